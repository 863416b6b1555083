#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""LayerNorm / RMSNorm benchmark: libfusednorm beside PyTorch, in one run.

Ops (shared/design.md §6 names): layernorm_fwd, rmsnorm_fwd, layernorm_bwd,
rmsnorm_bwd, layernorm_residual_fwd, and rmsnorm_fwd_bwd / layernorm_fwd_bwd
(one training step of the norm: the forward, then the backward of it).

Liger-Kernel (liger_kernel, Triton kernels LLM trainers install instead of
torch's norms) is timed beside ours at the LLM shapes (LIGER_SHAPES) when it
is importable: liger_us / vs_liger; otherwise those rows say why in
liger_note and carry no Liger figure.

QuACK (quack-kernels, Dao-AILab's CuTe-DSL norms) is timed the same way on
the forward, backward and forward+backward of both norms at the training
grid and the LLM shapes (quack_wanted) when it is importable: quack_us /
vs_quack, quack_impl; otherwise quack_note says why. Those rows also name the
kernels PyTorch's own call ran (torch_kernel): newer PyTorch routes eager
F.rms_norm to QuACK's kernel when the CuTe-DSL packages are importable.

Method (bench/README.md says more):
- CUDA-event timing of CUDA-graph replays, so launch overhead (ours through
  ctypes, PyTorch's through Python) is out of the figure for both; the median
  over many replays after warm-up.
- Each graph cycles through several input/output buffer sets totalling at
  least 8x the L2 size, so inputs come from device memory, not L2; PyTorch's
  outputs are kept alive inside the capture so they rotate too.
- Bytes counted (BYTES below): forward read x + write y; backward read x +
  read dy + write dx; residual forward read x + read r + write s + write y.
  gamma/beta, dgamma/dbeta and mean/rstd are not counted.
- The copy bandwidth is measured in the same run (1 GiB device-to-device
  copy, read + write counted), and every GB/s is also given as % of it.
- Before timing, our outputs are compared with PyTorch's on the same input.

Usage: bench_layernorm.py --out DIR [--quick] [--grid] [--no-quack] [--ops OP,OP,...]
                          [--shapes [DTYPE:]COLS|ROWSxCOLS,...]
(a shape given in full, DTYPE:ROWSxCOLS, runs for every op asked even when
the plan does not hold it)
Writes DIR/<gpu>.json (the schema of shared/design.md section 6) and DIR/<gpu>.md.
"""
from __future__ import annotations

import argparse
import datetime
import gc
import importlib.metadata
import json
import math
import os
import re
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bindings", "python"))
import fusednorm as fn  # noqa: E402

# OneFlow's published LayerNorm kernel as measured on an H200 (shared/design.md
# section 7, fp16, rows = 49152). Anchors, not measured in this run: reported
# only when this run is on an H200 too.
ONEFLOW_H200_FP16_49152 = {32: 11.9, 64: 18.7, 128: 23.7, 256: 39.9, 512: 114, 1024: 294,
                           2048: 269, 4096: 458, 8192: 981, 16384: 2006, 32768: 5685}

# cuDNN 9.19.1's own norm benchmark on an H200, bf16 (design.md §7,
# research/features.md §3): TB/s (forward, backward) by (norm, rows, cols).
# Its byte count differs from ours (cudnn_bytes below), so rows that carry
# it also report our TB/s under that count (tbps_cudnn_bytes), and cudnn_us
# is that count over the published TB/s: cuDNN's time, not measured here.
CUDNN_H200_BF16_TBPS = {("rmsnorm", 16384, 4096): (3.71, 3.80), ("rmsnorm", 8192, 8192): (3.77, 3.53),
                        ("rmsnorm", 8192, 128): (1.44, 0.73), ("layernorm", 1024, 12288): (3.23, 0.95)}

# LLM shapes (bf16) at which Liger-Kernel is timed beside ours (issue 20, 1b).
LIGER_SHAPES = ((4096, 4096), (16384, 4096), (8192, 8192), (32768, 2048), (4096, 16384))

# Training shapes (issue 25): one micro-batch per GPU, 1-16 K tokens of
# 2-8 K features, bf16 and fp16; every op of the norm in a training step,
# Liger-Kernel beside ours on every forward and forward+backward cell.
GRID_DTYPES = ("bf16", "fp16")
GRID_ROWS = (1024, 2048, 4096, 8192, 16384)
GRID_COLS = (2048, 4096, 8192)
GRID_OPS = ("layernorm_fwd", "rmsnorm_fwd", "layernorm_bwd", "rmsnorm_bwd", "layernorm_fwd_bwd",
            "rmsnorm_fwd_bwd", "layernorm_residual_fwd")
# Repetitions for grid cells: each replay already averages the launches of
# every buffer set (> 8x L2), and ten replays keep the grid inside the
# benchmark's device-time budget; the other rows keep their 30.
GRID_REPS = 10


def in_grid(dtype: str, rows: int, cols: int) -> bool:
    return dtype in GRID_DTYPES and rows in GRID_ROWS and cols in GRID_COLS

TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
FN_DTYPES = {"fp32": fn.DType.FLOAT32, "fp16": fn.DType.FLOAT16, "bf16": fn.DType.BFLOAT16}
OPS = ("layernorm_fwd", "rmsnorm_fwd", "layernorm_bwd", "rmsnorm_bwd", "layernorm_residual_fwd",
       "rmsnorm_fwd_bwd", "layernorm_fwd_bwd")
BYTES = {"layernorm_fwd": "read x + write y",
         "rmsnorm_fwd": "read x + write y",
         "layernorm_bwd": "read x + read dy + write dx",
         "rmsnorm_bwd": "read x + read dy + write dx",
         "layernorm_residual_fwd": "read x + read r + write s + write y",
         "rmsnorm_fwd_bwd": "forward (read x + write y) + backward (read x + read dy + write dx)",
         "layernorm_fwd_bwd": "forward (read x + write y) + backward (read x + read dy + write dx)"}
TENSORS_MOVED = {"layernorm_fwd": 2, "rmsnorm_fwd": 2, "layernorm_bwd": 3, "rmsnorm_bwd": 3,
                 "layernorm_residual_fwd": 4, "rmsnorm_fwd_bwd": 5, "layernorm_fwd_bwd": 5}
EPS = 1e-5

FP16_COLS = (32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)


def plan(quick: bool, grid_only: bool = False) -> list[tuple[str, str, int, int]]:
    """(op, dtype, rows, cols) in run order, grouped by op (grid_only: the
    training-shape grid alone)."""
    by_op = {op: [] for op in OPS}
    for c in FP16_COLS:
        by_op["layernorm_fwd"].append(("fp16", 49152, c))
        by_op["rmsnorm_fwd"].append(("fp16", 49152, c))
        by_op["layernorm_bwd"].append(("fp16", 49152, c))
        if c >= 256:  # below, add+norm is launch-bound on both sides: little to learn
            by_op["layernorm_residual_fwd"].append(("fp16", 49152, c))
    for c in (1024, 8192):
        by_op["layernorm_fwd"].append(("fp32", 49152, c))
        by_op["layernorm_bwd"].append(("fp32", 49152, c))
    # Shapes of the earlier runs, kept for continuity.
    by_op["layernorm_fwd"] += [("bf16", 49152, 1024), ("fp16", 49152, 1000), ("fp16", 49152, 768)]
    # cuDNN's benchmark shapes.
    for (norm, r, c) in CUDNN_H200_BF16_TBPS:
        by_op[f"{norm}_fwd"].append(("bf16", r, c))
        by_op[f"{norm}_bwd"].append(("bf16", r, c))
    # LLM shapes, where Liger-Kernel is timed too.
    for r, c in LIGER_SHAPES:
        for op in ("rmsnorm_fwd", "layernorm_fwd", "rmsnorm_fwd_bwd", "layernorm_fwd_bwd"):
            if ("bf16", r, c) not in by_op[op]:
                by_op[op].append(("bf16", r, c))
    if grid_only:
        by_op = {op: [] for op in OPS}
    for op in GRID_OPS:
        for dt in GRID_DTYPES:
            for r in GRID_ROWS:
                for c in GRID_COLS:
                    if (dt, r, c) not in by_op[op]:
                        by_op[op].append((dt, r, c))
    out = []
    for op in OPS:
        shapes = by_op[op][::3] if quick else by_op[op]
        out += [(op, dt, r, c) for dt, r, c in shapes]
    return out


def load_liger():
    """Liger-Kernel's norm autograd functions (Triton kernels), or why not.

    Returns ((rms_fn, ln_fn, version), None) or (None, reason). They are the
    classes its LigerRMSNorm / LigerLayerNorm modules and its liger_rms_norm /
    liger_layer_norm functionals apply on a CUDA GPU."""
    try:
        from liger_kernel.ops import LigerLayerNormFunction, LigerRMSNormFunction
    except Exception as e:  # noqa: BLE001 - not installed, or its Triton/torch refuses
        return None, f"liger_kernel not importable ({type(e).__name__}: {str(e)[:200]})"
    try:
        version = importlib.metadata.version("liger_kernel")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return (LigerRMSNormFunction, LigerLayerNormFunction, version), None


# Liger's RMSNorm computes the same function as ours and torch's (fp32 from
# x and w, one rounding of y) in its "gemma" casting mode with offset 0; its
# default "llama" mode rounds x*rstd to the input dtype before multiplying by
# w (two roundings), so it is timed for reference only (liger_llama_us).
LIGER_RMS_CASTING = "gemma"


def liger_wanted(op: str, dtype: str, rows: int, cols: int) -> bool:
    if op.endswith("_fwd_bwd"):
        return True
    if op not in ("rmsnorm_fwd", "layernorm_fwd"):
        return False
    return (dtype == "bf16" and (rows, cols) in LIGER_SHAPES) or in_grid(dtype, rows, cols)


def liger_forward(B, ln: bool, w, b, casting: str = LIGER_RMS_CASTING):
    """x -> y through Liger's autograd function (in_place=True, its module's
    default: the backward writes dx over dy, saving a buffer)."""
    rms_fn, ln_fn, _ = B.liger
    if ln:
        return lambda x: ln_fn.apply(x, w, b, EPS)
    return lambda x: rms_fn.apply(x, w, EPS, 0.0, casting, True)


def liger_impl(B, ln: bool) -> str:
    if ln:
        return f"liger_kernel {B.liger[2]} LigerLayerNormFunction"
    return f"liger_kernel {B.liger[2]} LigerRMSNormFunction (casting_mode={LIGER_RMS_CASTING}, offset 0, in_place)"


# QuACK (quack-kernels 0.6.5: quack.rmsnorm holds both norms' entry points)
# beside ours wherever Liger's forward is timed, on all three passes.
def quack_wanted(op: str, dtype: str, rows: int, cols: int) -> bool:
    if op not in ("rmsnorm_fwd", "layernorm_fwd", "rmsnorm_bwd", "layernorm_bwd", "rmsnorm_fwd_bwd",
                  "layernorm_fwd_bwd"):
        return False
    return (dtype == "bf16" and (rows, cols) in LIGER_SHAPES) or in_grid(dtype, rows, cols)


def load_quack():
    """QuACK's norm module (CuTe-DSL kernels, JIT-compiled on first use per
    shape class), or why not: ((module, version), None) or (None, reason)."""
    try:
        import quack
        # The module, not the function quack/__init__.py binds to the same name.
        qr = importlib.import_module("quack.rmsnorm")
    except Exception as e:  # noqa: BLE001 - not installed, or its DSL / CUDA bindings refuse
        return None, f"quack not importable ({type(e).__name__}: {str(e)[:200]})"
    try:
        version = importlib.metadata.version("quack-kernels")
    except importlib.metadata.PackageNotFoundError:
        version = getattr(quack, "__version__", "unknown")
    return (qr, version), None


def gpu_tag(name: str) -> str:
    n = name.lower()
    for tag in ("h200", "h100", "a100", "l40s", "b200"):
        if tag in n:
            return tag
    return "".join(c for c in n if c.isalnum())[:16] or "gpu"


def load_build_copy(name: str, path: str, copies: str):
    """A private copy (in the folder `copies`) of the libfusednorm build at
    `path`, loaded: its own process-wide state, so that several builds run side
    by side in one process (the A/B tools). Its functions are typed from the
    binding's prototypes; an older build (the baseline of an A/B) lacks the
    entry points added since, and only the ones it has are typed."""
    import ctypes
    import shutil
    from fusednorm import _core
    dst = os.path.join(copies, f"{name}.so")
    shutil.copy(path, dst)
    lib = ctypes.CDLL(dst)
    _core._apply(lib, {k: v for k, v in _core._PROTOTYPES.items() if hasattr(lib, k)})
    return lib


def time_graph(launch, n_launch: int, reps: int, setup=None, who: str = "ours") -> float:
    """Median microseconds per launch of launch(i), i = 0..n_launch-1, captured
    in one CUDA graph and replayed `reps` times. setup(), when given, runs
    first on the stream the graph is captured on (autograd runs a backward
    on its forward's stream). `who` names the implementation timed (ours,
    torch, liger, liger_llama, quack, unfused): ab_norm.py times only the
    column it was asked for."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        if setup is not None:
            setup()
        for i in range(n_launch):  # warm-up, eager: caches, module load
            launch(i)
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    keep = []
    with torch.cuda.graph(graph, stream=stream):
        for i in range(n_launch):
            keep.append(launch(i))
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        e0.record()
        graph.replay()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1000.0 / n_launch)
    del keep, graph
    return statistics.median(times)


def copy_bandwidth_gbps() -> float:
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    a.random_(0, 255)
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    torch.cuda.synchronize()
    times = []
    for _ in range(20):
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        e0.record()
        b.copy_(a)
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) / 1000.0)
    del a, b
    return 2 * n / statistics.median(times) / 1e9


def cudnn_bytes(norm: str, direction: str, rows: int, cols: int, esize: int) -> int:
    """Bytes as cuDNN's norm benchmark counts them (cudnn-frontend
    benchmark/norms/benchmark_single_norm.py, compute_bandwidth_bytes): every
    input read once and every output written once, parameters and fp32
    statistics included; its LayerNorm preset has a bias, its RMSNorm ones
    have none."""
    n, c = rows, cols
    if direction == "fwd":
        if norm == "rmsnorm":  # x, gamma -> y, rstd
            return (n * c + c) * esize + n * c * esize + 4 * n
        return (n * c + 2 * c) * esize + n * c * esize + 8 * n  # x, gamma, beta -> y, mean, rstd
    if norm == "rmsnorm":  # dy, x, rstd, gamma -> dx, dgamma
        return (2 * n * c + c) * esize + 4 * n + (n * c + c) * esize
    return (2 * n * c + c) * esize + 8 * n + (n * c + 2 * c) * esize  # + mean; -> dx, dgamma, dbeta


class Bench:
    """What every measurement shares: the GPU, its L2, the copy bandwidth
    and the library handle."""

    def __init__(self, reps: int, with_quack: bool = True):
        props = torch.cuda.get_device_properties(0)
        self.name = props.name
        self.gpu = gpu_tag(props.name)
        self.l2 = getattr(props, "L2_cache_size", 50 << 20)
        self.copy_gbps = copy_bandwidth_gbps()
        self.max_reps = reps
        self.handle = fn._handle_for(torch.cuda.current_device())
        self.liger, self.liger_note = load_liger()
        self.quack, self.quack_note = load_quack() if with_quack else (None, "not asked (--no-quack)")

    def n_sets(self, set_bytes: int) -> int:
        # Enough sets to cover 8x L2; at least 2 so that consecutive launches
        # never touch the same buffers even when one set dwarfs the L2.
        return max(2, min(200, math.ceil(8 * self.l2 / set_bytes)))

    def reps(self, n_sets: int, bytes_per_launch: int, cap: int | None = None) -> int:
        # Big shapes: fewer replays (each is long, and the median settles
        # fast): ~0.15 s of replays per graph at the copy bandwidth.
        est_s = n_sets * bytes_per_launch / (self.copy_gbps * 1e9)
        most = self.max_reps if cap is None else min(cap, self.max_reps)
        return max(min(10, most), min(most, int(0.15 / max(est_s, 1e-9))))

    def reps_for(self, dtype: str, rows: int, cols: int, n_sets: int, bytes_per_launch: int) -> int:
        return self.reps(n_sets, bytes_per_launch, GRID_REPS if in_grid(dtype, rows, cols) else None)


def max_diff(a, b) -> float:
    d = (a.float() - b.float()).abs().max().item()
    if not math.isfinite(d):
        raise RuntimeError("non-finite output (or a NaN left from the poisoning)")
    return d


def rand_sets(n_sets, rows, cols, tdt, gen, kind):
    if kind == "x":
        return [torch.randn(rows, cols, device="cuda", dtype=tdt, generator=gen) * 2 + 1 for _ in range(n_sets)]
    return [torch.randn(rows, cols, device="cuda", dtype=tdt, generator=gen) for _ in range(n_sets)]


def params(cols, tdt, gen):
    w = (torch.rand(cols, device="cuda", dtype=torch.float32, generator=gen) + 0.5).to(tdt)
    b = (torch.rand(cols, device="cuda", dtype=torch.float32, generator=gen) - 0.5).to(tdt)
    return w, b


# ---------------------------------------------------------------------------
# Forward: layernorm_fwd, rmsnorm_fwd, layernorm_residual_fwd
# ---------------------------------------------------------------------------
def bench_fwd(B: Bench, op: str, dtype: str, rows: int, cols: int) -> dict:
    ln = op != "rmsnorm_fwd"
    residual = op == "layernorm_residual_fwd"
    tdt = TORCH_DTYPES[dtype]
    esize = torch.empty((), dtype=tdt).element_size()
    moved = TENSORS_MOVED[op] * rows * cols * esize
    n_sets = B.n_sets(moved)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1234 + cols)
    xs = rand_sets(n_sets, rows, cols, tdt, gen, "x")
    rs = rand_sets(n_sets, rows, cols, tdt, gen, "r") if residual else [None] * n_sets
    ss = [torch.empty_like(x) for x in xs] if residual else [None] * n_sets
    ys = [torch.empty_like(x) for x in xs]
    # Our forward writes mean/rstd, as PyTorch's layer_norm does (the training
    # forward); they are rows * 4 bytes each, not counted.
    means = [torch.empty(rows, device="cuda") for _ in range(n_sets)] if ln else [None] * n_sets
    rstds = [torch.empty(rows, device="cuda") for _ in range(n_sets)]
    w, b = params(cols, tdt, gen)
    if not ln:
        b = None

    # Descriptors built once: the timed launches are the bare C call.
    xd = fn.TensorDesc(FN_DTYPES[dtype], [rows, cols])
    wd = fn.TensorDesc(FN_DTYPES[dtype], [cols])
    nd = fn.NormDesc(fn.NormMode.LAYERNORM if ln else fn.NormMode.RMSNORM, -1, EPS)
    ws_bytes = fn.norm_fwd_workspace_size(B.handle, nd, xd, xd)
    ws = torch.empty(ws_bytes, dtype=torch.uint8, device="cuda") if ws_bytes else None
    ptr = lambda t: t.data_ptr() if t is not None else None  # noqa: E731

    def norm(k, x, r, s):
        fn.check(fn.lib.fnorm_norm_fwd(B.handle.ptr, torch.cuda.current_stream().cuda_stream, nd.ptr,
                                       xd.ptr, x.data_ptr(), ptr(r), ptr(s), wd.ptr, w.data_ptr(), ptr(b),
                                       xd.ptr, ys[k].data_ptr(), ptr(means[k]), rstds[k].data_ptr(),
                                       ptr(ws), ws_bytes))

    def ours(i):
        k = i % n_sets
        norm(k, xs[k], rs[k], ss[k])

    def torch_fwd(i):
        k = i % n_sets
        if residual:
            s = xs[k] + rs[k]
            return s, F.layer_norm(s, (cols,), w, b, EPS)
        if ln:
            return F.layer_norm(xs[k], (cols,), w, b, EPS)
        return F.rms_norm(xs[k], (cols,), w, EPS)

    # Correctness beside PyTorch (outputs poisoned first).
    ys[0].fill_(float("nan"))
    if residual:
        ss[0].fill_(float("nan"))
    ours(0)
    ref = torch_fwd(0)
    torch.cuda.synchronize()
    if residual:
        diff = max(max_diff(ss[0], ref[0]), max_diff(ys[0], ref[1]))
    else:
        diff = max_diff(ys[0], ref)
    liger = {}
    if not residual and liger_wanted(op, dtype, rows, cols):
        liger = liger_setup(B, ln, w, b, lambda f: (lambda i: f(xs[i % n_sets])),
                            lambda y: max_diff(y, ref), forward_only=True, with_llama=not ln)
    quack = {}
    if not residual and quack_wanted(op, dtype, rows, cols):
        quack = quack_setup(B, op, lambda qr: quack_forward(qr, ln, w, b, lambda i: xs[i % n_sets]),
                            lambda out: {"max_abs_diff_quack_vs_torch": max_diff(out[0], ref)})
    ref = None  # PyTorch's outputs freed (the checks above, run already, read it)

    reps = B.reps_for(dtype, rows, cols, n_sets, moved)
    us = time_graph(ours, n_sets, reps)
    torch_us = time_graph(torch_fwd, n_sets, reps, who="torch")
    row = row_common(B, op, dtype, rows, cols, moved, us, torch_us)
    liger_time(row, liger, n_sets, reps, us)
    quack_time(B, row, quack, n_sets, reps, us, moved)
    if residual:
        # Unfused with our own LayerNorm: s = x + r by torch.add, then norm(s).
        def unfused(i):
            k = i % n_sets
            torch.add(xs[k], rs[k], out=ss[k])
            norm(k, ss[k], None, None)

        unfused_us = time_graph(unfused, n_sets, reps, who="unfused")
        row["unfused_us"] = round(unfused_us, 2)
        row["vs_unfused"] = round(unfused_us / us, 3)
        row["torch_impl"] = "x + r, F.layer_norm"
    else:
        row["torch_impl"] = "F.layer_norm" if ln else "F.rms_norm"
    if op == "layernorm_fwd" and B.gpu == "h200" and dtype == "fp16" and rows == 49152:
        oneflow = ONEFLOW_H200_FP16_49152.get(cols)
        if oneflow:
            row["oneflow_us"] = oneflow
            row["vs_oneflow"] = round(oneflow / us, 3)
    if not residual:  # cuDNN's figures are for the plain norm
        add_cudnn(B, row, "layernorm" if ln else "rmsnorm", "fwd", esize)
    if quack_wanted(op, dtype, rows, cols):
        row["torch_kernel"] = torch_kernel(lambda: torch_fwd(0))
    row["max_abs_diff_vs_torch"] = diff
    row["buffer_sets"] = n_sets
    return row


# ---------------------------------------------------------------------------
# Backward: layernorm_bwd, rmsnorm_bwd
# ---------------------------------------------------------------------------
def bench_bwd(B: Bench, op: str, dtype: str, rows: int, cols: int) -> dict:
    ln = op == "layernorm_bwd"
    tdt = TORCH_DTYPES[dtype]
    esize = torch.empty((), dtype=tdt).element_size()
    moved = TENSORS_MOVED[op] * rows * cols * esize
    n_sets = B.n_sets(moved)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(4321 + cols)
    xs = rand_sets(n_sets, rows, cols, tdt, gen, "x")
    dys = rand_sets(n_sets, rows, cols, tdt, gen, "dy")
    dxs = [torch.empty_like(x) for x in xs]
    w, b = params(cols, tdt, gen)
    if not ln:
        b = None
    dgamma = torch.empty_like(w)
    dbeta = torch.empty_like(w) if ln else None

    mode = fn.NormMode.LAYERNORM if ln else fn.NormMode.RMSNORM
    xd = fn.TensorDesc(FN_DTYPES[dtype], [rows, cols])
    wd = fn.TensorDesc(FN_DTYPES[dtype], [cols])
    nd = fn.NormDesc(mode, -1, EPS)
    ptr = lambda t: t.data_ptr() if t is not None else None  # noqa: E731

    # Our statistics, from our forward (y goes to dx's buffer, overwritten by
    # the backward); PyTorch's, from the forward its autograd would run.
    means = [torch.empty(rows, device="cuda") for _ in range(n_sets)] if ln else [None] * n_sets
    rstds = [torch.empty(rows, device="cuda") for _ in range(n_sets)]
    for k in range(n_sets):
        fn.check(fn.lib.fnorm_norm_fwd(B.handle.ptr, torch.cuda.current_stream().cuda_stream, nd.ptr,
                                       xd.ptr, xs[k].data_ptr(), None, None, wd.ptr, w.data_ptr(), ptr(b),
                                       xd.ptr, dxs[k].data_ptr(), ptr(means[k]), rstds[k].data_ptr(), None, 0))
    if ln:
        t_stats = [torch.ops.aten.native_layer_norm(x, [cols], w, b, EPS)[1:] for x in xs]

    ws_bytes = fn.norm_bwd_workspace_size(B.handle, nd, xd, wd)
    ws = torch.empty(ws_bytes, dtype=torch.uint8, device="cuda") if ws_bytes else None

    def ours(i):
        k = i % n_sets
        fn.check(fn.lib.fnorm_norm_bwd(B.handle.ptr, torch.cuda.current_stream().cuda_stream, nd.ptr,
                                       xd.ptr, xs[k].data_ptr(), xd.ptr, dys[k].data_ptr(), ptr(means[k]),
                                       rstds[k].data_ptr(), wd.ptr, w.data_ptr(), None, xd.ptr,
                                       dxs[k].data_ptr(), dgamma.data_ptr(), ptr(dbeta), ptr(ws), ws_bytes))

    # PyTorch: the aten backward op its autograd runs, called directly so only
    # the backward is timed.
    torch_setup = None
    if ln:
        torch_impl = "aten.native_layer_norm_backward"

        def torch_bwd(i):
            k = i % n_sets
            mean, rstd = t_stats[k]
            return torch.ops.aten.native_layer_norm_backward(dys[k], xs[k], [cols], mean, rstd, w, b,
                                                             [True, True, True])
    else:
        torch_impl = "aten._fused_rms_norm_backward"

        def torch_bwd(i):
            k = i % n_sets
            return torch.ops.aten._fused_rms_norm_backward(dys[k], xs[k], [cols], t_rstd[k], w, [True, True])

        try:
            t_rstd = [torch.ops.aten._fused_rms_norm(x, [cols], w, EPS)[1] for x in xs]
            torch_bwd(0)
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - not in this build, or refuses this shape
            print(f"  {op} {dtype} {rows}x{cols}: _fused_rms_norm_backward failed ({e}); timing autograd",
                  flush=True)
            torch_impl = "autograd(F.rms_norm)"
            wr = w.detach().requires_grad_(True)
            xrs = [x.detach().requires_grad_(True) for x in xs]
            yrs = []

            def forward():  # outside the timing, on the stream timed
                yrs[:] = [F.rms_norm(xr, (cols,), wr, EPS) for xr in xrs]

            def torch_bwd(i):
                k = i % n_sets
                return torch.autograd.grad(yrs[k], (xrs[k], wr), dys[k], retain_graph=True)

            torch_setup = forward
            forward()

    # Correctness beside PyTorch (outputs poisoned first).
    dxs[0].fill_(float("nan"))
    dgamma.fill_(float("nan"))
    if ln:
        dbeta.fill_(float("nan"))
    ours(0)
    ref = torch_bwd(0)
    torch.cuda.synchronize()
    diff = max_diff(dxs[0], ref[0])
    diff_dgamma = max_diff(dgamma, ref[1])
    diff_dbeta = max_diff(dbeta, ref[2]) if ln else None
    quack = {}
    if quack_wanted(op, dtype, rows, cols):
        quack = quack_setup(B, op, lambda qr: quack_backward(qr, ln, w, b, xs, dys),
                            lambda out: {"max_abs_diff_quack_vs_torch": max_diff(out[0], ref[0]),
                                         "max_abs_diff_quack_dgamma_vs_torch": max_diff(out[1], ref[1])})
    ref = None  # PyTorch's outputs freed (the checks above, run already, read it)

    reps = B.reps_for(dtype, rows, cols, n_sets, moved)
    us = time_graph(ours, n_sets, reps)
    torch_us = time_graph(torch_bwd, n_sets, reps, setup=torch_setup, who="torch")
    row = row_common(B, op, dtype, rows, cols, moved, us, torch_us)
    row["torch_impl"] = torch_impl
    quack_time(B, row, quack, n_sets, reps, us, moved)
    if quack_wanted(op, dtype, rows, cols):
        row["torch_kernel"] = torch_kernel(lambda: torch_bwd(0))
    add_cudnn(B, row, "layernorm" if ln else "rmsnorm", "bwd", esize)
    row["max_abs_diff_vs_torch"] = diff
    row["max_abs_diff_dgamma_vs_torch"] = diff_dgamma
    if ln:
        row["max_abs_diff_dbeta_vs_torch"] = diff_dbeta
    row["buffer_sets"] = n_sets
    return row


# ---------------------------------------------------------------------------
# Liger-Kernel beside ours
# ---------------------------------------------------------------------------
def liger_setup(B: Bench, ln: bool, w, b, make_launch, check, forward_only: bool, with_llama=False) -> dict:
    """Runs Liger once on set 0 and checks it against torch (check(output) ->
    max |difference|); returns what liger_time needs ({"launch",
    "llama_launch", "impl", "diff"}), or {"note": why not}
    when Liger is absent or fails: the row then says so and carries no Liger
    figure. make_launch(f) turns Liger's x -> y into the launch(i) that
    time_graph captures."""
    if B.liger is None:
        return {"note": B.liger_note}
    try:
        launch = make_launch(liger_forward(B, ln, w, b))
        if forward_only:
            launch = no_grad(launch)
        out = launch(0)
        torch.cuda.synchronize()
        res = {"launch": launch, "impl": liger_impl(B, ln), "diff": check(out)}
        del out
        if with_llama:
            llama = make_launch(liger_forward(B, ln, w, b, casting="llama"))
            res["llama_launch"] = no_grad(llama) if forward_only else llama
        return res
    except Exception as e:  # noqa: BLE001 - Liger's failure is a note on our row, not our error
        print(f"  liger failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
        return {"note": f"liger_kernel failed here ({type(e).__name__}: {str(e)[:200]})"}


def no_grad(launch):
    def f(i):
        with torch.no_grad():
            return launch(i)
    return f


def liger_time(row: dict, liger: dict, n_sets: int, reps: int, us: float) -> None:
    """Times what liger_setup prepared (same graphs, same sets, same reps as
    ours) and fills liger_us / vs_liger, or liger_note."""
    if not liger:
        return
    row["liger_us"] = row["vs_liger"] = None
    if "note" in liger:
        row["liger_note"] = liger["note"]
        return
    try:
        liger_us = time_graph(liger["launch"], n_sets, reps, who="liger")
        if "llama_launch" in liger:
            row["liger_llama_us"] = round(time_graph(liger["llama_launch"], n_sets, reps, who="liger_llama"), 2)
    except Exception as e:  # noqa: BLE001
        print(f"  liger timing failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
        row["liger_note"] = f"liger_kernel failed in timing ({type(e).__name__}: {str(e)[:200]})"
        return
    row["liger_us"] = round(liger_us, 2)
    row["vs_liger"] = round(liger_us / us, 3)
    row["liger_impl"] = liger["impl"]
    row["max_abs_diff_liger_vs_torch"] = liger["diff"]


# ---------------------------------------------------------------------------
# QuACK beside ours
# ---------------------------------------------------------------------------
# What each row times of QuACK's (quack.rmsnorm, version in quack_impl). Its
# LayerNorm forward takes fp32 γ and β only: they are fp32 copies of ours
# (the same values; γ/β bytes are not counted). Its backward returns dγ (dβ)
# as the sum of fp32 per-CTA partials, the sum a torch kernel inside its call.
QUACK_IMPL = {
    "rmsnorm_fwd": "quack.rmsnorm.rmsnorm_fwd(store_rstd=True)",
    "layernorm_fwd": "quack.rmsnorm.layernorm_fwd(return_rstd=True, return_mean=True), fp32 gamma/beta",
    "rmsnorm_bwd": "quack.rmsnorm.rmsnorm_bwd (dx, dgamma), rstd from its rmsnorm_fwd",
    "layernorm_bwd": "quack.rmsnorm.layernorm_bwd(has_bias=True) (dx, dgamma, dbeta), fp32 gamma, "
                     "rstd/mean from its layernorm_fwd",
    "rmsnorm_fwd_bwd": "autograd(quack.rmsnorm.rmsnorm)",
    "layernorm_fwd_bwd": "quack.rmsnorm.layernorm_fwd + layernorm_bwd (0.6.5 has no LayerNorm autograd "
                         "function), fp32 gamma/beta",
}


def quack_forward(qr, ln: bool, w, b, x_of):
    """launch(i) -> (y, statistics...): QuACK's forward of x_of(i), writing
    the statistics as ours does (the training forward)."""
    if ln:
        w32, b32 = w.float(), b.float()
        return lambda i: qr.layernorm_fwd(x_of(i), w32, b32, eps=EPS, return_rstd=True, return_mean=True)
    return lambda i: qr.rmsnorm_fwd(x_of(i), w, eps=EPS, store_rstd=True)


def quack_backward(qr, ln: bool, w, b, xs, dys):
    """launch(i) -> (dx, dgamma, ...) from the statistics of QuACK's own
    forward (made here, outside the timing, as PyTorch's are)."""
    n = len(xs)
    if ln:
        w32, b32 = w.float(), b.float()
        stats = [qr.layernorm_fwd(x, w32, b32, eps=EPS, return_rstd=True, return_mean=True)[1:] for x in xs]
        return lambda i: qr.layernorm_bwd(xs[i % n], w32, dys[i % n], *stats[i % n], has_bias=True)
    rstds = [qr.rmsnorm_fwd(x, w, eps=EPS, store_rstd=True)[2] for x in xs]
    return lambda i: qr.rmsnorm_bwd(xs[i % n], w, dys[i % n], rstds[i % n])


def quack_setup(B: Bench, op: str, make_launch, check) -> dict:
    """make_launch(quack.rmsnorm) -> launch(i); runs it once on set 0 (where
    QuACK JIT-compiles the shape's kernels, outside the timing) and checks it
    (check(output) -> {field: max |difference| against PyTorch}). Returns
    what quack_time needs, or {"note": why not}: QuACK absent, refusing the
    shape or failing is a note on our row, never a figure."""
    if B.quack is None:
        return {"note": B.quack_note}
    qr, version = B.quack
    try:
        launch = make_launch(qr)
        out = launch(0)
        torch.cuda.synchronize()
        res = {"launch": launch, "impl": f"quack-kernels {version} {QUACK_IMPL[op]}", "diffs": check(out)}
        del out
        return res
    except Exception as e:  # noqa: BLE001
        print(f"  quack failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
        return {"note": f"quack failed here ({type(e).__name__}: {str(e)[:200]})"}


def quack_time(B: Bench, row: dict, quack: dict, n_sets: int, reps: int, us: float, moved: int) -> None:
    """Times what quack_setup prepared (same graphs, sets and reps as ours)
    and fills quack_us / vs_quack (QuACK µs / our µs, as vs_liger), or
    quack_note."""
    if not quack:
        return
    row["quack_us"] = row["vs_quack"] = None
    if "note" in quack:
        row["quack_note"] = quack["note"]
        return
    try:
        quack_us = time_graph(quack["launch"], n_sets, reps, who="quack")
    except Exception as e:  # noqa: BLE001
        print(f"  quack timing failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
        row["quack_note"] = f"quack failed in timing ({type(e).__name__}: {str(e)[:200]})"
        return
    # Faster than the copy of the same bytes would mean the graph did not
    # hold QuACK's kernels (launched on a stream other than the captured
    # one, say): no figure then. (ab_norm.py times one column at a time and
    # stubs the others: its rows carry this note.)
    if moved / (quack_us * 1e-6) > 1.05 * B.copy_gbps * 1e9:
        row["quack_note"] = (f"QuACK's graph replayed in {quack_us:.2f} us per launch, faster than the copy "
                             "of the same bytes: not its kernels' time, no figure")
        return
    row["quack_us"] = round(quack_us, 2)
    row["vs_quack"] = round(quack_us / us, 3)
    row["quack_impl"] = quack["impl"]
    row.update(quack["diffs"])


def torch_kernel(f) -> str:
    """The CUDA kernels one call of f (PyTorch's side of a row) launches, by
    torch.profiler, after the timing: names cut before their template and
    argument lists, in launch order, each once."""
    from torch.profiler import ProfilerActivity, profile
    try:
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            out = f()
            torch.cuda.synchronize()
        del out
        names = []
        for e in prof.events():
            if e.device_type != torch.autograd.DeviceType.CUDA:
                continue
            name = re.sub(r"^void |\(anonymous namespace\)::", "", e.name)
            name = re.split(r"[<(]", name, maxsplit=1)[0].strip()[:120]
            if name and name not in names:
                names.append(name)
        return "; ".join(names) or "(no CUDA kernel recorded)"
    except Exception as e:  # noqa: BLE001 - the profiler's failure is a note, not the row's
        return f"(torch.profiler failed: {type(e).__name__}: {str(e)[:120]})"


# ---------------------------------------------------------------------------
# Forward + backward: rmsnorm_fwd_bwd, layernorm_fwd_bwd (one training step
# of the norm, both launches in one graph)
# ---------------------------------------------------------------------------
def bench_fwd_bwd(B: Bench, op: str, dtype: str, rows: int, cols: int) -> dict:
    ln = op == "layernorm_fwd_bwd"
    tdt = TORCH_DTYPES[dtype]
    esize = torch.empty((), dtype=tdt).element_size()
    moved = TENSORS_MOVED[op] * rows * cols * esize
    n_sets = B.n_sets(moved)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(2468 + cols)
    xs = rand_sets(n_sets, rows, cols, tdt, gen, "x")
    dys = rand_sets(n_sets, rows, cols, tdt, gen, "dy")
    ys = [torch.empty_like(x) for x in xs]
    dxs = [torch.empty_like(x) for x in xs]
    means = [torch.empty(rows, device="cuda") for _ in range(n_sets)] if ln else [None] * n_sets
    rstds = [torch.empty(rows, device="cuda") for _ in range(n_sets)]
    w, b = params(cols, tdt, gen)
    if not ln:
        b = None
    dgamma = torch.empty_like(w)
    dbeta = torch.empty_like(w) if ln else None

    xd = fn.TensorDesc(FN_DTYPES[dtype], [rows, cols])
    wd = fn.TensorDesc(FN_DTYPES[dtype], [cols])
    nd = fn.NormDesc(fn.NormMode.LAYERNORM if ln else fn.NormMode.RMSNORM, -1, EPS)
    fws_bytes = fn.norm_fwd_workspace_size(B.handle, nd, xd, xd)
    bws_bytes = fn.norm_bwd_workspace_size(B.handle, nd, xd, wd)
    fws = torch.empty(fws_bytes, dtype=torch.uint8, device="cuda") if fws_bytes else None
    bws = torch.empty(bws_bytes, dtype=torch.uint8, device="cuda") if bws_bytes else None
    ptr = lambda t: t.data_ptr() if t is not None else None  # noqa: E731

    def ours(i):
        k = i % n_sets
        stream = torch.cuda.current_stream().cuda_stream
        fn.check(fn.lib.fnorm_norm_fwd(B.handle.ptr, stream, nd.ptr, xd.ptr, xs[k].data_ptr(), None, None,
                                       wd.ptr, w.data_ptr(), ptr(b), xd.ptr, ys[k].data_ptr(), ptr(means[k]),
                                       rstds[k].data_ptr(), ptr(fws), fws_bytes))
        fn.check(fn.lib.fnorm_norm_bwd(B.handle.ptr, stream, nd.ptr, xd.ptr, xs[k].data_ptr(), xd.ptr,
                                       dys[k].data_ptr(), ptr(means[k]), rstds[k].data_ptr(), wd.ptr,
                                       w.data_ptr(), None, xd.ptr, dxs[k].data_ptr(), dgamma.data_ptr(),
                                       ptr(dbeta), ptr(bws), bws_bytes))

    # PyTorch and Liger: autograd of the forward, gradients for x and the
    # parameters (what ours computes), y kept alive as training keeps it.
    xr = [x.detach().requires_grad_(True) for x in xs]
    wr = w.detach().requires_grad_(True)
    br = b.detach().requires_grad_(True) if ln else None
    prm = (wr, br) if ln else (wr,)

    def step(forward, grads):
        def f(i):
            k = i % n_sets
            y = forward(xr[k])
            return (y,) + torch.autograd.grad(y, (xr[k],) + prm, grads[k])
        return f

    if ln:
        torch_step = step(lambda x: F.layer_norm(x, (cols,), wr, br, EPS), dys)
    else:
        torch_step = step(lambda x: F.rms_norm(x, (cols,), wr, EPS), dys)

    # Correctness beside PyTorch (outputs poisoned first).
    for t in (ys[0], dxs[0], dgamma) + ((dbeta,) if ln else ()):
        t.fill_(float("nan"))
    ours(0)
    ref = torch_step(0)
    torch.cuda.synchronize()
    diff = max_diff(dxs[0], ref[1])
    diff_y = max_diff(ys[0], ref[0])
    diff_dgamma = max_diff(dgamma, ref[2])
    diff_dbeta = max_diff(dbeta, ref[3]) if ln else None

    liger = {}
    if liger_wanted(op, dtype, rows, cols):
        # Liger's RMSNorm backward writes dx over dy (in_place, its module's
        # default): its own copies of dy, so ours and torch's stay intact.
        ldys = dys if ln else [d.clone() for d in dys]
        liger = liger_setup(B, ln, wr, br, lambda f: step(f, ldys),
                            lambda out: max(max_diff(out[0], ref[0]), max_diff(out[1], ref[1])),
                            forward_only=False)
    quack = {}
    if quack_wanted(op, dtype, rows, cols):
        if ln:
            def quack_step(qr):
                w32, b32 = w.float(), b.float()

                def f(i):
                    k = i % n_sets
                    y, rstd, mean = qr.layernorm_fwd(xs[k], w32, b32, eps=EPS, return_rstd=True, return_mean=True)
                    return (y,) + tuple(qr.layernorm_bwd(xs[k], w32, dys[k], rstd, mean, has_bias=True))
                return f
        else:
            def quack_step(qr):
                return step(lambda x: qr.rmsnorm(x, wr, eps=EPS), dys)
        quack = quack_setup(B, op, quack_step,
                            lambda out: {"max_abs_diff_quack_vs_torch": max(max_diff(out[0], ref[0]),
                                                                            max_diff(out[1], ref[1])),
                                         "max_abs_diff_quack_dgamma_vs_torch": max_diff(out[2], ref[2])})
    ref = None  # PyTorch's outputs freed (the checks above, run already, read it)

    reps = B.reps_for(dtype, rows, cols, n_sets, moved)
    us = time_graph(ours, n_sets, reps)
    torch_us = time_graph(torch_step, n_sets, reps, who="torch")
    row = row_common(B, op, dtype, rows, cols, moved, us, torch_us)
    row["torch_impl"] = "autograd(F.layer_norm)" if ln else "autograd(F.rms_norm)"
    liger_time(row, liger, n_sets, reps, us)
    quack_time(B, row, quack, n_sets, reps, us, moved)
    if quack_wanted(op, dtype, rows, cols):
        row["torch_kernel"] = torch_kernel(lambda: torch_step(0))
    row["max_abs_diff_vs_torch"] = diff
    row["max_abs_diff_y_vs_torch"] = diff_y
    row["max_abs_diff_dgamma_vs_torch"] = diff_dgamma
    if ln:
        row["max_abs_diff_dbeta_vs_torch"] = diff_dbeta
    row["buffer_sets"] = n_sets
    return row


def row_common(B: Bench, op, dtype, rows, cols, moved, us, torch_us) -> dict:
    gbps = moved / (us * 1e-6) / 1e9
    return {
        "op": op, "dtype": dtype, "shape": [rows, cols],
        "us": round(us, 2), "gbps": round(gbps, 1), "pct_copy": round(100 * gbps / B.copy_gbps, 1),
        "torch_us": round(torch_us, 2), "vs_torch": round(torch_us / us, 3),
        "oneflow_us": None, "vs_oneflow": None, "cudnn_us": None, "vs_cudnn": None,
        # Which set of shapes the row belongs to (for the charts; a row may be in both).
        "grid": in_grid(dtype, rows, cols), "llm_shape": dtype == "bf16" and (rows, cols) in LIGER_SHAPES,
    }


def add_cudnn(B: Bench, row: dict, norm: str, direction: str, esize: int) -> None:
    rows, cols = row["shape"]
    pub = CUDNN_H200_BF16_TBPS.get((norm, rows, cols))
    if pub is None or row["dtype"] != "bf16":
        return
    tbps = pub[0] if direction == "fwd" else pub[1]
    nbytes = cudnn_bytes(norm, direction, rows, cols, esize)
    row["cudnn_published_tbps"] = tbps
    row["tbps_cudnn_bytes"] = round(nbytes / (row["us"] * 1e-6) / 1e12, 3)
    if B.gpu == "h200":  # the published figure is an H200's
        cudnn_us = nbytes / (tbps * 1e12) * 1e6
        row["cudnn_us"] = round(cudnn_us, 2)
        row["vs_cudnn"] = round(cudnn_us / row["us"], 3)


# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------
def markdown(result: dict) -> str:
    lines = [f"# LayerNorm / RMSNorm on {result['gpu_name']} ({result['date']}, PyTorch {result['torch']})", "",
             f"Copy bandwidth measured in the same run: {result['copy_gbps']:.0f} GB/s (read + write).",
             "Times: median µs per launch, CUDA-graph replay, inputs rotated over > 8x L2. GB/s and % copy "
             "count the bytes stated per op. vs X = X µs / our µs (above 1: we are faster). OneFlow: "
             "design.md §7 anchor (H200), not measured here. cuDNN: cuDNN 9.19.1's published H200 TB/s for "
             "that shape; 'ours TB/s (cuDNN bytes)' counts bytes as it does (parameters and statistics too), "
             "and cuDNN µs is its byte count over its TB/s. Liger: Liger-Kernel's Triton norms timed in this run "
             "the same way (RMSNorm in its casting mode that computes our function; 'Liger llama µs' is its "
             "default mode, which rounds x·rstd before ×γ). fwd_bwd ops: the forward then its backward in one "
             "graph (ours: the two C calls; PyTorch and Liger: autograd, dx and the parameter gradients). QuACK: "
             "quack-kernels' CuTe-DSL norms timed the same way (its entry points per op in quack_impl; "
             "forward+backward: autograd of its RMSNorm, its LayerNorm forward then backward).", ""]
    if result.get("partial"):
        lines += [f"**Partial run**: {result['partial']} (the run was cut short).", ""]
    if any(r.get("liger_note") for r in result["rows"]):
        lines += [f"Liger-Kernel: {next(r['liger_note'] for r in result['rows'] if r.get('liger_note'))}; "
                  "rows that would carry it show —.", ""]
    if any(r.get("quack_note") for r in result["rows"]):
        lines += [f"QuACK: {next(r['quack_note'] for r in result['rows'] if r.get('quack_note'))}; "
                  "rows that would carry it show —.", ""]
    for op in OPS:
        rows = [r for r in result["rows"] if r["op"] == op]
        if not rows:
            continue
        has = lambda k: any(r.get(k) is not None for r in rows)  # noqa: E731
        cols = [("dtype", lambda r: r["dtype"]),
                ("shape", lambda r: f"{r['shape'][0]}×{r['shape'][1]}"),
                ("ours µs", lambda r: f"{r['us']:.1f}"),
                ("GB/s", lambda r: f"{r['gbps']:.0f}"),
                ("% copy", lambda r: f"{r['pct_copy']:.0f}%"),
                ("PyTorch µs", lambda r: f"{r['torch_us']:.1f}"),
                ("vs PyTorch", lambda r: f"{r['vs_torch']:.2f}x")]
        if has("unfused_us"):
            cols += [("unfused (add + ours) µs", lambda r: f"{r['unfused_us']:.1f}"),
                     ("vs unfused", lambda r: f"{r['vs_unfused']:.2f}x")]
        if has("oneflow_us"):
            cols += [("OneFlow µs", lambda r: f"{r['oneflow_us']}" if r.get("oneflow_us") else "—"),
                     ("vs OneFlow", lambda r: f"{r['vs_oneflow']:.2f}x" if r.get("vs_oneflow") else "—")]
        if has("cudnn_published_tbps"):
            cols += [("cuDNN TB/s (published)",
                      lambda r: f"{r['cudnn_published_tbps']}" if r.get("cudnn_published_tbps") else "—"),
                     ("ours TB/s (cuDNN bytes)",
                      lambda r: f"{r['tbps_cudnn_bytes']:.2f}" if r.get("tbps_cudnn_bytes") else "—"),
                     ("vs cuDNN", lambda r: f"{r['vs_cudnn']:.2f}x" if r.get("vs_cudnn") else "—")]
        if has("liger_us") or any(r.get("liger_note") for r in rows):
            cols += [("Liger µs", lambda r: fmt(r.get("liger_us"), "{:.1f}")),
                     ("vs Liger", lambda r: fmt(r.get("vs_liger"), "{:.2f}x"))]
        if has("liger_llama_us"):
            cols += [("Liger llama µs", lambda r: fmt(r.get("liger_llama_us"), "{:.1f}"))]
        if has("quack_us") or any(r.get("quack_note") for r in rows):
            cols += [("QuACK µs", lambda r: fmt(r.get("quack_us"), "{:.1f}")),
                     ("vs QuACK", lambda r: fmt(r.get("vs_quack"), "{:.2f}x"))]
        cols += [("max abs diff vs PyTorch", lambda r: f"{r['max_abs_diff_vs_torch']:.2g}")]
        if has("max_abs_diff_liger_vs_torch"):
            cols += [("Liger diff vs PyTorch", lambda r: fmt(r.get("max_abs_diff_liger_vs_torch"), "{:.2g}"))]
        if has("max_abs_diff_quack_vs_torch"):
            cols += [("QuACK diff vs PyTorch", lambda r: fmt(r.get("max_abs_diff_quack_vs_torch"), "{:.2g}"))]
        if has("max_abs_diff_dgamma_vs_torch"):
            cols += [("dγ max abs diff", lambda r: f"{r['max_abs_diff_dgamma_vs_torch']:.2g}")]
        kernels = sorted({r["torch_kernel"] for r in rows if r.get("torch_kernel")})
        ran = (" PyTorch's kernels (torch.profiler, one call): " + " / ".join(f"`{k}`" for k in kernels) + "."
               if kernels else "")
        impls = sorted({r["quack_impl"] for r in rows if r.get("quack_impl")})
        quack_ran = " QuACK: " + " / ".join(f"`{i}`" for i in impls) + "." if impls else ""
        lines += [f"## {op}", "", f"Bytes counted: {BYTES[op]}. PyTorch: `{rows[0].get('torch_impl', '')}`."
                  + ran + quack_ran, "",
                  "| " + " | ".join(c[0] for c in cols) + " |",
                  "|" + "---|" * len(cols)]
        lines += ["| " + " | ".join(f(r) for _, f in cols) + " |" for r in rows]
        lines.append("")
    if result.get("errors"):
        lines += ["## Errors", ""] + [f"- {e['op']} {e['dtype']} {e['shape'][0]}×{e['shape'][1]}: {e['error']}"
                                      for e in result["errors"]] + [""]
    return "\n".join(lines)


def fmt(v, f: str) -> str:
    return "—" if v is None else f.format(v)


def summary(r: dict) -> str:
    s = (f"{r['op']} {r['dtype']} {r['shape'][0]}x{r['shape'][1]}: {r['us']:.1f} us, {r['gbps']:.0f} GB/s "
         f"({r['pct_copy']:.0f}% copy), torch {r['torch_us']:.1f} us ({r['vs_torch']:.2f}x)")
    if r.get("unfused_us") is not None:
        s += f", unfused {r['unfused_us']:.1f} us ({r['vs_unfused']:.2f}x)"
    if r.get("oneflow_us") is not None:
        s += f", oneflow {r['oneflow_us']} ({r['vs_oneflow']:.2f}x)"
    if r.get("cudnn_published_tbps") is not None:
        s += f", {r['tbps_cudnn_bytes']:.2f} TB/s cuDNN-bytes vs cuDNN {r['cudnn_published_tbps']}"
    if r.get("liger_us") is not None:
        s += f", liger {r['liger_us']:.1f} us ({r['vs_liger']:.2f}x)"
        if r.get("liger_llama_us") is not None:
            s += f" [llama mode {r['liger_llama_us']:.1f}]"
    elif r.get("liger_note"):
        s += f", liger: {r['liger_note'][:60]}"
    if r.get("quack_us") is not None:
        s += f", quack {r['quack_us']:.1f} us ({r['vs_quack']:.2f}x)"
    elif r.get("quack_note"):
        s += f", quack: {r['quack_note'][:60]}"
    return s + f", diff {r['max_abs_diff_vs_torch']:.2g}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true", help="every third shape of each op, fewer repetitions")
    ap.add_argument("--grid", action="store_true", help="only the training-shape grid (GRID_*)")
    ap.add_argument("--no-quack", action="store_true", help="leave QuACK out even where it is importable")
    ap.add_argument("--ops", default=",".join(OPS), help=f"comma-separated subset of {','.join(OPS)}")
    ap.add_argument("--shapes", default="", help="comma-separated subset of shapes: COLS or ROWSxCOLS, optionally DTYPE:...")
    args = ap.parse_args()
    wanted = [w.strip() for w in args.shapes.split(",") if w.strip()]

    def shape_wanted(dt: str, r: int, c: int) -> bool:
        if not wanted:
            return True
        for w in wanted:
            wdt, _, shape = w.rpartition(":")
            if wdt and wdt != dt:
                continue
            if shape == str(c) or shape == f"{r}x{c}":
                return True
        return False

    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    unknown = [o for o in ops if o not in OPS]
    if unknown:
        ap.error(f"unknown op(s) {unknown}; choose from {list(OPS)}")
    os.makedirs(args.out, exist_ok=True)
    B = Bench(reps=10 if args.quick else 30, with_quack=not args.no_quack)
    print(f"{B.name}: copy {B.copy_gbps:.0f} GB/s, L2 {B.l2 >> 20} MiB, torch {torch.__version__}, "
          f"quack {B.quack[1] if B.quack else B.quack_note}", flush=True)
    rows, errors = [], []
    todo = [(op, dt, r, c) for op, dt, r, c in plan(args.quick, args.grid) if op in ops and shape_wanted(dt, r, c)]
    # A shape given in full (DTYPE:ROWSxCOLS) runs for every op asked even
    # when the plan does not hold it.
    for w in wanted:
        m = re.fullmatch(r"(fp32|fp16|bf16):(\d+)x(\d+)", w)
        for op in ops if m else ():
            case = (op, m.group(1), int(m.group(2)), int(m.group(3)))
            if case not in todo:
                todo.append(case)
    t_start = time.time()

    def save(final: bool) -> dict:
        # Written after every op's last shape too, so that a run cut short
        # (a device call's time limit) keeps the rows it measured.
        result = {"gpu": B.gpu, "gpu_name": B.name, "date": datetime.date.today().isoformat(),
                  "copy_gbps": round(B.copy_gbps, 1), "torch": torch.__version__,
                  "bytes_counted": {op: BYTES[op] for op in OPS}, "rows": rows}
        if errors:
            result["errors"] = errors
        if not final:
            result["partial"] = f"{len(rows) + len(errors)} of {len(todo)} cases"
        with open(os.path.join(args.out, f"{B.gpu}.json"), "w") as f:
            json.dump(result, f, indent=1)
        with open(os.path.join(args.out, f"{B.gpu}.md"), "w") as f:
            f.write(markdown(result))
        return result

    for i, (op, dt, r, c) in enumerate(todo):
        try:
            bench = bench_fwd_bwd if op.endswith("_fwd_bwd") else bench_bwd if op.endswith("_bwd") else bench_fwd
            row = bench(B, op, dt, r, c)
            rows.append(row)
            print(summary(row), flush=True)
        except Exception as e:  # noqa: BLE001 - record it, go on with the other shapes
            errors.append({"op": op, "dtype": dt, "shape": [r, c], "error": f"{type(e).__name__}: {e}"})
            print(f"ERROR {op} {dt} {r}x{c}: {type(e).__name__}: {e}", flush=True)
        gc.collect()
        torch.cuda.empty_cache()
        if i + 1 < len(todo) and todo[i + 1][0] != op:
            save(final=False)
    print(f"{len(todo)} cases in {time.time() - t_start:.0f} s", flush=True)
    print(markdown(save(final=True)))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
