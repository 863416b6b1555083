#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Build libfusednorm and run the LayerNorm demo (README's demo command).
# Without a GPU (no driver, no nvidia-smi, or no device) it still builds, then
# the demo says why it cannot run and exits 77; any other failure is non-zero
# with its own message.
# Usage: scripts/demo.sh [BUILD_DIR]   (default build-demo)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
PATH=$("$root/scripts/setup.sh")
export PATH
build=${1:-$root/build-demo}
if [ ! -f "$build/build.ninja" ]; then
  # What the demo needs and no more: machine code for this machine's GPU only
  # (the default build has four architectures and takes 4x as long;
  # FNORM_GPU_ARCHS overrides; sm_90 when nvidia-smi cannot tell, and the demo
  # says what is missing) and the fp32 kernels only (the demo is fp32; all
  # three dtypes take 3x as long: on 2 cores 136 s against 43 s of wall time,
  # 245 s against 79 s of CPU). CI runs this command beside the test
  # command's 17 minutes. A library for your own use: README "Install".
  arch=${FNORM_GPU_ARCHS:-$("$root/scripts/gpu-probe" arch)}
  if [ -z "$arch" ]; then
    why=$("$root/scripts/gpu-probe" reason)
    echo "demo: no GPU arch from nvidia-smi (${why:-it gave no compute capability}); building for sm_90 only" \
         "(FNORM_GPU_ARCHS=NN picks another)" >&2
  fi
  meson setup "$build" "$root" -Dtests=false -Dgpu_archs="${arch:-90}" -Ddtypes=f32
fi
ninja -C "$build" examples/layernorm_demo
exec "$build/examples/layernorm_demo"
