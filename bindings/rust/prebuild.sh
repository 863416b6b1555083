#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the Rust binding's test binaries and examples here (the GPU machine
# has no Rust toolchain) and copies them into build-bindings/rust/ (ignored
# by git), which the device tool carries (carry: ["build-bindings"]) and
# gpu-test.sh runs. Debug info is stripped to keep the carried tree small.
# Usage: bindings/rust/prebuild.sh [BUILD_DIR]   (default: build; its
# meson-uninstalled/ pkg-config module is what the binaries link against)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
cargo=$(command -v cargo || echo "${HOME:-/root}/.cargo/bin/cargo")
dest=$root/build-bindings/rust
export CARGO_TARGET_DIR=$root/build-rust-prebuild
export PKG_CONFIG_PATH=$build/meson-uninstalled${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export CARGO_PROFILE_DEV_STRIP=debuginfo
cd "$root/bindings/rust"
rm -rf "$dest" && mkdir -p "$dest/tests" "$dest/examples"
# Each test executable: named after its target (unit tests: <crate>-unit).
"$cargo" test --offline --locked --no-run --message-format=json 2>/dev/null | python3 -c '
import json, shutil, sys
dest = sys.argv[1]
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable") or not m["profile"]["test"]:
        continue
    t = m["target"]
    name = t["name"] + ("-unit" if "lib" in t["kind"] else "")
    shutil.copy(m["executable"], f"{dest}/tests/{name}")
    print("test binary:", name)
' "$dest"
"$cargo" build --offline --locked --examples
for e in layernorm_demo batchnorm_demo; do
  cp "$CARGO_TARGET_DIR/debug/examples/$e" "$dest/examples/$e"
done
git -C "$root" rev-parse --short HEAD > "$dest/COMMIT"
du -sh "$dest"
