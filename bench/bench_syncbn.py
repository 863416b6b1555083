#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""SyncBatchNorm benchmark on several GPUs (one process each): per rank
[N, 256, 56, 56] (N = --batch, 64 by default), BN + add + ReLU, forward +
backward.

Cases (--cases): `base` is fp16 NHWC with every rank holding N samples;
`all` adds NCHW, bf16 and fp32 in both layouts, and uneven per-rank batches
(fp16 and fp32 NHWC: the last rank holds no sample, the one before it 1, the
others N; with two ranks that is [1, 0]).

Measured in the same run, on every rank (rank 0's figures are the row's;
`us_ranks` holds every rank's):
  ours:        SyncBatchNorm through the caller's communicator
  single:      the same call without a communicator (local BatchNorm)
  collectives: the two all-reduces SyncBatchNorm makes (3 C doubles each)
               alone, through torch.distributed (NCCL); `collectives_own_comm_us`
               the same two through the communicator ours uses (ncclAllReduce)
  torch:       torch.nn.SyncBatchNorm, + z, relu, forward + autograd backward
               (the input's gradient dropped after each step, not accumulated);
               `torch_collectives_us`: its all-gather of (2C + 1) floats per
               rank and its backward all-reduce of 2C floats alone
Payload (bytes per rank per step in the collectives' output buffers):
ours 2 x 3C x 8 (`collectives_bytes`); torch's world x (2C + 1) x 4 gathered +
2C x 4 reduced (`torch_collectives_bytes`). torch.nn.SyncBatchNorm is not run
with an empty rank and fp16/bf16 input: its empty rank all-gathers zeros in
the input's dtype while the others send float32 statistics (torch 2.11,
nn/modules/_functions.py).
Times: CUDA events around 20 iterations after warm-up, median of 7 such
windows; ranks start each window together (barrier).
overhead_ratio = ours / (single + collectives).

Writes DIR/rows_syncbn<tag>.json / .md.
Usage: bench_syncbn.py --out DIR [--world N] [--batch N] [--cases base|all] [--tag T]
"""
import argparse
import ctypes
import json
import os
import statistics
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bindings", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "gpu"))
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")

C = 256
HW = [56, 56]
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
# (dtype, layout, batches): "equal" every rank --batch samples; "uneven" the
# last rank none, the one before it 1, the others --batch.
CASES = {"base": [("fp16", "nhwc", "equal")],
         "all": [("fp16", "nhwc", "equal"), ("fp16", "nchw", "equal"), ("bf16", "nhwc", "equal"),
                 ("bf16", "nchw", "equal"), ("fp32", "nhwc", "equal"), ("fp32", "nchw", "equal"),
                 ("fp16", "nhwc", "uneven"), ("fp32", "nhwc", "uneven")]}
NCCL_FLOAT64, NCCL_SUM = 8, 0  # ncclDataType_t ncclFloat64, ncclRedOp_t ncclSum


def counts_of(kind, world, batch):
    if kind == "equal":
        return [batch] * world
    return [batch] * (world - 2) + [1, 0]


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


def run_case(fn, lib, comm, rank, world, dtype_name, layout, kind, batch):
    dtype = DTYPES[dtype_name]
    n = counts_of(kind, world, batch)[rank]
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    x = torch.randn([n, C] + HW, device="cuda", dtype=dtype).contiguous(memory_format=fmt)
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

    # Every rank calls timed() alike (its barriers pair up); a rank without
    # samples has no single-GPU call to time (the library takes an empty batch
    # as a rank without samples only with a communicator).
    t = {"ours": timed(ours(comm)), "single": timed(ours(None) if n > 0 else (lambda: None))}
    buf = torch.zeros(3 * C, dtype=torch.float64, device="cuda")

    def colls():
        dist.all_reduce(buf)
        dist.all_reduce(buf)
    t["coll"] = timed(colls)

    def own_colls():
        s = torch.cuda.current_stream().cuda_stream
        for _ in range(2):
            r = lib.ncclAllReduce(buf.data_ptr(), buf.data_ptr(), 3 * C, NCCL_FLOAT64, NCCL_SUM, comm, s)
            if r != 0:
                raise RuntimeError(f"ncclAllReduce: {lib.ncclGetErrorString(r).decode()}")
    t["own_coll"] = timed(own_colls)
    g_in = torch.zeros(2 * C + 1, device="cuda")
    g_out = torch.zeros(world * (2 * C + 1), device="cuda")
    r_buf = torch.zeros(2 * C, device="cuda")

    def torch_colls():
        dist.all_gather_into_tensor(g_out, g_in)
        dist.all_reduce(r_buf)
    t["torch_coll"] = timed(torch_colls)
    # torch.nn.SyncBatchNorm: see the module's text for the case it is not run in.
    t["torch"] = None
    if kind == "equal" or dtype == torch.float32:
        m = torch.nn.SyncBatchNorm(C).cuda().to(memory_format=fmt)
        xt = x.detach().requires_grad_(True)

        def torch_step():
            out = torch.relu(m(xt) + z)
            out.backward(dy)
            xt.grad = None
        t["torch"] = timed(torch_step)
    return n, t


def worker(rank, world, queue, init, results, batch, cases):
    torch.cuda.set_device(rank)
    import fusednorm as fn
    from test_syncbn import UniqueId, nccl
    lib = nccl()
    lib.ncclAllReduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                  ctypes.c_void_p, ctypes.c_void_p]
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
    dist.init_process_group("nccl", init_method=init, rank=rank, world_size=world,
                            device_id=torch.device("cuda", rank))
    out = []
    for case in cases:
        try:
            out.append((case, run_case(fn, lib, comm, rank, world, *case, batch), ""))
        except Exception as e:  # noqa: BLE001 - the other cases still run (a collective may hang: the caller's timeout)
            out.append((case, None, f"{type(e).__name__}: {e}"))
        torch.cuda.empty_cache()
    results.put((rank, out))
    dist.barrier()
    dist.destroy_process_group()


def fmt_us(v):
    return "—" if v is None else f"{v:.1f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--world", type=int, default=torch.cuda.device_count())
    ap.add_argument("--batch", type=int, default=64, help="samples per rank")
    ap.add_argument("--cases", choices=sorted(CASES), default="base")
    ap.add_argument("--quick", action="store_true", help="accepted for scripts/gpu-check; the run is already short")
    ap.add_argument("--tag", default="", help="suffix of the output files (rows_syncbn<tag>.json)")
    ap.add_argument("--note", default=None, help="the rows file's note (merge_results.py prints it)")
    args = ap.parse_args()
    if args.world < 2:
        print("SKIP: fewer than 2 GPUs")
        return 0
    cases = CASES[args.cases]
    # A file rendezvous: a free TCP port picked here could be taken before rank 0
    # listens on it (the ranks' NCCL bootstrap opens ephemeral ports meanwhile).
    init = "file://" + tempfile.mktemp(prefix="fnorm-rdv-")
    ctx = mp.get_context("spawn")
    q, res = ctx.Queue(), ctx.Queue()
    ps = [ctx.Process(target=worker, args=(r, args.world, q, init, res, args.batch, cases))
          for r in range(args.world)]
    for p in ps:
        p.start()
    got = dict(res.get(timeout=900) for _ in range(args.world))
    for p in ps:
        p.join(timeout=60)
    name = torch.cuda.get_device_name(0)
    gpu = "h200" if "H200" in name else "h100" if "H100" in name else "gpu"
    rows, errors = [], []
    for i, case in enumerate(cases):
        dtype_name, layout, kind = case
        per_rank = [got[r][i] for r in range(args.world)]
        bad = [f"rank {r}: {e}" for r, (_, _, e) in enumerate(per_rank) if e]
        if bad:
            errors.append({"case": list(case), "error": "; ".join(bad)})
            print(f"{case}: " + "; ".join(bad))
            continue
        counts = [pr[1][0] for pr in per_rank]
        t = per_rank[0][1][1]
        for r, pr in enumerate(per_rank):
            tr = pr[1][1]
            print(f"{dtype_name} {layout} {kind} rank {r} ({counts[r]} samples): ours {tr['ours']:.1f} us, single "
                  f"{tr['single']:.1f}, collectives {tr['coll']:.1f} (own comm {tr['own_coll']:.1f}), torch "
                  f"{fmt_us(tr['torch'])}, torch's collectives {tr['torch_coll']:.1f}")
        ours, single, coll, tt = t["ours"], t["single"], t["coll"], t["torch"]
        row = {"op": "syncbatchnorm_fwd_bwd", "dtype": dtype_name, "shape": [args.batch, C] + HW, "layout": layout,
               "epilogue": "add_relu", "engine": "native", "ranks": args.world, "device": f"{args.world} x {name}",
               "batches": kind, "per_rank_samples": counts, "us": round(ours, 1), "gbps": None, "pct_copy": None,
               "torch_us": None if tt is None else round(tt, 1),
               "vs_torch": None if tt is None else round(tt / ours, 3),
               "single_gpu_us": round(single, 1), "collectives_us": round(coll, 1),
               "collectives_own_comm_us": round(t["own_coll"], 1), "collectives_bytes": 2 * 3 * C * 8,
               "torch_collectives_us": round(t["torch_coll"], 1),
               "torch_collectives_bytes": args.world * (2 * C + 1) * 4 + 2 * C * 4,
               "overhead_ratio": round(ours / (single + coll), 3),
               "us_ranks": [round(pr[1][1]["ours"], 1) for pr in per_rank],
               "torch_us_ranks": None if tt is None else [round(pr[1][1]["torch"], 1) for pr in per_rank],
               "oneflow_us": None, "vs_oneflow": None, "cudnn_us": None, "vs_cudnn": None}
        if tt is None:
            row["torch_note"] = ("not run: with an empty rank and fp16/bf16 input torch.nn.SyncBatchNorm's empty "
                                 "rank all-gathers its zeros in the input's dtype, the others float32")
        rows.append(row)
    os.makedirs(args.out, exist_ok=True)
    doc = {"gpu": gpu, "rows": rows, "note": args.note}
    if errors:
        doc["errors"] = errors
    with open(os.path.join(args.out, f"rows_syncbn{args.tag}.json"), "w") as f:
        json.dump(doc, f, indent=1)
    md = (f"## SyncBatchNorm ({args.world} x {name})\n\nPer rank [{args.batch}, {C}, {HW[0]}, {HW[1]}], BN + add + "
          "ReLU, forward + backward; µs per step (rank 0). overhead = ours / (single-GPU + collectives alone). "
          "Uneven: the last rank holds no sample, the one before it 1, the others the full batch. Collectives "
          "alone: ours two all-reduces of 3C doubles, torch's an all-gather of 2C + 1 floats per rank and an "
          "all-reduce of 2C floats; bytes per rank per step.\n\n"
          "| ranks | dtype | layout | batches | ours µs | single-GPU µs | collectives µs (bytes) | overhead | "
          "torch.nn.SyncBatchNorm µs | its collectives µs (bytes) | vs torch |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|\n")
    for r in rows:
        vs = "—" if r["vs_torch"] is None else f"{r['vs_torch']:.2f}x"
        md += (f"| {r['ranks']} | {r['dtype']} | {r['layout'].upper()} | {r['batches']} "
               f"{'/'.join(map(str, r['per_rank_samples']))} | {r['us']:.1f} | {r['single_gpu_us']:.1f} | "
               f"{r['collectives_us']:.1f} ({r['collectives_bytes']}) | {r['overhead_ratio']:.3f} | "
               f"{fmt_us(r['torch_us'])} | {r['torch_collectives_us']:.1f} ({r['torch_collectives_bytes']}) | "
               f"{vs} |\n")
    with open(os.path.join(args.out, f"rows_syncbn{args.tag}.md"), "w") as f:
        f.write(md)
    print(md)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
