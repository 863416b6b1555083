#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""BatchNorm benchmark: libfusednorm (NATIVE engine, and its CUDNN engine where
cuDNN takes the case) against PyTorch's batch_norm with cuDNN enabled and
with cuDNN disabled (its native kernels), measured in the same run.

Ops (shared/design.md §6 names): batchnorm_fwd_train, batchnorm_bwd,
batchnorm_fwd_infer; keys layout, epilogue, engine. Training rows without an
epilogue also time the AUTO engine (auto_us, with auto_engine: the engine
whose output AUTO's matched bit for bit), so the results show its routing.

Method: as bench_layernorm.py (CUDA-graph replay, median of CUDA-event
timings, buffer sets rotated over > 8x L2, copy bandwidth measured in the
same run). PyTorch's unfused epilogue is batch_norm, then in-place add and
relu (what ResNet's block runs); its backward is autograd of that graph,
timed alone (the forward runs outside the timing). vs_torch compares with the
faster of PyTorch's two paths.

Bytes counted (bench/README.md):
  fwd_train: read x twice + write y (+ read z, + write the 1-bit mask)
  fwd_infer: read x + write y (+ read z)
  bwd:       read x and dy twice + write dx (+ write dz, + read the mask twice)

Writes DIR/rows_batchnorm.json ({"rows": [...]}) and DIR/rows_batchnorm.md.
"""
from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bindings", "python"))

import fusednorm as fn  # noqa: E402
from bench_layernorm import Bench, time_graph  # noqa: E402

EPS = 1e-5
TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
EPI = {"none": fn.BnEpilogue.NONE, "relu": fn.BnEpilogue.RELU, "add_relu": fn.BnEpilogue.ADD_RELU}

# (dtype, shape [N, C, ...], layout, epilogue, with backward)
CASES = [
    ("fp32", [126000, 16], "nhwc", "none", True),
    ("fp32", [136000, 16], "nhwc", "none", False),
    ("fp32", [1000000, 16, 16], "nchw", "none", True),
    ("fp32", [16, 32, 112, 112], "nchw", "none", True),
    ("fp32", [16, 32, 112, 112], "nchw", "relu", True),
    ("fp32", [128, 64, 56, 56], "nchw", "none", True),
    ("fp16", [128, 64, 56, 56], "nhwc", "none", True),
    ("fp16", [128, 256, 56, 56], "nhwc", "none", True),
    ("fp16", [128, 256, 56, 56], "nhwc", "add_relu", True),
    ("bf16", [128, 256, 56, 56], "nhwc", "add_relu", False),
    ("fp32", [2100000, 256, 4], "nchw", "none", True),
    # BN+ReLU, ResNet's commonest BatchNorm (issue 20, item 4): NATIVE against
    # cuDNN's fused BN+activation through our CUDNN engine, and PyTorch.
    ("fp16", [128, 64, 56, 56], "nhwc", "relu", True),
    ("fp16", [128, 256, 56, 56], "nhwc", "relu", True),
    ("fp16", [256, 64, 112, 112], "nhwc", "relu", True),
] + [
    # Issue 29: NATIVE against cuDNN (our CUDNN engine) on ResNet's channels-last
    # BatchNorm shapes, plain and with ReLU, fp16 and bf16 (the rows above
    # hold the fp16 ones already there).
    (dt, shape, "nhwc", epi, True)
    for dt in ("fp16", "bf16")
    for shape in ([128, 64, 56, 56], [128, 256, 56, 56], [256, 64, 112, 112], [128, 256, 14, 14], [128, 512, 7, 7])
    for epi in ("none", "relu")
    if not (dt == "fp16" and (epi, shape) in (("none", [128, 64, 56, 56]), ("none", [128, 256, 56, 56]),
                                              ("relu", [128, 64, 56, 56]), ("relu", [128, 256, 56, 56]),
                                              ("relu", [256, 64, 112, 112])))
]
INFER_CASES = [
    ("fp32", [16, 32, 112, 112], "nchw", "none"),
    ("fp16", [128, 256, 56, 56], "nhwc", "add_relu"),
]


def make(shape, layout, dtype, gen):
    x = torch.empty(shape, dtype=TORCH_DTYPES[dtype], device="cuda")
    if layout == "nhwc" and len(shape) >= 3:
        x = x.to(memory_format=torch.channels_last if len(shape) == 4 else torch.channels_last_3d)
    x.uniform_(-1, 1, generator=gen)
    x.add_(torch.rand(shape[1], device="cuda", generator=gen).view([1, -1] + [1] * (len(shape) - 2)).to(x.dtype))
    return x


def nbytes(t) -> int:
    return t.numel() * t.element_size()


def best(*vals):
    vals = [v for v in vals if v is not None]
    return min(vals) if vals else None


def torch_fwd_fn(epi, xs, zs, w, b, rm, rv, training, cudnn):
    def f(i):
        k = i % len(xs)
        with torch.backends.cudnn.flags(enabled=cudnn):
            y = F.batch_norm(xs[k], rm, rv, w, b, training=training, momentum=0.1, eps=EPS)
        if epi == "add_relu":
            return torch.relu_(y.add_(zs[k]))
        if epi == "relu":
            return torch.relu_(y)
        return y
    return f


def torch_bwd_time(epi, xs, zs, dys, w, b, reps, cudnn=True):
    """PyTorch's backward of F.batch_norm (+ the epilogue) by autograd,
    graph-timed over the buffer sets (the forward recorded outside the
    timing), with cuDNN on or off."""
    n_sets = len(xs)
    xr = [x.detach().requires_grad_(True) for x in xs]
    wr, br = w.detach().requires_grad_(True), b.detach().requires_grad_(True)
    zr = [z.detach().requires_grad_(True) if z is not None else None for z in zs]
    outs = []

    def forward():
        outs.clear()
        with torch.backends.cudnn.flags(enabled=cudnn):
            for k in range(n_sets):
                y = F.batch_norm(xr[k], None, None, wr, br, training=True, eps=EPS)
                if epi == "add_relu":
                    y = torch.relu(y + zr[k])
                elif epi == "relu":
                    y = torch.relu(y)
                outs.append(y)

    def bwd(i):
        k = i % n_sets
        inputs = (xr[k], wr, br) + ((zr[k],) if epi == "add_relu" else ())
        with torch.backends.cudnn.flags(enabled=cudnn):
            return torch.autograd.grad(outs[k], inputs, dys[k], retain_graph=True)
    forward()
    t = time_graph(bwd, n_sets, reps, setup=forward)
    outs.clear()
    return t


def bench_case(B: Bench, dtype, shape, layout, epi, with_bwd):
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1234)
    one = make(shape, layout, dtype, gen)
    set_bytes = nbytes(one) * (3 if epi == "add_relu" else 2)
    n_sets = B.n_sets(set_bytes)
    xs = [one] + [make(shape, layout, dtype, gen) for _ in range(n_sets - 1)]
    zs = [make(shape, layout, dtype, gen) for _ in range(n_sets)] if epi == "add_relu" else [None] * n_sets
    ys = [torch.empty_like(x) for x in xs]
    c = shape[1]
    w = torch.rand(c, device="cuda", generator=gen) + 0.5
    b = torch.rand(c, device="cuda", generator=gen) - 0.5
    rm, rv = torch.zeros(c, device="cuda"), torch.ones(c, device="cuda")
    E = one.numel()
    es = one.element_size()
    mask = (E + 31) // 32 * 4 if epi != "none" else 0
    moved_f = 3 * E * es + (E * es if epi == "add_relu" else 0) + mask
    rows = []
    saved = {}

    def ours_fwd(engine):
        def f(i):
            k = i % n_sets
            y, s = fn.batch_norm_train(xs[k], w, b, rm, rv, momentum=0.1, eps=EPS, epilogue=EPI[epi], z=zs[k],
                                       engine=engine, out=ys[k])
            saved[(engine, k)] = s
            return s
        return f

    reps = B.reps(n_sets, moved_f)
    us = time_graph(ours_fwd(fn.BnEngine.NATIVE), n_sets, reps)
    cudnn_us = None
    try:
        cudnn_us = time_graph(ours_fwd(fn.BnEngine.CUDNN), n_sets, reps)
    except fn.FusedNormError as e:
        print(f"  cudnn engine: {e.status.name}: {str(e)[:160]}", flush=True)
    auto_us = auto_engine = None
    if epi == "none":
        auto_us = time_graph(ours_fwd(fn.BnEngine.AUTO), n_sets, reps)
        auto_engine = matched_engine(xs[0], w, b, epi, zs[0])
    t_cudnn = t_native = None
    try:
        t_cudnn = time_graph(torch_fwd_fn(epi, xs, zs, w, b, rm, rv, True, True), n_sets, reps)
    except Exception as e:  # noqa: BLE001
        print(f"  torch (cudnn on) failed: {type(e).__name__}: {str(e)[:160]}", flush=True)
    try:
        t_native = time_graph(torch_fwd_fn(epi, xs, zs, w, b, rm, rv, True, False), n_sets, reps)
    except Exception as e:  # noqa: BLE001
        print(f"  torch (cudnn off) failed: {type(e).__name__}: {str(e)[:160]}", flush=True)
    # Correctness beside PyTorch (float64 reference on one set).
    y0, _ = fn.batch_norm_train(xs[0], w, b, None, None, eps=EPS, epilogue=EPI[epi], z=zs[0])
    rdt = torch.float64 if E < (1 << 28) else torch.float32  # the huge shape: fp32 on the GPU
    ref = F.batch_norm(xs[0].to(rdt), None, None, w.to(rdt), b.to(rdt), training=True, eps=EPS)
    if epi == "add_relu":
        ref = torch.relu(ref + zs[0].to(rdt))
    elif epi == "relu":
        ref = torch.relu(ref)
    diff = (y0.to(rdt) - ref).abs().max().item()
    del ref, y0
    rows.append(row(B, "batchnorm_fwd_train", dtype, shape, layout, epi, us, moved_f, t_cudnn, t_native,
                    cudnn_us, diff))
    fwd_row = rows[-1]
    if auto_us is not None:
        fwd_row["auto_us"], fwd_row["auto_engine"] = round(auto_us, 2), auto_engine

    if with_bwd:
        dys = [make(shape, layout, dtype, gen) for _ in range(n_sets)]
        moved_b = 5 * E * es + (E * es if epi == "add_relu" else 0) + 2 * mask
        dxs = ys  # reuse
        sv = [fn.batch_norm_train(xs[k], w, b, None, None, eps=EPS, epilogue=EPI[epi], z=zs[k],
                                  engine=fn.BnEngine.NATIVE)[1]
              for k in range(n_sets)]

        def ours_bwd(i):
            k = i % n_sets
            return fn.batch_norm_backward(dys[k], xs[k], w, sv[k], dx_out=dxs[k])

        breps = B.reps(n_sets, moved_b)
        bus = time_graph(ours_bwd, n_sets, breps)
        bauto = bauto_engine = None
        if epi == "none":  # AUTO's backward from the same saved statistics
            sva = [dataclasses.replace(s, engine=fn.BnEngine.AUTO) for s in sv]

            def auto_bwd(i):
                k = i % n_sets
                return fn.batch_norm_backward(dys[k], xs[k], w, sva[k], dx_out=dxs[k])

            bauto = time_graph(auto_bwd, n_sets, breps)
            bauto_engine = matched_engine_bwd(dys[0], xs[0], w, sv[0])
            del sva
        del sv
        bcudnn = None
        try:
            svc = [fn.batch_norm_train(xs[k], w, b, None, None, eps=EPS, epilogue=EPI[epi], z=zs[k],
                                       engine=fn.BnEngine.CUDNN)[1] for k in range(n_sets)]

            def cudnn_bwd(i):
                k = i % n_sets
                return fn.batch_norm_backward(dys[k], xs[k], w, svc[k], dx_out=dxs[k])

            bcudnn = time_graph(cudnn_bwd, n_sets, breps)
            del svc
        except fn.FusedNormError as e:
            print(f"  cudnn engine bwd: {e.status.name}: {str(e)[:160]}", flush=True)

        tb_cudnn = tb_native = None
        try:
            tb_cudnn = torch_bwd_time(epi, xs, zs, dys, w, b, breps, cudnn=True)
        except Exception as e:  # noqa: BLE001
            print(f"  torch bwd (cudnn on) failed: {type(e).__name__}: {str(e)[:160]}", flush=True)
        gc.collect()
        torch.cuda.empty_cache()
        try:
            tb_native = torch_bwd_time(epi, xs, zs, dys, w, b, breps, cudnn=False)
        except Exception as e:  # noqa: BLE001
            print(f"  torch bwd (cudnn off) failed: {type(e).__name__}: {str(e)[:160]}", flush=True)
        r = row(B, "batchnorm_bwd", dtype, shape, layout, epi, bus, moved_b, tb_cudnn, tb_native, bcudnn, None)
        if bauto is not None:
            r["auto_us"], r["auto_engine"] = round(bauto, 2), bauto_engine
        # forward + backward, each measured above
        tf = best(fwd_row["torch_cudnn_us"], fwd_row["torch_native_us"])
        tb = best(tb_cudnn, tb_native)
        r["fwd_bwd_us"] = round(us + bus, 2)
        if tf is not None and tb is not None:
            r["torch_fwd_bwd_us"] = round(tf + tb, 2)
            r["vs_torch_fwd_bwd"] = round((tf + tb) / (us + bus), 3)
        if cudnn_us is not None and bcudnn is not None:
            r["cudnn_fwd_bwd_us"] = round(cudnn_us + bcudnn, 2)
            r["vs_cudnn_fwd_bwd"] = round((cudnn_us + bcudnn) / (us + bus), 3)
        rows.append(r)
    return rows


def bench_infer(B: Bench, dtype, shape, layout, epi):
    gen = torch.Generator(device="cuda")
    gen.manual_seed(99)
    one = make(shape, layout, dtype, gen)
    n_sets = B.n_sets(nbytes(one) * (3 if epi == "add_relu" else 2))
    xs = [one] + [make(shape, layout, dtype, gen) for _ in range(n_sets - 1)]
    zs = [make(shape, layout, dtype, gen) for _ in range(n_sets)] if epi == "add_relu" else [None] * n_sets
    ys = [torch.empty_like(x) for x in xs]
    c = shape[1]
    w = torch.rand(c, device="cuda", generator=gen) + 0.5
    b = torch.rand(c, device="cuda", generator=gen) - 0.5
    rm, rv = torch.rand(c, device="cuda", generator=gen), torch.rand(c, device="cuda", generator=gen) + 0.5
    E, es = one.numel(), one.element_size()
    moved = 2 * E * es + (E * es if epi == "add_relu" else 0)
    reps = B.reps(n_sets, moved)

    def ours(engine):
        def f(i):
            k = i % n_sets
            return fn.batch_norm_infer(xs[k], rm, rv, w, b, eps=EPS, epilogue=EPI[epi], z=zs[k], engine=engine,
                                       out=ys[k])
        return f
    us = time_graph(ours(fn.BnEngine.NATIVE), n_sets, reps)
    cudnn_us = None
    try:
        cudnn_us = time_graph(ours(fn.BnEngine.CUDNN), n_sets, reps)
    except fn.FusedNormError as e:
        print(f"  cudnn engine: {e.status.name}: {str(e)[:160]}", flush=True)
    t_c = time_graph(torch_fwd_fn(epi, xs, zs, w, b, rm, rv, False, True), n_sets, reps)
    t_n = time_graph(torch_fwd_fn(epi, xs, zs, w, b, rm, rv, False, False), n_sets, reps)
    y0 = fn.batch_norm_infer(xs[0], rm, rv, w, b, eps=EPS, epilogue=EPI[epi], z=zs[0])
    ref = F.batch_norm(xs[0].double(), rm.double(), rv.double(), w.double(), b.double(), training=False, eps=EPS)
    if epi == "add_relu":
        ref = torch.relu(ref + zs[0].double())
    diff = (y0.double() - ref).abs().max().item()
    return [row(B, "batchnorm_fwd_infer", dtype, shape, layout, epi, us, moved, t_c, t_n, cudnn_us, diff)]


def matched_engine(x, w, b, epi, z):
    """The engine whose training-forward output AUTO's equals bit for bit
    (the engines differ in the last bits; each is deterministic)."""
    y = {}
    for e, eng in (("auto", fn.BnEngine.AUTO), ("native", fn.BnEngine.NATIVE), ("cudnn", fn.BnEngine.CUDNN)):
        try:
            y[e] = fn.batch_norm_train(x, w, b, None, None, eps=EPS, epilogue=EPI[epi], z=z, engine=eng)[0]
        except fn.FusedNormError:
            pass
    return "/".join(e for e in ("native", "cudnn") if e in y and torch.equal(y["auto"], y[e])) or "neither"


def matched_engine_bwd(dy, x, w, saved):
    """As matched_engine, for the backward from the same saved statistics."""
    got = {}
    for e, eng in (("auto", fn.BnEngine.AUTO), ("native", fn.BnEngine.NATIVE), ("cudnn", fn.BnEngine.CUDNN)):
        try:
            got[e] = fn.batch_norm_backward(dy, x, w, dataclasses.replace(saved, engine=eng))[0]
        except fn.FusedNormError:
            pass
    return "/".join(e for e in ("native", "cudnn") if e in got and torch.equal(got["auto"], got[e])) or "neither"


def row(B, op, dtype, shape, layout, epi, us, moved, t_cudnn, t_native, cudnn_us, diff):
    gbps = moved / (us * 1e-6) / 1e9
    t = best(t_cudnn, t_native)
    return {
        "op": op, "dtype": dtype, "shape": list(shape), "layout": layout, "epilogue": epi, "engine": "native",
        "us": round(us, 2), "gbps": round(gbps, 1), "pct_copy": round(100 * gbps / B.copy_gbps, 1),
        "torch_us": round(t, 2) if t else None, "vs_torch": round(t / us, 3) if t else None,
        "torch_cudnn_us": round(t_cudnn, 2) if t_cudnn else None,
        "torch_native_us": round(t_native, 2) if t_native else None,
        "oneflow_us": None, "vs_oneflow": None,
        "cudnn_us": round(cudnn_us, 2) if cudnn_us else None,
        "vs_cudnn": round(cudnn_us / us, 3) if cudnn_us else None,
        "max_abs_diff_vs_torch_fp64": diff,
    }


def fmt(v, f="{:.1f}"):
    return "—" if v is None else f.format(v)


def markdown(rows, B) -> str:
    lines = [f"## BatchNorm ({B.name}, copy {B.copy_gbps:.0f} GB/s measured in the same run)", "",
             "µs: median per call, CUDA-graph replay, buffers rotated over > 8x L2. PyTorch: F.batch_norm "
             "(+ in-place add and relu) with cuDNN on / off; autograd for backward. 'cuDNN engine': ours "
             "calling cuDNN's BatchNormalization*Ex (— where cuDNN refuses). vs X = X µs / ours. fwd+bwd "
             "(bwd rows): the forward and backward times of the case added, each side its own. AUTO µs (no "
             "epilogue): the AUTO engine, and the engine whose output it matched bit for bit.", "",
             "| op | dtype | shape | layout | epilogue | ours µs | GB/s | % copy | PyTorch cuDNN µs | "
             "PyTorch native µs | vs PyTorch | cuDNN engine µs | vs cuDNN | fwd+bwd µs | "
             "fwd+bwd vs PyTorch | fwd+bwd vs cuDNN engine | AUTO µs (ran) |",
             "|" + "---|" * 17]
    for r in rows:
        lines.append("| " + " | ".join([
            r["op"].replace("batchnorm_", ""), r["dtype"], "×".join(map(str, r["shape"])), r["layout"], r["epilogue"],
            fmt(r["us"]), fmt(r["gbps"], "{:.0f}"), fmt(r["pct_copy"], "{:.0f}%"), fmt(r["torch_cudnn_us"]),
            fmt(r["torch_native_us"]), fmt(r["vs_torch"], "{:.2f}x"), fmt(r["cudnn_us"]),
            fmt(r["vs_cudnn"], "{:.2f}x"), fmt(r.get("fwd_bwd_us")), fmt(r.get("vs_torch_fwd_bwd"), "{:.2f}x"),
            fmt(r.get("vs_cudnn_fwd_bwd"), "{:.2f}x"),
            "—" if r.get("auto_us") is None else f"{r['auto_us']:.1f} ({r['auto_engine']})"]) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--skip-huge", action="store_true", help="leave out [2100000, 256, 4]")
    ap.add_argument("--cases", default="", help="comma-separated indices into CASES (for profiling; "
                    "leaves out the inference cases)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    B = Bench(reps=10 if args.quick else 30)
    print(f"{B.name}: copy {B.copy_gbps:.0f} GB/s, L2 {B.l2 >> 20} MiB, torch {torch.__version__}", flush=True)
    rows, errors = [], []
    cases = CASES[::3] if args.quick else CASES
    if args.cases:
        cases = [CASES[int(i)] for i in args.cases.split(",")]
    for dtype, shape, layout, epi, bwd in cases:
        if args.skip_huge and shape[0] == 2100000:
            continue
        try:
            for r in bench_case(B, dtype, shape, layout, epi, bwd):
                rows.append(r)
                print(summary(r), flush=True)
        except Exception as e:  # noqa: BLE001 - record, go on
            errors.append({"op": "batchnorm", "dtype": dtype, "shape": shape, "error": f"{type(e).__name__}: {e}"})
            print(f"ERROR {dtype} {shape} {layout} {epi}: {type(e).__name__}: {e}", flush=True)
        gc.collect()
        torch.cuda.empty_cache()
    for dtype, shape, layout, epi in ([] if args.cases else INFER_CASES):
        try:
            for r in bench_infer(B, dtype, shape, layout, epi):
                rows.append(r)
                print(summary(r), flush=True)
        except Exception as e:  # noqa: BLE001
            errors.append({"op": "batchnorm_fwd_infer", "dtype": dtype, "shape": shape,
                           "error": f"{type(e).__name__}: {e}"})
            print(f"ERROR infer {dtype} {shape}: {type(e).__name__}: {e}", flush=True)
        gc.collect()
        torch.cuda.empty_cache()
    out = {"gpu": B.gpu, "gpu_name": B.name, "copy_gbps": round(B.copy_gbps, 1), "rows": rows}
    if errors:
        out["errors"] = errors
    with open(os.path.join(args.out, "rows_batchnorm.json"), "w") as f:
        json.dump(out, f, indent=1)
    with open(os.path.join(args.out, "rows_batchnorm.md"), "w") as f:
        f.write(markdown(rows, B))
    print(markdown(rows, B))
    return 1 if errors else 0


def summary(r):
    s = (f"{r['op']} {r['dtype']} {r['shape']} {r['layout']} {r['epilogue']}: {r['us']:.1f} us "
         f"({r['pct_copy']:.0f}% copy), torch cudnn {fmt(r['torch_cudnn_us'])} native {fmt(r['torch_native_us'])} "
         f"-> {fmt(r['vs_torch'], '{:.2f}x')}, cudnn engine {fmt(r['cudnn_us'])} ({fmt(r['vs_cudnn'], '{:.2f}x')})")
    if r.get("vs_torch_fwd_bwd"):
        s += f", fwd+bwd {r['fwd_bwd_us']} vs torch {r['torch_fwd_bwd_us']} ({r['vs_torch_fwd_bwd']:.2f}x)"
    if r.get("vs_cudnn_fwd_bwd"):
        s += f" vs cudnn engine {r['cudnn_fwd_bwd_us']} ({r['vs_cudnn_fwd_bwd']:.2f}x)"
    if r.get("auto_us") is not None:
        s += f", auto {r['auto_us']:.1f} ({r['auto_engine']})"
    if r.get("max_abs_diff_vs_torch_fp64") is not None:
        s += f", diff {r['max_abs_diff_vs_torch_fp64']:.2g}"
    return s


if __name__ == "__main__":
    sys.exit(main())
