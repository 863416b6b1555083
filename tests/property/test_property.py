#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Randomized property tests of every op against PyTorch in float64.

Each case draws, from one seeded generator, an op and everything about it:
  - LayerNorm / RMSNorm forward + backward: rows and cols (1, primes, odd
    sizes, > 64K columns), rank 2 or 3 (begin_norm_axis -1 or -2), dtype,
    gamma/beta in x's dtype or fp32 or absent, zero-centred gamma, residual
    (with the sum output given or left to the binding), rows that are a
    column slice of a wider tensor or every other row of a taller one,
    y / dx in their own padded layouts, in place (y = x, sum = x or
    residual, dx = dy);
  - BatchNorm training forward (running statistics, momentum or cumulative),
    backward and inference forward: every epilogue (none / ReLU / Add+ReLU),
    every layout (NCHW, NHWC, [N, C], [N, C, L] and its channels-last
    form), both engines (NATIVE, CUDNN), in place (y = x or y = z, dx = dy),
    and padded layouts the header says are NOT_SUPPORTED (they must be
    refused, outputs untouched);
  - the linear layer forward + backward: every epilogue (none, bias,
    bias+ReLU, bias+GELU), both weight layouts, x of rank 2 or 3, rows that
    are a slice of wider rows (x, w, y), padding that breaks alignment;
  - LayerNorm / RMSNorm with a quantized output (FP8 E4M3 / E5M2 static or
    per token, INT8 per token), residual (sum allocated, given, in place),
    the layouts above, y in its own padded layout: codes against torch's
    composition on the float64 norm, either neighbour accepted within the
    fp32 band of a rounding boundary; per-token scales and amax within it;
  - GroupNorm forward + backward: 1 to 32 groups of 1 to 16 channels, rank 2
    to 5, channels-first and channels-last, parameters in x's dtype, fp32 or
    absent, SiLU, scale / shift (packed, the halves of temb.chunk(2, 1), one
    of them alone) in x's dtype or fp32, inputs offset from 0 (the fp32
    statistics' conditioning), the statistics checked too.
Every output is poisoned with NaN first, NaN never passes, and every value
must satisfy |ours - ref| <= bound, where ref is PyTorch in float64 on the
very (rounded) inputs the library got and the bound is the per-dtype
tolerance of the op's own GPU test (tests/gpu/test_torch_*.py,
tests/linear/test_torch_linear.py) plus the conditioning terms explained
there. A NOT_SUPPORTED answer where the header allows one (cuDNN's limits,
cuBLASLt's alignments, padded BatchNorm layouts) is counted as refused, not
passed.

FNORM_PROPERTY_SEED=N repeats a run (the seed is printed first; each
failure prints the line that reruns it alone); FNORM_PROPERTY_CASES (default
1000; about 20 s on an H200 host) sets the number of random cases,
which follow pinned ones (negative case numbers: PINNED_LINEAR,
PINNED_NORM, PINNED_ONE_COLUMN); FNORM_PROPERTY_CASE=i runs case i only;
FNORM_PROPERTY_OPS=batchnorm[,norm,linear] runs only those ops' cases (case
i is the same case with or without it: ops take turns by case number).
Exit 77 (skip) without PyTorch or a GPU; 1 when a case fails.
"""
from __future__ import annotations

import ctypes
import math
import os
import random
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "common"))
from torch_prologue import load  # noqa: E402

torch, F, fn = load(ROOT)

DEV = "cuda"
FP32, FP16, BF16 = torch.float32, torch.float16, torch.bfloat16
DTYPES = (FP32, FP16, BF16)
NAMES = {FP32: "fp32", FP16: "fp16", BF16: "bf16"}
EPS32 = torch.finfo(torch.float32).eps
# Unit roundoff of each dtype and the fp32 accumulation unit (linear layer).
U = {FP32: 2.0 ** -24, FP16: 2.0 ** -11, BF16: 2.0 ** -8}
ACC = 2.0 ** -23
# Half the spacing of each dtype's subnormals: an output (or a stored
# intermediate such as dz) that small is rounded to that absolute step, below
# what any relative bound allows (seen on the H200: fp16 dx of ~2e-7 where
# dz = dy * GELU'(z) is near GELU's zero slope, dw = dy * x at m = 1; ours was
# the correctly rounded value, 0.43 of a subnormal step from float64).
TINY = {FP32: 2.0 ** -150, FP16: 2.0 ** -25, BF16: 2.0 ** -134}
GELU_APPROX = 2.0 ** -10  # cuBLASLt's tanh-GELU against torch's, as tests/linear
# LayerNorm / RMSNorm (tests/gpu/test_torch_norm.py): forward, statistics,
# dx, dgamma/dbeta (times sqrt(rows) absolute), conditioning factor.
NORM_FWD_TOL = {FP32: 2e-5, FP16: 1e-3, BF16: 8e-3}
NORM_STATS_TOL = 2e-5
NORM_DX_TOL = {FP32: 1e-4, FP16: 5e-3, BF16: 3e-2}
# tanh.approx.f32's largest relative error is 2^-10.987 (PTX ISA); sigmoid =
# (1 + tanh(v / 2)) / 2 is then within half of it, absolute.
SIG16 = 0.5 * 2.0 ** -10.987
NORM_DW_TOL = {FP32: 5e-5, FP16: 2e-3, BF16: 1.6e-2}
COND_K = 8
# BatchNorm (tests/gpu/test_torch_batchnorm.py).
BN_FWD_TOL = {FP32: 2e-5, FP16: 1e-3, BF16: 8e-3}
BN_DX_TOL = {FP32: 1e-4, FP16: 5e-3, BF16: 3e-2}

SEED = int(os.environ.get("FNORM_PROPERTY_SEED") or random.SystemRandom().randrange(1, 2 ** 31))
N_CASES = int(os.environ.get("FNORM_PROPERTY_CASES", "1000"))
ONLY = os.environ.get("FNORM_PROPERTY_CASE")
ONLY_OPS = set(filter(None, os.environ.get("FNORM_PROPERTY_OPS", "").split(",")))
# Elements of the largest tensor of a case: keeps the float64 references and
# the whole run within about a minute.
MAX_ELEMS = 1 << 21

PRIMES = (2, 3, 5, 7, 11, 13, 17, 31, 61, 127, 251, 509, 1021, 2039, 4093)

# The package exports `linear` both as its submodule and as a function of it:
# take the function wherever the package puts it.
_linear_mod = fn.linear
LINEAR = getattr(_linear_mod, "linear", _linear_mod)
LINEAR_BACKWARD = getattr(fn, "linear_backward", None) or _linear_mod.linear_backward
# Shapes of tests/linear/test_linear_gpu.cpp's threaded forwards, (m, n, k),
# fp16, BIAS_GELU, weight [n, k]: compute-sanitizer's initcheck reported
# bytes of y there that no kernel wrote; here every element is checked.
PINNED_LINEAR = [(64, 17, 3), (1000, 64, 17), (3, 1000, 64), (17, 3, 1000), (64, 64, 64), (1, 1, 1)]
# (mode, dtype, rows, cols, where the residual sum goes): the sum written in
# place over x or the residual on rows too long for shared memory, which the
# random cases found wrong on the H200 (y from x + s or s + r: the second
# pass of the uncached tier re-reads x and the residual after the first pass
# overwrote one of them); and the same with a separate sum, which was right.
PINNED_NORM = [(fn.NormMode.LAYERNORM, FP32, 4, 131072, "x"), (fn.NormMode.RMSNORM, FP16, 4, 131072, "res"),
               (fn.NormMode.LAYERNORM, BF16, 3, 70001, "res"), (fn.NormMode.LAYERNORM, FP32, 4, 131072, "given")]
# LayerNorm over one column: y = beta whatever x is, so dx must be exactly 0
# (plus dsum). Random cases against PyTorch found fp32 [4097, 1] at 3.05e-3
# and [1, 1] with values near 300, a column of a wider tensor, at 7.4e-5:
# the rounding error of rstd * dy * gamma (rstd = 1 / sqrt(eps) there).
# (dtype, rows, values near, dy scale)
PINNED_ONE_COLUMN = [(FP32, 4097, None, 100.0), (FP32, 1, 300.0, 1.0), (BF16, 1, 300.0, 1.0),
                     (FP16, 4097, None, 10.0), (BF16, 4097, 300.0, 100.0)]


class Failure(Exception):
    pass


HANDLE = []  # one handle for the ctypes-level queries

# What the running case is, filled in as it goes (printed when it fails).
CASE = {"desc": ""}


class Refused(Exception):
    pass


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------
def draw_size(r: random.Random, hi: int = 300) -> int:
    c = r.random()
    if c < 0.15:
        return 1
    if c < 0.45:
        return r.choice([p for p in PRIMES if p <= hi] or [1])
    if c < 0.6:
        return r.choice([v for v in (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048) if v <= hi] or [1])
    return r.randint(1, hi)


def strided(shape, dtype, pad_last: int = 0, row_step: int = 1, fill=None):
    """A tensor of `shape` whose last dimension is packed and whose rows are
    `pad_last` elements longer than needed (a column slice of a wider
    tensor), and/or every `row_step`-th row of a taller one. Poisoned with
    NaN unless fill is given."""
    *lead, last = shape
    rows = math.prod(lead) if lead else 1
    base = torch.full((rows * row_step, last + pad_last), float("nan"), dtype=dtype, device=DEV)
    v = base[::row_step, :last]
    v = v.reshape(*lead, last) if lead else v.reshape(last)
    if fill is not None:
        v.copy_(fill)
    return v


def poisoned_like(t):
    out = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=DEV)
    return out.fill_(float("nan"))


def check(name: str, ours, ref, bound) -> None:
    """|ours - ref| <= bound everywhere; NaN (or inf) never passes."""
    o = ours.double()
    ref = ref.double()
    bound = torch.as_tensor(bound, dtype=torch.float64, device=o.device)
    err = (o - ref).abs()
    ok = torch.isfinite(o) & (err <= bound)
    if not bool(ok.all()):
        bad = (~ok).nonzero()
        i = tuple(bad[0].tolist())
        b = bound.expand_as(err)
        raise Failure(f"{name}: {bad.shape[0]} of {o.numel()} elements off, first at {list(i)}: ours "
                      f"{o[i].item():.6g}, ref {ref[i].item():.6g}, bound {b[i].item():.3g}")


def untouched(name: str, t) -> None:
    if not bool(torch.isnan(t.double()).all()):
        raise Failure(f"{name} was written although the call was refused")


# ---------------------------------------------------------------------------
# LayerNorm / RMSNorm
# ---------------------------------------------------------------------------
def norm_case(r: random.Random, pinned=None) -> str:
    mode = r.choice([fn.NormMode.LAYERNORM, fn.NormMode.RMSNORM])
    dtype = r.choice(DTYPES)
    if r.random() < 0.08:
        cols = r.choice([65537, 70001, 100003, 131072])  # > 64K columns
        rows = r.randint(1, 6)
    else:
        cols = draw_size(r, 5000)
        rows = draw_size(r, 600)
    while rows * cols > MAX_ELEMS:
        rows = max(1, rows // 2)
    if pinned is not None:
        mode, dtype, rows, cols = pinned[:4]
    ln = mode == fn.NormMode.LAYERNORM
    rank3 = rows > 1 and r.random() < 0.3 and pinned is None
    axis = -1
    if rank3:
        a = r.choice([d for d in range(1, rows + 1) if rows % d == 0])
        lead = [a, rows // a]
        if r.random() < 0.3 and cols % 2 == 0:  # normalize the last two dims: [rows, c1, c2]
            lead, norm_dims, axis = [rows], [2, cols // 2], -2
        else:
            norm_dims = [cols]
    else:
        lead, norm_dims = [rows], [cols]
    shape = lead + norm_dims
    layout = r.choice(["packed", "packed", "colslice", "rowstep"]) if axis == -1 else "packed"
    if pinned is not None:
        layout = "packed"
    pad = r.choice([1, 3, 8, 64]) if layout == "colslice" else 0
    step = 2 if layout == "rowstep" else 1

    def act(fill, lay=True):
        if axis == -2:
            return fill.contiguous().clone()
        return strided(shape, dtype, pad if lay else 0, step if lay else 1, fill=fill)

    g = torch.Generator(device=DEV).manual_seed(r.getrandbits(62))
    x = act((2 * torch.randn(shape, generator=g, device=DEV) + 1).to(dtype))
    has_res = r.random() < 0.4 or pinned is not None
    res = act(torch.randn(shape, generator=g, device=DEV).to(dtype)) if has_res else None
    wdt = r.choice([dtype, FP32])
    has_w = r.random() < 0.8
    zc = has_w and r.random() < 0.2
    w = b = None
    if has_w:
        w = ((torch.rand(norm_dims, generator=g, device=DEV) - 0.5) if zc else
             (torch.rand(norm_dims, generator=g, device=DEV) + 0.5)).to(wdt)
    if ln and r.random() < 0.7:
        b = (torch.rand(norm_dims, generator=g, device=DEV) - 0.5).to(wdt)
    if w is None and b is not None:
        wdt = b.dtype
    x0, r0 = x.clone(), (res.clone() if res is not None else None)
    # Output placement: own padded layout, in place, or left to the binding.
    y_where = r.choice(["alloc", "own", "inplace"])
    out = None
    if y_where == "own":
        out = strided(shape, dtype, r.choice([0, 2, 5]), 1) if axis == -1 else torch.full_like(x, float("nan"))
    elif y_where == "inplace" and not has_res:
        out = x
    sum_where = r.choice(["alloc", "given", "x", "res"]) if has_res else None
    if pinned is not None:
        sum_where = pinned[4]
    sum_out = None
    if sum_where == "given":
        sum_out = poisoned_like(x)
    elif sum_where == "x":
        sum_out = x
    elif sum_where == "res":
        sum_out = res
    eps = 1e-5 if ln else 1e-6
    desc = CASE["desc"] = (f"{'LN' if ln else 'RMS'} {NAMES[dtype]} x{list(shape)} axis {axis} {layout}{pad or ''} "
            f"w={NAMES[wdt] if w is not None else '-'} b={'y' if b is not None else '-'} zc={int(zc)} "
            f"res={sum_where or '-'} y={y_where}")
    mean_out = torch.full((rows,), float("nan"), device=DEV) if ln else None
    rstd_out = torch.full((rows,), float("nan"), device=DEV)
    if ln:
        res_t = fn.layer_norm(x, w, b, eps, residual=res, zero_centered_gamma=zc, out=out, sum_out=sum_out,
                              mean_out=mean_out, rstd_out=rstd_out, begin_norm_axis=axis)
    else:
        res_t = fn.rms_norm(x, w, eps, residual=res, zero_centered_gamma=zc, out=out, sum_out=sum_out,
                            rstd_out=rstd_out, begin_norm_axis=axis)
    y, s = (res_t if has_res else (res_t, None))
    torch.cuda.synchronize()

    # Reference, float64, from the inputs as given.
    s_ref = (x0.double() + r0.double()).to(dtype) if has_res else x0
    if has_res:
        check("sum", s, s_ref, 0.0 if dtype == FP32 else U[dtype] * s_ref.double().abs() * 2)
    s64 = s_ref.double().reshape(rows, cols)
    if ln:
        mu = s64.mean(1, keepdim=True)
        var = s64.var(1, unbiased=False, keepdim=True)
        rstd = 1 / torch.sqrt(var + eps)
        xh = (s64 - mu) * rstd
        kappa = s64.abs().amax(1, keepdim=True) * rstd
    else:
        mu = None
        rstd = 1 / torch.sqrt((s64 * s64).mean(1, keepdim=True) + eps)
        xh = s64 * rstd
        kappa = torch.ones_like(rstd)
    scale = torch.ones(cols, dtype=torch.float64, device=DEV)
    if w is not None:
        scale = w.double().reshape(cols) + (1 if zc else 0)
    shift = b.double().reshape(cols) if b is not None else torch.zeros_like(scale)
    y_ref = xh * scale + shift
    t = NORM_FWD_TOL[dtype]
    cond = COND_K * EPS32 * kappa * scale.abs().max()
    check("y", y.reshape(rows, cols), y_ref, t + t * y_ref.abs() + cond)
    check("rstd", rstd_out, rstd.reshape(rows),
          rstd.reshape(rows) * (NORM_STATS_TOL + COND_K * EPS32 * kappa.reshape(rows)))
    if ln:
        std = 1 / rstd.reshape(rows)
        check("mean", mean_out, mu.reshape(rows), NORM_STATS_TOL * (s64.abs().amax(1) + std))

    # Backward, from the library's own statistics and s.
    x_or_sum = s if has_res else x0
    dy = act(torch.randn(shape, generator=g, device=DEV).to(dtype), lay=r.random() < 0.5)
    dy0 = dy.clone()
    has_dsum = has_res and r.random() < 0.6
    dsum = poisoned_like(x_or_sum).copy_(torch.randn(shape, generator=g, device=DEV).to(dtype)) if has_dsum else None
    dx_where = r.choice(["alloc", "own", "inplace"])
    dx_out = None
    if dx_where == "own":
        dx_out = strided(shape, dtype, r.choice([0, 4, 7]), 1) if axis == -1 else torch.full_like(x, float("nan"))
    elif dx_where == "inplace":
        dx_out = dsum if (has_dsum and r.random() < 0.5) else dy
    desc += f" | bwd dx={dx_where} dsum={int(has_dsum)}"
    CASE["desc"] = desc
    need_dw = w is not None and r.random() < 0.8
    need_db = ln and r.random() < 0.8
    dsum0 = dsum.clone() if has_dsum else None
    dx, dgamma, dbeta = fn.norm_backward(mode, dy, x_or_sum, mean_out if ln else None, rstd_out, w, dsum,
                                         zero_centered_gamma=zc, need_dgamma=need_dw, need_dbeta=need_db,
                                         dx_out=dx_out, param_dtype=wdt, begin_norm_axis=axis)
    torch.cuda.synchronize()
    # The reference backward from the library's saved statistics (what the
    # kernel uses): mean/rstd already checked against float64 above.
    s64 = x_or_sum.double().reshape(rows, cols) if has_res else s64
    rs = rstd_out.double().reshape(rows, 1)
    xh = ((s64 - mean_out.double().reshape(rows, 1)) if ln else s64) * rs
    gy = dy0.double().reshape(rows, cols)
    gg = gy * scale
    if ln:
        dx_ref = rs * (gg - gg.mean(1, keepdim=True) - xh * (gg * xh).mean(1, keepdim=True))
    else:
        dx_ref = rs * (gg - xh * (gg * xh).mean(1, keepdim=True))
    if has_dsum:
        dx_ref = dx_ref + dsum0.double().reshape(rows, cols)
    td = NORM_DX_TOL[dtype]
    cond_dx = COND_K * EPS32 * kappa * rs * gg.abs().amax(1, keepdim=True)
    check("dx", dx.reshape(rows, cols), dx_ref, td + td * dx_ref.abs() + cond_dx)
    if ln and cols == 1:
        exact_one_column(dx, dsum0)
    tw = NORM_DW_TOL[wdt if (w is not None or b is not None) else dtype]
    if dgamma is not None:
        ref = (gy * xh).sum(0)
        bound = tw * math.sqrt(rows) + tw * ref.abs() + COND_K * EPS32 * torch.sqrt(((kappa * gy) ** 2).sum(0))
        check("dgamma", dgamma.reshape(cols), ref, bound)
    if dbeta is not None:
        ref = gy.sum(0)
        check("dbeta", dbeta.reshape(cols), ref, tw * math.sqrt(rows) + tw * ref.abs())
    return desc


def exact_one_column(dx, dsum0) -> None:
    """LayerNorm over one column: dx is exactly dsum (0 without it)."""
    want = torch.zeros_like(dx) if dsum0 is None else dsum0.reshape(dx.shape)
    bad = ~(dx == want)
    if bool(bad.any()):
        i = tuple(bad.nonzero()[0].tolist())
        raise Failure(f"dx over one column: {int(bad.sum())} of {dx.numel()} elements are not exactly "
                      f"{'dsum' if dsum0 is not None else 0}, first at {list(i)}: {dx[i].item():.6g}")


def one_column_case(r: random.Random, pinned) -> str:
    """PINNED_ONE_COLUMN: x as given (near a large value: a column of a
    wider tensor), statistics from the library's forward, dx checked exact."""
    dtype, rows, near, dy_scale = pinned
    g = torch.Generator(device=DEV).manual_seed(r.getrandbits(62))
    if near is None:
        x = (2 * torch.randn(rows, 1, generator=g, device=DEV) + 1).to(dtype)
    else:
        x = (near + torch.randn(rows, 8, generator=g, device=DEV)).to(dtype)[:, 3:4]
    w = (torch.rand(1, generator=g, device=DEV) + 0.5).to(dtype)
    b = (torch.rand(1, generator=g, device=DEV) - 0.5).to(dtype)
    CASE["desc"] = f"LN one column {NAMES[dtype]} x[{rows}, 1] near {near} dy x{dy_scale}"
    mean_out = torch.full((rows,), float("nan"), device=DEV)
    rstd_out = torch.full((rows,), float("nan"), device=DEV)
    y = fn.layer_norm(x, w, b, 1e-5, mean_out=mean_out, rstd_out=rstd_out)
    torch.cuda.synchronize()
    check("y", y, b.double().expand(rows, 1), NORM_FWD_TOL[dtype] * (1 + b.double().abs()))
    dy = (dy_scale * torch.randn(rows, 1, generator=g, device=DEV)).to(dtype)
    dx, dgamma, dbeta = fn.norm_backward(fn.NormMode.LAYERNORM, dy, x, mean_out, rstd_out, w)
    torch.cuda.synchronize()
    exact_one_column(dx, None)
    # dgamma = sum dy * x_hat = 0 (x_hat is exactly 0); dbeta = sum dy.
    check("dgamma", dgamma, torch.zeros(1, dtype=torch.float64, device=DEV), 0.0)
    ref = dy.double().sum(0)
    tw = NORM_DW_TOL[dtype]
    check("dbeta", dbeta, ref, tw * math.sqrt(rows) * dy_scale + tw * ref.abs())
    return CASE["desc"]


# ---------------------------------------------------------------------------
# BatchNorm
# ---------------------------------------------------------------------------
def bn_make(shape, dtype, layout, fill):
    """x-shaped tensor in `layout`: 'cf' channels-first packed, 'cl'
    channels-last, 'pad' channels-first with padded rows (NOT_SUPPORTED)."""
    if layout == "cl" and len(shape) > 2:
        perm = [0] + list(range(2, len(shape))) + [1]
        t = torch.empty([shape[i] for i in perm], dtype=dtype, device=DEV)
        inv = [perm.index(i) for i in range(len(shape))]
        t = t.permute(inv)
    elif layout == "pad":
        t = strided(shape, dtype, 3, 1)
    else:
        t = torch.empty(shape, dtype=dtype, device=DEV)
    t.fill_(float("nan"))
    if fill is not None:
        t.copy_(fill)
    return t


def bn_case(r: random.Random) -> str:
    dtype = r.choice(DTYPES)
    engine = r.choice([fn.BnEngine.NATIVE, fn.BnEngine.NATIVE, fn.BnEngine.CUDNN])
    epi = r.choice(["none", "relu", "add_relu"])
    form = r.choice(["nchw", "nhwc", "nc", "ncl", "nlc"])
    C = draw_size(r, 200)
    N = draw_size(r, 64)
    if form in ("nchw", "nhwc"):
        shape = [N, C, draw_size(r, 40), draw_size(r, 40)]
    elif form in ("ncl", "nlc"):
        shape = [N, C, draw_size(r, 300)]
    else:
        shape = [max(N, 2), C]
    while math.prod(shape) > MAX_ELEMS:
        shape[0] = max(1, shape[0] // 2)
        if math.prod(shape) > MAX_ELEMS:
            shape[-1] = max(1, shape[-1] // 2)
    if math.prod(shape) // C < 2:
        shape[0] = 2  # one value per channel is BAD_PARAM (tested by the BatchNorm suite)
    layout = "cl" if form in ("nhwc", "nlc") else "cf"
    if len(shape) > 2 and r.random() < 0.06:
        layout = "pad"
    g = torch.Generator(device=DEV).manual_seed(r.getrandbits(62))
    x = bn_make(shape, dtype, layout, (torch.randn(shape, generator=g, device=DEV) * 2 + 0.5).to(dtype))
    if layout == "pad" and x.is_contiguous():  # padding only strides of size-1 dimensions: still packed
        layout = "cf"
        x = x.contiguous()
    z = bn_make(shape, dtype, layout, torch.randn(shape, generator=g, device=DEV).to(dtype)) if epi == "add_relu" else None
    affine = r.random() < 0.8
    w = (torch.rand(C, generator=g, device=DEV) + 0.5) if affine else None
    b = (torch.rand(C, generator=g, device=DEV) - 0.5) if affine else None
    momentum = r.choice([0.1, r.random(), None])
    rm = torch.randn(C, generator=g, device=DEV)
    rv = torch.rand(C, generator=g, device=DEV) + 0.5
    nbt = torch.tensor([r.randint(0, 5)], dtype=torch.int64, device=DEV)
    rm0, rv0, nbt0 = rm.clone(), rv.clone(), int(nbt.item())
    x0, z0 = x.clone(), (z.clone() if z is not None else None)
    # A padded layout is one the library refuses (NOT_SUPPORTED, asked below
    # through the ctypes layer with x's own strides); the binding copies such
    # an x to a packed tensor first, so through it only allocated outputs.
    y_where = "alloc" if layout == "pad" else r.choice(["own", "own", "x"] + (["z"] if z is not None else []))
    out = {"x": x, "z": z, "own": None, "alloc": None}[y_where]
    if y_where == "own":
        out = bn_make(shape, dtype, layout, None)
    eps = 1e-5
    desc = CASE["desc"] = (f"BN {NAMES[dtype]} {shape} {form}/{layout} {epi} {engine.name} affine={int(affine)} "
            f"momentum={momentum} y={y_where}")
    refusable = engine == fn.BnEngine.CUDNN
    if layout == "pad":
        h = HANDLE[0] if HANDLE else HANDLE.append(fn.Handle()) or HANDLE[0]
        xd = fn.TensorDesc({FP32: fn.DType.FLOAT32, FP16: fn.DType.FLOAT16, BF16: fn.DType.BFLOAT16}[dtype],
                           list(x.shape), list(x.stride()))
        bd = fn.BatchNormDesc(fn.BnEpilogue[epi.upper()], eps, engine=engine)
        nbytes = ctypes.c_size_t(12345)
        st = fn.lib.fnorm_batchnorm_fwd_train_workspace_size(h.ptr, bd.ptr, xd.ptr, ctypes.byref(nbytes))
        if st != fn.Status.NOT_SUPPORTED or nbytes.value != 12345:
            raise Failure(f"a padded x (strides {x.stride()}) got status {st} and {nbytes.value} bytes from the "
                          f"workspace query; the header says NOT_SUPPORTED")
    try:
        y, saved = fn.batch_norm_train(x, w, b, rm, rv, nbt, momentum=momentum, eps=eps, epilogue=fn.BnEpilogue[epi.upper()],
                                       z=z, engine=engine, out=out)
        torch.cuda.synchronize()
    except fn.FusedNormError as e:
        if refusable and e.status == fn.Status.NOT_SUPPORTED:
            if y_where == "own":
                untouched("y", out)
            raise Refused(f"{desc}: {e}")
        raise
    # Reference forward in float64.
    perm = [1, 0] + list(range(2, len(shape)))
    x64 = x0.double()
    cv = x64.permute(perm).reshape(C, -1)
    m = cv.shape[1]
    mean_c = cv.mean(1)
    var_c = cv.var(1, unbiased=False)
    invstd = 1 / torch.sqrt(var_c + eps)
    bsh = [1, C] + [1] * (len(shape) - 2)
    xr = x64.clone().requires_grad_(True)
    wr = w.double().requires_grad_(True) if affine else None
    br = b.double().requires_grad_(True) if affine else None
    pre = F.batch_norm(xr, None, None, wr, br, training=True, eps=eps)
    if z0 is not None:
        pre = pre + z0.double()
    y_ref = torch.relu(pre) if epi != "none" else pre
    maxabs = cv.abs().amax(1)
    g_abs = w.double().abs() if affine else torch.ones(C, dtype=torch.float64, device=DEV)
    cond = (8 * EPS32 * maxabs * invstd * g_abs).view(bsh)
    t = BN_FWD_TOL[dtype]
    check("y", y, y_ref.detach(), t + t * y_ref.detach().abs() + cond)
    check("saved mean", saved.mean, mean_c, 1e-6 * maxabs + 1e-5 / invstd)
    check("saved invstd", saved.invstd, invstd, 1e-4 * invstd)
    mom = (1.0 / (nbt0 + 1)) if momentum is None else momentum
    rm_ref = (1 - mom) * rm0.double() + mom * mean_c
    rv_ref = (1 - mom) * rv0.double() + mom * var_c * m / (m - 1)
    check("running mean", rm, rm_ref, 1e-5 * rm_ref.abs() + 1e-6 * maxabs + 1e-7)
    check("running var", rv, rv_ref, 1e-5 * rv_ref.abs() + 1e-6 * maxabs ** 2 / max(m - 1, 1) + 1e-6)
    if int(nbt.item()) != nbt0 + 1:
        raise Failure(f"num_batches_tracked {int(nbt.item())}, expected {nbt0 + 1}")
    if epi != "none":
        wrong = ((y.double() > 0) != (y_ref.detach() > 0)) & (y_ref.detach().abs() > 1e-6)
        if bool(wrong.any()):
            raise Failure(f"ReLU mask disagrees with float64 y > 0 at {int(wrong.sum())} elements")

    # Backward.
    dy = bn_make(shape, dtype, layout, torch.randn(shape, generator=g, device=DEV).to(dtype))
    dy0 = dy.clone()
    yo = y.clone()
    dx_where = "alloc" if layout == "pad" else r.choice(["own", "dy", "x"])
    xb = x0.clone() if y_where == "x" else x  # the forward overwrote x in place: give backward the original
    dx_out = {"dy": dy, "x": xb, "alloc": None, "own": None}[dx_where]
    if dx_where == "own":
        dx_out = bn_make(shape, dtype, layout, None)
    desc += f" | bwd dx={dx_where}"
    CASE["desc"] = desc
    try:
        dx, dgamma, dbeta, dz = fn.batch_norm_backward(dy, xb, w, saved, dx_out=dx_out)
        torch.cuda.synchronize()
    except fn.FusedNormError as e:
        if engine == fn.BnEngine.CUDNN and e.status == fn.Status.NOT_SUPPORTED:
            raise Refused(f"{desc}: backward {e}")
        raise
    gd = dy0.double()
    if epi != "none":
        mask = yo.double() > 0
        if engine == fn.BnEngine.CUDNN and dz is not None:
            mask |= (yo.double() == 0) & (dz.double() == gd) & (gd != 0)  # cuDNN masks on its fp32 pre-activation
        gd = torch.where(mask, gd, torch.zeros_like(gd))
    inputs = [xr] + ([wr, br] if affine else [])
    grads = torch.autograd.grad(pre, inputs, gd)
    a = (g_abs * invstd).view(bsh)
    td = BN_DX_TOL[dtype]
    gc = gd.permute(perm).reshape(C, -1)
    xh = (cv - mean_c[:, None]) * invstd[:, None]
    s_g, s_gx = gc.abs().sum(1), (gc * xh).abs().sum(1)
    extra = a * cond / g_abs.view(bsh).clamp_min(1e-30) * (s_g / m + s_gx / m).view(bsh)
    check("dx", dx, grads[0], td * a + td * grads[0].abs() + extra)
    if affine:
        check("dgamma", dgamma, grads[1], 1e-5 * s_gx + 8 * EPS32 * maxabs * invstd * s_g + 1e-5)
        check("dbeta", dbeta, grads[2], 1e-5 * s_g + 1e-5)
    if dz is not None:
        check("dz", dz, gd, 0.0)

    # Inference forward with the updated running statistics.
    xi = bn_make(shape, dtype, layout, x0)
    zi = bn_make(shape, dtype, layout, z0) if z0 is not None else None
    yi_where = "alloc" if layout == "pad" else r.choice(["own", "x"] + (["z"] if zi is not None else []))
    outi = {"x": xi, "z": zi, "alloc": None, "own": None}[yi_where]
    if yi_where == "own":
        outi = bn_make(shape, dtype, layout, None)
    rmi, rvi = rm.clone(), rv.clone()
    try:
        yi = fn.batch_norm_infer(xi, rmi, rvi, w, b, eps=eps, epilogue=fn.BnEpilogue[epi.upper()], z=zi,
                                 engine=engine, out=outi)
        torch.cuda.synchronize()
    except fn.FusedNormError as e:
        if engine == fn.BnEngine.CUDNN and e.status == fn.Status.NOT_SUPPORTED:
            if yi_where == "own":
                untouched("y (inference)", outi)
            return desc + " | inference refused by cuDNN"
        raise
    inv_i = 1 / torch.sqrt(rvi.double() + eps)
    pre_i = F.batch_norm(x0.double(), rmi.double(), rvi.double(), w.double() if affine else None,
                         b.double() if affine else None, training=False, eps=eps)
    if z0 is not None:
        pre_i = pre_i + z0.double()
    yi_ref = torch.relu(pre_i) if epi != "none" else pre_i
    cond_i = (8 * EPS32 * (maxabs + rmi.double().abs()) * inv_i * g_abs).view(bsh)
    check("y (inference)", yi, yi_ref, t + t * yi_ref.abs() + cond_i)
    return desc + f" | infer y={yi_where}"


# ---------------------------------------------------------------------------
# Linear
# ---------------------------------------------------------------------------
def gelu_grad(z):
    c = math.sqrt(2 / math.pi)
    inner = c * (z + 0.044715 * z ** 3)
    th = torch.tanh(inner)
    return 0.5 * (1 + th) + 0.5 * z * (1 - th * th) * c * (1 + 3 * 0.044715 * z * z)


def linear_case(r: random.Random, pinned=None) -> str:
    dtype = r.choice(DTYPES)
    act = r.choice([None, "bias", "relu", "gelu"])
    layout = r.choice(["nk", "kn"])
    m, k, n = draw_size(r, 700), draw_size(r, 700), draw_size(r, 700)
    while m * max(k, n) > MAX_ELEMS:
        m = max(1, m // 2)
    rank3 = m > 1 and r.random() < 0.25
    pad_x, pad_w, pad_y = (r.choice([0, 0, 8, 1]) for _ in range(3))
    if pinned is not None:
        (m, n, k), dtype, act, layout, rank3, pad_x, pad_w, pad_y = pinned, FP16, "gelu", "nk", False, 0, 0, 0
    has_bias = act is not None
    activation = None if act in (None, "bias") else act
    g = torch.Generator(device=DEV).manual_seed(r.getrandbits(62))
    xs = [m, k]
    if rank3:
        a = r.choice([d for d in range(1, m + 1) if m % d == 0])
        xs = [a, m // a, k]
    x = strided(xs, dtype, pad_x, 1, fill=torch.randn(xs, generator=g, device=DEV).to(dtype))
    ws = [n, k] if layout == "nk" else [k, n]
    w = strided(ws, dtype, pad_w, 1, fill=(torch.randn(ws, generator=g, device=DEV) / math.sqrt(k)).to(dtype))
    bias = torch.randn(n, generator=g, device=DEV).to(dtype) if has_bias else None
    ys = xs[:-1] + [n]
    out = strided(ys, dtype, pad_y, 1)
    desc = CASE["desc"] = (f"linear {NAMES[dtype]} m{m} k{k} n{n} x{list(xs)} {act or 'none'} {layout} "
            f"pad x{pad_x} w{pad_w} y{pad_y}")
    save_aux = activation is not None
    try:
        res = LINEAR(x, w, bias, activation, layout, save_aux=save_aux, out=out)
        torch.cuda.synchronize()
    except fn.FusedNormError as e:
        if e.status == fn.Status.NOT_SUPPORTED:  # cuBLASLt has no kernel for these alignments
            untouched("y", out)
            raise Refused(f"{desc}: {e}")
        raise
    y, aux = res if save_aux else (res, None)
    u = U[dtype]
    x2 = x.double().reshape(m, k)
    wnk = w.double() if layout == "nk" else w.double().t()
    b64 = bias.double() if has_bias else None
    z = F.linear(x2, wnk, b64)
    zmag = F.linear(x2.abs(), wnk.abs(), b64.abs() if has_bias else None)
    ztol = (2 * u + k * ACC) * zmag + 1e-30
    ref = torch.relu(z) if act == "relu" else (F.gelu(z, approximate="tanh") if act == "gelu" else z)
    tiny = TINY[dtype]
    allowed = 2 * u * ref.abs() + 1.2 * ztol + (GELU_APPROX * z.abs() if act == "gelu" else 0) + tiny
    check("y", y.reshape(m, n), ref, allowed)

    dy = torch.randn(ys, generator=g, device=DEV).to(dtype)
    dw_out = poisoned_like(w)
    desc += " | bwd"
    CASE["desc"] = desc
    try:
        dx, dw, db = LINEAR_BACKWARD(dy, x, w, aux, has_bias, activation, layout, dw_out=dw_out)
        torch.cuda.synchronize()
    except fn.FusedNormError as e:
        if e.status == fn.Status.NOT_SUPPORTED:
            raise Refused(f"{desc}: backward {e}")
        raise
    dy2 = dy.double().reshape(m, n)
    dz = dy2
    edz = torch.zeros_like(dz)
    if act == "relu":
        edz = dz.abs() * (z.abs() <= ztol)  # undecided sign: dz may be dy or 0
        dz = dz * (y.double().reshape(m, n) > 0)
    elif act == "gelu":
        dz = dy2 * gelu_grad(z)
        edz = dy2.abs() * (0.8 * (ztol + u * z.abs()) + GELU_APPROX * (1 + z.abs())) + u * dz.abs()
    dx_ref = dz @ wnk
    mag = dz.abs() @ wnk.abs()
    prop = edz @ wnk.abs()
    # tiny: dx's own rounding, and each dz element's (if stored in the dtype) through |W|.
    ones = torch.ones_like(dz)
    check("dx", dx.reshape(m, k), dx_ref, 2 * u * (dx_ref.abs() + prop) + (2 * u + n * ACC) * mag + prop
          + tiny * (1 + ones @ wnk.abs()))
    dw_nk = dz.t() @ x2
    magw = dz.abs().t() @ x2.abs()
    propw = edz.t() @ x2.abs()
    ours_dw = dw.double() if layout == "nk" else dw.double().t()
    check("dw", ours_dw, dw_nk, 2 * u * (dw_nk.abs() + propw) + (2 * u + m * ACC) * magw + propw
          + tiny * (1 + ones.t() @ x2.abs()))
    if has_bias:
        db_ref = dz.sum(0)
        check("db", db, db_ref, 2 * u * (db_ref.abs() + edz.sum(0)) + (2 * u + m * ACC) * dz.abs().sum(0)
              + edz.sum(0) + tiny * (1 + m))
    return desc


# ---------------------------------------------------------------------------
# ---------------------------------------------------------------------------
# LayerNorm / RMSNorm with a quantized output (fnorm_norm_fwd_quant)
# ---------------------------------------------------------------------------
QMAX = {torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0, torch.int8: 127.0}


def q_codes(v, s, qdt):
    """The header's rules (torch's composition) on float64 v and scale s."""
    m = QMAX[qdt]
    t = v / s
    q = t.round().clamp(-127, 127).to(torch.int8) if qdt == torch.int8 else t.clamp(-m, m).to(qdt)
    return q.double()


def quant_case(r: random.Random) -> str:
    mode = r.choice([fn.NormMode.LAYERNORM, fn.NormMode.RMSNORM])
    ln = mode == fn.NormMode.LAYERNORM
    dtype = r.choice(DTYPES)
    qdt = r.choice([torch.float8_e4m3fn, torch.float8_e5m2, torch.int8])
    per_token = qdt == torch.int8 or r.random() < 0.6
    cols = r.choice([65537, 131072]) if r.random() < 0.05 else draw_size(r, 5000)
    rows = r.randint(1, 4) if cols > 65536 else draw_size(r, 600)
    while rows * cols > MAX_ELEMS:
        rows = max(1, rows // 2)
    shape = [rows, cols]
    layout = r.choice(["packed", "packed", "colslice", "rowstep"])
    pad = r.choice([1, 3, 8, 64]) if layout == "colslice" else 0
    step = 2 if layout == "rowstep" else 1
    g = torch.Generator(device=DEV).manual_seed(r.getrandbits(62))
    x = strided(shape, dtype, pad, step, fill=(2 * torch.randn(shape, generator=g, device=DEV) + 1).to(dtype))
    has_res = r.random() < 0.4
    res = strided(shape, dtype, pad, step, fill=torch.randn(shape, generator=g, device=DEV).to(dtype)) \
        if has_res else None
    wdt = r.choice([dtype, FP32])
    zc = r.random() < 0.2
    w = ((torch.rand(cols, generator=g, device=DEV) - 0.5) if zc else
         (torch.rand(cols, generator=g, device=DEV) + 0.5)).to(wdt) if r.random() < 0.8 else None
    zc = zc and w is not None
    b = (torch.rand(cols, generator=g, device=DEV) - 0.5).to(w.dtype if w is not None else wdt) \
        if ln and r.random() < 0.7 else None
    x0, r0 = x.clone(), (res.clone() if res is not None else None)
    sum_where = r.choice(["alloc", "given", "x", "res"]) if has_res else None
    sum_out = {"given": poisoned_like(x) if has_res else None, "x": x, "res": res}.get(sum_where)
    # y in its own padded layout sometimes (one-byte codes poisoned 0xFF).
    out = ybase = None
    if r.random() < 0.3:
        ybase = torch.full((rows, cols + r.choice([0, 1, 5])), 0xFF, dtype=torch.uint8, device=DEV)
        out = ybase.view(qdt)[:, :cols]
    # A static scale mapping |v| = c to the format's largest value: |v|
    # reaches about 8, so c < 8 saturates some codes.
    scale = None if per_token else torch.tensor(r.choice([2.0, 6.0, 12.0]) / QMAX[qdt], device=DEV)
    eps = 1e-5 if ln else 1e-6
    desc = CASE["desc"] = (f"QUANT {'LN' if ln else 'RMS'} {NAMES[dtype]} -> {qdt} "
                           f"{'per-token' if per_token else 'static'} x{shape} {layout}{pad or ''} "
                           f"w={NAMES[wdt] if w is not None else '-'} b={'y' if b is not None else '-'} zc={int(zc)} "
                           f"res={sum_where or '-'} y={'own' if out is not None else 'alloc'}")
    if ln:
        got = fn.layer_norm_quant(x, w, b, eps, residual=res, dtype=qdt, scale=scale, return_amax=True,
                                  zero_centered_gamma=zc, out=out, sum_out=sum_out)
    else:
        got = fn.rms_norm_quant(x, w, eps, residual=res, dtype=qdt, scale=scale, return_amax=True,
                                zero_centered_gamma=zc, out=out, sum_out=sum_out)
    torch.cuda.synchronize()
    y, sc, amax = got[0], got[1], got[-1]
    s_ref = (x0.double() + r0.double()).to(dtype) if has_res else x0
    if has_res and not torch.equal(got[2], s_ref):
        raise Failure("sum differs from x + residual rounded to x's dtype")
    s64 = s_ref.double()
    if ln:
        rstd = 1 / torch.sqrt(s64.var(1, unbiased=False, keepdim=True) + eps)
        xh = (s64 - s64.mean(1, keepdim=True)) * rstd
        kappa = s64.abs().amax(1, keepdim=True) * rstd
    else:
        xh = s64 / torch.sqrt((s64 * s64).mean(1, keepdim=True) + eps)
        kappa = torch.ones(rows, 1, dtype=torch.float64, device=DEV)
    gam = (w.double() + (1 if zc else 0)) if w is not None else torch.ones(cols, dtype=torch.float64, device=DEV)
    v = xh * gam + (b.double() if b is not None else 0)
    # v is fp32 arithmetic whatever the dtype: the fp32 forward bound.
    tol = NORM_FWD_TOL[FP32] * (1 + v.abs()) + COND_K * EPS32 * kappa * gam.abs().max()
    m = QMAX[qdt]
    if per_token:
        floor = torch.finfo(torch.float32).eps if qdt == torch.int8 else \
            torch.tensor(1.0 / (m * 512), dtype=torch.float32).item()
        sref = (v.abs().amax(1) / m).clamp(min=floor)
        check("scale", sc, sref, (tol.amax(1) / m) + 1e-12)
        sd = sc.double().reshape(rows, 1)
    else:
        sd = sc.double()
    want = q_codes(v, sd, qdt)
    lo, hi = q_codes(v - tol, sd, qdt), q_codes(v + tol, sd, qdt)
    gv = y.double()
    ok = (gv == want) | ((lo != hi) & (gv >= torch.minimum(lo, hi)) & (gv <= torch.maximum(lo, hi)))
    if not bool(ok.all()):
        i = tuple((~ok).nonzero()[0].tolist())
        raise Failure(f"codes: {int((~ok).sum())} of {gv.numel()} off, first at {list(i)}: v {v[i].item():.9g}, "
                      f"s {sd.expand_as(v)[i].item():.6g}, ours {gv[i].item()}, ref {want[i].item()}")
    check("amax", amax.reshape(1), v.abs().amax().reshape(1), tol.amax().reshape(1))
    if ybase is not None and not bool((ybase[:, cols:] == 0xFF).all()):
        raise Failure("y's padding was written")
    return desc


# ---------------------------------------------------------------------------
# GroupNorm (+ SiLU, + per-sample scale / shift)
# ---------------------------------------------------------------------------
def gn_reference(x, groups, w, b, sc, sh, eps, silu):
    """float64: (v0 = group_norm, v = v0 * (1 + scale) + shift, y). The
    statistics from x's groups directly: F.group_norm refuses one value per
    group (its batch-size check for training), which the library computes
    (mean = x, variance 0)."""
    shape = (x.shape[0], x.shape[1]) + (1,) * (x.dim() - 2)
    xg = x.reshape(x.shape[0], groups, -1)
    mean = xg.mean(dim=2, keepdim=True)
    var = ((xg - mean) ** 2).mean(dim=2, keepdim=True)
    v0 = ((xg - mean) / torch.sqrt(var + eps)).reshape(x.shape)
    if w is not None:
        v0 = v0 * w.reshape((1, -1) + (1,) * (x.dim() - 2))
    if b is not None:
        v0 = v0 + b.reshape((1, -1) + (1,) * (x.dim() - 2))
    v = v0
    if sc is not None:
        v = v * (1 + sc.reshape(shape))
    if sh is not None:
        v = v + sh.reshape(shape)
    return v0, v, (F.silu(v) if silu else v)


def groupnorm_case(r: random.Random) -> str:
    from fusednorm import groupnorm as gnm
    dtype = r.choice(DTYPES)
    n = r.choice([1, 1, 2, 3, 4])
    groups = r.choice([1, 2, 4, 8, 32])
    cg = r.choice([1, 1, 2, 3, 4, 8, 16])
    c = groups * cg
    rank = r.choice([2, 3, 4, 4, 4, 5])
    spatial = []
    budget = max(1, MAX_ELEMS // (n * c))
    for _ in range(rank - 2):
        spatial.append(max(1, min(draw_size(r, 64), budget)))
        budget = max(1, budget // spatial[-1])
    shape = (n, c, *spatial)
    layout = r.choice(["cf", "cl"]) if rank in (4, 5) else "cf"
    pdtype = r.choice([dtype, FP32, None])
    silu = r.random() < 0.5
    mod = r.choice([None, "packed", "chunk", "scale", "shift"])
    eps = r.choice([1e-5, 1e-6, 1e-3])
    offset = r.choice([0.0, 0.0, 3.0, 100.0])
    g = torch.Generator(device=DEV).manual_seed(r.getrandbits(63))
    desc = (f"groupnorm {NAMES[dtype]} {list(shape)} G={groups} {layout} params={pdtype and NAMES[pdtype]} "
            f"silu={silu} mod={mod} eps={eps} offset={offset}")
    CASE["desc"] = desc
    fmt = {4: torch.channels_last, 5: torch.channels_last_3d}.get(rank)
    x = (torch.randn(shape, generator=g, device=DEV) + offset).to(dtype)
    if layout == "cl":
        x = x.to(memory_format=fmt)
    w = b = sc = sh = temb = None
    if pdtype is not None:
        w = (torch.randn(c, generator=g, device=DEV) * 0.5 + 1).to(pdtype)
        b = (torch.randn(c, generator=g, device=DEV) * 0.3).to(pdtype)
    sdt = r.choice([dtype, FP32])
    if mod == "chunk":
        temb = (torch.randn(n, 2 * c, 1, 1, generator=g, device=DEV) * 0.4).to(sdt)
        sc, sh = temb.chunk(2, dim=1)
    elif mod is not None:
        if mod in ("packed", "scale"):
            sc = (torch.randn(n, c, generator=g, device=DEV) * 0.4).to(sdt)
        if mod in ("packed", "shift"):
            sh = (torch.randn(n, c, generator=g, device=DEV) * 0.4).to(sdt)
    act = gnm.GnActivation.SILU if silu else gnm.GnActivation.NONE
    y_out = poisoned_like(x)
    y, mean, rstd = gnm.group_norm(x, groups, w, b, eps=eps, scale=sc, shift=sh, activation=act,
                                   return_stats=True, out=y_out)
    torch.cuda.synchronize()
    d = torch.float64
    xd = x.double()
    wd, bd = (w.double(), b.double()) if w is not None else (None, None)
    scd = sc.double() if sc is not None else None
    shd = sh.double() if sh is not None else None
    v0, v, y_ref = gn_reference(xd, groups, wd, bd, scd, shd, eps, silu)
    xg = xd.reshape(n, groups, -1)
    mean_ref = xg.mean(-1)
    rstd_ref = 1 / torch.sqrt(xg.var(-1, unbiased=False) + eps)
    maxabs = xg.abs().amax(-1)
    check("mean", mean.view(n, groups), mean_ref, 2e-6 * maxabs + 1e-7)
    check("rstd", rstd.view(n, groups), rstd_ref, 2e-5 * rstd_ref + 8 * EPS32 * maxabs * rstd_ref ** 2 * maxabs)
    bsh = (n, c) + (1,) * (rank - 2)
    gamma_eff = (wd if wd is not None else torch.ones(c, dtype=d, device=DEV)).view(1, c, *([1] * (rank - 2)))
    one_s = (1 + scd.reshape(bsh)) if scd is not None else torch.ones(bsh, dtype=d, device=DEV)
    gp = (gamma_eff * one_s).abs()
    rstd_c = rstd_ref.repeat_interleave(cg, dim=1).view(bsh)
    max_c = maxabs.repeat_interleave(cg, dim=1).view(bsh)
    cond = 8 * EPS32 * max_c * rstd_c * gp  # fp32 statistics of values far from 0
    t = NORM_FWD_TOL[dtype]
    check("y", y, y_ref, t + t * y_ref.abs() + cond)
    if y.stride() != x.stride():
        raise Failure(f"y has strides {y.stride()}, x {x.stride()}")
    # Backward.
    dy = torch.randn(shape, generator=g, device=DEV).to(dtype)
    if layout == "cl":
        dy = dy.to(memory_format=fmt)
    dx_out = poisoned_like(x)
    dx, dgamma, dbeta, dscale, dshift = gnm.group_norm_backward(dy, x, mean, rstd, groups, w, b, scale=sc, shift=sh,
                                                                activation=act, dx_out=dx_out)
    torch.cuda.synchronize()
    leaves = [xd.requires_grad_()]
    if wd is not None:
        leaves += [wd.requires_grad_(), bd.requires_grad_()]
    if temb is not None:
        td_ = temb.double().requires_grad_()
        leaves.append(td_)
        scd, shd = td_.chunk(2, dim=1)
    else:
        if scd is not None:
            leaves.append(scd.requires_grad_())
        if shd is not None:
            leaves.append(shd.requires_grad_())
    _, _, y2 = gn_reference(leaves[0], groups, leaves[1] if wd is not None else None,
                            leaves[2] if wd is not None else None, scd, shd, eps, silu)
    grads = list(torch.autograd.grad(y2, leaves, dy.double()))
    du = dy.double() * (torch.sigmoid(v) * (1 + v * (1 - torch.sigmoid(v))) if silu else 1)
    # du's own error (SiLU): the library recomputes SiLU's derivative from its
    # fp32 x_hat (error kx below, through silu''), and for 16-bit x through
    # tanh.approx (sigmoid within SIG16 absolute, src/groupnorm/gn_tile.cuh:
    # an exact sigmoid made the backward 1.06-1.38x slower on the H100).
    # Every sum of du below carries it (e_du), beside the fp32 rounding.
    e_du = torch.zeros_like(xd)
    if silu:
        sg = torch.sigmoid(v)
        ds = (1 + v * (1 - 2 * sg)).abs()  # d silu' / d sigmoid
        d2 = (sg * (1 - sg) * (2 + v * (1 - 2 * sg))).abs()  # silu''
        kxv = 8 * EPS32 * maxabs.repeat_interleave(cg, dim=1).view(bsh) * rstd_c
        e_du = dy.double().abs() * (d2 * gp * kxv * (1 + xd.detach().sub(mean_ref.repeat_interleave(
            cg, 1).view(bsh)).abs() * rstd_c) + (SIG16 * ds if dtype != FP32 else 0))
    m = xd.numel() // (n * groups)
    gsum = (du.abs() * gp).reshape(n, groups, -1).sum(-1) / m
    a = rstd_c * (gp * du.abs().reshape(n, groups, -1).amax(-1).repeat_interleave(cg, 1).view(bsh)
                  + gsum.repeat_interleave(cg, 1).view(bsh) * (1 + 8 * EPS32 * max_c * rstd_c))
    tdx = NORM_DX_TOL[dtype]
    rx = grads.pop(0)
    check("dx", dx, rx, tdx * a + tdx * rx.abs() + cond * a)
    xhat = (xd.detach() - mean_ref.repeat_interleave(cg, 1).view(bsh)) * rstd_c
    kx = (8 * EPS32 * max_c * rstd_c).expand(bsh)  # x_hat's fp32 error where values sit far from 0
    kx_c = kx.amax(0).reshape(c)
    kx_nc = kx.reshape(n, c)
    if wd is not None:
        s_gx = (du * one_s * xhat).abs().transpose(0, 1).reshape(c, -1).sum(1)
        s_g = (du * one_s).abs().transpose(0, 1).reshape(c, -1).sum(1)
        rw = grads.pop(0)
        e_gx = (e_du * one_s * xhat).abs().transpose(0, 1).reshape(c, -1).sum(1)
        e_g = (e_du * one_s).abs().transpose(0, 1).reshape(c, -1).sum(1)
        check("dgamma", dgamma, rw, 2e-5 * s_gx + 2 * U[w.dtype] * rw.abs() + kx_c * s_g + e_gx + 1e-5)
        rb = grads.pop(0)
        check("dbeta", dbeta, rb, 2e-5 * s_g + 2 * U[w.dtype] * rb.abs() + e_g + 1e-5)
    red = tuple(range(2, rank))
    if temb is not None:
        rt = grads.pop(0).reshape(n, 2 * c)
        s0 = (du * v0).abs().sum(red) if red else (du * v0).abs()
        s1 = du.abs().sum(red) if red else du.abs()
        e0 = (e_du * v0).abs().sum(red) if red else (e_du * v0).abs()
        e1 = e_du.sum(red) if red else e_du
        bound = torch.cat([2e-5 * s0 + kx_nc * gp.reshape(n, c) * s1 + e0, 2e-5 * s1 + e1], 1) + \
            2 * U[sdt] * rt.abs() + 1e-5
        check("dtemb (dscale, dshift)", torch.cat([dscale.reshape(n, c), dshift.reshape(n, c)], 1), rt, bound)
    else:
        for name, out, t_ in (("dscale", dscale, sc), ("dshift", dshift, sh)):
            if t_ is None:
                continue
            ref = grads.pop(0)
            s1 = du.abs().sum(red) if red else du.abs()
            s0 = (du * v0).abs().sum(red) if red else (du * v0).abs()
            base = s0 if name == "dscale" else s1
            e0 = (e_du * v0).abs().sum(red) if red else (e_du * v0).abs()
            e1 = e_du.sum(red) if red else e_du
            check(name, out, ref, 2e-5 * base + kx_nc * gp.reshape(n, c) * s1 + (e0 if name == "dscale" else e1) +
                  2 * U[sdt] * ref.abs() + 1e-5)
    return desc


OPS = [("norm", norm_case), ("batchnorm", bn_case), ("linear", linear_case), ("norm_quant", quant_case),
       ("groupnorm", groupnorm_case)]


def main() -> int:
    unknown = ONLY_OPS - {name for name, _ in OPS}
    if unknown:
        print(f"FNORM_PROPERTY_OPS: no op named {', '.join(sorted(unknown))} (ops: "
              f"{', '.join(name for name, _ in OPS)})", flush=True)
        return 99
    print(f"property: seed {SEED} (FNORM_PROPERTY_SEED={SEED} repeats this run), {N_CASES} cases; "
          f"{torch.cuda.get_device_name()} torch {torch.__version__}", flush=True)
    master = random.Random(SEED)
    case_seeds = [master.getrandbits(64) for _ in range(N_CASES)]
    counts = {"passed": 0, "failed": 0, "refused": 0}
    per_op = {name: [0, 0, 0] for name, _ in OPS}
    t0 = time.time()
    pinned = [("linear", lambda r, p=p: linear_case(r, p)) for p in PINNED_LINEAR] + \
             [("norm", lambda r, p=p: norm_case(r, p)) for p in PINNED_NORM] + \
             [("norm", lambda r, p=p: one_column_case(r, p)) for p in PINNED_ONE_COLUMN]
    indices = [int(ONLY)] if ONLY is not None else range(-len(pinned), N_CASES)
    verbose = ONLY is not None or bool(os.environ.get("FNORM_PROPERTY_VERBOSE"))
    for i in indices:
        # Negative indices: the pinned cases, then the random ones.
        r = random.Random(case_seeds[i] if i >= 0 else i)
        name, fnc = OPS[i % len(OPS)] if i >= 0 else pinned[i]
        if ONLY_OPS and name not in ONLY_OPS:
            continue
        CASE["desc"] = ""
        try:
            fnc(r)
            counts["passed"] += 1
            per_op[name][0] += 1
            if verbose:
                print(f"ok case {i}: {CASE['desc']}")
        except Refused as e:
            counts["refused"] += 1
            per_op[name][2] += 1
            if verbose:
                print(f"refused case {i}: {e}")
        except Exception as e:  # noqa: BLE001 - a library error or a failed check: report and go on
            counts["failed"] += 1
            per_op[name][1] += 1
            kind = "" if isinstance(e, Failure) else f"{type(e).__name__}: "
            print(f"FAIL case {i}: {CASE['desc']}\n    {kind}{e}\n"
                  f"    rerun: FNORM_PROPERTY_SEED={SEED} FNORM_PROPERTY_CASE={i}", flush=True)
            if not isinstance(e, (Failure, fn.FusedNormError)):
                traceback.print_exc(limit=4)
            try:
                torch.cuda.synchronize()
            except Exception as e2:  # noqa: BLE001 - a sticky CUDA error ends the run
                print(f"CUDA context lost ({e2}); stopping", flush=True)
                break
    dt = time.time() - t0
    ops = ", ".join(f"{k} {v[0]}/{v[1]}/{v[2]}" for k, v in per_op.items())
    print(f"property ({ops} passed/failed/refused): {counts['passed']} passed, {counts['failed']} failed, "
          f"{counts['refused']} refused in {dt:.1f} s; seed {SEED}")
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
