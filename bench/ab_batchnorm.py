#!/usr/bin/env python3
"""BatchNorm engines side by side in one process: NATIVE, CUDNN and AUTO,
training forward and backward (no epilogue), over a ladder of sizes, three
rounds interleaved (engine by engine within a round), medians. One process,
because the same shape moved by up to 6% between benchmark processes on the
H200 (buffer placement). The measurement is bench_layernorm's time_graph
(CUDA-graph replay over buffer sets covering > 8x L2), as in
bench_batchnorm.py. PyTorch is not timed here.

Each row also says what the size queries answer per engine (workspace of the
forward and the backward, cuDNN's reserve), and which engine AUTO matched.

Usage: ab_batchnorm.py [--out DIR] [--rounds 3] [--cases DTYPE:LAYOUT:N,C,H,W[;...]]
                       [--engines native,cudnn,auto,native_env] [--env VAR=VALUE[,VAR=VALUE]]
       (default: the ladder below, engines native, cudnn, auto). native_env is
       NATIVE with the --env variables set while it is timed (an old code path
       kept behind a variable, against the new one, in the same process).
       Writes DIR/ab_batchnorm.json when --out is given.
"""
from __future__ import annotations

import argparse
import ctypes
import dataclasses
import gc
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bindings", "python"))
import fusednorm as fn  # noqa: E402
from bench_layernorm import Bench, time_graph  # noqa: E402
from bench_batchnorm import make, nbytes  # noqa: E402

from fusednorm import _core  # noqa: E402
from fusednorm.batchnorm import _bn_desc, _bn_x_desc, _handle_for  # noqa: E402

EPS = 1e-5
ENGINES = {"native": fn.BnEngine.NATIVE, "cudnn": fn.BnEngine.CUDNN, "auto": fn.BnEngine.AUTO,
           "native_env": fn.BnEngine.NATIVE}
ENV = {}  # set while native_env runs (--env)

# (dtype, layout, shape): the crossover ladder of issue 20 item 3.
LADDER = (
    [("fp16", "nhwc", [n, 64, 56, 56]) for n in (4, 8, 16, 32, 64, 96, 128, 144, 160, 192, 256)] +
    [("fp16", "nhwc", [128, c, 56, 56]) for c in (32, 96, 128, 256)] +
    # ResNet-50's other BatchNorm sizes at batch 128, and [N, C] tensors
    [("fp16", "nhwc", s) for s in ([128, 128, 28, 28], [128, 256, 14, 14], [128, 512, 7, 7], [128, 2048, 7, 7],
                                   [128, 1024, 14, 14], [126000, 16], [32768, 256])] +
    [("bf16", "nhwc", [n, 64, 56, 56]) for n in (16, 64, 128, 160, 192, 256)] +
    [("bf16", "nhwc", [128, 256, 56, 56])] +
    [("fp32", "nhwc", s) for s in ([126000, 16], [32, 64, 56, 56], [128, 64, 56, 56])]
)


def sizes(dtype, layout, shape):
    """Workspace (fwd, bwd) per engine and cuDNN's reserve, as the queries answer."""
    x = make(shape, layout, dtype, torch.Generator(device="cuda"))
    xd = _bn_x_desc(x)
    h = _handle_for(x.device.index)
    out = {}
    for name, eng in (("native", fn.BnEngine.NATIVE), ("cudnn", fn.BnEngine.CUDNN), ("auto", fn.BnEngine.AUTO)):
        d = _bn_desc(int(fn.BnEpilogue.NONE), EPS, 0, 0.1, int(eng))
        vals = []
        for q in ("fnorm_batchnorm_fwd_train_workspace_size", "fnorm_batchnorm_bwd_workspace_size",
                  "fnorm_batchnorm_reserve_space_size"):
            n = ctypes.c_size_t()
            st = getattr(_core.lib, q)(h.ptr, d.ptr, xd.ptr, ctypes.byref(n))
            vals.append(n.value if st == 0 else None)
        out[name] = vals
    del x
    return out


def time_case(B, dtype, layout, shape, rounds):
    gen = torch.Generator(device="cuda")
    gen.manual_seed(7)
    one = make(shape, layout, dtype, gen)
    n_sets = B.n_sets(3 * nbytes(one))
    xs = [one] + [make(shape, layout, dtype, gen) for _ in range(n_sets - 1)]
    dys = [make(shape, layout, dtype, gen) for _ in range(n_sets)]
    ys = [torch.empty_like(x) for x in xs]
    c = shape[1]
    w = torch.rand(c, device="cuda", generator=gen) + 0.5
    b = torch.rand(c, device="cuda", generator=gen) - 0.5
    rm, rv = torch.zeros(c, device="cuda"), torch.ones(c, device="cuda")
    E, es = one.numel(), one.element_size()
    # The statistics every backward starts from (the same meaning on every engine).
    sv = [fn.batch_norm_train(xs[k], w, b, None, None, eps=EPS, engine=fn.BnEngine.NATIVE)[1] for k in range(n_sets)]
    res = {(e, p): [] for e in ENGINES for p in ("fwd", "bwd")}
    errors = {}

    def fwd(eng):
        def f(i):
            k = i % n_sets
            return fn.batch_norm_train(xs[k], w, b, rm, rv, momentum=0.1, eps=EPS, engine=eng, out=ys[k])[1]
        return f

    def bwd(eng):
        s = [dataclasses.replace(v, engine=eng) for v in sv]

        def f(i):
            k = i % n_sets
            return fn.batch_norm_backward(dys[k], xs[k], w, s[k], dx_out=ys[k])
        return f

    rf, rb = B.reps(n_sets, 3 * E * es), B.reps(n_sets, 5 * E * es)
    for _ in range(rounds):
        for name, eng in ENGINES.items():
            if name == "native_env":
                os.environ.update(ENV)
            for p, mk, reps in (("fwd", fwd, rf), ("bwd", bwd, rb)):
                if (name, p) in errors:
                    continue
                try:
                    res[(name, p)].append(time_graph(mk(eng), n_sets, reps))
                except fn.FusedNormError as e:
                    errors[(name, p)] = f"{e.status.name}: {str(e)[:120]}"
            for k in ENV:
                os.environ.pop(k, None)
    # Which engine AUTO's forward output matches bit for bit (one set).
    y = {name: fn.batch_norm_train(xs[0], w, b, None, None, eps=EPS, engine=eng)[0]
         for name, eng in ENGINES.items() if name in ("native", "cudnn", "auto") and (name, "fwd") not in errors}
    same = [n for n in ("native", "cudnn") if n in y and "auto" in y and torch.equal(y["auto"], y[n])]
    out = {"dtype": dtype, "layout": layout, "shape": shape, "mb": round(E * es / 1e6, 1),
           "auto_fwd_matches": "/".join(same) or "neither"}
    if "native_env" in ENGINES:  # the old path's outputs against the new one's
        os.environ.update(ENV)
        y_env, s_env = fn.batch_norm_train(xs[0], w, b, None, None, eps=EPS, engine=fn.BnEngine.NATIVE)
        dx_env = fn.batch_norm_backward(dys[0], xs[0], w, dataclasses.replace(sv[0], engine=fn.BnEngine.NATIVE))[0]
        for k in ENV:
            os.environ.pop(k, None)
        y_new, s_new = fn.batch_norm_train(xs[0], w, b, None, None, eps=EPS, engine=fn.BnEngine.NATIVE)
        dx_new = fn.batch_norm_backward(dys[0], xs[0], w, dataclasses.replace(sv[0], engine=fn.BnEngine.NATIVE))[0]
        out["env_vs_native_max_diff"] = {
            "y": (y_env.float() - y_new.float()).abs().max().item(),
            "mean": (s_env.mean - s_new.mean).abs().max().item(),
            "invstd_rel": ((s_env.invstd - s_new.invstd).abs() / s_new.invstd).max().item(),
            "dx": (dx_env.float() - dx_new.float()).abs().max().item()}
    for (name, p), v in res.items():
        out[f"{name}_{p}_us"] = round(statistics.median(v), 2) if v else None
        out[f"{name}_{p}_runs"] = [round(t, 2) for t in v]
    out["errors"] = {f"{k[0]}_{k[1]}": v for k, v in errors.items()}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cases", default="", help="DTYPE:LAYOUT:N,C,H,W;... (default: the ladder)")
    ap.add_argument("--engines", default="native,cudnn,auto")
    ap.add_argument("--env", default="", help="VAR=VALUE,...: set while native_env is timed")
    args = ap.parse_args()
    for name in list(ENGINES):
        if name not in args.engines.split(","):
            del ENGINES[name]
    ENV.update(dict(kv.split("=", 1) for kv in args.env.split(",") if kv))
    cases = LADDER
    if args.cases:
        cases = []
        for c in args.cases.split(";"):
            dt, lay, dims = c.split(":")
            cases.append((dt, lay, [int(v) for v in dims.split(",")]))
    B = Bench(reps=30)
    props = torch.cuda.get_device_properties(0)
    print(f"{B.name}: copy {B.copy_gbps:.0f} GB/s, L2 {B.l2 / 2**20:.0f} MiB, {props.multi_processor_count} SMs, "
          f"torch {torch.__version__}", flush=True)
    names = list(ENGINES)
    print(f"{'case':34s} {'MB':>6s} | " + " ".join(f"{n:>10s}" for n in names) + " fwd | " +
          " ".join(f"{n:>10s}" for n in names) + " bwd | auto matches | ws fwd/bwd per engine; cudnn reserve", flush=True)
    rows = []
    for dt, lay, shape in cases:
        try:
            r = time_case(B, dt, lay, shape, args.rounds)
            r["sizes"] = sizes(dt, lay, shape)
        except Exception as e:  # noqa: BLE001 - record, go on
            print(f"ERROR {dt} {lay} {shape}: {type(e).__name__}: {e}", flush=True)
            continue
        rows.append(r)

        def f(v):
            return f"{v:10.1f}" if v is not None else "         —"
        s = r["sizes"]
        print(f"{dt} {lay} {str(shape):24s} {r['mb']:6.1f} | " + " ".join(f(r[f'{n}_fwd_us']) for n in names) + "     | " +
              " ".join(f(r[f'{n}_bwd_us']) for n in names) + f"     | {r['auto_fwd_matches']:12s} | "
              f"{ {n: s[n][:2] for n in s} }; {s['cudnn'][2]}"
              + (f" env diff {r['env_vs_native_max_diff']}" if "env_vs_native_max_diff" in r else "")
              + (f" errors {r['errors']}" if r["errors"] else ""), flush=True)
        gc.collect()
        torch.cuda.empty_cache()
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "ab_batchnorm.json"), "w") as fh:
            json.dump({"gpu": B.name, "copy_gbps": round(B.copy_gbps, 1), "l2_bytes": B.l2,
                       "sm_count": props.multi_processor_count, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
