#!/usr/bin/env bash
# Build libfusednorm and run the LayerNorm demo (README's demo command).
# Without a GPU the demo says so and exits non-zero.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
PATH=$("$root/scripts/setup.sh")
export PATH
build=${1:-$root/build}
if [ ! -f "$build/build.ninja" ]; then meson setup "$build" "$root"; fi
ninja -C "$build" examples/layernorm_demo
exec "$build/examples/layernorm_demo"
