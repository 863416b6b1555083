#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A DDP training step of torchvision's ResNet-50 with SyncBatchNorm, one
process per GPU: torch.nn's (nn.SyncBatchNorm.convert_sync_batchnorm) against
the same model converted with fusednorm.torch.convert(model, fuse=True)
(SyncBatchNorm on the library's communicator, BN + ReLU and BN + add + ReLU
fused, Linear swapped), both in the same processes from the same weights.

Channels-last, autocast fp16 with a GradScaler of fixed scale 1024 (no
growth), SGD (lr 0.02, momentum 0.9), cross-entropy on random images and
labels (--batch per rank at 224 x 224; each rank its own).

1. Loss tracking: --track-steps steps of each model on the same batches, with
   cuDNN deterministic (no benchmark, no TF32), so the two differ by their
   BatchNorm arithmetic alone; the losses of every step, the largest relative
   difference and whether any step was skipped (inf/nan gradients) are
   reported.
2. Step time: cuDNN benchmark on, warm-up, then --rounds rounds alternating
   the two models, each round --steps steps timed with CUDA events (the ranks
   start each round together); the median per-step time of the rounds, rank 0
   and the slowest rank.

Writes DIR/rows_syncbn_ddp<tag>.json / .md. Needs torchvision and the
fusednorm.torch C++ ops (FNORM_TORCH_OPS).
Usage: bench_syncbn_ddp.py --out DIR [--world N] [--batch 32] [--tag T]
"""
import argparse
import copy
import json
import os
import statistics
import sys
import tempfile
import time
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bindings", "python"))
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")


def make_models(rank):
    import torchvision
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    import fusednorm.torch as ft
    if not ft.ops_available():
        raise RuntimeError(f"fusednorm.torch ops not available: {ft.ops_unavailable_reason()}")
    torch.manual_seed(0)  # the same weights on every rank (DDP broadcasts rank 0's anyway)
    base = torchvision.models.resnet50(weights=None)
    base = nn.SyncBatchNorm.convert_sync_batchnorm(base)
    ref = copy.deepcopy(base).cuda().to(memory_format=torch.channels_last)
    ours = ft.convert(copy.deepcopy(base), fuse=True).cuda().to(memory_format=torch.channels_last)
    n_sbn = sum(isinstance(m, ft.SyncBatchNorm) for m in ours.modules())
    fused = getattr(ours, "fused_epilogues", 0)
    models = {}
    for name, m in (("torch", ref), ("ours", ours)):
        opt = torch.optim.SGD(m.parameters(), lr=0.02, momentum=0.9)
        scaler = torch.amp.GradScaler("cuda", init_scale=1024.0, growth_interval=10 ** 9)
        models[name] = (DDP(m, device_ids=[rank]), opt, scaler)
    return models, n_sbn, fused


def step(model, opt, scaler, x, y):
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.float16):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    return loss


def worker(rank, world, init, results, args):
    try:
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", init_method=init, rank=rank, world_size=world,
                                device_id=torch.device("cuda", rank))
        t0 = time.time()
        models, n_sbn, fused = make_models(rank)
        g = torch.Generator(device="cuda")
        g.manual_seed(1000 + rank)
        batches = [(torch.randn(args.batch, 3, 224, 224, device="cuda", generator=g)
                    .contiguous(memory_format=torch.channels_last),
                    torch.randint(0, 1000, (args.batch,), device="cuda", generator=g)) for _ in range(4)]
        # 1. loss tracking, deterministic convolutions
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.allow_tf32 = False
        losses = {"torch": [], "ours": []}
        for name in ("torch", "ours"):
            m, opt, scaler = models[name]
            for i in range(args.track_steps):
                x, y = batches[i % len(batches)]
                loss = step(m, opt, scaler, x, y).detach()
                dist.all_reduce(loss)
                losses[name].append(loss.item() / world)
            losses[name + "_scale"] = scaler.get_scale()
        # 2. step time
        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.deterministic = False
        torch.backends.cudnn.allow_tf32 = True
        for name in ("torch", "ours"):
            m, opt, scaler = models[name]
            for i in range(args.warmup):
                step(m, opt, scaler, *batches[i % len(batches)])
        torch.cuda.synchronize()
        times = {"torch": [], "ours": []}
        for _ in range(args.rounds):
            for name in ("torch", "ours"):
                m, opt, scaler = models[name]
                dist.barrier()
                torch.cuda.synchronize()
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                for i in range(args.steps):
                    step(m, opt, scaler, *batches[i % len(batches)])
                e1.record()
                e1.synchronize()
                times[name].append(e0.elapsed_time(e1) / args.steps)
        med = {k: statistics.median(v) for k, v in times.items()}
        results.put((rank, {"losses": losses, "ms": med, "rounds_ms": times, "n_sbn": n_sbn, "fused": fused,
                            "setup_s": round(time.time() - t0, 1)}, ""))
        dist.barrier()
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        results.put((rank, None, traceback.format_exc()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--world", type=int, default=torch.cuda.device_count())
    ap.add_argument("--batch", type=int, default=32, help="images per rank")
    ap.add_argument("--track-steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4, help="steps per timed round")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--tag", default="")
    ap.add_argument("--note", default=None)
    args = ap.parse_args()
    if args.world < 2:
        print("SKIP: fewer than 2 GPUs")
        return 0
    # A file rendezvous: a free TCP port picked here could be taken before rank 0
    # listens on it (the ranks' NCCL bootstrap opens ephemeral ports meanwhile).
    init = "file://" + tempfile.mktemp(prefix="fnorm-rdv-")
    ctx = mp.get_context("spawn")
    res = ctx.Queue()
    ps = [ctx.Process(target=worker, args=(r, args.world, init, res, args)) for r in range(args.world)]
    for p in ps:
        p.start()
    got = {}
    while len(got) < args.world:
        rank, out, tb = res.get(timeout=900)
        got[rank] = out
        if tb:
            print(f"rank {rank} raised:\n{tb}", flush=True)
            for p in ps:
                p.terminate()
            return 1
    for p in ps:
        p.join(timeout=60)
    r0 = got[0]
    lt, lo = r0["losses"]["torch"], r0["losses"]["ours"]
    rel = [abs(a - b) / abs(a) for a, b in zip(lt, lo)]
    skipped = {k: r0["losses"][k + "_scale"] != 1024.0 for k in ("torch", "ours")}
    ms_t, ms_o = r0["ms"]["torch"], r0["ms"]["ours"]
    slow_t = max(got[r]["ms"]["torch"] for r in got)
    slow_o = max(got[r]["ms"]["ours"] for r in got)
    name = torch.cuda.get_device_name(0)
    gpu = "h200" if "H200" in name else "h100" if "H100" in name else "gpu"
    row = {"op": "resnet50_ddp_syncbn_step", "dtype": "fp16", "shape": [args.batch, 3, 224, 224], "layout": "nhwc",
           "ranks": args.world, "device": f"{args.world} x {name}", "us": round(ms_o * 1000, 1),
           "torch_us": round(ms_t * 1000, 1), "vs_torch": round(ms_t / ms_o, 3),
           "slowest_rank_us": round(slow_o * 1000, 1), "torch_slowest_rank_us": round(slow_t * 1000, 1),
           "rounds_ms": r0["rounds_ms"], "losses": lo, "torch_losses": lt,
           "max_rel_loss_diff": round(max(rel), 5), "scaler_backed_off": skipped,
           "sync_bn_modules": r0["n_sbn"], "fused_epilogues": r0["fused"], "gbps": None, "pct_copy": None,
           "impl": "DDP (torch.nn.parallel.DistributedDataParallel), autocast fp16, GradScaler(1024, no growth), SGD",
           "torch_impl": "torch.nn.SyncBatchNorm (convert_sync_batchnorm)"}
    print(f"losses torch: {' '.join(f'{v:.5f}' for v in lt)}")
    print(f"losses ours:  {' '.join(f'{v:.5f}' for v in lo)}")
    print(f"max relative loss difference {max(rel):.2e}; scaler backed off: {skipped}")
    for r in sorted(got):
        print(f"rank {r}: step ours {got[r]['ms']['ours']:.2f} ms, torch {got[r]['ms']['torch']:.2f} ms "
              f"(rounds ours {[round(v, 2) for v in got[r]['rounds_ms']['ours']]}, torch "
              f"{[round(v, 2) for v in got[r]['rounds_ms']['torch']]}); setup {got[r]['setup_s']} s")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"rows_syncbn_ddp{args.tag}.json"), "w") as f:
        json.dump({"gpu": gpu, "rows": [row], "note": args.note}, f, indent=1)
    md = (f"## ResNet-50 DDP step with SyncBatchNorm ({args.world} x {name})\n\n"
          f"torchvision ResNet-50, {args.batch} images per rank at 224², channels-last, autocast fp16, SGD; "
          "torch.nn.SyncBatchNorm against `convert(model, fuse=True)` "
          f"({r0['n_sbn']} SyncBatchNorm modules, {r0['fused']} epilogues fused), same process, alternating rounds; "
          "ms per step (rank 0; median of the rounds). Losses: the first steps from the same weights with "
          "deterministic convolutions.\n\n"
          "| ranks | ours ms | torch.nn ms | vs torch | slowest rank ours / torch ms | max rel. loss diff |\n"
          "|---|---|---|---|---|---|\n"
          f"| {args.world} | {ms_o:.2f} | {ms_t:.2f} | {ms_t / ms_o:.3f}x | {slow_o:.2f} / {slow_t:.2f} | "
          f"{max(rel):.1e} over {len(lt)} steps |\n")
    with open(os.path.join(args.out, f"rows_syncbn_ddp{args.tag}.md"), "w") as f:
        f.write(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
