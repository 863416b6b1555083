#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""GroupNorm (+ SiLU, + per-sample scale / shift) against PyTorch, in one
process on one GPU (issue 38).

Op rows (`groupnorm_fwd`, `groupnorm_bwd`, `groupnorm_fwd_bwd`, with
`layout`, `epilogue`, `groups`): CUDA-graph replays (bench_layernorm's
time_graph) over buffer sets that together exceed 8x the L2; bytes counted:
fwd read x + write y, bwd read x and dy + write dx, fwd_bwd both; GB/s and
% of the copy bandwidth measured in the same run. Ours: the registered ops
(torch.ops.fusednorm.group_norm_fwd / group_norm_bwd; fwd_bwd through
autograd). PyTorch: `F.silu(F.group_norm(x, G, w, b, eps))` (epilogue "silu";
"none" without the SiLU; "silu_ss" with `* (1 + scale) + shift` before it,
scale/shift the halves of temb.chunk(2, dim=1)), eager and torch.compile
(one compiled function per case, recompile limit raised), backward through
autograd.
--vae: diffusers' AutoencoderKL (SD/SDXL VAE config, random weights) decoding
a 1x4x128x128 latent to 1024x1024 in bf16, NCHW and channels-last, torch and
convert(fuse=True), eager and (--vae-compile) compiled; plus (--unet) a
UNet-style training step (diffusers ResnetBlock2D with a scale/shift time
embedding, forward + backward).
Writes OUT/rows_groupnorm_torch.json and .md (bench/gn_rows.py writes
rows_groupnorm, ours alone from bench/gn_time).
Usage: bench_groupnorm.py --out DIR [--shapes all|issue] [--no-compile] [--vae] [--vae-compile] [--unet]
"""
from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "bindings", "python"))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import bench_layernorm as bl  # noqa: E402
import fusednorm.torch as ft  # noqa: E402

ISSUE = [(1, 512, 128, 128), (1, 512, 256, 256), (1, 256, 512, 512), (4, 128, 512, 512), (8, 320, 64, 64),
         (2, 1280, 32, 32)]
MORE = [(1, 128, 1024, 1024),  # SD/SDXL/FLUX VAE decoder, last stage at 1024^2
        (2, 320, 128, 128), (2, 640, 64, 64)]  # SDXL UNet (batch 2: classifier-free guidance)
G, EPS = 32, 1e-6
BYTES = {"fwd": 2, "bwd": 3, "fwd_bwd": 5}  # tensor passes over x's size


def layout_of(x, layout):
    return x.to(memory_format=torch.channels_last) if layout == "nhwc" else x


def make_sets(shape, dtype, layout, n_sets, gen):
    return [layout_of(torch.randn(shape, device="cuda", generator=gen).to(dtype), layout) for _ in range(n_sets)]


def torch_fn(epilogue):
    def f(x, w, b, sc, sh):
        y = F.group_norm(x, G, w, b, EPS)
        if epilogue == "silu_ss":
            y = y * (1 + sc) + sh
        return F.silu(y) if epilogue != "none" else y
    return f


def bench_case(B, shape, dtype, layout, epilogue, direction, compile_too):
    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    n, c = shape[0], shape[1]
    numel = math.prod(shape)
    esize = torch.finfo(tdt).bits // 8
    per_set = numel * esize * (2 if direction == "fwd" else 3)
    n_sets = B.n_sets(per_set)
    gen = torch.Generator(device="cuda").manual_seed(hash((shape, dtype, layout)) & 0xffff)
    xs = make_sets(shape, tdt, layout, n_sets, gen)
    w = torch.randn(c, device="cuda", generator=gen).to(tdt)
    b = torch.randn(c, device="cuda", generator=gen).to(tdt)
    temb = torch.randn(n, 2 * c, 1, 1, device="cuda", generator=gen).to(tdt) * 0.3
    sc, sh = temb.chunk(2, dim=1) if epilogue == "silu_ss" else (None, None)
    act = 0 if epilogue == "none" else 1
    ops = torch.ops.fusednorm
    reps = B.reps(n_sets, per_set)
    row = {"op": f"groupnorm_{direction}", "dtype": dtype, "shape": list(shape), "groups": G, "layout": layout,
           "epilogue": epilogue, "bytes": BYTES[direction] * numel * esize}
    f_t = torch_fn(epilogue)
    # a correctness look (not an assertion): ours and torch's eager against float64
    y_ours = ops.group_norm_fwd(xs[0], G, w, b, sc, sh, EPS, act)[0]
    ref = torch_fn(epilogue)(xs[0].double(), w.double(), b.double(), None if sc is None else sc.double(),
                             None if sh is None else sh.double())
    row["max_err"] = float((y_ours.double() - ref).abs().max())
    row["torch_max_err"] = float((f_t(xs[0], w, b, sc, sh).double() - ref).abs().max())
    del y_ours, ref
    if direction == "fwd":
        row["us"] = bl.time_graph(lambda i: ops.group_norm_fwd(xs[i % n_sets], G, w, b, sc, sh, EPS, act),
                                  n_sets, reps)
        row["torch_us"] = bl.time_graph(lambda i: f_t(xs[i % n_sets], w, b, sc, sh), n_sets, reps)
        if compile_too:
            fc = torch.compile(torch_fn(epilogue), dynamic=False)
            row["torch_compile_us"] = bl.time_graph(lambda i: fc(xs[i % n_sets], w, b, sc, sh), n_sets, reps)
    elif direction == "bwd":
        dys = make_sets(shape, tdt, layout, n_sets, gen)
        stats = [ops.group_norm_fwd(x, G, w, b, sc, sh, EPS, act)[1:] for x in xs]
        need_ss = sc is not None
        row["us"] = bl.time_graph(
            lambda i: ops.group_norm_bwd(dys[i % n_sets], xs[i % n_sets], stats[i % n_sets][0], stats[i % n_sets][1],
                                         G, w, b, sc, sh, act, True, True, need_ss, need_ss), n_sets, reps)
        for key, fn in (("torch_us", f_t),) + ((("torch_compile_us", torch.compile(torch_fn(epilogue),
                                                                                    dynamic=False)),)
                                               if compile_too else ()):
            leaves = []

            def setup(fn=fn, leaves=leaves):
                for x in xs:
                    xr, wr, br = x.detach().requires_grad_(), w.detach().requires_grad_(), b.detach().requires_grad_()
                    tr = temb.detach().requires_grad_()
                    s1, s2 = tr.chunk(2, dim=1) if epilogue == "silu_ss" else (None, None)
                    leaves.append((fn(xr, wr, br, s1, s2), [xr, wr, br] + ([tr] if s1 is not None else [])))

            row[key] = bl.time_graph(
                lambda i, leaves=leaves: torch.autograd.grad(leaves[i % n_sets][0], leaves[i % n_sets][1],
                                                             dys[i % n_sets], retain_graph=True),
                n_sets, reps, setup=setup)
            leaves.clear()
    else:
        dys = make_sets(shape, tdt, layout, n_sets, gen)
        wr, br, tr = w.detach().requires_grad_(), b.detach().requires_grad_(), temb.detach().requires_grad_()
        xrs = [x.detach().requires_grad_() for x in xs]

        def ours(i):
            s1, s2 = tr.chunk(2, dim=1) if epilogue == "silu_ss" else (None, None)
            y = ft.group_norm(xrs[i % n_sets], G, wr, br, EPS, activation=None if act == 0 else "silu", scale=s1,
                              shift=s2)
            return torch.autograd.grad(y, [xrs[i % n_sets], wr, br] + ([tr] if s1 is not None else []),
                                       dys[i % n_sets])

        def make_torch(fn):
            def run(i):
                s1, s2 = tr.chunk(2, dim=1) if epilogue == "silu_ss" else (None, None)
                y = fn(xrs[i % n_sets], wr, br, s1, s2)
                return torch.autograd.grad(y, [xrs[i % n_sets], wr, br] + ([tr] if s1 is not None else []),
                                           dys[i % n_sets])
            return run
        row["us"] = bl.time_graph(ours, n_sets, reps)
        row["torch_us"] = bl.time_graph(make_torch(f_t), n_sets, reps)
        if compile_too:
            row["torch_compile_us"] = bl.time_graph(make_torch(torch.compile(torch_fn(epilogue), dynamic=False)),
                                                    n_sets, reps)
    row["gbps"] = round(row["bytes"] / row["us"] / 1e3, 1)
    row["pct_copy"] = round(100 * row["gbps"] / B.copy_gbps, 1)
    row["torch_pct_copy"] = round(100 * row["bytes"] / row["torch_us"] / 1e3 / B.copy_gbps, 1)
    row["vs_torch"] = round(row["torch_us"] / row["us"], 2)
    if "torch_compile_us" in row:
        row["vs_torch_compile"] = round(row["torch_compile_us"] / row["us"], 2)
    for k in ("us", "torch_us", "torch_compile_us"):
        if k in row:
            row[k] = round(row[k], 2)
    return row


# ---- end to end -------------------------------------------------------------

VAE_CONFIG = dict(in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 4,
                  up_block_types=["UpDecoderBlock2D"] * 4, block_out_channels=[128, 256, 512, 512],
                  layers_per_block=2, latent_channels=4, norm_num_groups=32, sample_size=1024)


def event_ms(fn, warmup=2, reps=7):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1))
    return statistics.median(ts)


def gn_gpu_ms(fn):
    """GPU time of the GroupNorm kernels (torch's and ours) in one call of fn."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        fn()
        torch.cuda.synchronize()
    total = gn = 0.0
    for e in p.key_averages():
        t = e.device_time_total / 1e3
        total += t
        name = e.key.lower()
        if "groupnorm" in name or "group_norm" in name or "rowwisemoments" in name or "gn_" in name \
                or "fnorm::gn" in name:
            gn += t
    return round(gn, 2), round(total, 2)


def bench_vae(compile_too):
    from diffusers import AutoencoderKL
    rows = []
    torch.manual_seed(0)
    base = AutoencoderKL(**VAE_CONFIG).to("cuda", torch.bfloat16).eval()
    z = torch.randn(1, 4, 128, 128, device="cuda", dtype=torch.bfloat16)
    import copy
    variants = {}
    for layout in ("nchw", "nhwc"):
        for impl in ("torch", "ours"):
            m = copy.deepcopy(base)
            if layout == "nhwc":
                m = m.to(memory_format=torch.channels_last)
            if impl == "ours":
                ft.convert(m, fuse=True)
            variants[(impl, layout)] = m
    zz = {"nchw": z, "nhwc": z.to(memory_format=torch.channels_last)}
    with torch.no_grad():
        ref = variants[("torch", "nchw")].decode(zz["nchw"]).sample.double()
        for (impl, layout), m in variants.items():
            out = m.decode(zz[layout]).sample
            ms = event_ms(lambda: m.decode(zz[layout]))
            gn, total = gn_gpu_ms(lambda: m.decode(zz[layout]))
            rows.append({"op": "vae_decode", "model": "AutoencoderKL SD/SDXL config", "latent": [1, 4, 128, 128],
                         "dtype": "bf16", "layout": layout, "impl": impl, "mode": "eager", "ms": round(ms, 2),
                         "groupnorm_gpu_ms": gn, "gpu_ms": total,
                         "max_abs_diff_vs_torch_nchw": float((out.double() - ref).abs().max())})
            print(rows[-1], flush=True)
        if compile_too:
            for (impl, layout), m in variants.items():
                dec = torch.compile(m.decoder)
                zc = m.post_quant_conv(zz[layout])
                t0 = time.time()
                dec(zc)
                ms = event_ms(lambda: dec(zc))
                rows.append({"op": "vae_decode", "model": "AutoencoderKL SD/SDXL config", "latent": [1, 4, 128, 128],
                             "dtype": "bf16", "layout": layout, "impl": impl, "mode": "compile", "ms": round(ms, 2),
                             "compile_s": round(time.time() - t0, 1), "what": "torch.compile(vae.decoder)"})
                print(rows[-1], flush=True)
    by = {(r["impl"], r["layout"], r["mode"]): r["ms"] for r in rows}
    t_nchw = by[("torch", "nchw", "eager")]
    for r in rows:
        r["vs_torch_nchw_eager"] = round(t_nchw / r["ms"], 2)
        if r["mode"] == "compile":
            best = min(v for (i, _, md), v in by.items() if i == "torch" and md == "compile")
            r["vs_best_torch_compile"] = round(best / r["ms"], 2)
    return rows


def bench_unet_step():
    from diffusers.models.resnet import ResnetBlock2D
    import copy
    rows = []
    torch.manual_seed(0)

    class Stack(torch.nn.Module):
        def __init__(self, c=320, temb=1280, blocks=4):
            super().__init__()
            self.blocks = torch.nn.ModuleList(
                ResnetBlock2D(in_channels=c, out_channels=c, temb_channels=temb, groups=32,
                              time_embedding_norm="scale_shift") for _ in range(blocks))

        def forward(self, x, t):
            for blk in self.blocks:
                x = blk(x, t)
            return x

    base = Stack().to("cuda", torch.bfloat16).to(memory_format=torch.channels_last)
    x = torch.randn(8, 320, 64, 64, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    t = torch.randn(8, 1280, device="cuda", dtype=torch.bfloat16)
    models = {"torch": base, "ours": ft.convert(copy.deepcopy(base), fuse=True)}
    for impl, m in models.items():
        def step(m=m):
            m.zero_grad(set_to_none=True)
            m(x, t).float().square().mean().backward()
        ms = event_ms(step)
        gn, total = gn_gpu_ms(step)
        rows.append({"op": "unet_block_train_step", "model": "4 x diffusers ResnetBlock2D (320 ch, scale_shift)",
                     "shape": [8, 320, 64, 64], "dtype": "bf16", "layout": "nhwc", "impl": impl, "ms": round(ms, 3),
                     "groupnorm_gpu_ms": gn, "gpu_ms": total})
    rows[1]["vs_torch"] = round(rows[0]["ms"] / rows[1]["ms"], 2)
    for r in rows:
        print(r, flush=True)
    return rows


def markdown(res):
    lines = [f"### GroupNorm ({res['gpu_name']}, copy {res['copy_gbps']:.0f} GB/s, torch {res['torch']}, "
             f"{G} groups, eps {EPS})", "",
             "| op | shape | dtype | layout | epilogue | ours µs | % copy | torch µs | % copy | vs torch | "
             "vs compile |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        if not r["op"].startswith("groupnorm_"):
            continue
        lines.append(f"| {r['op']} | {r['shape']} | {r['dtype']} | {r['layout']} | {r['epilogue']} | {r['us']} | "
                     f"{r['pct_copy']} | {r['torch_us']} | {r['torch_pct_copy']} | {r['vs_torch']} | "
                     f"{r.get('vs_torch_compile', '')} |")
    e2e = [r for r in res["rows"] if not r["op"].startswith("groupnorm_")]
    if e2e:
        lines += ["", "| end to end | impl | layout | mode | ms | GroupNorm GPU ms | vs torch NCHW eager | "
                      "vs best torch compiled |", "|---|---|---|---|---|---|---|---|"]
        for r in e2e:
            lines.append(f"| {r['op']} | {r['impl']} | {r['layout']} | {r.get('mode', 'eager')} | {r['ms']} | "
                         f"{r.get('groupnorm_gpu_ms', '')} | {r.get('vs_torch_nchw_eager', r.get('vs_torch', ''))} |"
                         f" {r.get('vs_best_torch_compile', '')} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--shapes", default="all", choices=("all", "issue"))
    ap.add_argument("--dtypes", default="bf16")
    ap.add_argument("--directions", default="fwd,bwd,fwd_bwd")
    ap.add_argument("--epilogues", default="none,silu,silu_ss")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--no-ops", action="store_true")
    ap.add_argument("--vae", action="store_true")
    ap.add_argument("--vae-compile", action="store_true")
    ap.add_argument("--unet", action="store_true")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if not ft.ops_available():
        print(f"fusednorm.torch ops unavailable: {ft.ops_unavailable_reason()}")
        return 1
    torch._dynamo.config.cache_size_limit = 4096
    torch._dynamo.config.recompile_limit = 4096
    B = bl.Bench(reps=8 if args.quick else 20)
    print(f"{B.name}: copy {B.copy_gbps:.0f} GB/s, L2 {B.l2 >> 20} MiB, torch {torch.__version__}", flush=True)
    os.makedirs(args.out, exist_ok=True)
    shapes = ISSUE + (MORE if args.shapes == "all" else [])
    rows, errors = [], []
    res = {"gpu": B.gpu, "gpu_name": B.name, "date": datetime.date.today().isoformat(),
           "copy_gbps": round(B.copy_gbps, 1), "torch": torch.__version__, "rows": rows,
           "bytes_counted": {"groupnorm_fwd": "read x + write y", "groupnorm_bwd": "read x, dy + write dx",
                             "groupnorm_fwd_bwd": "fwd + bwd"}}

    def save():
        if errors:
            res["errors"] = errors
        with open(os.path.join(args.out, "rows_groupnorm_torch.json"), "w") as f:
            json.dump(res, f, indent=1)
        with open(os.path.join(args.out, "rows_groupnorm_torch.md"), "w") as f:
            f.write(markdown(res))

    t0 = time.time()
    if not args.no_ops:
        for direction in args.directions.split(","):
            for shape in shapes:
                for dtype in args.dtypes.split(","):
                    for layout in ("nchw", "nhwc"):
                        for epi in args.epilogues.split(","):
                            # torch.compile for the SiLU epilogue (the issue's function)
                            comp = not args.no_compile and epi == "silu"
                            try:
                                row = bench_case(B, shape, dtype, layout, epi, direction, comp)
                                rows.append(row)
                                print(f"{row['op']} {shape} {dtype} {layout} {epi}: {row['us']} us "
                                      f"{row['pct_copy']}% copy, torch {row['torch_us']} us "
                                      f"({row['vs_torch']}x) compile {row.get('vs_torch_compile', '-')}x "
                                      f"err {row['max_err']:.3g}/{row['torch_max_err']:.3g}", flush=True)
                            except Exception as e:  # noqa: BLE001
                                errors.append({"op": direction, "shape": list(shape), "layout": layout,
                                               "epilogue": epi, "error": f"{type(e).__name__}: {e}"[:300]})
                                print("ERROR", errors[-1], flush=True)
                            gc.collect()
                            torch.cuda.empty_cache()
                save()
    if args.vae:
        rows.extend(bench_vae(args.vae_compile))
        save()
    if args.unet:
        rows.extend(bench_unet_step())
    save()
    print(markdown(res))
    print(f"done in {time.time() - t0:.0f} s")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
