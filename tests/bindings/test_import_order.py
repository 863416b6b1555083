#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Importing the binding first leaves the process's choice of NVIDIA
libraries to whoever loads them next (issue 27 item 1: with NCCL linked,
`import fusednorm.torch` before `import torch` bound the system's NCCL and
torch failed with "undefined symbol: ncclCommResume").

1. (no PyTorch needed) `import fusednorm` maps libfusednorm and no cuDNN,
   NCCL or cuBLAS(Lt).
2. (with PyTorch) `import fusednorm.torch` first, then torch: torch imports,
   torch.distributed imports, and on a GPU a LayerNorm runs; the NCCL the
   process then has is torch's (the one fusednorm would use).
Each part runs in a fresh interpreter. Usage: test_import_order.py
{--loader | --torch}; --torch exits 77 without PyTorch.
"""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.path.join(ROOT, "bindings", "python"),
                                                                  os.environ.get("PYTHONPATH")])))

PART1 = r"""
import fusednorm
maps = open("/proc/self/maps").read()
loaded = sorted({l.split()[-1] for l in maps.splitlines() if "/lib" in l and any(n in l for n in ("libnccl", "libcudnn", "libcublas"))})
print("libfusednorm:", fusednorm.lib._name, "version", fusednorm.version())
print("optional NVIDIA libraries mapped after import fusednorm:", loaded)
assert "libfusednorm" in maps
assert not loaded, loaded
"""

PART2 = r"""
import warnings
warnings.simplefilter("ignore")   # no ops built here is fine: the import order is the point
import fusednorm.torch as ft
import torch
import torch.distributed
print("torch", torch.__version__, "imported after fusednorm.torch; ops:", ft.ops_available())
if torch.cuda.is_available():
    x = torch.randn(64, 256, device="cuda")
    y = ft.LayerNorm(256).cuda()(x)
    ref = torch.nn.functional.layer_norm(x, (256,))
    err = float((y - ref).abs().max())
    print("LayerNorm on", torch.cuda.get_device_name(), "max |ours - torch|", err)
    assert err < 1e-4
    nccl = sorted({l.split()[-1] for l in open("/proc/self/maps").read().splitlines() if "libnccl" in l})
    print("NCCL in the process:", nccl)
"""


def run(code):
    r = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, cwd="/")
    print(r.stdout.strip())
    if r.returncode != 0:
        print(r.stderr.strip()[-3000:])
    return r.returncode


def main():
    if sys.argv[1:] == ["--loader"]:
        ok = run(PART1) == 0
        print(f"import-order --loader: {int(ok)} passed, {int(not ok)} failed")
        return 0 if ok else 1
    try:
        import torch  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any import failure means: no PyTorch here
        print(f"SKIP: PyTorch is not importable ({type(e).__name__}: {e})")
        return 77
    ok = run(PART2) == 0
    print(f"import-order --torch: {int(ok)} passed, {int(not ok)} failed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
