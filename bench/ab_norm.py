#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A/B of several libfusednorm builds (LayerNorm/RMSNorm) in one process:
each case runs bench_layernorm's measurement of our call once per build, three
rounds interleaved, and prints the medians. One process, because the same
shape moved by up to 6% between benchmark processes on the H200 (buffer
placement), more than most changes being judged. PyTorch and Liger are timed only
when named (below).
Usage: FNORM_LIB=LIB_A ab_norm.py NAME=LIB_A NAME=LIB_B[,VAR=VALUE...] [...] -- OP:DTYPE:ROWSxCOLS [...]
(the variables are set in the environment while that build's handle is
created and while it runs; a forward's plan can be overridden per build with
FNORM_NORM_FWD_PLAN, src/core/tuning.hpp, which the library reads at
fnorm_create. Each NAME loads its own copy of its library, so one path may
serve several NAMEs with different plans.)
(OP: layernorm_fwd, rmsnorm_fwd, layernorm_bwd, rmsnorm_bwd, layernorm_residual_fwd,
layernorm_fwd_bwd, rmsnorm_fwd_bwd)
Reference columns may be named instead of a build, timed the same way in
the same rounds: NAME=torch (PyTorch's op), for the forward and forward+backward
ops NAME=liger (Liger-Kernel, as bench_layernorm times it), and for the forward,
backward and forward+backward of both norms NAME=quack (QuACK, as bench_layernorm
times it; those cases must be shapes where bench_layernorm times it:
bench_layernorm.quack_wanted). A build that refuses a case (e.g. a plan override
that cannot hold the row), or a reference absent or refusing it, shows n/a."""
import os, statistics, sys, tempfile, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_layernorm as bl  # noqa: E402
import torch  # noqa: E402
fn = bl.fn
sep = sys.argv.index("--")
# NAME=LIB[,VAR=VALUE...]: the variables are set while that build runs.
libs, envs = {}, {}
for a in sys.argv[1:sep]:
    n, spec = a.split("=", 1)
    path, *kv = spec.split(",")
    libs[n] = path
    envs[n] = dict(x.split("=", 1) for x in kv)
cases = sys.argv[sep + 1:]
# Reference columns: the `who` of bench_*'s time_graph call that is theirs,
# and the row field that holds its time.
REFS = {"torch": "torch_us", "liger": "liger_us", "quack": "quack_us"}
refs = {n: p for n, p in libs.items() if p in REFS}
libs = {n: p for n, p in libs.items() if p not in REFS}
cdll = {}
copies = tempfile.mkdtemp(prefix="ab_norm_")
for n, path in libs.items():
    cdll[n] = bl.load_build_copy(n, path, copies)  # a copy per NAME: its own process-wide state
B = bl.Bench(reps=30)
handles = {}
for n, L in cdll.items():
    fn.lib = L
    for k in set().union(*envs.values()):
        os.environ.pop(k, None)
    os.environ.update(envs[n])  # the tuning the handle reads at fnorm_create
    handles[n] = fn.Handle()
# Each bench_* function times ours and the references with time_graph(...,
# who=...): only the column wanted runs, the others are stubbed.
real_tg = bl.time_graph
state = {"want": "ours"}


def tg(*a, **k):
    return real_tg(*a, **k) if k.get("who", "ours") == state["want"] else 1.0


bl.time_graph = tg
print(f"copy {B.copy_gbps:.0f} GB/s", flush=True)
t_start = time.time()
for case in cases:
    op, dt, shape = case.split(":")
    r, c = (int(v) for v in shape.split("x"))
    names = [n for n in envs if n in cdll or n in refs]
    res = {n: [] for n in names}
    diff = {}  # our builds: the largest |ours - PyTorch| seen (bench_* checks each on set 0)
    for rep in range(3):
        for n in names:
            lib_name = n if n in cdll else next(iter(cdll))
            fn.lib = cdll[lib_name]; B.handle = handles[lib_name]
            state["want"] = refs.get(n, "ours")
            for k in set().union(*envs.values()):
                os.environ.pop(k, None)
            os.environ.update(envs[n])
            try:
                bench = (bl.bench_fwd_bwd if op.endswith("_fwd_bwd") else bl.bench_bwd if op.endswith("_bwd")
                         else bl.bench_fwd)
                row = bench(B, op, dt, r, c)
                us = row.get(REFS.get(state["want"], "us"))
                if us is not None:
                    res[n].append(us)
                if n in cdll and row.get("max_abs_diff_vs_torch") is not None:
                    diff[n] = max(diff.get(n, 0.0), row["max_abs_diff_vs_torch"])
            except Exception as e:  # noqa: BLE001 - a refused variant is a cell, not the end of the run
                print(f"  {case} {n}: {type(e).__name__}: {str(e)[:160]}", flush=True)
            torch.cuda.empty_cache()
    base = statistics.median(res[names[0]]) if res[names[0]] else float("nan")
    cells = []
    for n in names:
        if not res[n]:
            cells.append(f"{n} n/a")
            continue
        m = statistics.median(res[n])
        gb = bl.TENSORS_MOVED[op] * r * c * (4 if dt == "fp32" else 2) / (m * 1e-6) / 1e9
        d = f" d={diff[n]:.2g}" if n in diff else ""
        cells.append(f"{n} {m:8.1f} us ({100 * gb / B.copy_gbps:4.1f}%, x{base / m:.3f}){d} [{' '.join(f'{v:.1f}' for v in res[n])}]")
    print(f"{case:32s} " + " | ".join(cells), flush=True)
print(f"{len(cases)} cases in {time.time() - t_start:.0f} s", flush=True)
os._exit(0)  # the handles belong to different libraries: no destructors at exit
