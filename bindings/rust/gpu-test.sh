#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Rust binding on a GPU machine, which has no Rust toolchain: runs the
# test binaries and examples that bindings/rust/prebuild.sh built elsewhere
# and left in build-bindings/rust/ (carried with the tree), against
# BUILD_DIR/src/libfusednorm.so. Prints everything to stdout (scripts/gpu-check
# keeps it as bindings-rust.log). OUTDIR is accepted for gpu-check's calling
# convention; nothing is written there (the device tool returns 8 files at most).
# Exit: 0 when all passed, or (with "SKIP: ...") when the binaries are absent;
# 1 on any failure.
# Usage: bindings/rust/gpu-test.sh BUILD_DIR [OUTDIR]
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: gpu-test.sh BUILD_DIR [OUTDIR]}" && pwd)
bin=$root/build-bindings/rust
if [ ! -d "$bin/tests" ]; then
  echo "SKIP: prebuilt Rust binaries absent ($bin; run bindings/rust/prebuild.sh where cargo is, then carry build-bindings)"
  exit 0
fi
if [ ! -f "$build/src/libfusednorm.so" ]; then
  echo "FAIL: $build/src/libfusednorm.so not found (build the library first)"
  exit 1
fi
# The library just built comes first; the CUDA runtime the test helper links
# is found where nvcc's toolkit is (or /usr/local/cuda).
cuda_lib=
for d in "${CUDA_HOME:-}" "$(dirname "$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")")" /usr/local/cuda; do
  [ -n "$d" ] && ls "$d"/lib64/libcudart.so* >/dev/null 2>&1 && { cuda_lib=$d/lib64; break; }
done
export LD_LIBRARY_PATH=$build/src${cuda_lib:+:$cuda_lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export FUSEDNORM_REPO=$root RUST_BACKTRACE=1
echo "prebuilt at commit $(cat "$bin/COMMIT" 2>/dev/null || echo '?'); tree at $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
fails=() summary=()
for t in "$bin"/tests/*; do
  name=$(basename "$t")
  echo "=== test binary $name"
  start=$(date +%s%N)
  "$t" --nocapture --test-threads=1
  rc=$?
  summary+=("$name: rc=$rc ($(( ($(date +%s%N) - start) / 1000000 )) ms)")
  [ $rc -eq 0 ] || fails+=("$name")
done
for e in "$bin"/examples/*; do
  name=$(basename "$e")
  echo "=== example $name"
  "$e"
  rc=$?
  summary+=("example $name: rc=$rc")
  # 77 (no GPU) is a failure here: this script runs where the GPU is.
  [ $rc -eq 0 ] || fails+=("example $name (rc=$rc)")
done
echo "=== summary"
printf '%s\n' "${summary[@]}"
if [ ${#fails[@]} -gt 0 ]; then
  echo "FAIL: ${fails[*]}"
  exit 1
fi
echo "bindings-rust on the GPU: all passed"
