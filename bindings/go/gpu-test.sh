#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# On the GPU machine: run the Go binding's prebuilt test binaries and
# examples (bindings/go/prebuild.sh, carried in build-bindings/go/) against
# BUILD_DIR/src/libfusednorm.so. The whole log goes to OUTDIR/go-tests.log
# (one file: the device tool brings back at most 8); a summary to stdout.
# Non-zero on any failure, including a GPU test that skipped although the
# machine has a GPU.
# Usage: bindings/go/gpu-test.sh BUILD_DIR OUTDIR
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: gpu-test.sh BUILD_DIR OUTDIR}" && pwd)
out=${2:?usage: gpu-test.sh BUILD_DIR OUTDIR}
bin=$root/build-bindings/go
if [ ! -x "$bin/fusednorm.test" ]; then
  echo "SKIP: prebuilt Go binaries absent ($bin: run bindings/go/prebuild.sh where Go is, carry build-bindings)"
  exit 0
fi
mkdir -p "$out"
lib=$build/src/libfusednorm.so
[ -f "$lib" ] || { echo "gpu-test.sh: no $lib"; exit 1; }
# The binaries need libfusednorm (not installed) and libcudart (devmem links
# it): the same cudart libfusednorm resolves to.
cudart=$(ldd "$lib" | awk '/libcudart/ {print $3; exit}')
export LD_LIBRARY_PATH=$build/src${cudart:+:$(dirname "$cudart")}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat "$bin/BUILT_WITH" 2>/dev/null
rc=0
# The package tests read api/ and shim.c relative to bindings/go.
(cd "$root/bindings/go" && "$bin/fusednorm.test" -test.v -test.count=1 -test.timeout=300s) > "$tmp/test.log" 2>&1 || rc=1
(cd "$root/bindings/go/half" && "$bin/half.test" -test.v) > "$tmp/half.log" 2>&1 || rc=1
pass=$(grep -c -- "--- PASS" "$tmp/test.log")
fail=$(grep -c -- "--- FAIL" "$tmp/test.log")
skip=$(grep -c -- "--- SKIP" "$tmp/test.log")
echo "go test (package fusednorm, tests + subtests): $pass passed, $fail failed, $skip skipped"
grep -E -- "--- (FAIL|SKIP)" "$tmp/test.log" | head -20
grep -B1 -- "--- SKIP" "$tmp/test.log" | grep -v -- "^--" | head -6 # the reasons
if nvidia-smi -L 2>/dev/null | grep -q GPU && grep -q -- "^--- SKIP: TestGPU" "$tmp/test.log"; then
  echo "FAIL: GPU tests skipped on a machine with a GPU"
  grep -- "^--- SKIP: TestGPU" "$tmp/test.log"
  rc=1
fi
echo "go test (package half): $(tail -1 "$tmp/half.log")"
# The demo (examples/demo), one process a part.
for ex in layernorm batchnorm; do
  if "$bin/example-demo" "$ex" > "$tmp/example-$ex.log" 2>&1; then
    echo "example $ex: OK: $(tail -1 "$tmp/example-$ex.log")"
  else
    echo "example $ex: FAILED: $(tail -3 "$tmp/example-$ex.log")"
    rc=1
  fi
done
for f in test half example-layernorm example-batchnorm; do
  echo "==== $f"
  cat "$tmp/$f.log"
done > "$out/go-tests.log"
echo "bindings-go (GPU): rc=$rc (log: $out/go-tests.log)"
exit $rc
