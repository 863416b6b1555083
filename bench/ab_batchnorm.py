#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""BatchNorm engines side by side in one process: NATIVE, CUDNN and AUTO,
training forward and backward (no epilogue), over a ladder of sizes, three
rounds interleaved (engine by engine within a round), medians. One process,
because the same shape moved by up to 6% between benchmark processes on the
H200 (buffer placement). The measurement is bench_layernorm's time_graph
(CUDA-graph replay over buffer sets covering > 8x L2), as in
bench_batchnorm.py. PyTorch is not timed here.

Each row also says what the size queries answer per engine (workspace of the
forward and the backward, cuDNN's reserve), and which engine AUTO matched.

Usage: ab_batchnorm.py [--out DIR] [--rounds 3] [--cases DTYPE:LAYOUT:N,C,H,W[:EPILOGUE][;...]]
                       [--engines native,cudnn,auto,native_env] [--env VAR=VALUE[,VAR=VALUE]]
                       [--builds NAME=LIB[,FNORM_VAR=VALUE...][,NAME=LIB...]]
       (default: the ladder below, engines native, cudnn, auto). native_env is
       NATIVE on a handle created with the --env variables set (the library
       reads its tuning at fnorm_create): a path chosen by a tuning knob
       against the default one, in the same process.
       Writes DIR/ab_batchnorm.json when --out is given.
--builds: several libfusednorm builds in the same process (a copy of each
       library, its own handle): each case is timed with the NATIVE engine of
       every build, beside the CUDNN engine (of the first build) and PyTorch
       (F.batch_norm with cuDNN on, then the epilogue; autograd backward) in
       the same rounds; EPILOGUE (none, relu, add_relu) per case; FNORM_*
       items after a build are set while its handle is created (one library
       under two names with different tuning knobs). Also prints
       the largest difference of each build's y and dx from the first's.
"""
from __future__ import annotations

import argparse
import ctypes
import dataclasses
import functools
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
from bench_batchnorm import make, nbytes, torch_bwd_time, torch_fwd_fn  # noqa: E402

from fusednorm import _core  # noqa: E402
from fusednorm import batchnorm as _fbn  # noqa: E402
from fusednorm.batchnorm import _bn_desc, _bn_x_desc, _handle_for  # noqa: E402

EPS = 1e-5
ENGINES = {"native": fn.BnEngine.NATIVE, "cudnn": fn.BnEngine.CUDNN, "auto": fn.BnEngine.AUTO,
           "native_env": fn.BnEngine.NATIVE}
ENV = {}  # set while native_env's handle is created (--env)
_ENV_HANDLES = {}  # device -> that handle


def env_handles(on):
    """native_env runs on a handle of its own, created while the --env
    variables are set: the library reads its tuning at fnorm_create only."""
    if on and 0 not in _ENV_HANDLES:
        os.environ.update(ENV)
        try:
            with torch.cuda.device(0):
                _ENV_HANDLES[0] = _core.Handle()
        finally:
            for k in ENV:
                os.environ.pop(k, None)
    _core._handles = _ENV_HANDLES if on else _HANDLES


_HANDLES = _core._handles

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
            env_handles(name == "native_env")
            for p, mk, reps in (("fwd", fwd, rf), ("bwd", bwd, rb)):
                if (name, p) in errors:
                    continue
                try:
                    res[(name, p)].append(time_graph(mk(eng), n_sets, reps))
                except fn.FusedNormError as e:
                    errors[(name, p)] = f"{e.status.name}: {str(e)[:120]}"
            env_handles(False)
    # Which engine AUTO's forward output matches bit for bit (one set).
    y = {name: fn.batch_norm_train(xs[0], w, b, None, None, eps=EPS, engine=eng)[0]
         for name, eng in ENGINES.items() if name in ("native", "cudnn", "auto") and (name, "fwd") not in errors}
    same = [n for n in ("native", "cudnn") if n in y and "auto" in y and torch.equal(y["auto"], y[n])]
    out = {"dtype": dtype, "layout": layout, "shape": shape, "mb": round(E * es / 1e6, 1),
           "auto_fwd_matches": "/".join(same) or "neither"}
    if "native_env" in ENGINES:  # the old path's outputs against the new one's
        env_handles(True)
        y_env, s_env = fn.batch_norm_train(xs[0], w, b, None, None, eps=EPS, engine=fn.BnEngine.NATIVE)
        dx_env = fn.batch_norm_backward(dys[0], xs[0], w, dataclasses.replace(sv[0], engine=fn.BnEngine.NATIVE))[0]
        env_handles(False)
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


# ---- several builds in one process (--builds) ------------------------------
# name -> (ctypes library, its handles, its tensor and BatchNorm descriptor
# caches): a library's objects go to that library only, since their layouts
# may differ between builds.
BUILDS = {}
EPIS = {"none": fn.BnEpilogue.NONE, "relu": fn.BnEpilogue.RELU, "add_relu": fn.BnEpilogue.ADD_RELU}


def load_builds(spec):
    """NAME=LIB items; an FNORM_*=VALUE item after one is set while that
    build's handle is created (the library reads its tuning there): one
    library under several names, each with its own knobs."""
    import tempfile
    from bench_layernorm import load_build_copy
    copies = tempfile.mkdtemp(prefix="ab_bn_")
    items = []  # (name, path, {env})
    for item in spec.split(","):
        key, value = item.split("=", 1)
        if key.startswith("FNORM_"):
            items[-1][2][key] = value
        else:
            items.append((key, value, {}))
    for name, path, env in items:
        lib = load_build_copy(name, path, copies)
        BUILDS[name] = (lib, {}, functools.lru_cache(maxsize=512)(_core._tensor_desc.__wrapped__),
                        functools.lru_cache(maxsize=64)(_fbn._bn_desc.__wrapped__))
        use_build(name)
        os.environ.update(env)
        try:
            _handle_for(0)
        finally:
            for k in env:
                os.environ.pop(k, None)


def use_build(name):
    lib, handles, tensor_desc, bn_desc = BUILDS[name]
    _core.lib, _core._handles = lib, handles
    _core._tensor_desc = _fbn._tensor_desc = tensor_desc
    _fbn._bn_desc = bn_desc


def time_case_builds(B, dtype, layout, shape, epi, rounds):
    gen = torch.Generator(device="cuda")
    gen.manual_seed(7)
    one = make(shape, layout, dtype, gen)
    E, es = one.numel(), one.element_size()
    add = epi == "add_relu"
    n_sets = B.n_sets((4 if add else 3) * nbytes(one))
    xs = [one] + [make(shape, layout, dtype, gen) for _ in range(n_sets - 1)]
    dys = [make(shape, layout, dtype, gen) for _ in range(n_sets)]
    zs = [make(shape, layout, dtype, gen) for _ in range(n_sets)] if add else [None] * n_sets
    ys = [torch.empty_like(x) for x in xs]
    c = shape[1]
    w = torch.rand(c, device="cuda", generator=gen) + 0.5
    b = torch.rand(c, device="cuda", generator=gen) - 0.5
    rm, rv = torch.zeros(c, device="cuda"), torch.ones(c, device="cuda")
    e = EPIS[epi]
    names = list(BUILDS)
    use_build(names[0])
    sv = [fn.batch_norm_train(xs[k], w, b, None, None, eps=EPS, epilogue=e, z=zs[k], engine=fn.BnEngine.NATIVE)[1]
          for k in range(n_sets)]
    svc = None
    try:
        svc = [fn.batch_norm_train(xs[k], w, b, None, None, eps=EPS, epilogue=e, z=zs[k],
                                   engine=fn.BnEngine.CUDNN)[1] for k in range(n_sets)]
    except fn.FusedNormError as err:
        print(f"  cudnn engine: {err.status.name}: {str(err)[:120]}", flush=True)
    cols = names + ["cudnn", "torch"]
    res = {(n, p): [] for n in cols for p in ("fwd", "bwd")}

    def fwd(eng):
        def f(i):
            k = i % n_sets
            return fn.batch_norm_train(xs[k], w, b, rm, rv, momentum=0.1, eps=EPS, epilogue=e, z=zs[k], engine=eng,
                                       out=ys[k])[1]
        return f

    def bwd(saved):
        def f(i):
            k = i % n_sets
            return fn.batch_norm_backward(dys[k], xs[k], w, saved[k], dx_out=ys[k])
        return f

    torch_fwd = torch_fwd_fn(epi, xs, zs, w, b, rm, rv, True, True)

    mask = (E + 31) // 32 * 4 if epi != "none" else 0
    rf = B.reps(n_sets, 3 * E * es + (E * es if add else 0) + mask)
    rb = B.reps(n_sets, 5 * E * es + (E * es if add else 0) + 2 * mask)
    for _ in range(rounds):
        for n in cols:
            for p in ("fwd", "bwd"):
                try:
                    if n == "torch":
                        t = time_graph(torch_fwd, n_sets, rf) if p == "fwd" else torch_bwd_time(epi, xs, zs, dys, w, b, rb)
                    elif n == "cudnn":
                        if svc is None:
                            continue
                        use_build(names[0])
                        t = time_graph(fwd(fn.BnEngine.CUDNN), n_sets, rf) if p == "fwd" else \
                            time_graph(bwd(svc), n_sets, rb)
                    else:
                        use_build(n)
                        t = time_graph(fwd(fn.BnEngine.NATIVE), n_sets, rf) if p == "fwd" else \
                            time_graph(bwd(sv), n_sets, rb)
                    res[(n, p)].append(t)
                except Exception as err:  # noqa: BLE001 - a refused cell, not the end of the run
                    print(f"  {n} {p}: {type(err).__name__}: {str(err)[:160]}", flush=True)
                gc.collect()
    # Each build's outputs against the first build's (one set).
    diff = {}
    use_build(names[0])
    y0 = fn.batch_norm_train(xs[0], w, b, None, None, eps=EPS, epilogue=e, z=zs[0], engine=fn.BnEngine.NATIVE)[0]
    g0 = fn.batch_norm_backward(dys[0], xs[0], w, sv[0])
    for n in names[1:]:
        use_build(n)
        y1, s1 = fn.batch_norm_train(xs[0], w, b, None, None, eps=EPS, epilogue=e, z=zs[0], engine=fn.BnEngine.NATIVE)
        g1 = fn.batch_norm_backward(dys[0], xs[0], w, sv[0])
        d = {"y": (y1.float() - y0.float()).abs().max().item(), "dx": (g1[0].float() - g0[0].float()).abs().max().item(),
             "dgamma_rel": ((g1[1] - g0[1]).abs().max() / g0[1].abs().max().clamp_min(1e-30)).item(),
             "mean": (s1.mean - sv[0].mean).abs().max().item()}
        if s1.reserve is not None and sv[0].reserve is not None:
            d["mask_bits_differ"] = int((s1.reserve != sv[0].reserve).sum().item())
        diff[n] = d
    out = {"dtype": dtype, "layout": layout, "shape": shape, "epilogue": epi, "mb": round(E * es / 1e6, 1),
           "diff_vs_first": diff}
    for (n, p), v in res.items():
        out[f"{n}_{p}_us"] = round(statistics.median(v), 2) if v else None
        out[f"{n}_{p}_runs"] = [round(t, 2) for t in v]
    return out


def print_builds_row(r):
    names = list(BUILDS)
    new, base = names[-1], names[0]

    def med(n, p):
        return r.get(f"{n}_{p}_us")

    def fb(n):
        a, b_ = med(n, "fwd"), med(n, "bwd")
        return a + b_ if a is not None and b_ is not None else None

    def ratio(a, b_):
        return f"{a / b_:5.2f}" if a is not None and b_ else "  —  "
    cells = []
    for p in ("fwd", "bwd"):
        cells.append(" ".join(f"{med(n, p):8.1f}" if med(n, p) is not None else "       —"
                              for n in names + ["cudnn", "torch"]))
    print(f"{r['dtype']} {r['epilogue']:8s} {str(r['shape']):18s} | fwd {cells[0]} | bwd {cells[1]} | "
          f"new/base fwd {ratio(med(base, 'fwd'), med(new, 'fwd'))} bwd {ratio(med(base, 'bwd'), med(new, 'bwd'))} | "
          f"vs cudnn fwd {ratio(med('cudnn', 'fwd'), med(new, 'fwd'))} fb {ratio(fb('cudnn'), fb(new))} | "
          f"vs torch fwd {ratio(med('torch', 'fwd'), med(new, 'fwd'))} bwd {ratio(med('torch', 'bwd'), med(new, 'bwd'))}"
          f" | diff {r['diff_vs_first']}", flush=True)



def run_cases(cases, time_one, show):
    """Each case (DTYPE, LAYOUT, SHAPE[, EPILOGUE]) timed by time_one(case)
    and shown by show(row); a case that raises is printed and left out.
    Returns the rows."""
    rows = []
    for c in cases:
        try:
            r = time_one(c)
        except Exception as e:  # noqa: BLE001 - record, go on
            print(f"ERROR {c[0]} {c[1]} {c[2]}: {type(e).__name__}: {e}", flush=True)
            continue
        rows.append(r)
        show(r)
        gc.collect()
        torch.cuda.empty_cache()
    return rows


def write_rows(out, B, rows, **extra):
    """DIR/ab_batchnorm.json (when --out names DIR): the GPU, its copy
    bandwidth and L2, `extra`, the rows."""
    if not out:
        return
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "ab_batchnorm.json"), "w") as fh:
        json.dump({"gpu": B.name, "copy_gbps": round(B.copy_gbps, 1), "l2_bytes": B.l2, **extra, "rows": rows}, fh,
                  indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cases", default="", help="DTYPE:LAYOUT:N,C,H,W;... (default: the ladder)")
    ap.add_argument("--engines", default="native,cudnn,auto")
    ap.add_argument("--env", default="", help="VAR=VALUE,...: set while native_env's handle is created")
    ap.add_argument("--builds", default="", help="NAME=LIB,...: several builds in one process (NATIVE of each, "
                    "CUDNN engine, PyTorch)")
    args = ap.parse_args()
    for name in list(ENGINES):
        if name not in args.engines.split(","):
            del ENGINES[name]
    ENV.update(dict(kv.split("=", 1) for kv in args.env.split(",") if kv))
    cases = LADDER
    if args.cases:
        cases = []
        for c in args.cases.split(";"):
            dt, lay, dims, *epi = c.split(":")
            cases.append((dt, lay, [int(v) for v in dims.split(",")]) + tuple(epi))
    B = Bench(reps=30)
    if args.builds:
        load_builds(args.builds)
        print(f"{B.name}: copy {B.copy_gbps:.0f} GB/s; columns: " + " ".join(list(BUILDS) + ["cudnn", "torch"]) +
              " (us, medians); ratios: time of the other / time of the last build", flush=True)
        rows = run_cases(cases, lambda c: time_case_builds(B, *c[:3], c[3] if len(c) > 3 else "none", args.rounds),
                         print_builds_row)
        write_rows(args.out, B, rows, builds=list(BUILDS))
        os._exit(0)  # the handles belong to different libraries: no destructors at exit
    props = torch.cuda.get_device_properties(0)
    print(f"{B.name}: copy {B.copy_gbps:.0f} GB/s, L2 {B.l2 / 2**20:.0f} MiB, {props.multi_processor_count} SMs, "
          f"torch {torch.__version__}", flush=True)
    names = list(ENGINES)
    print(f"{'case':34s} {'MB':>6s} | " + " ".join(f"{n:>10s}" for n in names) + " fwd | " +
          " ".join(f"{n:>10s}" for n in names) + " bwd | auto matches | ws fwd/bwd per engine; cudnn reserve", flush=True)

    def time_one(c):
        r = time_case(B, *c[:3], args.rounds)
        r["sizes"] = sizes(*c[:3])
        return r

    def show(r):
        def f(v):
            return f"{v:10.1f}" if v is not None else "         —"
        s = r["sizes"]
        print(f"{r['dtype']} {r['layout']} {str(r['shape']):24s} {r['mb']:6.1f} | " +
              " ".join(f(r[f'{n}_fwd_us']) for n in names) + "     | " +
              " ".join(f(r[f'{n}_bwd_us']) for n in names) + f"     | {r['auto_fwd_matches']:12s} | "
              f"{ {n: s[n][:2] for n in s} }; {s['cudnn'][2]}"
              + (f" env diff {r['env_vs_native_max_diff']}" if "env_vs_native_max_diff" in r else "")
              + (f" errors {r['errors']}" if r["errors"] else ""), flush=True)

    write_rows(args.out, B, run_cases(cases, time_one, show), sm_count=props.multi_processor_count)
    return 0


if __name__ == "__main__":
    sys.exit(main())
