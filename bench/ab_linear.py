#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A/B of the fully-connected layer's paths in one process (issue 20 item 6):
each variant is a handle created with the library's A/B hooks set
(src/core/tuning.hpp, read at fnorm_create), timed beside the others and PyTorch on
the same buffers, interleaved, at bench_linear.py's seed shapes.

Variants:
  old    FNORM_LINEAR_FWD_AUX=lt (cuBLASLt's activation epilogues always),
         FNORM_LINEAR_NO_N1=1 (GEMMs at n = 1)
  new    the defaults (the rule in src/linear/linear_fwd.cpp picks our
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
Writes DIR/ab_linear.json and prints a table (ratios torch / ours).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bindings", "python"))
sys.path.insert(0, HERE)
import fusednorm as fn  # noqa: E402
from bench_linear import ACTS, SEED_SHAPES, Bench, Layer, max_diff, torch_act  # noqa: E402
from bench_layernorm import time_graph  # noqa: E402

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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
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
                try:
                    return time_graph(launch, S, reps, setup=setup)
                except RuntimeError:
                    torch.cuda.synchronize()
                    return time_graph(launch, S, reps, setup=setup)

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
