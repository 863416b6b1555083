#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# On the GPU machine, in one call: the library (built in build-gpu-torch with
# tests off, unless FNORM_LIB names a built one), the drop-in's C++ ops, the
# drop-in's tests (the contract suite, the module tests and the host tests
# side by side; ONLY_TESTS="a.py b.py" picks some), then bench_torch.py alone.
# Usage: tests/torch/run-device.sh OUTDIR [tests|bench|all] [bench_torch.py args...]
# Wheels in .whl/ and $EXTRA_WHEELS (a directory: Liger-Kernel, expecttest for
# torch's module_db) are installed into a private directory first.
# Logs: OUTDIR/test_torch_*.log (one per test file), OUTDIR/bench.log,
# OUTDIR/rows_torch.json and .md.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: run-device.sh OUTDIR [tests|bench|all] [bench args...]}
what=${2:-all}
shift $(( $# >= 2 ? 2 : $# ))
mkdir -p "$out"
cd "$root"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
wheels=$(ls .whl/*.whl ${EXTRA_WHEELS:+$EXTRA_WHEELS/*.whl} 2>/dev/null)
if [ -n "$wheels" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/fnorm-site $wheels \
    > /tmp/fnorm-wheels.log 2>&1 && export PYTHONPATH=/tmp/fnorm-site${PYTHONPATH:+:$PYTHONPATH}
fi
if [ -z "${FNORM_LIB:-}" ]; then
  PATH=$(scripts/setup.sh) || exit 1
  export PATH
  b=$root/build-gpu-torch
  t=$(date +%s)
  # The device's own arch only: the default (four archs) takes 4x the build
  # time; FNORM_GPU_ARCHS overrides (e.g. "80,90,100,120" to run the default).
  archs=${FNORM_GPU_ARCHS:-$(scripts/gpu-probe arch)}
  archs=${archs:-90}
  [ -f "$b/build.ninja" ] || meson setup "$b" -Dtests=false -Dgpu_archs="$archs" > "$out/configure.log" 2>&1 \
    || { tail -20 "$out/configure.log"; exit 1; }
  ninja -C "$b" > "$out/build.log" 2>&1 || { grep -E "error|FAILED" "$out/build.log" | head -20; exit 1; }
  echo "library build: $(( $(date +%s) - t )) s"
  export FNORM_LIB=$b/src/libfusednorm.so
fi
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/tmp/fnorm-torch-ext} PYTHONUNBUFFERED=1
t=$(date +%s)
# The ops: compiled by the Meson build beside the library when PyTorch was
# importable there (no compile at import).
if [ -z "${FNORM_TORCH_OPS:-}" ]; then
  FNORM_TORCH_OPS=$(ls "$(dirname "$FNORM_LIB")"/../bindings/python/fusednorm/fusednorm_torch_ops*.so 2>/dev/null | head -1)
  export FNORM_TORCH_OPS
fi
python3 -c "import sys; sys.path.insert(0, 'bindings/python'); import torch, fusednorm.torch as ft; \
print('torch', torch.__version__, torch.version.cuda, torch.cuda.get_device_name(), '| ops available:', \
ft.ops_available(), ft.ops_unavailable_reason())" 2>&1 | tail -3
echo "ops load: $(( $(date +%s) - t )) s"
rc=0
if [ "$what" != bench ]; then
  pids=()
  # name:file:limit:FNORM_CONTRACT_ONLY (the contract suite in three parts)
  specs=("contract_a:tests/torch/test_torch_contract.py:300:nn.LayerNorm,nn.RMSNorm,nn.Linear,models"
         "contract_b:tests/torch/test_torch_contract.py:300:nn.BatchNorm1d,nn.BatchNorm2d"
         "contract_c:tests/torch/test_torch_contract.py:300:nn.BatchNorm3d"
         "modules:tests/torch/test_torch_modules.py:300:" "host:tests/torch/test_torch_host.py:120:"
         "hf:tests/torch/test_torch_hf.py:400:" "groupnorm:tests/torch/test_torch_groupnorm.py:300:")
  for spec in "${specs[@]}"; do
    IFS=: read -r n f lim part <<< "$spec"
    [ -n "${ONLY_TESTS:-}" ] && [[ " $ONLY_TESTS " != *" $f "* ]] && continue
    ( t=$(date +%s); FNORM_CONTRACT_ONLY=$part FNORM_TEST_QUICK=1 timeout "$lim" python3 "$f" \
        > "$out/test_torch_$n.log" 2>&1; r=$?
      echo "$f ${part:+($part)}: rc=$r, $(( $(date +%s) - t )) s" >> "$out/test_torch_$n.log"; exit $r ) &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  for f in "$out"/test_torch_*.log; do tail -1 "$f"; done
  grep -hE "^FAIL|^ERROR|passed, |^Ran |^OK|opcheck.*FAILED|losses|resnet18|BatchNorm fp16/bf16 dx|cases that ran" \
    "$out"/test_torch_*.log | cut -c1-400 | head -60
fi
if [ "$what" != tests ]; then
  t=$(date +%s)
  python3 bench/bench_torch.py --out "$out" "$@" > "$out/bench.log" 2>&1 || rc=1
  grep -E "^host |^profile |'op': 'train_step'|Error|error" "$out/bench.log" | cut -c1-330 | tail -45
  echo "bench: $(( $(date +%s) - t )) s"
fi
exit $rc
