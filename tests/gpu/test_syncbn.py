#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""SyncBatchNorm over NCCL on several GPUs: one process per GPU, the
ncclUniqueId made by rank 0 and handed to the others through a queue, the
communicator made with ncclCommInitRank (ctypes on libnccl) and attached to
the BatchNorm descriptor.

Every rank draws the same full batch (same seed) and keeps its shard; the
SyncBatchNorm results on the shards must equal libfusednorm's single-GPU
BatchNorm on the concatenated batch: y, saved mean / invstd, running
statistics, dx per shard, dz, and dgamma / dbeta (global option; the local
ones must sum to them). Cases: NCHW and NHWC, fp32 and fp16, equal and
unequal per-rank batches, one rank with zero samples, NONE and ADD_RELU.
Also: inputs of mean 1e4 and std 1 (fp32) give the variance within 1e-3
relative; the same shards through torch.nn.SyncBatchNorm (+ add + relu,
torch.distributed with NCCL) agree; a forward + backward captured in a CUDA
graph and replayed three times gives the eager results bit for bit.

Tolerances (|ours - ref| <= atol + rtol * |ref|): the reference is the same
library's single-GPU path, so only the reduction order differs (fp32 partial
sums, double combination): y and dx fp32 2e-5, fp16 2e-3 (one fp16 rounding
apart); saved statistics 1e-5 relative; dgamma / dbeta 1e-4 relative + 1e-4.

World size: all visible GPUs, or FNORM_TEST_WORLD (the same test runs on 4 and
8 GPUs). Exit 77 with fewer than 2 GPUs or without PyTorch.
"""
from __future__ import annotations

import ctypes
import os
import socket
import sys
import traceback

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn.functional as F
except Exception as e:  # noqa: BLE001
    print(f"SKIP: PyTorch is not importable ({type(e).__name__}: {e})")
    sys.exit(77)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # no NVLink multicast on shared hosts
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


def nccl():
    lib = ctypes.CDLL("libnccl.so.2")
    lib.ncclGetUniqueId.argtypes = [ctypes.POINTER(UniqueId)]
    lib.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, UniqueId, ctypes.c_int]
    lib.ncclCommDestroy.argtypes = [ctypes.c_void_p]
    lib.ncclGetErrorString.restype = ctypes.c_char_p
    return lib


class Checker:
    def __init__(self, rank):
        self.rank, self.checks, self.failed = rank, 0, 0

    def close(self, name, got, ref, atol, rtol):
        self.checks += 1
        got, ref = got.double(), ref.double()
        bad = ~((got - ref).abs() <= atol + rtol * ref.abs())
        if bool(bad.any()):
            i = int(bad.flatten().nonzero()[0])
            self.failed += 1
            print(f"FAIL rank {self.rank} {name}: {int(bad.sum())} values off, first at {i}: got "
                  f"{got.flatten()[i].item()!r} ref {ref.flatten()[i].item()!r}", flush=True)

    def equal(self, name, got, ref):
        self.checks += 1
        if not torch.equal(got, ref):
            self.failed += 1
            print(f"FAIL rank {self.rank} {name}: not bit-identical "
                  f"(max diff {(got.double() - ref.double()).abs().max().item():.3g})", flush=True)


def make_batch(shape, dtype, layout, seed, mean=0.0):
    g = torch.Generator(device="cuda")
    g.manual_seed(seed)
    C = shape[1]
    cm = (torch.rand(C, device="cuda", generator=g, dtype=torch.float64) - 0.5) * 4 + mean
    x = (torch.randn(shape, device="cuda", generator=g, dtype=torch.float64) +
         cm.view(1, C, *([1] * (len(shape) - 2)))).to(dtype)
    z = torch.randn(shape, device="cuda", generator=g).to(dtype)
    dy = torch.randn(shape, device="cuda", generator=g).to(dtype)
    if layout == "nhwc":
        x, z, dy = (t.contiguous(memory_format=torch.channels_last) for t in (x, z, dy))
    return x, z, dy


def run_case(fn, comm, ck, rank, world, name, counts, C, hw, dtype, layout, epi, seed):
    offs = [sum(counts[:r]) for r in range(world + 1)]
    shape = [offs[-1], C] + hw
    x, z, dy = make_batch(shape, dtype, layout, seed)
    lo, hi = offs[rank], offs[rank + 1]
    xs, zs, dys = x[lo:hi], z[lo:hi], dy[lo:hi]
    EPI = fn.BnEpilogue.ADD_RELU if epi == "add_relu" else fn.BnEpilogue.NONE
    g = torch.Generator(device="cuda")
    g.manual_seed(seed + 1)
    w = torch.rand(C, device="cuda", generator=g) + 0.5
    b = torch.rand(C, device="cuda", generator=g) - 0.5
    rm0, rv0 = torch.rand(C, device="cuda", generator=g), torch.rand(C, device="cuda", generator=g) + 0.5
    # Reference: the single-GPU path on the whole batch.
    rm_r, rv_r = rm0.clone(), rv0.clone()
    y_r, s_r = fn.batch_norm_train(x, w, b, rm_r, rv_r, epilogue=EPI, z=z if epi == "add_relu" else None)
    dx_r, dg_r, db_r, dz_r = fn.batch_norm_backward(dy, x, w, s_r)
    # SyncBatchNorm on the shard.
    rm, rv = rm0.clone(), rv0.clone()
    y, s = fn.batch_norm_train(xs, w, b, rm, rv, epilogue=EPI, z=zs if epi == "add_relu" else None, comm=comm,
                               sync_flags=fn.BnSyncFlag.GLOBAL_WEIGHT_GRADS)
    dx, dg, db, dz = fn.batch_norm_backward(dys, xs, w, s)
    torch.cuda.synchronize()
    t = 2e-5 if dtype == torch.float32 else 2e-3
    if hi > lo:
        ck.close(f"{name} y", y, y_r[lo:hi], t, t)
        ck.close(f"{name} dx", dx, dx_r[lo:hi], t * 5, t)
        if dz is not None:
            ck.close(f"{name} dz", dz, dz_r[lo:hi], 0, 0)
    ck.close(f"{name} saved mean", s.mean, s_r.mean, 1e-5 * s_r.mean.abs().max(), 1e-5)
    ck.close(f"{name} saved invstd", s.invstd, s_r.invstd, 0, 1e-5)
    ck.close(f"{name} running mean", rm, rm_r, 1e-6, 1e-5)
    ck.close(f"{name} running var", rv, rv_r, 1e-6, 1e-5)
    ck.close(f"{name} dgamma (global)", dg, dg_r, 1e-4, 1e-4)
    ck.close(f"{name} dbeta (global)", db, db_r, 1e-4, 1e-4)
    # Local weight gradients: their sum over the ranks is the global one.
    y2, s2 = fn.batch_norm_train(xs, w, b, None, None, epilogue=EPI, z=zs if epi == "add_relu" else None, comm=comm)
    _, dg_l, db_l, _ = fn.batch_norm_backward(dys, xs, w, s2)
    dist.all_reduce(dg_l)
    dist.all_reduce(db_l)
    ck.close(f"{name} sum of local dgamma", dg_l, dg_r, 1e-4, 1e-4)
    ck.close(f"{name} sum of local dbeta", db_l, db_r, 1e-4, 1e-4)


def worker(rank, world, queue, port, results):
    try:
        torch.cuda.set_device(rank)
        import fusednorm as fn
        lib = nccl()
        uid = UniqueId()
        if rank == 0:
            assert lib.ncclGetUniqueId(ctypes.byref(uid)) == 0
            raw = ctypes.string_at(ctypes.addressof(uid), 128)  # all 128 bytes (.internal stops at a NUL)
            for _ in range(world - 1):
                queue.put(raw)
        else:
            ctypes.memmove(ctypes.addressof(uid), queue.get(timeout=120), 128)
        comm_p = ctypes.c_void_p()
        r = lib.ncclCommInitRank(ctypes.byref(comm_p), world, uid, rank)
        assert r == 0, lib.ncclGetErrorString(r)
        comm = comm_p.value
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                device_id=torch.device("cuda", rank))
        ck = Checker(rank)
        seed = int(os.environ.get("FNORM_TEST_SEED", "1234"))
        cases = 0
        for layout in ("nchw", "nhwc"):
            for dtype in (torch.float32, torch.float16):
                for counts_name, counts in (("equal", [4] * world), ("unequal", [3 + 2 * r for r in range(world)]),
                                            ("zero", [0] + [6] * (world - 1))):
                    for epi in ("none", "add_relu"):
                        cases += 1
                        name = f"{layout} {str(dtype)[6:]} {counts_name} {epi}"
                        print(f"rank {rank}: {name}", flush=True)
                        run_case(fn, comm, ck, rank, world, name, counts, 24, [9, 7], dtype, layout, epi,
                                 seed + cases)
        # Numerics: mean 1e4, std 1, fp32.
        x, _, _ = make_batch([8 * world, 16, 32, 32], torch.float32, "nchw", seed, mean=1e4)
        xs = x[8 * rank:8 * (rank + 1)]
        _, s = fn.batch_norm_train(xs, comm=comm)
        var = 1 / s.invstd.double() ** 2 - 1e-5
        ref = x.double().transpose(0, 1).reshape(16, -1).var(1, unbiased=False)
        ck.close("mean 1e4 std 1: variance", var, ref, 0, 1e-3)
        # torch.nn.SyncBatchNorm (+ add + relu) on the same shards, fp32 NCHW.
        x, z, dy = make_batch([4 * world, 24, 9, 7], torch.float32, "nchw", seed + 99)
        xs, zs, dys = (t[4 * rank:4 * (rank + 1)] for t in (x, z, dy))
        m = torch.nn.SyncBatchNorm(24).cuda()
        xt = xs.clone().requires_grad_(True)
        yt = torch.relu(m(xt) + zs)
        yt.backward(dys)
        y, sv = fn.batch_norm_train(xs, m.weight.detach(), m.bias.detach(), epilogue=fn.BnEpilogue.ADD_RELU, z=zs,
                                    comm=comm)
        dx, _, _, _ = fn.batch_norm_backward(dys, xs, m.weight.detach(), sv)
        ck.close("vs torch.nn.SyncBatchNorm: y", y, yt.detach(), 1e-5, 1e-5)
        ck.close("vs torch.nn.SyncBatchNorm: dx", dx, xt.grad, 1e-4, 1e-4)
        # CUDA graph: a captured forward + backward, replayed, equals eager.
        x, z, dy = make_batch([6 * world, 32, 8, 8], torch.float16, "nhwc", seed + 7)
        xs, zs, dys = (t[6 * rank:6 * (rank + 1)].contiguous(memory_format=torch.channels_last) for t in (x, z, dy))
        w = torch.rand(32, device="cuda") + 0.5
        b = torch.rand(32, device="cuda")
        y_e, s_e = fn.batch_norm_train(xs, w, b, epilogue=fn.BnEpilogue.ADD_RELU, z=zs, comm=comm)
        dx_e, dg_e, _, _ = fn.batch_norm_backward(dys, xs, w, s_e)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        graph = torch.cuda.CUDAGraph()
        out = {}
        with torch.cuda.stream(stream):
            fn.batch_norm_train(xs, w, b, epilogue=fn.BnEpilogue.ADD_RELU, z=zs, comm=comm)  # warm-up
            stream.synchronize()
            with torch.cuda.graph(graph, stream=stream):
                out["y"], out["s"] = fn.batch_norm_train(xs, w, b, epilogue=fn.BnEpilogue.ADD_RELU, z=zs, comm=comm)
                out["dx"], out["dg"], _, _ = fn.batch_norm_backward(dys, xs, w, out["s"])
        for rep in range(3):
            out["y"].fill_(float("nan"))
            out["dx"].fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            ck.equal(f"graph replay {rep}: y", out["y"], y_e)
            ck.equal(f"graph replay {rep}: dx", out["dx"], dx_e)
            ck.equal(f"graph replay {rep}: dgamma", out["dg"], dg_e)
        del graph
        dist.barrier()
        dist.destroy_process_group()
        lib.ncclCommDestroy(comm_p)
        results.put((rank, cases + 3, ck.checks, ck.failed, ""))
    except Exception:  # noqa: BLE001
        results.put((rank, 0, 0, 1, traceback.format_exc()))


def main() -> int:
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        print(f"SKIP: SyncBatchNorm needs 2 GPUs; {torch.cuda.device_count() if torch.cuda.is_available() else 0} "
              "visible")
        return 77
    world = int(os.environ.get("FNORM_TEST_WORLD", torch.cuda.device_count()))
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue, results = ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, world, queue, port, results)) for r in range(world)]
    for p in procs:
        p.start()
    # Report each rank as it finishes; a rank that raised ends the run at once
    # (the others would wait in a collective for it forever).
    import queue as queue_mod
    got = []
    deadline = float(os.environ.get("FNORM_TEST_TIMEOUT", "600"))
    try:
        while len(got) < world:
            item = results.get(timeout=deadline)
            got.append(item)
            if item[4]:
                print(f"rank {item[0]} raised:\n{item[4]}", flush=True)
                break
    except queue_mod.Empty:
        print(f"FAIL: no result from {world - len(got)} rank(s) within {deadline:.0f} s", flush=True)
        got.append((-1, 0, 0, 1, "timeout"))
    for p in procs:
        p.join(timeout=5 if len(got) < world else 60)
        if p.is_alive():
            p.terminate()
    failed = 0
    for rank, cases, checks, nfail, tb in sorted(got):
        print(f"rank {rank}: {cases} cases, {checks} checks, {nfail} failed")
        if tb:
            print(tb)
        failed += nfail
    print(f"syncbn on {world} GPUs: {'all match' if failed == 0 else f'{failed} FAILED'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
