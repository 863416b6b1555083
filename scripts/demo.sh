#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Build libfusednorm and run the LayerNorm demo (README's demo command).
# Without a GPU the demo says so and exits non-zero.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
PATH=$("$root/scripts/setup.sh")
export PATH
build=${1:-$root/build-demo}
# Machine code for this machine's GPU only (the default build has four
# architectures and takes 4x as long); without a GPU, sm_90, and the demo
# says there is no GPU.
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
if [ ! -f "$build/build.ninja" ]; then meson setup "$build" "$root" -Dtests=false -Dgpu_archs="${arch:-90}"; fi
ninja -C "$build" examples/layernorm_demo
exec "$build/examples/layernorm_demo"
