#!/usr/bin/env python3
"""A/B of several libfusednorm builds (LayerNorm/RMSNorm) in one process:
each case runs bench_layernorm's measurement of our call once per build, three
rounds interleaved, and prints the medians. One process, because the same
shape moved by up to 6% between benchmark processes on the H200 (buffer
placement), more than most changes being judged. PyTorch is not timed here.
Usage: FNORM_LIB=LIB_A ab_norm.py NAME=LIB_A NAME=LIB_B[,VAR=VALUE...] [...] -- OP:DTYPE:ROWSxCOLS [...]
(the variables are set in the environment while that build runs)
(OP: layernorm_fwd, rmsnorm_fwd, layernorm_bwd, rmsnorm_bwd, layernorm_residual_fwd)"""
import ctypes, os, sys, statistics
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
cdll = {}
for n, path in libs.items():
    L = ctypes.CDLL(path)
    for name, (res, args) in fn._PROTOTYPES.items():
        f = getattr(L, name); f.restype = res; f.argtypes = args
    cdll[n] = L
B = bl.Bench(reps=30)
handles = {}
for n, L in cdll.items():
    fn.lib = L
    handles[n] = fn.Handle()
# Our call is the first graph each bench_* function times; the others
# (PyTorch, unfused) are skipped.
real_tg = bl.time_graph
state = {"calls": 0}


def tg(*a, **k):
    state["calls"] += 1
    return real_tg(*a, **k) if state["calls"] == 1 else 1.0


bl.time_graph = tg
print(f"copy {B.copy_gbps:.0f} GB/s", flush=True)
for case in cases:
    op, dt, shape = case.split(":")
    r, c = (int(v) for v in shape.split("x"))
    res = {n: [] for n in cdll}
    for rep in range(3):
        for n in cdll:
            fn.lib = cdll[n]; B.handle = handles[n]; state["calls"] = 0
            for k in set().union(*envs.values()):
                os.environ.pop(k, None)
            os.environ.update(envs[n])
            row = (bl.bench_bwd if op.endswith("_bwd") else bl.bench_fwd)(B, op, dt, r, c)
            res[n].append(row["us"])
            torch.cuda.empty_cache()
    base = statistics.median(res[list(cdll)[0]])
    cells = []
    for n in cdll:
        m = statistics.median(res[n])
        gb = bl.TENSORS_MOVED[op] * r * c * (4 if dt == "fp32" else 2) / (m * 1e-6) / 1e9
        cells.append(f"{n} {m:8.1f} us ({100 * gb / B.copy_gbps:4.1f}%, x{base / m:.3f}) [{' '.join(f'{v:.1f}' for v in res[n])}]")
    print(f"{case:32s} " + " | ".join(cells), flush=True)
os._exit(0)  # the handles belong to different libraries: no destructors at exit
