#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""One eager call per case of libfusednorm's LayerNorm/RMSNorm kernels and of
PyTorch's, for a profiler (ncu) to read their counters. Not a benchmark: one
buffer set, no timing. Usage:
  profile_norm.py OP:DTYPE:ROWSxCOLS[,...]   (OP: ln_fwd, rms_fwd, ln_bwd, rms_bwd)
Each case runs ours twice then PyTorch's once, inside NVTX ranges named
"ours <case>" / "torch <case>"."""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bindings", "python"))
import fusednorm as fn  # noqa: E402

DT = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
FDT = {"fp32": fn.DType.FLOAT32, "fp16": fn.DType.FLOAT16, "bf16": fn.DType.BFLOAT16}
EPS = 1e-5


def run(handle, op, dt, rows, cols):
    ln = op.startswith("ln")
    tdt = DT[dt]
    x = torch.randn(rows, cols, device="cuda", dtype=tdt)
    dy = torch.randn_like(x)
    y = torch.empty_like(x)
    w = (torch.rand(cols, device="cuda") + 0.5).to(tdt)
    b = torch.rand(cols, device="cuda").to(tdt) if ln else None
    mean = torch.empty(rows, device="cuda") if ln else None
    rstd = torch.empty(rows, device="cuda")
    xd = fn.TensorDesc(FDT[dt], [rows, cols])
    wd = fn.TensorDesc(FDT[dt], [cols])
    nd = fn.NormDesc(fn.NormMode.LAYERNORM if ln else fn.NormMode.RMSNORM, -1, EPS)
    ptr = lambda t: t.data_ptr() if t is not None else None  # noqa: E731
    stream = torch.cuda.current_stream().cuda_stream
    fwd = lambda: fn.check(fn.lib.fnorm_norm_fwd(  # noqa: E731
        handle.ptr, stream, nd.ptr, xd.ptr, x.data_ptr(), None, None, wd.ptr, w.data_ptr(), ptr(b),
        xd.ptr, y.data_ptr(), ptr(mean), rstd.data_ptr(), None, 0))
    fwd()
    case = f"{op}:{dt}:{rows}x{cols}"
    if op.endswith("fwd"):
        ours = fwd
        theirs = (lambda: F.layer_norm(x, [cols], w, b, EPS)) if ln else (lambda: F.rms_norm(x, [cols], w, EPS))
    else:
        ws_bytes = fn.norm_bwd_workspace_size(handle, nd, xd, wd)
        ws = torch.empty(max(ws_bytes, 1), dtype=torch.uint8, device="cuda")
        dx, dw = torch.empty_like(x), torch.empty_like(w)
        db = torch.empty_like(w) if ln else None
        ours = lambda: fn.check(fn.lib.fnorm_norm_bwd(  # noqa: E731
            handle.ptr, stream, nd.ptr, xd.ptr, x.data_ptr(), xd.ptr, dy.data_ptr(), ptr(mean),
            rstd.data_ptr(), wd.ptr, w.data_ptr(), None, xd.ptr, dx.data_ptr(), dw.data_ptr(), ptr(db),
            ws.data_ptr(), ws_bytes))
        if ln:
            _, tm, tr = torch.ops.aten.native_layer_norm(x, [cols], w, b, EPS)
            theirs = lambda: torch.ops.aten.native_layer_norm_backward(  # noqa: E731
                dy, x, [cols], tm, tr, w, b, [True, True, True])
        else:
            xr = x.detach().requires_grad_(True)
            wr = w.detach().requires_grad_(True)
            theirs = lambda: torch.autograd.grad(F.rms_norm(xr, [cols], wr, EPS), (xr, wr), dy)  # noqa: E731
    for _ in range(2):
        torch.cuda.nvtx.range_push(f"ours {case}")
        ours()
        torch.cuda.nvtx.range_pop()
    torch.cuda.nvtx.range_push(f"torch {case}")
    theirs()
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    handle = fn.Handle()
    for c in sys.argv[1].split(","):
        op, dt, shape = c.split(":")
        rows, cols = (int(v) for v in shape.split("x"))
        run(handle, op, dt, rows, cols)
        print("done", c, flush=True)


if __name__ == "__main__":
    main()
