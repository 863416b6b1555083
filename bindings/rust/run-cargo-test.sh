#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# meson test 'bindings-rust': `cargo test --offline --locked` of the Rust
# workspace against the library just built (pkg-config module
# fusednorm-uninstalled from BUILD_DIR/meson-uninstalled), with cargo's
# target directory inside the build directory; then `cargo package` of both
# published crates and their docs built as docs.rs would (DOCS_RS=1). Exit 77 (SKIP) only when no
# cargo is found: on PATH, $CARGO, $CARGO_HOME/bin, $HOME/.cargo/bin,
# /root/.cargo/bin.
# Usage: run-cargo-test.sh SOURCE_ROOT BUILD_ROOT
set -uo pipefail
src=${1:?source root}
build=${2:?build root}
cargo=
for c in "${CARGO:-}" "$(command -v cargo 2>/dev/null)" "${CARGO_HOME:-/nonexistent}/bin/cargo" \
         "${HOME:-/nonexistent}/.cargo/bin/cargo" /root/.cargo/bin/cargo; do
  if [ -n "$c" ] && [ -x "$c" ]; then cargo=$c; break; fi
done
if [ -z "$cargo" ]; then
  echo "SKIP: cargo not found (PATH, \$CARGO, \$CARGO_HOME/bin, \$HOME/.cargo/bin, /root/.cargo/bin); install Rust >= 1.77 to test the Rust binding"
  exit 77
fi
# rustup's proxies need their home; cargo itself next to rustc.
export PATH=$(dirname "$cargo"):$PATH
export CARGO_TARGET_DIR=$build/bindings/rust/cargo-target
export PKG_CONFIG_PATH=$build/meson-uninstalled${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export LD_LIBRARY_PATH=$build/src${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
unset FUSEDNORM_LIB_DIR FUSEDNORM_API_DIR FUSEDNORM_REPO
echo "$("$cargo" --version) at $cargo; CARGO_TARGET_DIR=$CARGO_TARGET_DIR"
cd "$src/bindings/rust" || exit 99
# The declarations must be what the generator makes of today's header.
python3 gen/rust_sys.py --check || exit 1
"$cargo" test --offline --locked -- --nocapture 2>&1 || exit 1
# Publishable: both crates package with nothing from outside their folders
# (the verify step builds each from its .crate against this build tree), and
# their docs build as docs.rs does, with DOCS_RS set and no library at all.
echo "cargo package (fusednorm-sys, fusednorm):"
# cargo unpacks each packaged crate once per registry path and reuses that
# copy when the same path is packaged again (a rebuilt build tree, a CI clone
# at the same place): a stale copy of these two crates would then be
# verified in place of today's. Only this project's crates are removed.
cargo_home=${CARGO_HOME:-${HOME:-/root}/.cargo}
rm -rf "$cargo_home"/registry/src/*/fusednorm-sys-[0-9]* "$cargo_home"/registry/src/*/fusednorm-[0-9]*
"$cargo" package --workspace --exclude fusednorm-testkit --offline --allow-dirty 2>&1 | grep -E "Packaged|Verifying|error|Finished" || exit 1
[ "${PIPESTATUS[0]}" -eq 0 ] || exit 1
echo "docs as docs.rs builds them (DOCS_RS=1, no libfusednorm to find):"
env -u PKG_CONFIG_PATH -u FUSEDNORM_LIB_DIR -u LD_LIBRARY_PATH DOCS_RS=1 \
  "$cargo" doc --offline --locked --no-deps -p fusednorm-sys -p fusednorm 2>&1 | tail -2
[ "${PIPESTATUS[0]}" -eq 0 ] || exit 1
