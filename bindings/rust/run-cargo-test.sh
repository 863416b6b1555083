#!/usr/bin/env bash
# meson test 'bindings-rust': `cargo test --offline --locked` of the Rust
# workspace against the library just built (pkg-config module
# fusednorm-uninstalled from BUILD_DIR/meson-uninstalled), with cargo's
# target directory inside the build directory. Exit 77 (SKIP) only when no
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
"$cargo" test --offline --locked -- --nocapture 2>&1
