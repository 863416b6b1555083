#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Quantized-output norm benchmark: fnorm_norm_fwd_quant beside PyTorch's
composition, eager and under torch.compile (Inductor fuses it into one
Triton kernel: the real anchor, shared/design.md §9), in one run.

Ops (row key `op`; `quant` = out dtype and scaling):
  rmsnorm_fwd_quant          RMSNorm, y in FP8 / INT8
  layernorm_fwd_quant        LayerNorm, y in FP8
  rmsnorm_residual_fwd_quant s = x + r written, RMSNorm(s) quantized
The composition PyTorch users write (and vLLM's reference): the norm in x's
dtype, then
  static:    (y.float() / scale).clamp(-M, M).to(fp8)
  per token: s = (y.abs().amax(-1, keepdim=True).float() / M).clamp(min=s_min),
             (y.float() / s).clamp(-M, M).to(fp8)   (INT8: .round().clamp(-127, 127))
torch.compile of the same function, the inputs' rows marked dynamic (one
compile per column count and variant; the columns, the reduction size, are
specialized as Inductor does for static shapes).

Bytes counted: read x (+ read r + write s) + write y at 1 byte per element
+ the per-token scales (4 bytes per row). gamma/beta and the static scale are
not counted.

Method as bench_layernorm.py: CUDA-graph replays (host cost out for all
three), CUDA events, median; buffer sets rotated past 8x L2; copy bandwidth
measured in the same run. Before timing, our codes are compared with the
eager composition's on the same input (`codes_differ`: the fraction that
differ; the composition rounds y to x's dtype before quantizing, the library
does not, so a few codes one step apart are expected).

Usage: bench_quant.py --out DIR [--quick]   (FNORM_LIB selects the library)
Writes DIR/rows_quant.json = {"gpu": ..., "rows": [...]} and DIR/rows_quant.md.
"""
from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bindings", "python"))
sys.path.insert(0, HERE)
import fusednorm as fn  # noqa: E402
from bench_layernorm import Bench, time_graph  # noqa: E402
from fusednorm.torch.quant import QUANT_MAX, _min_scale  # noqa: E402

EPS = 1e-6
BF16 = torch.bfloat16
QDTYPES = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2, "int8": torch.int8}
FN_QDTYPES = {"e4m3": fn.DType.FLOAT8_E4M3, "e5m2": fn.DType.FLOAT8_E5M2, "int8": fn.DType.INT8}
# The LLM grid of the shapes issue (bf16), and the 49152-row sweep at a few columns.
LLM_ROWS, LLM_COLS = (1024, 4096, 16384), (2048, 4096, 8192)
SWEEP_COLS = (4096, 8192)  # the grid's columns: no compile of its own


def plan(quick: bool):
    """(op, quant, per_token, rows, cols)."""
    out = []
    grid = [(r, c) for r in LLM_ROWS for c in LLM_COLS] + [(49152, c) for c in SWEEP_COLS]
    for r, c in grid:
        out.append(("rmsnorm_fwd_quant", "e4m3", False, r, c))
        out.append(("rmsnorm_fwd_quant", "e4m3", True, r, c))
    for r, c in ((4096, 4096), (16384, 4096)):
        out.append(("layernorm_fwd_quant", "e4m3", False, r, c))
        out.append(("rmsnorm_residual_fwd_quant", "e4m3", True, r, c))
        out.append(("rmsnorm_fwd_quant", "int8", True, r, c))
    return out[::3] if quick else out


def composition(op: str, quant: str, per_token: bool):
    """The PyTorch function (x, r, w, b, scale) -> outputs of the composition."""
    qdt = QDTYPES[quant]
    m = QUANT_MAX[qdt]
    floor = _min_scale(qdt)
    ln = op.startswith("layernorm")
    residual = "residual" in op

    def quantize(y, scale):
        outs = []
        if per_token:
            scale = (y.abs().amax(-1, keepdim=True).float() / m).clamp(min=floor)
            outs.append(scale)
        t = y.float() / scale
        q = t.round().clamp(-127, 127).to(qdt) if qdt == torch.int8 else t.clamp(-m, m).to(qdt)
        return [q] + outs

    def f(x, r, w, b, scale):
        s = x + r if residual else x
        cols = x.shape[-1]
        y = F.layer_norm(s, (cols,), w, b, EPS) if ln else F.rms_norm(s, (cols,), w, EPS)
        outs = quantize(y, scale)
        return tuple(outs + ([s] if residual else []))

    return f


_COMPILED = {}


def compiled(op, quant, per_token, cols):
    """One compiled function per (variant, columns); its inputs' rows are
    marked dynamic (bench_case), so other row counts reuse the compile. The
    columns, the reduction size, stay static as Inductor specializes them."""
    key = (op, quant, per_token, cols)
    if key not in _COMPILED:
        _COMPILED[key] = torch.compile(composition(op, quant, per_token))
    return _COMPILED[key]


def bench_case(B: Bench, op: str, quant: str, per_token: bool, rows: int, cols: int) -> dict:
    ln = op.startswith("layernorm")
    residual = "residual" in op
    qdt = QDTYPES[quant]
    moved = rows * cols * (2 + 1 + (4 if residual else 0)) + (4 * rows if per_token else 0)
    n_sets = B.n_sets(moved)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(28 + cols)
    xs = [torch.randn(rows, cols, device="cuda", dtype=BF16, generator=gen) * 2 + 1 for _ in range(n_sets)]
    rs = [torch.randn(rows, cols, device="cuda", dtype=BF16, generator=gen) for _ in range(n_sets)] if residual \
        else [None] * n_sets
    ss = [torch.empty_like(x) for x in xs] if residual else [None] * n_sets
    ys = [torch.empty(rows, cols, device="cuda", dtype=qdt) for _ in range(n_sets)]
    scales = [torch.empty(rows, device="cuda") for _ in range(n_sets)] if per_token else None
    w = (torch.rand(cols, device="cuda", generator=gen) + 0.5).to(BF16)
    b = (torch.rand(cols, device="cuda", generator=gen) - 0.5).to(BF16) if ln else None
    static = torch.tensor(6.0 / QUANT_MAX[qdt], device="cuda")

    xd = fn.TensorDesc(fn.DType.BFLOAT16, [rows, cols])
    yd = fn.TensorDesc(FN_QDTYPES[quant], [rows, cols])
    wd = fn.TensorDesc(fn.DType.BFLOAT16, [cols])
    nd = fn.NormDesc(fn.NormMode.LAYERNORM if ln else fn.NormMode.RMSNORM, -1, EPS)
    scaling = fn.QuantScaling.PER_TOKEN if per_token else fn.QuantScaling.PER_TENSOR
    ws_bytes = fn.norm_fwd_quant_workspace_size(B.handle, nd, xd, yd, scaling)
    ws = torch.empty(ws_bytes, dtype=torch.uint8, device="cuda") if ws_bytes else None
    ptr = lambda t: t.data_ptr() if t is not None else None  # noqa: E731

    def ours(i):
        k = i % n_sets
        sp = scales[k].data_ptr() if per_token else static.data_ptr()
        fn.check(fn.lib.fnorm_norm_fwd_quant(B.handle.ptr, torch.cuda.current_stream().cuda_stream, nd.ptr, xd.ptr,
                                             xs[k].data_ptr(), ptr(rs[k]), ptr(ss[k]), wd.ptr, w.data_ptr(), ptr(b),
                                             yd.ptr, ys[k].data_ptr(), int(scaling), sp, None, None, None, ptr(ws),
                                             ws_bytes))

    eager = composition(op, quant, per_token)
    comp = compiled(op, quant, per_token, cols)

    def torch_eager(i):
        k = i % n_sets
        return eager(xs[k], rs[k], w, b, static)

    def torch_compiled(i):
        k = i % n_sets
        return comp(xs[k], rs[k], w, b, static)

    # Codes beside the eager composition (ours first poisoned).
    ys[0].view(torch.uint8).fill_(0x7F)
    ours(0)
    ref = torch_eager(0)
    torch.cuda.synchronize()
    differ = (ys[0].view(torch.uint8) != ref[0].view(torch.uint8)).float().mean().item()
    far = (ys[0].float() - ref[0].float()).abs().max().item() if qdt == torch.int8 else None
    if per_token:
        sdiff = ((scales[0] - ref[1].squeeze(-1)).abs() / ref[1].squeeze(-1)).max().item()
    del ref

    reps = B.reps(n_sets, moved)
    for t in xs + [r for r in rs if r is not None]:
        torch._dynamo.mark_dynamic(t, 0)
    t0 = time.time()
    torch_compiled(0)  # compiles: once per columns and variant
    torch.cuda.synchronize()
    compile_s = time.time() - t0
    us = time_graph(ours, n_sets, reps)
    torch_us = time_graph(torch_eager, n_sets, reps)
    compile_us = time_graph(torch_compiled, n_sets, reps)
    gbps = moved / (us * 1e-6) / 1e9
    row = {"op": op, "dtype": "bf16", "quant": quant, "scaling": "per_token" if per_token else "per_tensor",
           "shape": [rows, cols], "us": round(us, 2), "gbps": round(gbps, 1),
           "pct_copy": round(100 * gbps / B.copy_gbps, 1), "torch_us": round(torch_us, 2),
           "vs_torch": round(torch_us / us, 3), "torch_compile_us": round(compile_us, 2),
           "vs_torch_compile": round(compile_us / us, 3),
           "compile_pct_copy": round(100 * moved / (compile_us * 1e-6) / 1e9 / B.copy_gbps, 1),
           "oneflow_us": None, "vs_oneflow": None, "cudnn_us": None, "vs_cudnn": None,
           "codes_differ": round(differ, 6), "buffer_sets": n_sets, "compile_s": round(compile_s, 1),
           "torch_impl": ("x + r, " if residual else "") + ("F.layer_norm" if ln else "F.rms_norm") +
                         (", per-token amax" if per_token else "") + ", divide, clamp, cast"}
    if per_token:
        row["scale_rel_diff"] = round(sdiff, 6)
    if far is not None:
        row["int8_max_code_diff"] = far
    return row


def markdown(result: dict) -> str:
    lines = [f"### Quantized outputs ({result['gpu_name']}, copy {result['copy_gbps']:.0f} GB/s, "
             f"torch {result['torch']}, bf16 in)", "",
             "| op | out | scaling | rows x cols | ours µs | % copy | eager µs | compiled µs | compiled % copy "
             "| vs eager | vs compiled | codes differ |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['op']} | {r['quant']} | {r['scaling']} | {r['shape'][0]} x {r['shape'][1]} | {r['us']} "
                     f"| {r['pct_copy']} | {r['torch_us']} | {r['torch_compile_us']} | {r['compile_pct_copy']} "
                     f"| {r['vs_torch']} | {r['vs_torch_compile']} | {r['codes_differ']} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    B = Bench(reps=10 if args.quick else 30)
    print(f"{B.name}: copy {B.copy_gbps:.0f} GB/s, torch {torch.__version__}", flush=True)
    rows, errors = [], []
    for op, quant, per_token, r, c in plan(args.quick):
        try:
            row = bench_case(B, op, quant, per_token, r, c)
            rows.append(row)
            print(f"{op} {quant} {row['scaling']} {r}x{c}: {row['us']} us ({row['pct_copy']}% copy), eager "
                  f"{row['torch_us']}, compiled {row['torch_compile_us']} ({row['compile_pct_copy']}%): "
                  f"x{row['vs_torch']} / x{row['vs_torch_compile']}, codes differ {row['codes_differ']}", flush=True)
        except Exception as e:  # noqa: BLE001 - record it, go on
            errors.append({"op": op, "quant": quant, "shape": [r, c], "error": f"{type(e).__name__}: {e}"})
            print(f"ERROR {op} {quant} {r}x{c}: {type(e).__name__}: {e}", flush=True)
        gc.collect()
        torch.cuda.empty_cache()
    result = {"gpu": B.gpu, "gpu_name": B.name, "date": datetime.date.today().isoformat(),
              "copy_gbps": round(B.copy_gbps, 1), "torch": torch.__version__, "rows": rows,
              "note": "quantized rows: bytes = read x (+ r, + write s) + write y at 1 byte + 4 bytes per row "
                      "of per-token scales; torch_compile_us: torch.compile of the composition, graph-replayed"}
    if errors:
        result["errors"] = errors
    with open(os.path.join(args.out, "rows_quant.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(args.out, "rows_quant.md"), "w") as f:
        f.write(markdown(result))
    print(markdown(result))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
