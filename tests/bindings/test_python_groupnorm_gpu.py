#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The Python binding's GroupNorm (fusednorm.group_norm / group_norm_backward)
on the GPU, against PyTorch in float64.

Reference: F.group_norm on the very inputs we gave the library, upcast to
float64, then `* (1 + scale) + shift` and F.silu as the case asks; its
autograd gives dx, dgamma, dbeta, dscale, dshift; mean and rstd from the
[N, G, -1] view.

Coverage: fp32 / fp16 / bf16; NCHW, channels-last (NHWC), NCDHW and
channels-last-3d, [N, C, L]; SiLU; scale / shift packed [N, C], as
[N, C, 1, 1], and as the halves of one [N, 2C] tensor (diffusers'
`temb.chunk(2, dim=1)`: views with row stride 2C, taken as they are, whose
gradients keep that layout); gamma / beta in x's dtype and in fp32, or
absent; odd shapes (C / G = 1, G = 1, one sample, a spatial size of 1); a
batch-1 VAE-like shape split over the device; a sliced x (copied by the
binding); y written in place into x; empty tensors (dgamma / dbeta / dscale /
dshift are zeros); refusals raising FusedNormError with the status and the
library's message. Output buffers are poisoned with NaN first.

Tolerances (|ours - ref| <= rtol |ref| + atol max|ref|; NaN never passes):
  y, dx:          fp32 2e-5, fp16 2e-3, bf16 1.6e-2
  mean, rstd:     1e-5, 1e-4 relative
  dgamma, dbeta, dscale, dshift: max(the dtype's, 1e-4)

Exit 77 (skip) without PyTorch or a GPU; 1 when a check fails.
FNORM_TEST_SEED=N repeats the inputs.
"""
from __future__ import annotations

import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "common"))
from torch_prologue import load  # noqa: E402

torch, F, fn = load(ROOT)

FP32, FP16, BF16 = torch.float32, torch.float16, torch.bfloat16
NAMES = {FP32: "fp32", FP16: "fp16", BF16: "bf16"}
TOL = {FP32: 2e-5, FP16: 2e-3, BF16: 1.6e-2}
SEED = int(os.environ.get("FNORM_TEST_SEED", str(int(time.time()))))
gen = torch.Generator(device="cuda")
stats = {"cases": 0, "checks": 0, "failed": 0}


def fail(name, what):
    stats["failed"] += 1
    print(f"FAIL {name}: {what}", flush=True)


def check_close(name, what, got, ref, rtol, atol=None):
    """|got - ref| <= rtol |ref| + atol max|ref| elementwise; NaN fails."""
    stats["checks"] += 1
    if got is None:
        fail(name, f"{what}: not returned")
        return False
    if tuple(got.shape) != tuple(ref.shape):
        fail(name, f"{what}: shape {tuple(got.shape)}, reference {tuple(ref.shape)}")
        return False
    got, ref = got.double(), ref.double()
    atol = rtol if atol is None else atol
    scale = ref.abs().max() if ref.numel() else torch.zeros((), dtype=torch.float64, device=ref.device)
    bad = ~((got - ref).abs() <= rtol * ref.abs() + atol * scale)
    if bool(bad.any()):
        i = int(bad.flatten().nonzero()[0])
        fail(name, f"{what}: {int(bad.sum())} of {bad.numel()} values off, first at {i}: got "
                   f"{got.flatten()[i].item()!r} ref {ref.flatten()[i].item()!r}")
        return False
    return True


def randn(shape, dtype, mean=0.0, std=1.0):
    return (torch.randn(shape, device="cuda", generator=gen, dtype=torch.float64) * std + mean).to(dtype)


def make_x(shape, dtype, layout):
    """x with a mean of its own per channel (the fp32 statistics must not
    cancel), in the layout."""
    c = shape[1]
    cmean = (torch.rand(c, device="cuda", generator=gen, dtype=torch.float64) - 0.5) * 8
    x = randn(shape, torch.float64) + cmean.view([1, c] + [1] * (len(shape) - 2))
    x = x.to(dtype)
    if layout == "cl" and len(shape) == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    elif layout == "cl" and len(shape) == 5:
        x = x.contiguous(memory_format=torch.channels_last_3d)
    return x


def nan_like(t):
    return torch.empty_like(t).fill_(float("nan"))


def reference(x, g, w, b, sc, sh, silu, eps, dy):
    xr = x.double().requires_grad_(True)
    leaves = [xr]
    wr = br = sr = tr = None
    if w is not None:
        wr = w.double().requires_grad_(True)
        leaves.append(wr)
    if b is not None:
        br = b.double().requires_grad_(True)
        leaves.append(br)
    v = F.group_norm(xr, g, wr, br, eps)
    n, c = x.shape[0], x.shape[1]
    bshape = [n, c] + [1] * (x.dim() - 2)
    if sc is not None:
        sr = sc.double().requires_grad_(True)
        tr = sh.double().requires_grad_(True)
        leaves += [sr, tr]
        v = v * (1 + sr.reshape(bshape)) + tr.reshape(bshape)
    y = F.silu(v) if silu else v
    grads = torch.autograd.grad(y, leaves, dy.double()) if x.numel() else [torch.zeros_like(t) for t in leaves]
    out = {"y": y.detach(), "dx": grads[0]}
    k = 1
    for key, t in (("dgamma", wr), ("dbeta", br), ("dscale", sr), ("dshift", tr)):
        if t is not None:
            out[key] = grads[k]
            k += 1
    xv = x.double().reshape(n, g, -1)
    out["mean"] = xv.mean(-1)
    out["rstd"] = 1 / torch.sqrt(xv.var(-1, correction=0) + eps)
    return out


def run_case(name, shape, dtype, groups, layout="cf", silu=False, affine=True, w_dtype=None, ss=None, eps=1e-5,
             in_place=False, sliced=False):
    """ss: None, "packed" ([N, C]), "4d" ([N, C, 1, 1]) or "chunk" (halves of [N, 2C])."""
    stats["cases"] += 1
    gen.manual_seed(SEED + stats["cases"])
    n, c = shape[0], shape[1]
    act = fn.GnActivation.SILU if silu else fn.GnActivation.NONE
    if sliced:  # a slice of a wider tensor: the binding copies it to a packed one
        wide = make_x(shape[:-1] + [shape[-1] + 3], dtype, "cf")
        x = wide[..., :shape[-1]]
    else:
        x = make_x(shape, dtype, layout)
    wd = w_dtype or dtype
    w = randn([c], wd, 1.0, 0.3) if affine else None
    b = randn([c], wd, 0.0, 0.3) if affine else None
    sc = sh = None
    if ss == "packed":
        sc, sh = randn([n, c], dtype, 0, 0.3), randn([n, c], dtype, 0, 0.3)
    elif ss == "4d":
        sc, sh = randn([n, c, 1, 1], dtype, 0, 0.3), randn([n, c, 1, 1], dtype, 0, 0.3)
    elif ss == "chunk":
        sc, sh = randn([n, 2 * c], dtype, 0, 0.3).chunk(2, dim=1)
    dy = randn(shape, dtype)
    if layout == "cl" and not sliced:
        dy = dy.contiguous(memory_format=torch.channels_last if len(shape) == 4 else torch.channels_last_3d)
    ref = reference(x, groups, w, b, sc, sh, silu, eps, dy)
    t = TOL[dtype]
    try:
        if in_place:
            x_keep = x.clone()
            y, mean, rstd = fn.group_norm(x, groups, w, b, eps, sc, sh, act, return_stats=True, out=x)
            if y.data_ptr() != x.data_ptr():
                fail(name, "out=x did not write into x")
            x = x_keep
        else:
            y0 = nan_like(x) if not sliced else None
            y, mean, rstd = fn.group_norm(x, groups, w, b, eps, sc, sh, act, return_stats=True, out=y0)
        torch.cuda.synchronize()
    except fn.FusedNormError as e:
        fail(name, f"forward raised {e}")
        return
    ok = check_close(name, "y", y, ref["y"], t)
    if x.numel():
        ok &= check_close(name, "mean", mean.view(n, groups), ref["mean"], 1e-5)
        ok &= check_close(name, "rstd", rstd.view(n, groups), ref["rstd"], 1e-4, 1e-5)
        if not sliced and y.stride() != x.stride():
            fail(name, f"y's strides {y.stride()} are not x's {x.stride()}")
    try:
        dx_out = nan_like(x) if not sliced and x.numel() else None
        dx, dgamma, dbeta, dscale, dshift = fn.group_norm_backward(dy, x, mean, rstd, groups, w, b, sc, sh, act,
                                                                   dx_out=dx_out)
        torch.cuda.synchronize()
    except fn.FusedNormError as e:
        fail(name, f"backward raised {e}")
        return
    ok &= check_close(name, "dx", dx, ref["dx"], t)
    st = max(t, 1e-4)
    if affine:
        ok &= check_close(name, "dgamma", dgamma, ref["dgamma"], st)
        ok &= check_close(name, "dbeta", dbeta, ref["dbeta"], st)
        if dgamma is not None and dgamma.dtype != wd:
            fail(name, f"dgamma dtype {dgamma.dtype}, weight's {wd}")
    elif dgamma is not None or dbeta is not None:
        fail(name, "dgamma / dbeta returned without weight or bias")
    if ss:
        ok &= check_close(name, "dscale", dscale, ref["dscale"], st)
        ok &= check_close(name, "dshift", dshift, ref["dshift"], st)
        if dscale is not None and dscale.stride() != sc.stride():
            fail(name, f"dscale's strides {dscale.stride()} are not scale's {sc.stride()}")
    print(f"{'ok  ' if ok else 'FAIL'} {name}", flush=True)


def refusals():
    x = make_x([2, 64, 5, 5], FP16, "cf")
    stats["cases"] += 1
    for what, call, status, word in (
            ("5 groups of 64 channels", lambda: fn.group_norm(x, 5), fn.Status.BAD_PARAM_SHAPE, "group"),
            ("0 groups", lambda: fn.group_norm(x, 0), fn.Status.BAD_PARAM, "groups"),
            ("NaN epsilon", lambda: fn.group_norm(x, 32, eps=float("nan")), fn.Status.BAD_PARAM, "epsilon"),
            ("fp64 weight", lambda: fn.group_norm(x, 32, torch.ones(64, dtype=torch.float64, device="cuda")),
             None, "dtype")):
        stats["checks"] += 1
        try:
            call()
            fail("refusals", f"{what}: accepted")
        except fn.FusedNormError as e:
            if status is not None and e.status != status or word not in e.message:
                fail("refusals", f"{what}: {e.status!r}: {e}")
            else:
                print(f"ok   refusal: {what}: {e}")
        except (TypeError, ValueError) as e:  # caught by the binding before the library
            if status is not None or word not in str(e):
                fail("refusals", f"{what}: {type(e).__name__}: {e}")
            else:
                print(f"ok   refusal: {what}: {type(e).__name__}: {e}")
    stats["checks"] += 1
    try:
        fn.group_norm(x, 32, scale=torch.zeros(3, 64, dtype=FP16, device="cuda"))
        fail("refusals", "scale of 3 samples for 2: accepted")
    except ValueError as e:
        print(f"ok   refusal: scale of the wrong batch: {e}")


def empty():
    """No samples / no spatial values: y empty, the sums over no values zeros."""
    for shape in ([0, 8, 3, 3], [2, 8, 0]):
        stats["cases"] += 1
        name = f"empty {shape}"
        x = torch.empty(shape, dtype=BF16, device="cuda")
        w = torch.ones(8, device="cuda")
        b = torch.zeros(8, device="cuda")
        n = shape[0]
        sc, sh = torch.zeros(n, 8, dtype=BF16, device="cuda"), torch.zeros(n, 8, dtype=BF16, device="cuda")
        try:
            y, mean, rstd = fn.group_norm(x, 4, w, b, scale=sc, shift=sh, activation=fn.GnActivation.SILU,
                                          return_stats=True)
            dx, dg, db, ds, dt = fn.group_norm_backward(torch.empty_like(x), x, mean, rstd, 4, w, b, sc, sh,
                                                        fn.GnActivation.SILU)
            torch.cuda.synchronize()
        except fn.FusedNormError as e:
            fail(name, f"raised {e}")
            continue
        stats["checks"] += 1
        if y.shape != x.shape or dx.shape != x.shape:
            fail(name, f"y {tuple(y.shape)}, dx {tuple(dx.shape)}")
        for what, t in (("dgamma", dg), ("dbeta", db), ("dscale", ds), ("dshift", dt)):
            stats["checks"] += 1
            if t is None or not bool((t == 0).all()):
                fail(name, f"{what} is not zeros: {t}")
        print(f"ok   {name}")


def main() -> int:
    print(f"seed {SEED} (FNORM_TEST_SEED repeats it); {torch.cuda.get_device_name()} torch {torch.__version__}",
          flush=True)
    t0 = time.time()
    for dt in (FP32, FP16, BF16):
        nm = NAMES[dt]
        for layout in ("cf", "cl"):
            for silu in (False, True):
                for ss in (None, "packed", "chunk"):
                    run_case(f"{nm} [2,64,9,7] G32 {layout}{' silu' if silu else ''}{' ss=' + ss if ss else ''}",
                             [2, 64, 9, 7], dt, 32, layout, silu, ss=ss, w_dtype=FP32 if ss == "packed" else None)
        run_case(f"{nm} [1,12,13] G12 silu ss=packed", [1, 12, 13], dt, 12, silu=True, ss="packed")
        run_case(f"{nm} [3,6,5,3,7] G1 channels-last-3d ss=chunk", [3, 6, 5, 3, 7], dt, 1, "cl", ss="chunk")
        run_case(f"{nm} [4,10,11,1] G5 silu no-affine ss=4d", [4, 10, 11, 1], dt, 5, silu=True, affine=False, ss="4d")
        run_case(f"{nm} [2,96,17,19] G32 cl silu fp32-weight eps=1e-6", [2, 96, 17, 19], dt, 32, "cl", True,
                 w_dtype=FP32, eps=1e-6)
        run_case(f"{nm} [2,32,6,10] G8 sliced x", [2, 32, 6, 10], dt, 8, sliced=True, silu=True)
        run_case(f"{nm} [2,32,6,6] G8 in place", [2, 32, 6, 6], dt, 8, "cl", silu=True, ss="packed", in_place=True)
    run_case("bf16 [1,512,64,64] G32 cl silu ss=chunk (batch 1, split over the device)", [1, 512, 64, 64], BF16, 32,
             "cl", True, ss="chunk", eps=1e-6)
    run_case("fp16 [1,512,64,64] G32 silu (batch 1, split over the device)", [1, 512, 64, 64], FP16, 32, "cf", True)
    refusals()
    empty()
    print(f"python groupnorm: {stats['cases']} cases, {stats['checks']} checks, {stats['failed']} failed, "
          f"{time.time() - t0:.0f} s")
    return 1 if stats["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
