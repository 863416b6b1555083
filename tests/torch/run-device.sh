#!/usr/bin/env bash
# On the GPU machine, in one call: build the library (build-gpu-torch, tests
# off: other work's test files stay out of the way), build the drop-in's C++
# ops, run the Python binding's and the drop-in's tests, then bench_torch.py.
# Usage: tests/torch/run-device.sh OUTDIR [tests|bench|all] [--quick]
# Logs: OUTDIR/tests.log (every test's output), OUTDIR/bench.log,
# OUTDIR/rows_torch.json and .md.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: run-device.sh OUTDIR [tests|bench|all] [--quick]}
what=${2:-all}
quick=${3:-}
mkdir -p "$out"
cd "$root"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/fnorm-site .whl/*.whl \
    > "$out/wheels.log" 2>&1 && export PYTHONPATH=/tmp/fnorm-site${PYTHONPATH:+:$PYTHONPATH}
fi
PATH=$(scripts/setup.sh) || exit 1
export PATH
b=$root/build-gpu-torch
t=$(date +%s)
# The device's own arch only: the default (four archs) takes 4x the build
# time; FNORM_GPU_ARCHS overrides (e.g. "80,90,100,120" to run the default).
archs=${FNORM_GPU_ARCHS:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')}
archs=${archs:-90}
[ -f "$b/build.ninja" ] || meson setup "$b" -Dtests=false -Dgpu_archs="$archs" > "$out/configure.log" 2>&1 \
  || { tail -20 "$out/configure.log"; exit 1; }
ninja -C "$b" > "$out/build.log" 2>&1 || { grep -E "error|FAILED" "$out/build.log" | head -20; exit 1; }
echo "library build: $(( $(date +%s) - t )) s"
export FNORM_LIB=$b/src/libfusednorm.so PYTHONUNBUFFERED=1
# The ops, built as a user builds them (import never compiles).
t=$(date +%s)
PYTHONPATH=bindings/python python3 -m fusednorm.torch.build --dest "$b/torch-ops" 2>&1 | tail -2
echo "ops build: $(( $(date +%s) - t )) s"
FNORM_TORCH_OPS=$(ls "$b"/torch-ops/fusednorm_torch_ops*.so 2>/dev/null | head -1)
export FNORM_TORCH_OPS
t=$(date +%s)
python3 -c "import sys; sys.path.insert(0, 'bindings/python'); import fusednorm.torch as ft; \
print('ops available:', ft.ops_available(), ft.ops_unavailable_reason())" 2>&1 | tail -3
echo "ops import: $(( $(date +%s) - t )) s"
rc=0
if [ "$what" != bench ]; then
  for spec in "tests/torch/test_torch_modules.py:300" "tests/torch/test_torch_host.py:120" \
              "tests/bindings/test_python_layout.py:60" "tests/bindings/test_python.py:60" \
              "tests/linear/test_linear_python.py:60" "tests/gpu/test_torch_norm.py:240" \
              "tests/gpu/test_torch_batchnorm.py:240" "tests/linear/test_torch_linear.py:240"; do
    f=${spec%%:*}
    lim=${spec##*:}
    [ -n "${ONLY_TESTS:-}" ] && [[ " $ONLY_TESTS " != *" $f "* ]] && continue
    t=$(date +%s)
    echo "=== $f" >> "$out/tests.log"
    FNORM_TEST_QUICK=1 timeout "$lim" python3 "$f" >> "$out/tests.log" 2>&1
    r=$?
    echo "$f: rc=$r, $(( $(date +%s) - t )) s" | tee -a "$out/tests.log"
    [ $r -eq 0 ] || rc=1
  done
  grep -E "FAIL|ERROR|Error|passed, |^Ran |^OK|opcheck|losses|resnet18" "$out/tests.log" | head -60
fi
if [ "$what" != tests ]; then
  t=$(date +%s)
  python3 bench/bench_torch.py --out "$out" $quick > "$out/bench.log" 2>&1 || rc=1
  tail -40 "$out/bench.log"
  echo "bench: $(( $(date +%s) - t )) s"
fi
exit $rc
