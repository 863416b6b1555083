#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""SyncBatchNorm benchmark on several GPUs (one process each): per rank
[64, 256, 56, 56] fp16 NHWC, BN + add + ReLU, forward + backward.

Measured in the same run, on every rank (rank 0's figures are reported):
  ours:        SyncBatchNorm through the caller's communicator
  single:      the same call without a communicator (local BatchNorm)
  collectives: the two all-reduces SyncBatchNorm makes (3 C doubles each)
               alone, through NCCL
  torch:       torch.nn.SyncBatchNorm, + z, relu, forward + autograd backward
Times: CUDA events around 20 iterations after warm-up, median of 7 such
windows; ranks start each window together (barrier).
overhead_ratio = ours / (single + collectives).

Writes DIR/rows_syncbn.json / .md. Usage: bench_syncbn.py --out DIR [--world N]
"""
import argparse
import ctypes
import json
import os
import socket
import statistics
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bindings", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "gpu"))
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")

SHAPE = [64, 256, 56, 56]  # per rank; --batch changes N (issue 7's scaling runs use 32)


def timed(fn, iters=20, windows=7):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(windows):
        dist.barrier()
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(iters):
            fn()
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1) * 1000 / iters)
    return statistics.median(ts)


def worker(rank, world, queue, port, results, batch):
    SHAPE[0] = batch  # a spawned process starts from the module's default
    torch.cuda.set_device(rank)
    import fusednorm as fn
    from test_syncbn import UniqueId, nccl
    lib = nccl()
    uid = UniqueId()
    if rank == 0:
        lib.ncclGetUniqueId(ctypes.byref(uid))
        raw = ctypes.string_at(ctypes.addressof(uid), 128)  # all 128 bytes (.internal stops at a NUL)
        for _ in range(world - 1):
            queue.put(raw)
    else:
        ctypes.memmove(ctypes.addressof(uid), queue.get(timeout=120), 128)
    comm_p = ctypes.c_void_p()
    assert lib.ncclCommInitRank(ctypes.byref(comm_p), world, uid, rank) == 0
    comm = comm_p.value
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            device_id=torch.device("cuda", rank))
    C = SHAPE[1]
    cl = torch.channels_last
    x = torch.randn(SHAPE, device="cuda", dtype=torch.float16).contiguous(memory_format=cl)
    z = torch.randn_like(x)
    dy = torch.randn_like(x)
    w = torch.rand(C, device="cuda") + 0.5
    b = torch.rand(C, device="cuda")
    rm, rv = torch.zeros(C, device="cuda"), torch.ones(C, device="cuda")
    y = torch.empty_like(x)
    dx = torch.empty_like(x)
    E = fn.BnEpilogue.ADD_RELU

    def ours(c):
        def f():
            _, s = fn.batch_norm_train(x, w, b, rm, rv, epilogue=E, z=z, comm=c, out=y)
            fn.batch_norm_backward(dy, x, w, s, dx_out=dx)
        return f

    t_ours = timed(ours(comm))
    t_single = timed(ours(None))
    buf = torch.zeros(3 * C, dtype=torch.float64, device="cuda")

    def colls():
        dist.all_reduce(buf)
        dist.all_reduce(buf)
    t_coll = timed(colls)
    m = torch.nn.SyncBatchNorm(C).cuda().to(memory_format=cl)
    xt = x.detach().requires_grad_(True)

    def torch_step():
        out = torch.relu(m(xt) + z)
        out.backward(dy)
    t_torch = timed(torch_step)
    results.put((rank, t_ours, t_single, t_coll, t_torch))
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--world", type=int, default=torch.cuda.device_count())
    ap.add_argument("--batch", type=int, default=SHAPE[0], help="samples per rank")
    ap.add_argument("--quick", action="store_true", help="accepted for scripts/gpu-check; the run is already short")
    ap.add_argument("--tag", default="", help="suffix of the output files (rows_syncbn<tag>.json)")
    args = ap.parse_args()
    SHAPE[0] = args.batch
    if args.world < 2:
        print("SKIP: fewer than 2 GPUs")
        return 0
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    ctx = mp.get_context("spawn")
    q, res = ctx.Queue(), ctx.Queue()
    ps = [ctx.Process(target=worker, args=(r, args.world, q, port, res, args.batch)) for r in range(args.world)]
    for p in ps:
        p.start()
    got = sorted(res.get(timeout=900) for _ in range(args.world))
    for p in ps:
        p.join(timeout=60)
    for r in got:
        print(f"rank {r[0]}: ours {r[1]:.1f} us, single {r[2]:.1f} us, collectives {r[3]:.1f} us, torch {r[4]:.1f} us")
    _, ours, single, coll, tt = got[0]
    row = {"op": "syncbatchnorm_fwd_bwd", "dtype": "fp16", "shape": SHAPE, "layout": "nhwc", "epilogue": "add_relu",
           "engine": "native", "ranks": args.world, "us": round(ours, 1), "gbps": None, "pct_copy": None,
           "torch_us": round(tt, 1), "vs_torch": round(tt / ours, 3), "single_gpu_us": round(single, 1),
           "collectives_us": round(coll, 1), "overhead_ratio": round(ours / (single + coll), 3),
           "oneflow_us": None, "vs_oneflow": None, "cudnn_us": None, "vs_cudnn": None}
    name = torch.cuda.get_device_name(0)
    gpu = "h200" if "H200" in name else "h100" if "H100" in name else "gpu"
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"rows_syncbn{args.tag}.json"), "w") as f:
        json.dump({"gpu": gpu, "rows": [row]}, f, indent=1)
    md = (f"## SyncBatchNorm ({args.world} x {name})\n\nPer rank {SHAPE} fp16 NHWC, BN + add + ReLU, forward + "
          "backward; µs per step (rank 0). overhead = ours / (single-GPU + collectives alone).\n\n"
          "| ranks | ours µs | single-GPU µs | collectives µs | overhead | torch.nn.SyncBatchNorm µs | vs torch |\n"
          "|---|---|---|---|---|---|---|\n"
          f"| {args.world} | {ours:.1f} | {single:.1f} | {coll:.1f} | {row['overhead_ratio']:.3f} | {tt:.1f} | "
          f"{row['vs_torch']:.2f}x |\n")
    with open(os.path.join(args.out, f"rows_syncbn{args.tag}.md"), "w") as f:
        f.write(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
