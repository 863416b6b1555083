#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Fully-connected layer benchmark: libfusednorm (cuBLASLt with fused
epilogues) beside PyTorch and the unfused baselines, in one run.

Ops (shared/design.md §6): linear_fwd, linear_bwd; shape key [m, n, k];
epilogue bias / bias_relu / bias_gelu. The seed's five shapes, m = 8192,
(n, k) = (1024, 784), (1024, 1024), (512, 1024), (256, 512), (1, 256);
fp16 and fp32 (fp32 without TF32, as PyTorch's default); W stored [n, k]
as torch.nn.Linear holds it.

What each row times (median µs per launch):
- linear_fwd bias: ours (BIAS epilogue); gemm_alone (ours with NONE: the
  cuBLASLt GEMM without bias; vs_gemm_alone = its µs / ours);
  gemm_then_bias (that GEMM, then PyTorch's y += b: the seed's first method);
  torch (F.linear).
- linear_fwd bias_relu / bias_gelu: ours in training (with the aux output
  backward needs; us) and in inference (us_no_aux); torch = F.linear then
  F.relu / F.gelu(approximate="tanh") (torch_unfused_us, the issue's
  baseline); torch_fused_us = torch._addmm_activation, PyTorch's own
  cuBLASLt RELU_BIAS / GELU_BIAS (inference only).
- linear_bwd: ours computes dx, dw and db (and the activation's derivative
  from the aux); torch = autograd of the same forward (torch.autograd.grad
  of y w.r.t. x, w, b), only the backward timed.

Method as bench_layernorm.py (bench/README.md): CUDA-graph replays timed with
CUDA events, median; every graph cycles through buffer sets (x, y, dy, aux;
W and b are shared, as a layer's parameters are) covering 8x the L2.
gbps / pct_copy are null (GEMMs are not bandwidth-bound); tflops counts
2mnk (forward) or 4mnk (backward: dx and dw).

Usage: bench_linear.py --out DIR [--quick]   (FNORM_LIB selects the library)
Writes DIR/rows_linear.json = {"gpu": ..., "rows": [...]} and prints a table.
"""
from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bindings", "python"))
sys.path.insert(0, HERE)
import fusednorm as fn  # noqa: E402
from fusednorm import linear as fl  # noqa: E402
from bench_layernorm import copy_bandwidth_gbps, gpu_tag, time_graph  # noqa: E402

SEED_SHAPES = [(8192, 1024, 784), (8192, 1024, 1024), (8192, 512, 1024), (8192, 256, 512), (8192, 1, 256)]
TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
FN_DTYPES = {"fp32": fn.DType.FLOAT32, "fp16": fn.DType.FLOAT16, "bf16": fn.DType.BFLOAT16}
EPILOGUES = {"bias": fl.LinearEpilogue.BIAS, "bias_relu": fl.LinearEpilogue.BIAS_RELU,
             "bias_gelu": fl.LinearEpilogue.BIAS_GELU}
ACTS = {"bias": None, "bias_relu": "relu", "bias_gelu": "gelu"}


def torch_act(act, y):
    if act == "relu":
        return F.relu(y)
    if act == "gelu":
        return F.gelu(y, approximate="tanh")
    return y


class Bench:
    def __init__(self, reps: int):
        props = torch.cuda.get_device_properties(0)
        self.name = props.name
        self.gpu = gpu_tag(props.name)
        self.l2 = getattr(props, "L2_cache_size", 50 << 20)
        self.copy_gbps = copy_bandwidth_gbps()
        self.max_reps = reps
        self.handle = fn._handle_for(torch.cuda.current_device())
        # Start autograd's device thread (and its cuBLAS context) now, not
        # inside the first captured backward.
        a = torch.ones(8, 8, device="cuda", requires_grad=True)
        torch.autograd.grad(F.linear(a, a).sum(), a)
        torch.cuda.synchronize()
        self.stream_ptr = lambda: torch.cuda.current_stream().cuda_stream  # noqa: E731

    def n_sets(self, set_bytes: int) -> int:
        return max(2, min(64, math.ceil(8 * self.l2 / set_bytes)))

    def reps(self, n_sets: int, est_us: float) -> int:
        # ~0.15 s of replays per graph.
        return max(10, min(self.max_reps, int(0.15e6 / max(n_sets * est_us, 1e-3))))


class Layer:
    """Buffers and descriptors for one (dtype, shape): n_sets of x, y, dy,
    dx, aux; one W, b, dW, db; our launches as bare C calls."""

    def __init__(self, B: Bench, dtype: str, m: int, n: int, k: int):
        self.B, self.dtype, self.m, self.n, self.k = B, dtype, m, n, k
        tdt = TORCH_DTYPES[dtype]
        es = torch.empty((), dtype=tdt).element_size()
        aux_max = m * ((n + 7) // 8 * 8) * es  # GELU's aux, the larger
        self.n_sets = B.n_sets((2 * m * k + 2 * m * n) * es + aux_max)
        g = torch.Generator(device="cuda")
        g.manual_seed(1000 + n + k)
        r = lambda *s: (torch.rand(*s, device="cuda", generator=g) * 2 - 1).to(tdt)  # noqa: E731
        self.xs = [r(m, k) for _ in range(self.n_sets)]
        self.dys = [r(m, n) for _ in range(self.n_sets)]
        self.ys = [torch.empty(m, n, dtype=tdt, device="cuda") for _ in range(self.n_sets)]
        self.dxs = [torch.empty(m, k, dtype=tdt, device="cuda") for _ in range(self.n_sets)]
        self.w = r(n, k)
        self.b = (r(n) * 0.5).contiguous()
        self.dw = torch.empty_like(self.w)
        self.db = torch.empty_like(self.b)
        fdt = FN_DTYPES[dtype]
        self.xd = fn.TensorDesc(fdt, [m, k])
        self.wd = fn.TensorDesc(fdt, [n, k])
        self.yd = fn.TensorDesc(fdt, [m, n])
        self.descs = {e: fl.LinearDesc(v, fl.WeightLayout.NK) for e, v in EPILOGUES.items()}
        self.descs["none"] = fl.LinearDesc(fl.LinearEpilogue.NONE, fl.WeightLayout.NK)
        h = B.handle
        self.ws_fwd = max(fl.linear_fwd_workspace_size(h, d, self.xd, self.wd, self.yd) for d in self.descs.values())
        self.ws_bwd = max(fl.linear_bwd_workspace_size(h, d, self.xd, self.wd, self.yd) for d in self.descs.values())
        self.ws = torch.empty(max(self.ws_fwd, self.ws_bwd), dtype=torch.uint8, device="cuda")
        self.aux_bytes = {e: fl.linear_aux_size(h, d, self.yd) for e, d in self.descs.items()}
        self.auxs = {e: [torch.empty(max(nb, 1), dtype=torch.uint8, device="cuda") for _ in range(self.n_sets)]
                     for e, nb in self.aux_bytes.items() if nb}

    def fwd(self, epi: str, i: int, with_aux: bool = True):
        d = self.descs[epi]
        aux = self.auxs[epi][i] if (with_aux and epi in self.auxs) else None
        fn.check(fn.lib.fnorm_linear_fwd(self.B.handle.ptr, self.B.stream_ptr(), d.ptr, self.xd.ptr,
                                         self.xs[i].data_ptr(), self.wd.ptr, self.w.data_ptr(),
                                         self.b.data_ptr() if epi != "none" else None, self.yd.ptr,
                                         self.ys[i].data_ptr(), aux.data_ptr() if aux is not None else None,
                                         self.aux_bytes[epi] if aux is not None else 0, self.ws.data_ptr(),
                                         self.ws.numel()))

    def bwd(self, epi: str, i: int):
        d = self.descs[epi]
        aux = self.auxs[epi][i] if epi in self.auxs else None
        fn.check(fn.lib.fnorm_linear_bwd(self.B.handle.ptr, self.B.stream_ptr(), d.ptr, self.xd.ptr,
                                         self.xs[i].data_ptr(), self.wd.ptr, self.w.data_ptr(), self.yd.ptr,
                                         self.dys[i].data_ptr(), aux.data_ptr() if aux is not None else None,
                                         self.aux_bytes[epi], None, None, 0, self.xd.ptr, self.dxs[i].data_ptr(),
                                         self.dw.data_ptr(), self.db.data_ptr(), None, self.ws.data_ptr(),
                                         self.ws.numel()))


def max_diff(a, b) -> float:
    d = (a.float() - b.float()).abs().max().item()
    if not math.isfinite(d):
        raise RuntimeError("non-finite output")
    return d


def bench_shape(B: Bench, dtype: str, m: int, n: int, k: int) -> list[dict]:
    L = Layer(B, dtype, m, n, k)
    S = L.n_sets
    rows = []
    fwd_flops, bwd_flops = 2 * m * n * k, 4 * m * n * k
    est = max(fwd_flops / 200e6, 5.0)  # µs, for the repetition count only
    reps = B.reps(S, est)

    def t(launch, setup=None):
        # A capture can fail once on first use of something in the process
        # (seen once for the first backward graph: "operation failed due to a
        # previous error during capture", H200, 2026-11-22); the failed graph
        # is discarded, so try that graph once more before giving up.
        try:
            return time_graph(launch, S, reps, setup=setup)
        except RuntimeError as e:
            print(f"  graph capture failed ({type(e).__name__}: {str(e).splitlines()[0]}); retrying once", flush=True)
            torch.cuda.synchronize()
            return time_graph(launch, S, reps, setup=setup)

    def common(op, epi, us, torch_us, flops):
        return {"op": op, "dtype": dtype, "shape": [m, n, k], "epilogue": epi, "layout": "nk",
                "us": round(us, 2), "gbps": None, "pct_copy": None, "tflops": round(flops / (us * 1e-6) / 1e12, 1),
                "torch_us": round(torch_us, 2), "vs_torch": round(torch_us / us, 3)}

    # ---- forward ----
    gemm_us = t(lambda i: L.fwd("none", i))

    def gemm_then_bias(i):
        L.fwd("none", i)
        L.ys[i].add_(L.b)
    gemm_bias_us = t(gemm_then_bias)
    for epi, act in ACTS.items():
        L.ys[0].fill_(float("nan"))
        L.fwd(epi, 0)
        ref = torch_act(act, F.linear(L.xs[0], L.w, L.b))
        torch.cuda.synchronize()
        diff = max_diff(L.ys[0], ref)
        us = t(lambda i, e=epi: L.fwd(e, i))
        torch_us = t(lambda i, a=act: torch_act(a, F.linear(L.xs[i], L.w, L.b)))
        row = common("linear_fwd", epi, us, torch_us, fwd_flops)
        row["gemm_alone_us"] = round(gemm_us, 2)
        if act is None:
            row["vs_gemm_alone"] = round(gemm_us / us, 3)
            row["gemm_then_bias_us"] = round(gemm_bias_us, 2)
            row["vs_gemm_then_bias"] = round(gemm_bias_us / us, 3)
            row["torch_impl"] = "F.linear"
        else:
            row["us_no_aux"] = round(t(lambda i, e=epi: L.fwd(e, i, with_aux=False)), 2)
            row["torch_unfused_us"] = row["torch_us"]
            row["torch_impl"] = f"F.linear, then {'F.relu' if act == 'relu' else 'F.gelu(approximate=tanh)'}"
            try:
                wt = L.w.t()
                fused = lambda i, g=(act == "gelu"): torch._addmm_activation(L.b, L.xs[i], wt, use_gelu=g)  # noqa
                fused(0)
                torch.cuda.synchronize()
                row["torch_fused_us"] = round(t(fused), 2)
                row["vs_torch_fused_no_aux"] = round(row["torch_fused_us"] / row["us_no_aux"], 3)
            except Exception as e:  # noqa: BLE001 - not in this build
                row["torch_fused_error"] = f"{type(e).__name__}: {e}"
        row["max_abs_diff_vs_torch"] = diff
        row["buffer_sets"] = S
        rows.append(row)
        print(summary(row), flush=True)

    # ---- backward ----
    for epi, act in ACTS.items():
        # Our aux comes from our forward; PyTorch's saved tensors from its own.
        for i in range(S):
            L.fwd(epi, i)
        # The reference, eager, with leaves of its own. The timed graphs use
        # leaves that only ever meet the capture stream: autograd binds a
        # leaf's gradient accumulation to the stream it first saw, and a
        # default-stream binding breaks the capture.
        x0, w0, b0 = (t.detach().requires_grad_(True) for t in (L.xs[0], L.w, L.b))
        ref = torch.autograd.grad(torch_act(act, F.linear(x0, w0, b0)), (x0, w0, b0), L.dys[0])
        wr = L.w.detach().requires_grad_(True)
        br = L.b.detach().requires_grad_(True)
        xrs = [x.detach().requires_grad_(True) for x in L.xs]
        yrs = []

        def forward(a=act):  # outside the timing, on the stream the graph is captured on
            yrs[:] = [torch_act(a, F.linear(xr, wr, br)) for xr in xrs]

        def torch_bwd(i):
            return torch.autograd.grad(yrs[i], (xrs[i], wr, br), L.dys[i], retain_graph=True)

        L.dxs[0].fill_(float("nan"))
        L.dw.fill_(float("nan"))
        L.db.fill_(float("nan"))
        L.bwd(epi, 0)
        torch.cuda.synchronize()
        diffs = [max_diff(L.dxs[0], ref[0]), max_diff(L.dw, ref[1]), max_diff(L.db, ref[2])]
        del ref
        us = t(lambda i, e=epi: L.bwd(e, i))
        torch_us = t(torch_bwd, setup=forward)
        row = common("linear_bwd", epi, us, torch_us, bwd_flops)
        row["torch_impl"] = f"autograd of {ACTS[epi] or 'no activation'} over F.linear (dx, dw, db)"
        row["max_abs_diff_vs_torch"] = diffs[0]
        row["max_abs_diff_dw_vs_torch"] = diffs[1]
        row["max_abs_diff_db_vs_torch"] = diffs[2]
        row["buffer_sets"] = S
        rows.append(row)
        print(summary(row), flush=True)
        del yrs
    return rows


def summary(r: dict) -> str:
    m, n, k = r["shape"]
    s = (f"{r['op']} {r['dtype']} {m}x{n}x{k} {r['epilogue']}: {r['us']:.1f} us ({r['tflops']} TFLOP/s), "
         f"torch {r['torch_us']:.1f} ({r['vs_torch']:.2f}x)")
    if r.get("vs_gemm_alone") is not None:
        s += (f", gemm alone {r['gemm_alone_us']:.1f} ({r['vs_gemm_alone']:.3f}x), gemm+bias "
              f"{r['gemm_then_bias_us']:.1f} ({r['vs_gemm_then_bias']:.2f}x)")
    if r.get("us_no_aux") is not None:
        s += f", no aux {r['us_no_aux']:.1f}"
    if r.get("torch_fused_us") is not None:
        s += f", torch fused {r['torch_fused_us']:.1f}"
    return s + f", diff {r['max_abs_diff_vs_torch']:.2g}"


def markdown(result: dict) -> str:
    lines = [f"# Fully-connected layer on {result['gpu_name']} ({result['date']}, PyTorch {result['torch']})", "",
             "µs: median per launch, CUDA-graph replay, inputs rotated over > 8x L2; W [n, k] (nn.Linear's layout). "
             "vs X = X µs / ours (above 1: we are faster).", ""]
    fwd = [r for r in result["rows"] if r["op"] == "linear_fwd"]
    bwd = [r for r in result["rows"] if r["op"] == "linear_bwd"]
    shape = lambda r: "×".join(str(v) for v in r["shape"])  # noqa: E731
    lines += ["## linear_fwd, bias", "",
              "| dtype | m×n×k | ours µs | TFLOP/s | GEMM alone µs | vs GEMM alone | GEMM + bias kernel µs | vs it | "
              "F.linear µs | vs torch |", "|" + "---|" * 10]
    for r in fwd:
        if r["epilogue"] == "bias":
            lines.append(f"| {r['dtype']} | {shape(r)} | {r['us']:.1f} | {r['tflops']} | {r['gemm_alone_us']:.1f} | "
                         f"{r['vs_gemm_alone']:.3f} | {r['gemm_then_bias_us']:.1f} | {r['vs_gemm_then_bias']:.2f} | "
                         f"{r['torch_us']:.1f} | {r['vs_torch']:.2f} |")
    lines += ["", "## linear_fwd, bias + activation", "",
              "| dtype | m×n×k | epilogue | ours µs (with aux) | ours µs (no aux) | torch linear + act µs | vs it | "
              "torch fused (_addmm_activation) µs |", "|" + "---|" * 8]
    for r in fwd:
        if r["epilogue"] != "bias":
            tf = f"{r['torch_fused_us']:.1f}" if r.get("torch_fused_us") is not None else "—"
            lines.append(f"| {r['dtype']} | {shape(r)} | {r['epilogue']} | {r['us']:.1f} | {r['us_no_aux']:.1f} | "
                         f"{r['torch_us']:.1f} | {r['vs_torch']:.2f} | {tf} |")
    lines += ["", "## linear_bwd (dx, dw, db)", "",
              "| dtype | m×n×k | epilogue | ours µs | TFLOP/s | torch autograd µs | vs torch |", "|" + "---|" * 7]
    for r in bwd:
        lines.append(f"| {r['dtype']} | {shape(r)} | {r['epilogue']} | {r['us']:.1f} | {r['tflops']} | "
                     f"{r['torch_us']:.1f} | {r['vs_torch']:.2f} |")
    if result.get("errors"):
        lines += ["", "## Errors", ""] + [f"- {e['dtype']} {e['shape']}: {e['error']}" for e in result["errors"]]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true", help="fp16 only, fewer repetitions")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 is fp32 on both sides
    B = Bench(reps=10 if args.quick else 30)
    print(f"{B.name}: copy {B.copy_gbps:.0f} GB/s, L2 {B.l2 >> 20} MiB, torch {torch.__version__}", flush=True)
    rows, errors = [], []
    for dtype in (("fp16",) if args.quick else ("fp16", "fp32")):
        for (m, n, k) in SEED_SHAPES:
            try:
                rows += bench_shape(B, dtype, m, n, k)
            except Exception as e:  # noqa: BLE001 - record it, go on with the other shapes
                errors.append({"dtype": dtype, "shape": [m, n, k], "error": f"{type(e).__name__}: {e}"})
                print(f"ERROR {dtype} {m}x{n}x{k}: {type(e).__name__}: {e}", flush=True)
            gc.collect()
            torch.cuda.empty_cache()
    result = {"gpu": B.gpu, "gpu_name": B.name, "date": datetime.date.today().isoformat(),
              "copy_gbps": round(B.copy_gbps, 1), "torch": torch.__version__, "rows": rows}
    if errors:
        result["errors"] = errors
    with open(os.path.join(args.out, "rows_linear.json"), "w") as f:
        json.dump(result, f, indent=1)
    text = markdown(result)
    with open(os.path.join(args.out, "rows_linear.md"), "w") as f:
        f.write(text)
    print(text)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
