#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A/B of the fully-connected layer's paths in one process (issue 20 item 6):
each variant is a handle created with the library's A/B hooks set
(src/core/tuning.hpp, read at fnorm_create), timed beside the others and PyTorch on
the same buffers, interleaved, at bench_linear.py's seed shapes.

Variants:
  old    FNORM_LINEAR_FWD_AUX=lt (cuBLASLt's activation epilogues always),
         FNORM_LINEAR_NO_N1=1 (GEMMs at n = 1)
  new    the defaults (the rule in src/linear/linear_plan.cpp picks our
         activation passes or cuBLASLt's epilogues; the element-wise dz
         kernel; our n = 1 backward)
  own    new + FNORM_LINEAR_FWD_AUX=own (our passes wherever they apply)
  ws4    new + FNORM_LINEAR_WS_MIB=4 (the heuristic told a 4 MiB budget)
  ws1    new + FNORM_LINEAR_WS_MIB=1

Cells (median µs per launch, CUDA-graph replay as bench_linear.py): fwd
bias / relu / gelu with aux (training) and relu / gelu without (inference);
bwd bias / relu / gelu (dx, dw, db); torch: F.linear (+ F.relu / F.gelu tanh)
and autograd's backward of the same.

Usage: ab_linear.py --out DIR [--quick] [--variants old,new,...]
       ab_linear.py --out DIR [--quick] --builds NAME=LIB,NAME=LIB[,...] [--rounds 3]
Writes DIR/ab_linear.json and prints a table (ratios torch / ours).

--builds: several libfusednorm builds in one process (before/after a change),
each build's default path (a copy of each library, its own handle and
descriptors, the same buffers), the same cells beside PyTorch, `rounds`
rounds interleaved build by build, medians; each build's outputs are checked
against torch's and the largest difference from the first build's is
printed. A library's objects stay alive to the end of the process (they are
not handed to another build's destroy functions).
"""
from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import statistics
import sys
import tempfile

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bindings", "python"))
sys.path.insert(0, HERE)
import fusednorm as fn  # noqa: E402
from fusednorm import linear as fl  # noqa: E402
from bench_linear import ACTS, EPILOGUES, SEED_SHAPES, Bench, Layer, max_diff, torch_act  # noqa: E402
from bench_layernorm import load_build_copy, time_graph  # noqa: E402

HOOKS = ("FNORM_LINEAR_FWD_AUX", "FNORM_LINEAR_NO_N1", "FNORM_LINEAR_WS_MIB")
VARIANTS = {
    "old": {"FNORM_LINEAR_FWD_AUX": "lt", "FNORM_LINEAR_NO_N1": "1"},
    "new": {},
    "own": {"FNORM_LINEAR_FWD_AUX": "own"},
    "ws4": {"FNORM_LINEAR_WS_MIB": "4"},
    "ws1": {"FNORM_LINEAR_WS_MIB": "1"},
}


def make_handle(env: dict, layer: Layer):
    """A handle whose linear state is created (first launch) with env set."""
    saved = {k: os.environ.pop(k, None) for k in HOOKS}
    os.environ.update(env)
    try:
        h = fn.Handle()
        old = layer.B.handle
        layer.B.handle = h
        layer.fwd("bias", 0)  # creates the handle's linear state now
        torch.cuda.synchronize()
        layer.B.handle = old
    finally:
        for k in HOOKS:
            os.environ.pop(k, None)
            if saved[k] is not None:
                os.environ[k] = saved[k]
    return h


def timed(launch, n_sets: int, reps: int, setup=None) -> float:
    """time_graph, tried once more when a capture fails (the first use of
    something in the process can fail one capture; the graph is discarded)."""
    try:
        return time_graph(launch, n_sets, reps, setup=setup)
    except RuntimeError:
        torch.cuda.synchronize()
        return time_graph(launch, n_sets, reps, setup=setup)


# ---- several builds in one process (--builds) ------------------------------

def load_builds(spec: str) -> dict:
    """NAME -> (its library copy, its handle). An older build (the baseline)
    lacks the entry points added since: only the ones it has are typed."""
    copies = tempfile.mkdtemp(prefix="ab_linear_")
    builds = {}
    for item in spec.split(","):
        name, path = item.split("=", 1)
        lib = load_build_copy(name, path, copies)
        fn.lib = lib
        builds[name] = (lib, fn.Handle())
    return builds


def bind_layer(L: Layer, lib, handle) -> Layer:
    """L's buffers with descriptors, workspace and aux buffers made by `lib`
    (what Layer.__init__ makes), for launches through that build."""
    fn.lib = lib
    v = copy.copy(L)
    fdt = {"fp32": fn.DType.FLOAT32, "fp16": fn.DType.FLOAT16, "bf16": fn.DType.BFLOAT16}[L.dtype]
    v.xd = fn.TensorDesc(fdt, [L.m, L.k])
    v.wd = fn.TensorDesc(fdt, [L.n, L.k])
    v.yd = fn.TensorDesc(fdt, [L.m, L.n])
    v.descs = {e: fl.LinearDesc(d, fl.WeightLayout.NK) for e, d in EPILOGUES.items()}
    v.descs["none"] = fl.LinearDesc(fl.LinearEpilogue.NONE, fl.WeightLayout.NK)
    v.ws_fwd = max(fl.linear_fwd_workspace_size(handle, d, v.xd, v.wd, v.yd) for d in v.descs.values())
    v.ws_bwd = max(fl.linear_bwd_workspace_size(handle, d, v.xd, v.wd, v.yd) for d in v.descs.values())
    v.ws = torch.empty(max(v.ws_fwd, v.ws_bwd, 1), dtype=torch.uint8, device="cuda")
    v.aux_bytes = {e: fl.linear_aux_size(handle, d, v.yd) for e, d in v.descs.items()}
    v.auxs = {e: [torch.empty(max(nb, 1), dtype=torch.uint8, device="cuda") for _ in range(L.n_sets)]
              for e, nb in v.aux_bytes.items() if nb}
    return v


def run_builds(args) -> int:
    B = Bench(reps=10 if args.quick else 20)
    builds = load_builds(args.builds)
    names = list(builds)
    print(f"{B.name}: torch {torch.__version__}, builds {names}, {args.rounds} rounds", flush=True)
    keep = []  # every build's objects, alive to the end (see the file's text)
    rows = []
    for dtype in (("fp16",) if args.quick else ("fp16", "fp32")):
        for (m, n, k) in SEED_SHAPES:
            fn.lib = builds[names[0]][0]
            B.handle = builds[names[0]][1]
            L = Layer(B, dtype, m, n, k)
            S = L.n_sets
            reps = B.reps(S, max(2 * m * n * k / 200e6, 5.0))
            views = {b: bind_layer(L, *builds[b]) for b in names}
            keep.append((L, views))

            def use(b):
                fn.lib, B.handle = builds[b]
                return views[b]

            def t(launch, setup=None):
                return timed(launch, S, reps, setup)

            cells = [(f"fwd {epi}{'' if aux else ' no aux'}", "fwd", epi, aux)
                     for epi, aux in (("bias", True), ("bias_relu", True), ("bias_gelu", True), ("bias_relu", False),
                                      ("bias_gelu", False))]
            cells += [(f"bwd {epi}", "bwd", epi, True) for epi in ACTS]
            for key, kind, epi, with_aux in cells:
                act = ACTS[epi]
                got = {b: {"runs": []} for b in names + ["torch"]}
                first = None
                # Outputs: each build's against torch's and the first build's.
                if kind == "fwd":
                    ref = torch_act(act, F.linear(L.xs[0], L.w, L.b))
                    for b in names:
                        v = use(b)
                        L.ys[0].fill_(float("nan"))
                        v.fwd(epi, 0, with_aux=with_aux)
                        torch.cuda.synchronize()
                        got[b]["max_abs_diff_vs_torch"] = max_diff(L.ys[0], ref)
                        first = L.ys[0].clone() if first is None else first
                        got[b]["max_abs_diff_vs_first"] = max_diff(L.ys[0], first)
                else:
                    x0, w0, b0 = (q.detach().requires_grad_(True) for q in (L.xs[0], L.w, L.b))
                    ref = torch.autograd.grad(torch_act(act, F.linear(x0, w0, b0)), (x0, w0, b0), L.dys[0])
                    for b in names:
                        v = use(b)
                        v.fwd(epi, 0)
                        for q in (L.dxs[0], L.dw, L.db):
                            q.fill_(float("nan"))
                        v.bwd(epi, 0)
                        torch.cuda.synchronize()
                        out = (L.dxs[0].clone(), L.dw.clone(), L.db.clone())
                        got[b]["max_abs_diff_dx_dw_db_vs_torch"] = [max_diff(a, r) for a, r in zip(out, ref)]
                        first = out if first is None else first
                        got[b]["max_abs_diff_dx_dw_db_vs_first"] = [max_diff(a, r) for a, r in zip(out, first)]
                    del ref
                for _ in range(args.rounds):
                    for b in names:
                        v = use(b)
                        if kind == "fwd":
                            got[b]["runs"].append(t(lambda i, e=epi, a=with_aux, v=v: v.fwd(e, i, with_aux=a)))
                        else:
                            got[b]["runs"].append(t(lambda i, e=epi, v=v: v.bwd(e, i),
                                                    setup=lambda e=epi, v=v: [v.fwd(e, i) for i in range(S)]))
                    if kind == "fwd":
                        got["torch"]["runs"].append(t(lambda i, a=act: torch_act(a, F.linear(L.xs[i], L.w, L.b))))
                    else:
                        wr = L.w.detach().requires_grad_(True)
                        br = L.b.detach().requires_grad_(True)
                        xrs = [q.detach().requires_grad_(True) for q in L.xs]
                        yrs = []

                        def forward(a=act, xrs=xrs, wr=wr, br=br, yrs=yrs):
                            yrs[:] = [torch_act(a, F.linear(xr, wr, br)) for xr in xrs]

                        got["torch"]["runs"].append(t(
                            lambda i, xrs=xrs, wr=wr, br=br, yrs=yrs: torch.autograd.grad(
                                yrs[i], (xrs[i], wr, br), L.dys[i], retain_graph=True), setup=forward))
                        del yrs
                for b in got:
                    got[b]["runs"] = [round(x, 2) for x in got[b]["runs"]]
                    got[b]["us"] = round(statistics.median(got[b]["runs"]), 2)
                tu = got["torch"]["us"]
                line = f"{dtype} {m}x{n}x{k} {key:18s} torch {tu:7.1f}"
                for b in names:
                    line += f" | {b} {got[b]['us']:7.1f} ({tu / got[b]['us']:.2f}x)"
                line += f" | {names[-1]}/{names[0]} {got[names[0]]['us'] / got[names[-1]]['us']:.3f}x"
                print(line, flush=True)
                rows.append({"dtype": dtype, "shape": [m, n, k], "cell": key, **got})
            gc.collect()
    fn.lib = builds[names[0]][0]
    with open(os.path.join(args.out, "ab_linear.json"), "w") as f:
        json.dump({"gpu_name": B.name, "torch": torch.__version__, "builds": args.builds.split(","),
                   "rounds": args.rounds, "rows": rows}, f, indent=1)
    sys.stdout.flush()
    os._exit(0)  # the builds' objects are not destroyed (see the file's text)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--builds", default="", help="NAME=LIB,...: several builds in one process (the file's text)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.builds:
        return run_builds(args)
    torch.backends.cuda.matmul.allow_tf32 = False
    names = args.variants.split(",")
    B = Bench(reps=10 if args.quick else 20)
    print(f"{B.name}: torch {torch.__version__}, variants {names}", flush=True)
    rows = []
    for dtype in (("fp16",) if args.quick else ("fp16", "fp32")):
        for (m, n, k) in SEED_SHAPES:
            L = Layer(B, dtype, m, n, k)
            S = L.n_sets
            reps = B.reps(S, max(2 * m * n * k / 200e6, 5.0))
            handles = {v: make_handle(VARIANTS[v], L) for v in names}
            base = B.handle

            def t(launch, setup=None):
                return timed(launch, S, reps, setup)

            cells = {}
            # Forward cells; each variant's outputs checked against torch first.
            fwd_cells = [("bias", True), ("bias_relu", True), ("bias_gelu", True), ("bias_relu", False),
                         ("bias_gelu", False)]
            for epi, with_aux in fwd_cells:
                key = f"fwd {epi}{'' if with_aux else ' no aux'}"
                act = ACTS[epi]
                ref = torch_act(act, F.linear(L.xs[0], L.w, L.b))
                got = {}
                for v in names:
                    B.handle = handles[v]
                    L.ys[0].fill_(float("nan"))
                    L.fwd(epi, 0, with_aux=with_aux)
                    torch.cuda.synchronize()
                    diff = max_diff(L.ys[0], ref)
                    got[v] = {"us": round(t(lambda i, e=epi, a=with_aux: L.fwd(e, i, with_aux=a)), 2),
                              "max_abs_diff_vs_torch": diff}
                B.handle = base
                got["torch"] = {"us": round(t(lambda i, a=act: torch_act(a, F.linear(L.xs[i], L.w, L.b))), 2)}
                cells[key] = got
            # Backward cells: each variant's aux from its own forward.
            for epi, act in ACTS.items():
                key = f"bwd {epi}"
                x0, w0, b0 = (q.detach().requires_grad_(True) for q in (L.xs[0], L.w, L.b))
                ref = torch.autograd.grad(torch_act(act, F.linear(x0, w0, b0)), (x0, w0, b0), L.dys[0])
                got = {}
                for v in names:
                    B.handle = handles[v]
                    for i in range(S):
                        L.fwd(epi, i)
                    L.dxs[0].fill_(float("nan"))
                    L.dw.fill_(float("nan"))
                    L.db.fill_(float("nan"))
                    L.bwd(epi, 0)
                    torch.cuda.synchronize()
                    diffs = [max_diff(L.dxs[0], ref[0]), max_diff(L.dw, ref[1]), max_diff(L.db, ref[2])]
                    got[v] = {"us": round(t(lambda i, e=epi: L.bwd(e, i)), 2), "max_abs_diff_dx_dw_db": diffs}
                B.handle = base
                wr = L.w.detach().requires_grad_(True)
                br = L.b.detach().requires_grad_(True)
                xrs = [q.detach().requires_grad_(True) for q in L.xs]
                yrs = []

                def forward(a=act):
                    yrs[:] = [torch_act(a, F.linear(xr, wr, br)) for xr in xrs]

                got["torch"] = {"us": round(t(lambda i: torch.autograd.grad(yrs[i], (xrs[i], wr, br), L.dys[i],
                                                                           retain_graph=True), setup=forward), 2)}
                del yrs, ref
                cells[key] = got
            for key, got in cells.items():
                tu = got["torch"]["us"]
                line = f"{dtype} {m}x{n}x{k} {key:18s} torch {tu:7.1f}"
                for v in names:
                    line += f" | {v} {got[v]['us']:7.1f} ({tu / got[v]['us']:.2f}x)"
                print(line, flush=True)
                rows.append({"dtype": dtype, "shape": [m, n, k], "cell": key, **got})
            del L, handles
            B.handle = base
            gc.collect()
            torch.cuda.empty_cache()
    with open(os.path.join(args.out, "ab_linear.json"), "w") as f:
        json.dump({"gpu_name": B.name, "torch": torch.__version__, "variants": {v: VARIANTS[v] for v in names},
                   "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
