#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""libfusednorm's fully-connected layer beside PyTorch on the GPU, through the
Python binding.

Reference: F.linear + relu / gelu(approximate="tanh") and their autograd,
evaluated in float64 on the very inputs we gave the library (upcast), so the
reference's own rounding is negligible and the bounds below are ours alone.
ReLU's derivative in the reference is taken from our y (y > 0), which must
match the sign of the float64 z wherever |z| exceeds its error bound; where
it does not, cuBLASLt's mask may differ from y > 0 (it rounds the z it tests
and the z it stores differently), and the bound allows dz to be dy or 0.

Coverage: the seed's five shapes (m = 8192; (n, k) = (1024, 784),
(1024, 1024), (512, 1024), (256, 512), (1, 256)) and every (m, n, k) with
m, n, k in {1, 3, 17, 64, 1000}; both weight layouts, every epilogue and
dtype (fp32, fp16, bf16); fp32 with TF32 allowed; tensors one element off
their alignment and rows padded; chained layers (the producer's derivative in
the dx GEMM); LinearFunction under autograd. Outputs are poisoned with NaN
and sit between NaN guards that must survive.

Exit 77 (skip) without PyTorch, a GPU or cuBLASLt; 99 when the library cannot
be loaded; 1 when any check fails. FNORM_TEST_SEED=N repeats the inputs;
FNORM_TEST_QUICK=1 runs a reduced list; FNORM_TEST_FILTER=substring runs
only the cases whose name has it.
"""
from __future__ import annotations

import itertools
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "common"))
from torch_prologue import load  # noqa: E402

torch, F, fn = load(ROOT)
from fusednorm import linear as fl  # noqa: E402
try:
    fl.LinearDesc()
except fn.FusedNormError as e:
    if e.status == fn.Status.NOT_SUPPORTED_BUILD:
        print("SKIP: this build of libfusednorm has no cuBLASLt")
        sys.exit(77)
    raise

DEV = "cuda"
FP32, FP16, BF16 = torch.float32, torch.float16, torch.bfloat16
NAMES = {FP32: "fp32", FP16: "fp16", BF16: "bf16"}
EPILOGUES = (None, "bias", "relu", "gelu")

# ---------------------------------------------------------------------------
# Tolerances. Inputs: x, w, dy ~ U(-1, 1), bias ~ U(-0.5, 0.5), rounded to the
# dtype. For an output that sums `inner` products, mag = the sum of their
# absolute values (+ |bias|):
#   |ours - ref| <= 2 u |ref| + (2 u + inner 2^-23 + t) mag + prop
# u: the dtype's unit roundoff (output rounding; dz's rounding before the
# GEMMs); inner 2^-23: fp32 accumulation, twice the recursive-summation
# bound's unit; t = 2^-10 with TF32 (each input rounded to 10 mantissa bits).
# GELU: cuBLASLt may evaluate tanh with the hardware approximation (relative
# error ~2^-11): + 2^-10 |z| on y, and z's bound counts 1.2 times (the slope
# of gelu is at most 1.13). prop (backward, GELU only): dz's own error, |dy|
# (0.8 (z's bound + u |z|) + 2^-10 (1 + |z|)) (|gelu''| <= 0.8), carried
# through the same GEMM with absolute values (and rounded with the output:
# 2 u applies to |ref| + prop). ReLU: where |z| is within its bound of 0,
# dz may be dy or 0, so prop counts |dy| there. fp16 adds its smallest
# subnormal, 2^-24 (products of two small inputs fall where fp16's spacing is
# absolute). NaN never passes. Inputs must come back unchanged.
U = {FP32: 2.0 ** -24, FP16: 2.0 ** -11, BF16: 2.0 ** -8}
SUB = {FP32: 1e-30, FP16: 2.0 ** -24, BF16: 1e-30}
ACC = 2.0 ** -23
TF32 = 2.0 ** -10
GELU_APPROX = 2.0 ** -10

SEED_SHAPES = [(8192, 1024, 784), (8192, 1024, 1024), (8192, 512, 1024), (8192, 256, 512), (8192, 1, 256)]
MIX = (1, 3, 17, 64, 1000)


class Results:
    def __init__(self):
        self.passed = self.failed = self.not_supported = 0
        self.ns = []

    def record(self, what, problems):
        if problems:
            self.failed += 1
            print(f"FAIL {what}")
            for p in problems[:6]:
                print(f"    {p}")
        else:
            self.passed += 1


R = Results()


def guarded(shape, dtype, misaligned=False, fill=None):
    """A tensor of `shape` inside a 1-D buffer with NaN guards around it;
    misaligned: one element off the buffer's (256-byte) alignment."""
    n = 1
    for s in shape:
        n *= s
    pad = 1 if misaligned else 64
    buf = torch.full((n + pad + 64,), float("nan"), dtype=dtype, device=DEV)
    t = buf[pad:pad + n].view(shape)
    if fill is not None:
        t.copy_(fill)
    return buf, t, pad, n


def guards_ok(buf, pad, n):
    return bool(torch.isnan(buf[:pad]).all()) and bool(torch.isnan(buf[pad + n:]).all())


def rand(shape, dtype, lo, hi, gen):
    return (torch.rand(shape, device=DEV, dtype=torch.float64, generator=gen) * (hi - lo) + lo).to(dtype)


def gelu_grad(z):
    b, k = 0.7978845608028654, 0.044715
    t = torch.tanh(b * (z + k * z ** 3))
    return 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * b * (1 + 3 * k * z * z)


def compare(name, ours, ref, allowed, problems):
    ours = ours.double()
    err = (ours - ref).abs()
    bad = ~(err <= allowed)  # NaN fails
    if bool(bad.any()):
        idx = tuple(int(i) for i in torch.nonzero(bad)[0])
        q = (err / allowed).nan_to_num(float("inf")).max().item()
        problems.append(f"{name}: {int(bad.sum())} elements out of bound (worst {q:.3g}x); first at {idx}: "
                        f"ours {ours[idx].item():.9g} ref {ref[idx].item():.9g} allowed {allowed[idx].item():.3g}")


def run_case(dtype, layout, epi, m, n, k, misaligned=False, padded=False, tf32=False, gen=None):
    name = (f"{NAMES[dtype]} {layout} {epi or 'none'} m={m} n={n} k={k}" + (" misaligned" if misaligned else "")
            + (" padded" if padded else "") + (" tf32" if tf32 else ""))
    filt = os.environ.get("FNORM_TEST_FILTER")
    if filt and filt not in name:
        return
    has_bias = epi is not None
    act = epi if epi in ("relu", "gelu") else None
    u, sub = U[dtype], SUB[dtype]
    t = TF32 if tf32 else 0.0
    x0 = rand((m, k), dtype, -1, 1, gen)
    w_nk = rand((n, k), dtype, -1, 1, gen)
    b0 = rand((n,), dtype, -0.5, 0.5, gen) if has_bias else None
    dy0 = rand((m, n), dtype, -1, 1, gen)
    # Inputs between NaN guards (a read outside them makes NaN); padded: a
    # slice of a wider tensor (row stride k + 3).
    if padded:
        xb, xw, xp, xn = guarded((m, k + 3), dtype, misaligned)
        x = xw[:, :k]
        x.copy_(x0)
    else:
        xb, x, xp, xn = guarded((m, k), dtype, misaligned, x0)
    w_src = w_nk if layout == "nk" else w_nk.t().contiguous()
    _, w, _, _ = guarded(tuple(w_src.shape), dtype, misaligned, w_src)
    b = guarded((n,), dtype, misaligned, b0)[1] if has_bias else None
    _, dy, _, _ = guarded((m, n), dtype, misaligned, dy0)
    yb, y, yp, yn = guarded((m, n), dtype, misaligned)
    problems = []
    try:
        y_ret, aux = fl.linear(x, w, b, act, layout, save_aux=True, allow_tf32=tf32, out=y)
        dxb, dx, dxp, dxn = guarded((m, k), dtype, misaligned)
        dwb, dw, dwp, dwn = guarded(tuple(w.shape), dtype, misaligned)
        dbb, db, dbp, dbn = guarded((n,), dtype, misaligned)
        fl.linear_backward(dy, x, w, aux, has_bias, act, layout, allow_tf32=tf32, dx_out=dx, dw_out=dw,
                           db_out=db if has_bias else None)
        torch.cuda.synchronize()
    except fn.FusedNormError as e:
        if e.status == fn.Status.NOT_SUPPORTED and (misaligned or padded):
            R.not_supported += 1
            R.ns.append(f"{name}: {e}")
            return
        R.record(name, [f"library error: {e}"])
        return
    if not guards_ok(yb, yp, yn):
        problems.append("y's guards were written")
    for buf, p, nn, what in ((dxb, dxp, dxn, "dx"), (dwb, dwp, dwn, "dw"), (dbb, dbp, dbn, "db")):
        if (what != "db" or has_bias) and not guards_ok(buf, p, nn):
            problems.append(f"{what}'s guards were written")

    # float64 reference with autograd.
    x64 = x0.double().requires_grad_(True)
    w64 = w_nk.double().requires_grad_(True)
    b64 = b0.double().requires_grad_(True) if has_bias else None
    z64 = F.linear(x64, w64, b64)
    with torch.no_grad():
        zmag = F.linear(x0.double().abs(), w_nk.double().abs(), b0.double().abs() if has_bias else None)
        ztol = (2 * u + k * ACC + t) * zmag + sub
        z = z64.detach()
        if act == "relu":
            ref = torch.relu(z)
        elif act == "gelu":
            ref = F.gelu(z, approximate="tanh")
        else:
            ref = z
        allowed = 2 * u * ref.abs() + 1.2 * ztol + (GELU_APPROX * z.abs() if act == "gelu" else 0)
        compare("y", y, ref, allowed, problems)
        if act == "relu":
            # Our mask is what we differentiate with: it must be y > 0 ...
            ours_pos = y.double() > 0
            decided = z.abs() > ztol
            wrong = (ours_pos != (z > 0)) & decided
            if bool(wrong.any()):
                problems.append(f"relu: {int(wrong.sum())} elements with y > 0 disagreeing with z's sign")
        # dz: the gradient at z.
        dz = dy0.double()
        edz = torch.zeros_like(dz)
        if act == "relu":
            edz = dz.abs() * (z.abs() <= ztol)  # undecided sign: dz may be dy or 0
            dz = dz * (y.double() > 0)
        elif act == "gelu":
            g = gelu_grad(z)
            dz = dz * g
            edz = dy0.double().abs() * (0.8 * (ztol + u * z.abs()) + GELU_APPROX * (1 + z.abs())) + u * dz.abs()
    gx, gw, gb = torch.autograd.grad(z64, [x64, w64] + ([b64] if has_bias else []), dz) + ((None,) if not has_bias
                                                                                           else ())
    with torch.no_grad():
        x_abs, w_abs, dz_abs = x0.double().abs(), w_nk.double().abs(), dz.abs()
        mag = dz_abs @ w_abs
        prop = edz @ w_abs
        compare("dx", dx, gx, 2 * u * (gx.abs() + prop) + (2 * u + n * ACC + t) * mag + prop + sub, problems)
        mag = dz_abs.t() @ x_abs  # [n, k]
        prop = edz.t() @ x_abs
        allow_w = 2 * u * (gw.abs() + prop) + (2 * u + m * ACC + t) * mag + prop + sub
        dw_nk = dw if layout == "nk" else dw.t()
        compare("dw", dw_nk, gw, allow_w, problems)
        if has_bias:
            prop = edz.sum(0)
            compare("db", db, gb, 2 * u * (gb.abs() + prop) + (2 * u + m * ACC) * dz_abs.sum(0) + prop + sub,
                    problems)
        if not (torch.equal(x, x0) and torch.equal(dy, dy0) and torch.equal(w, w_src)
                and (not has_bias or torch.equal(b, b0))):
            problems.append("an input (x, w, dy or bias) changed during fwd/bwd")
    R.record(name, problems)


def run_chain(dtype, act, m, k0, k, n, gen):
    """x0 -> layer 1 (bias + act, aux) -> a1 -> layer 2 (bias) -> y. The
    backward of layer 2 applies layer 1's derivative in its dx GEMM (chained)
    and gives layer 1's bias gradient; layer 1 finishes with a NONE
    descriptor. Checked: dz1, db1, dw1, dx0."""
    name = f"chain {NAMES[dtype]} {act} m={m} k0={k0} k={k} n={n}"
    filt = os.environ.get("FNORM_TEST_FILTER")
    if filt and filt not in name:
        return
    u, sub = U[dtype], SUB[dtype]
    x0 = rand((m, k0), dtype, -1, 1, gen)
    w1 = rand((k, k0), dtype, -1, 1, gen)
    b1 = rand((k,), dtype, -0.5, 0.5, gen)
    w2 = rand((n, k), dtype, -1, 1, gen)
    b2 = rand((n,), dtype, -0.5, 0.5, gen)
    dy = rand((m, n), dtype, -1, 1, gen)
    problems = []
    try:
        a1, aux1 = fl.linear(x0, w1, b1, act, "nk", save_aux=True)
        fl.linear(a1, w2, b2, None, "nk")
        dz1, dw2, db2, db1 = fl.linear_backward(dy, a1, w2, None, True, None, "nk", x_producer_activation=act,
                                                x_aux=aux1, need_x_db=True)
        dx0, dw1, _ = fl.linear_backward(dz1, x0, w1, None, False, None, "nk", need_db=False)
        torch.cuda.synchronize()
    except fn.FusedNormError as e:
        R.record(name, [f"library error: {e}"])
        return
    with torch.no_grad():
        x64, w1d, b1d, w2d = x0.double(), w1.double(), b1.double(), w2.double()
        z1 = F.linear(x64, w1d, b1d)
        z1tol = (2 * u + k0 * ACC) * F.linear(x64.abs(), w1d.abs(), b1d.abs()) + sub
        a1_64 = a1.double()  # layer 2 ran on our a1: its gradient flows from there
        g = dy.double() @ w2d  # d a1, [m, k]
        gmag = dy.double().abs() @ w2d.abs()
        if act == "relu":
            d = (a1_64 > 0).double()
            eprop = g.abs() * (z1.abs() <= z1tol)  # undecided sign: the mask may differ from a1 > 0
        else:
            d = gelu_grad(z1)
            eprop = g.abs() * (0.8 * (z1tol + u * z1.abs()) + GELU_APPROX * (1 + z1.abs()))
        ref = g * d
        allowed = 2 * u * (ref.abs() + eprop) + (2 * u + n * ACC) * gmag * d.abs() + eprop + sub
        compare("dz1 (chained dx)", dz1, ref, allowed, problems)
        # db1 is the column sum of dz1 as the GEMM produced it, before or
        # after its rounding to the dtype: bound by the sum of dz1's bounds.
        compare("db1", db1, ref.sum(0), 2 * u * ref.sum(0).abs() + allowed.sum(0) + ACC * m * ref.abs().sum(0),
                problems)
        dz1d = dz1.double()  # layer 1 finishes from our dz1
        gw1 = dz1d.t() @ x64
        compare("dw1", dw1, gw1, 2 * u * gw1.abs() + (2 * u + m * ACC) * (dz1d.abs().t() @ x64.abs()) + sub,
                problems)
        gx0 = dz1d @ w1d
        compare("dx0", dx0, gx0, 2 * u * gx0.abs() + (2 * u + k * ACC) * (dz1d.abs() @ w1d.abs()) + sub, problems)
    R.record(name, problems)


def run_autograd(dtype, act, gen):
    """LinearFunction beside nn.functional under autograd, in the dtype."""
    name = f"autograd {NAMES[dtype]} {act}"
    m, n, k = 256, 128, 64
    x = rand((m, k), dtype, -1, 1, gen).requires_grad_(True)
    w = rand((n, k), dtype, -1, 1, gen).requires_grad_(True)
    b = rand((n,), dtype, -0.5, 0.5, gen).requires_grad_(True)
    y = fl.LinearFunction.apply(x, w, b, act)
    dy = rand((m, n), dtype, -1, 1, gen)
    gx, gw, gb = torch.autograd.grad(y, (x, w, b), dy)
    x64, w64, b64 = (t.detach().double().requires_grad_(True) for t in (x, w, b))
    z = F.linear(x64, w64, b64)
    y64 = torch.relu(z) if act == "relu" else F.gelu(z, approximate="tanh") if act == "gelu" else z
    rx, rw, rb = torch.autograd.grad(y64, (x64, w64, b64), dy.double())
    problems = []
    # A loose sanity bound: the exact bounds are checked above; here only
    # that gradients flow to the right inputs with the right values. ReLU:
    # an element whose z is within rounding of 0 may take either derivative
    # (see the top), which moves dx, dw, db by |dy| times the other operand.
    tol = {FP32: 1e-3, FP16: 5e-2, BF16: 3e-1}[dtype]
    with torch.no_grad():
        amb = torch.zeros_like(z)
        if act == "relu":
            zt = (2 * U[dtype] + k * ACC) * F.linear(x64.abs(), w64.abs(), b64.abs()) + SUB[dtype]
            amb = dy.double().abs() * (z.abs() <= zt)
        extra = {"y": torch.zeros_like(z), "dx": amb @ w64.abs(), "dw": amb.t() @ x64.abs(), "db": amb.sum(0)}
    for nm, a, r in (("y", y, y64), ("dx", gx, rx), ("dw", gw, rw), ("db", gb, rb)):
        scale = r.abs().max().item() + 1
        bad = ~((a.double() - r).abs() <= tol * scale + (1 + tol) * extra[nm])
        if bool(bad.any()):
            err = (a.double() - r).abs().max().item()
            problems.append(f"{nm}: {int(bad.sum())} elements beyond {tol * scale:.3g} (+ the ReLU allowance); "
                            f"max |err| {err:.3g}")
    R.record(name, problems)


def main() -> int:
    seed = int(os.environ.get("FNORM_TEST_SEED", str(time.time_ns() % (1 << 31))))
    print(f"seed {seed} (set FNORM_TEST_SEED to repeat); FNORM_LINEAR_UNFUSED="
          f"{os.environ.get('FNORM_LINEAR_UNFUSED', '')!r}; device {torch.cuda.get_device_name()}")
    gen = torch.Generator(device=DEV)
    gen.manual_seed(seed)
    quick = bool(os.environ.get("FNORM_TEST_QUICK"))
    t0 = time.time()
    dtypes = (FP32, FP16, BF16)
    for dtype in dtypes:
        for layout in ("kn", "nk"):
            for epi in EPILOGUES:
                for (m, n, k) in (SEED_SHAPES[::2] if quick else SEED_SHAPES):
                    run_case(dtype, layout, epi, m, n, k, gen=gen)
                mix = MIX[::2] if quick else MIX
                for m, n, k in itertools.product(mix, mix, mix):
                    run_case(dtype, layout, epi, m, n, k, gen=gen)
                for (m, n, k) in ((64, 64, 64), (1000, 17, 3), (3, 1000, 17), (8192, 256, 512)):
                    run_case(dtype, layout, epi, m, n, k, misaligned=True, gen=gen)
                    run_case(dtype, layout, epi, m, n, k, padded=True, gen=gen)
        print(f"{NAMES[dtype]}: {R.passed} passed, {R.failed} failed so far ({time.time() - t0:.0f} s)", flush=True)
    for layout in ("kn", "nk"):
        for epi in EPILOGUES:
            for (m, n, k) in ((8192, 1024, 1024), (1000, 64, 17)):
                run_case(FP32, layout, epi, m, n, k, tf32=True, gen=gen)
    for dtype in dtypes:
        for act in ("relu", "gelu"):
            for shape in ((8192, 784, 1024, 512), (17, 3, 64, 1000), (1000, 17, 3, 64)):
                run_chain(dtype, act, *shape, gen)
        for act in (None, "relu", "gelu"):
            run_autograd(dtype, act, gen)
    print(f"{R.not_supported} NOT_SUPPORTED (allowed for misaligned/padded tensors; not counted as passed):")
    for s in R.ns:
        print(f"  {s}")
    print(f"torch linear: {R.passed} passed, {R.failed} failed, {R.not_supported} not supported "
          f"({time.time() - t0:.0f} s)")
    return 0 if R.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
