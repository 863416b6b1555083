#!/usr/bin/env python3
"""LayerNorm forward benchmark: libfusednorm beside PyTorch, in one run.

Method (bench/README.md says more):
- CUDA-event timing of CUDA-graph replays, so launch overhead (ours through
  ctypes, PyTorch's through Python) is out of the figure for both; the median
  over many replays after warm-up.
- Each graph cycles through several input/output buffer sets totalling at
  least 8x the L2 size, so inputs come from device memory, not L2; PyTorch's
  outputs are kept alive inside the capture so they rotate too.
- Bytes counted: read x + write y (gamma/beta, mean/rstd are not counted).
- The copy bandwidth is measured in the same run (1 GiB device-to-device
  copy, read + write counted), and every GB/s is also given as % of it.
- Before timing, our output is compared with PyTorch's on the same input.

Usage: bench_layernorm.py --out DIR [--quick]
Writes DIR/<gpu>.json (the schema of shared/design.md section 6) and DIR/<gpu>.md.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bindings", "python"))
import fusednorm  # noqa: E402

# OneFlow's published LayerNorm kernel as measured on an H200 (shared/design.md
# section 7, fp16, rows = 49152). Anchors, not measured in this run: reported
# only when this run is on an H200 too.
ONEFLOW_H200_FP16_49152 = {32: 11.9, 64: 18.7, 128: 23.7, 256: 39.9, 512: 114, 1024: 294,
                           2048: 269, 4096: 458, 8192: 981, 16384: 2006, 32768: 5685}

TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def gpu_tag(name: str) -> str:
    n = name.lower()
    for tag in ("h200", "h100", "a100", "l40s", "b200"):
        if tag in n:
            return tag
    return "".join(c for c in n if c.isalnum())[:16] or "gpu"


def time_graph(launch, n_launch: int, reps: int) -> float:
    """Median microseconds per launch of launch(i), i = 0..n_launch-1, captured
    in one CUDA graph and replayed `reps` times."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for i in range(n_launch):  # warm-up, eager: caches, module load
            launch(i)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    keep = []
    with torch.cuda.graph(graph):
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


def bench_layernorm_fwd(rows: int, cols: int, dtype: str, l2_bytes: int, copy_gbps: float,
                        gpu: str, reps: int) -> dict:
    tdt = TORCH_DTYPES[dtype]
    esize = torch.tensor([], dtype=tdt).element_size()
    set_bytes = 2 * rows * cols * esize
    n_sets = max(3, min(200, math.ceil(8 * l2_bytes / set_bytes)))
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1234 + cols)
    xs = [torch.randn(rows, cols, device="cuda", dtype=tdt, generator=gen) * 2 + 1 for _ in range(n_sets)]
    ys = [torch.empty_like(x) for x in xs]
    w = (torch.rand(cols, device="cuda", dtype=torch.float32, generator=gen) + 0.5).to(tdt)
    b = (torch.rand(cols, device="cuda", dtype=torch.float32, generator=gen) - 0.5).to(tdt)
    eps = 1e-5

    # Correctness beside PyTorch (outputs poisoned first).
    ys[0].fill_(float("nan"))
    fusednorm.layer_norm(xs[0], w, b, eps, out=ys[0])
    ref = F.layer_norm(xs[0], (cols,), w, b, eps)
    torch.cuda.synchronize()
    diff = (ys[0].float() - ref.float()).abs().max().item()
    if not math.isfinite(diff):
        raise RuntimeError(f"layernorm_fwd {dtype} [{rows},{cols}]: non-finite output")

    # Descriptors built once: the timed launches are the bare C call.
    fn = fusednorm
    dt = {"fp32": fn.DType.FLOAT32, "fp16": fn.DType.FLOAT16, "bf16": fn.DType.BFLOAT16}[dtype]
    xd = fn.TensorDesc(dt, [rows, cols])
    wd = fn.TensorDesc(dt, [cols])
    nd = fn.NormDesc(fn.NormMode.LAYERNORM, -1, eps)
    handle = fn._handle_for(torch.cuda.current_device())

    def ours(i):
        k = i % n_sets
        fn.check(fn.lib.fnorm_layernorm_fwd(handle.ptr, torch.cuda.current_stream().cuda_stream, nd.ptr,
                                            xd.ptr, xs[k].data_ptr(), wd.ptr, w.data_ptr(), b.data_ptr(),
                                            xd.ptr, ys[k].data_ptr(), None, None, None, 0))
        return None

    def torch_ln(i):
        return F.layer_norm(xs[i % n_sets], (cols,), w, b, eps)

    us = time_graph(ours, n_sets, reps)
    torch_us = time_graph(torch_ln, n_sets, reps)
    moved = rows * cols * esize * 2
    gbps = moved / (us * 1e-6) / 1e9
    oneflow = ONEFLOW_H200_FP16_49152.get(cols) if (gpu == "h200" and dtype == "fp16" and rows == 49152) else None
    del xs, ys
    torch.cuda.empty_cache()
    return {
        "op": "layernorm_fwd", "dtype": dtype, "shape": [rows, cols],
        "us": round(us, 2), "gbps": round(gbps, 1), "pct_copy": round(100 * gbps / copy_gbps, 1),
        "torch_us": round(torch_us, 2), "vs_torch": round(torch_us / us, 3),
        "oneflow_us": oneflow, "vs_oneflow": round(oneflow / us, 3) if oneflow else None,
        "cudnn_us": None, "vs_cudnn": None,
        "max_abs_diff_vs_torch": diff, "buffer_sets": n_sets,
    }


def markdown(result: dict) -> str:
    lines = [f"# LayerNorm forward on {result['gpu_name']} ({result['date']})", "",
             f"Copy bandwidth measured in the same run: {result['copy_gbps']:.0f} GB/s (read + write).",
             "Bytes counted: read x + write y. Times: median µs per launch, CUDA-graph replay, "
             "inputs rotated over > 8x L2. OneFlow: design.md §7 anchor (H200), not measured here.", "",
             "| dtype | shape | ours µs | GB/s | % copy | PyTorch µs | vs PyTorch | OneFlow µs | vs OneFlow | max |diff| vs PyTorch |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        of = f"{r['oneflow_us']}" if r["oneflow_us"] else "—"
        vof = f"{r['vs_oneflow']:.2f}x" if r["vs_oneflow"] else "—"
        lines.append(f"| {r['dtype']} | {r['shape'][0]}×{r['shape'][1]} | {r['us']:.1f} | {r['gbps']:.0f} | "
                     f"{r['pct_copy']:.0f}% | {r['torch_us']:.1f} | {r['vs_torch']:.2f}x | {of} | {vof} | "
                     f"{r['max_abs_diff_vs_torch']:.2g} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true", help="fewer shapes and repetitions")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    props = torch.cuda.get_device_properties(0)
    gpu = gpu_tag(props.name)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    copy = copy_bandwidth_gbps()
    print(f"{props.name}: copy {copy:.0f} GB/s, L2 {l2 >> 20} MiB", flush=True)
    reps = 10 if args.quick else 30
    shapes = [(49152, c, "fp16") for c in (32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)]
    shapes += [(49152, 1024, "fp32"), (49152, 8192, "fp32"), (49152, 1024, "bf16"), (1024, 12288, "bf16"),
               (49152, 1000, "fp16"), (49152, 768, "fp16")]
    if args.quick:
        shapes = shapes[::3]
    rows = []
    for r, c, dt in shapes:
        row = bench_layernorm_fwd(r, c, dt, l2, copy, gpu, reps)
        rows.append(row)
        print(f"layernorm_fwd {dt} {r}x{c}: {row['us']:.1f} us, {row['gbps']:.0f} GB/s "
              f"({row['pct_copy']:.0f}% copy), torch {row['torch_us']:.1f} us ({row['vs_torch']:.2f}x), "
              f"oneflow {row['oneflow_us']}, diff {row['max_abs_diff_vs_torch']:.2g}", flush=True)
    result = {"gpu": gpu, "gpu_name": props.name, "date": datetime.date.today().isoformat(),
              "copy_gbps": round(copy, 1), "torch": torch.__version__, "rows": rows}
    with open(os.path.join(args.out, f"{gpu}.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(args.out, f"{gpu}.md"), "w") as f:
        f.write(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
