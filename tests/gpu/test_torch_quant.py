#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The quantized forward (fnorm_norm_fwd_quant) beside PyTorch on the GPU.

1. Every fp32 input through the library against torch's own conversion:
   LayerNorm of a row of zeros with beta = the inputs and a static scale of
   1 writes code(beta) (v = 0 * rstd + beta = beta exactly; -0 becomes +0,
   the one input whose sign is not compared), for E4M3 and E5M2, against
   torch's `beta.clamp(-M, M).to(float8)`; NaN inputs must give NaN codes.
2. fp32 input, every shape class: codes, per-token scales and amax bit for
   bit against torch's composition `(y / s).clamp(-M, M).to(fp8)` (INT8:
   `(y / s).round().clamp(-127, 127)`) applied to the library's own fp32
   forward output y.
3. fp16 / bf16 input: against the float64 reference (torch, float64) of the
   norm, quantized with the same composition; a code may differ from it only
   where the float64 value lies within the fp32 arithmetic's reach of a
   rounding boundary (counted). Scales and amax within the same tolerance.
4. fusednorm.torch.rms_norm_quant / layer_norm_quant (the C++ op): the same
   bits as the ctypes call; torch.library.opcheck; torch.compile(fullgraph);
   CUDA-graph capture with the amax reset captured.

Exit 77 without PyTorch or a GPU; 1 when any check fails.
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "common"))
from torch_prologue import load  # noqa: E402

torch, F, fn = load(ROOT)

import fusednorm.torch as ft  # noqa: E402
from fusednorm.torch.quant import QUANT_MAX, _min_scale  # noqa: E402

DEV = "cuda"
E4M3, E5M2, I8 = torch.float8_e4m3fn, torch.float8_e5m2, torch.int8
FP32, FP16, BF16 = torch.float32, torch.float16, torch.bfloat16
FAILED = []
STATS = {"codes": 0, "band": 0}


def fail(msg):
    FAILED.append(msg)
    print("FAIL", msg, flush=True)


def torch_codes(v, s, dtype):
    """torch's composition on v (float32 or float64) with scale s (broadcast)."""
    m = QUANT_MAX[dtype]
    t = v / s
    if dtype == I8:
        return t.round().clamp(-127, 127).to(I8)
    return t.clamp(-m, m).to(dtype)


def code_values(q):
    return q.float() if q.dtype != I8 else q.to(torch.float32)


# ---- 1. every fp32 input --------------------------------------------------------

def every_fp32_input():
    chunk = 1 << 24
    one = torch.ones((), dtype=FP32, device=DEV)
    x = torch.zeros(1, chunk, dtype=FP32, device=DEV)
    for dtype in (E4M3, E5M2):
        bad = nan_bad = 0
        for start in range(0, 1 << 32, chunk):
            bits = torch.arange(start, start + chunk, dtype=torch.int64, device=DEV)
            beta = bits.to(torch.int32).view(FP32)  # wraps into int32: the same bits
            q, _ = fn.layer_norm_quant(x, None, beta, eps=1e-5, dtype=dtype, scale=one)
            ref = beta.clamp(-QUANT_MAX[dtype], QUANT_MAX[dtype]).to(dtype)
            qb, rb = q.view(torch.uint8)[0], ref.view(torch.uint8)
            nan = torch.isnan(beta)
            negzero = (beta == 0) & torch.signbit(beta)
            cmp = ~nan & ~negzero
            bad += int((qb[cmp] != rb[cmp]).sum())
            bad += int((qb[negzero] != 0).sum())  # +0: v = 0 + (-0)
            nan_bad += int((~torch.isnan(q[0][nan].float())).sum())
        print(f"every fp32 input, {dtype}: {bad} codes differ from torch's, {nan_bad} NaN inputs without a NaN code")
        if bad or nan_bad:
            fail(f"every fp32 input {dtype}: {bad} / {nan_bad}")


# ---- 2./3. the shape classes --------------------------------------------------

def make_x(rows, cols, dtype, layout, gen):
    """x of [rows, cols] in `layout`: packed, 'padded' (a slice of wider
    rows), 'misaligned' (one element past an aligned start), 'rank3'."""
    if layout == "padded":
        base = torch.randn(rows, cols + 7, generator=gen, device=DEV) * 2 + 1
        return base.to(dtype)[:, :cols]
    if layout == "misaligned":
        base = torch.randn(rows * cols + 1, generator=gen, device=DEV) * 2 + 1
        return base.to(dtype)[1:].view(rows, cols)
    if layout == "rank3":  # [rows, 2, cols]: 2 * rows rows of cols
        return (torch.randn(rows, 2, cols, generator=gen, device=DEV) * 2 + 1).to(dtype)
    return (torch.randn(rows, cols, generator=gen, device=DEV) * 2 + 1).to(dtype)


def norm64(mode, x, w, b, eps, residual):
    s = x if residual is None else (x + residual)  # rounded to x's dtype, as the library does
    v = s.double()
    shape = (x.shape[-1],)
    if mode == "ln":
        v = F.layer_norm(v, shape, w.double(), b.double(), eps)
    else:
        v = F.rms_norm(v, shape, w.double(), eps)
    return v, s


def check_case(mode, dtype, qdtype, per_token, rows, cols, layout, residual, gen):
    name = f"{mode} {dtype} -> {qdtype} {'per-token' if per_token else 'static'} [{rows},{cols}] {layout}" + \
        (" residual" if residual else "")
    x = make_x(rows, cols, dtype, layout, gen)
    w = (torch.rand(cols, generator=gen, device=DEV) + 0.5).to(dtype)
    b = (torch.rand(cols, generator=gen, device=DEV) - 0.5).to(dtype)
    r = (torch.randn(x.shape, generator=gen, device=DEV)).to(dtype) if residual else None
    m = QUANT_MAX[qdtype]
    scale = None if per_token else torch.tensor(5.0 / m, dtype=FP32, device=DEV)
    eps = 1e-5
    if mode == "ln":
        out = fn.layer_norm_quant(x, w, b, eps, residual=r, dtype=qdtype, scale=scale, return_amax=True)
    else:
        out = fn.rms_norm_quant(x, w, eps, residual=r, dtype=qdtype, scale=scale, return_amax=True)
    q, s = out[0], out[1]
    amax = out[-1]
    ssum = out[2] if residual else None
    q2 = q.reshape(-1, cols)
    s_rows = s.reshape(-1, 1) if per_token else s
    if dtype == FP32:
        # Exact: the library's own fp32 values through torch's composition.
        y = (fn.layer_norm(x, w, b, eps, residual=r) if mode == "ln" else fn.rms_norm(x, w, eps, residual=r))
        y = (y[0] if residual else y).reshape(-1, cols)
        if per_token:
            # amax / M correctly rounded, as the header states: in float64,
            # then rounded (exact for one division of two floats). A CUDA
            # tensor divided by a Python scalar is multiplied by its
            # reciprocal in PyTorch, one ulp off for some amax.
            want_s = (y.abs().amax(-1, keepdim=True).double() / m).float().clamp(min=_min_scale(qdtype))
            if not torch.equal(s_rows, want_s):
                fail(f"{name}: per-token scales differ from torch's on our fp32 values")
        want = torch_codes(y, s_rows, qdtype)
        diff = int((q2.view(torch.uint8) != want.view(torch.uint8)).sum())
        if diff:
            i = (q2.view(torch.uint8) != want.view(torch.uint8)).nonzero()[0].tolist()
            fail(f"{name}: {diff} codes differ from torch's composition on our fp32 output, first at {i}: "
                 f"v {y[i[0], i[1]].item()!r} code {q2.view(torch.uint8)[i[0], i[1]].item():#x} "
                 f"want {want.view(torch.uint8)[i[0], i[1]].item():#x}")
        if amax.item() != y.abs().max().item():
            fail(f"{name}: amax {amax.item()!r} != max|y| {y.abs().max().item()!r}")
    # Against float64, with the fp32 band.
    v, s_in = norm64(mode, x, w, b, eps, r)
    v = v.reshape(-1, cols)
    tol = 5e-5 * (1 + v.abs()) + 1e-6 * x.double().abs().max()
    if per_token:
        sref = (v.abs().amax(-1, keepdim=True) / m).clamp(min=_min_scale(qdtype))
        if ((s_rows.double() - sref).abs() > tol.max() / m).any():
            fail(f"{name}: per-token scales off the float64 reference")
    sd = s_rows.double()
    want = code_values(torch_codes(v, sd, qdtype)).double()
    lo = code_values(torch_codes(v - tol, sd, qdtype)).double()
    hi = code_values(torch_codes(v + tol, sd, qdtype)).double()
    got = code_values(q2).double()
    exact = got == want
    in_band = (lo != hi) & (got >= torch.minimum(lo, hi)) & (got <= torch.maximum(lo, hi))
    bad = ~(exact | in_band)
    STATS["codes"] += got.numel()
    STATS["band"] += int((~exact & in_band).sum())
    if bad.any():
        i = bad.nonzero()[0].tolist()
        fail(f"{name}: {int(bad.sum())} codes off the float64 reference, first at {i}: v {v[i[0], i[1]].item()!r} "
             f"got {got[i[0], i[1]].item()} want {want[i[0], i[1]].item()}")
    if abs(amax.item() - v.abs().max().item()) > tol.max().item():
        fail(f"{name}: amax {amax.item()} vs {v.abs().max().item()}")
    if residual and not torch.equal(ssum, s_in):
        fail(f"{name}: sum differs from x + residual")
    # The torch op gives the same bits.
    if ft.ops_available():
        f = ft.layer_norm_quant if mode == "ln" else ft.rms_norm_quant
        args = (x, w, b) if mode == "ln" else (x, w)
        o2 = f(*args, eps, residual=r, scale=scale, dtype=qdtype, return_amax=True)
        if not (torch.equal(o2[0].view(torch.uint8), q.view(torch.uint8)) and torch.equal(o2[1], s)
                and torch.equal(o2[-1], amax)):
            fail(f"{name}: fusednorm.torch op differs from the ctypes call")


def shape_classes():
    gen = torch.Generator(device=DEV)
    gen.manual_seed(int(os.environ.get("FNORM_TEST_SEED", "2028")))
    shapes = [(1, 4096, "packed"), (37, 203, "packed"), (33, 1000, "padded"), (9, 768, "misaligned"),
              (5, 96, "rank3"), (64, 8192, "packed"), (2, 131072, "packed")]
    n = 0
    for dtype in (FP32, FP16, BF16):
        for mode in ("ln", "rms"):
            for qdtype, per_token in ((E4M3, False), (E4M3, True), (E5M2, False), (E5M2, True), (I8, True)):
                for k, (rows, cols, layout) in enumerate(shapes):
                    check_case(mode, dtype, qdtype, per_token, rows, cols, layout, residual=(k % 3 == 1), gen=gen)
                    n += 1
    print(f"shape classes: {n} cases; {STATS['codes']} codes, {STATS['band']} within the fp32 band of a "
          f"rounding boundary (either neighbour accepted)")


# ---- 4. the torch op ---------------------------------------------------------------

def torch_op():
    if not ft.ops_available():
        fail(f"fusednorm.torch ops unavailable: {ft.ops_unavailable_reason()}")
        return
    x = torch.randn(8, 512, device=DEV, dtype=BF16)
    w = torch.rand(512, device=DEV, dtype=BF16) + 0.5
    r = torch.randn(8, 512, device=DEV, dtype=BF16)
    s = torch.tensor(0.01, device=DEV)
    op = torch.ops.fusednorm.norm_quant.default
    cases = {
        "per-token e4m3": (x, w, None, None, None, 1, 1, 1e-6, E4M3, True),
        "static e5m2 + residual": (x, w, None, r, s, 1, 1, 1e-6, E5M2, False),
        "per-token int8 layernorm": (x, w, w, None, None, 0, 1, 1e-5, I8, True),
    }
    for name, args in cases.items():
        try:
            torch.library.opcheck(op, args)
            print(f"opcheck norm_quant {name}: ok")
        except Exception as e:  # noqa: BLE001 - report every failure
            fail(f"opcheck norm_quant {name}: {type(e).__name__}: {str(e)[:500]}")

    def step(x, w, r):
        q, scale, s = ft.rms_norm_quant(x, w, 1e-6, residual=r)
        return q, scale, s

    compiled = torch.compile(step, fullgraph=True)
    got, want = compiled(x, w, r), step(x, w, r)
    if not all(torch.equal(a.view(torch.uint8) if a.dtype == E4M3 else a, b.view(torch.uint8) if b.dtype == E4M3 else b)
               for a, b in zip(got, want)):
        fail("torch.compile(fullgraph) of rms_norm_quant differs from eager")
    else:
        print("torch.compile(fullgraph=True): same bits as eager")

    # CUDA graph: the captured amax reset makes each replay report its input's max.
    xs = torch.randn(64, 1024, device=DEV)
    big = xs.clone()
    big[3, 5] = 1000.0
    g = torch.cuda.CUDAGraph()
    out = ft.rms_norm_quant(xs, None, 1e-6, return_amax=True)  # warm-up (builds the op)
    torch.cuda.synchronize()
    with torch.cuda.graph(g):
        out = ft.rms_norm_quant(xs, None, 1e-6, return_amax=True)
    src = xs.clone()
    xs.copy_(big)
    g.replay()
    a1 = out[-1].item()
    xs.copy_(src)
    g.replay()
    a2 = out[-1].item()
    ref2 = fn.rms_norm_quant(src, None, 1e-6, return_amax=True)[-1].item()
    print(f"CUDA graph replays: amax {a1:.4g} then {a2:.4g} (eager on the second input: {ref2:.4g})")
    if not (a1 > 20 and a2 == ref2):
        fail(f"CUDA graph: amax {a1} then {a2}, want > 20 then {ref2}")


def main():
    every_fp32_input()
    shape_classes()
    torch_op()
    print(f"test_torch_quant: {len(FAILED)} failures")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
