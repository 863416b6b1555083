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

The drop-in module (fusednorm.torch.SyncBatchNorm, with the C++ ops of
FNORM_TORCH_OPS; skipped with a note without them): eager, one training step
per case against float64 BatchNorm of the whole batch and against
torch.nn.SyncBatchNorm (module_cases); under torch.compile(fullgraph=True)
against torch.nn.SyncBatchNorm compiled the same way (compiled_cases;
FNORM_TEST_COMPILE=0 leaves them out).

Tolerances (|ours - ref| <= atol + rtol * |ref|): the reference is the same
library's single-GPU path, so only the reduction order differs (fp32 partial
sums, double combination): y and dx fp32 2e-5, fp16 2e-3 (one fp16 rounding
apart); saved statistics 1e-5 relative; dgamma / dbeta 1e-4 relative + 1e-4.

World size: all visible GPUs, or FNORM_TEST_WORLD (the same test runs on 4 and
8 GPUs). Exit 77 with fewer than 2 GPUs or without PyTorch.
"""
from __future__ import annotations

import copy
import ctypes
import os
import sys
import tempfile
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


# ---- fusednorm.torch.SyncBatchNorm (the drop-in module) ----------------------

TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 4e-2}


def close_rel(ck, name, got, ref, tol):
    """|got - ref| <= tol * max(max|ref|, 1e-3) elementwise."""
    if ref.numel() == 0:
        return
    ck.close(name, got, ref, tol * max(ref.double().abs().max().item(), 1e-3), 0)


def close_agree(ck, name, got, ref, tol, agree):
    """close_rel where `agree` holds: where the two sides' ReLU masks agree.
    torch.nn's relu(bn(x) + z) rounds bn(x) to fp16/bf16 before the sum, ours
    adds in fp32: a sum within a rounding of 0 may take the other side of the
    ReLU (its gradient then differs wholly); at most 0.2% of the elements may."""
    if ref.numel() == 0:
        return
    ck.checks += 1
    off = 1 - agree.double().mean().item()
    if off > 0:
        print(f"NOTE rank {ck.rank} {name}: the ReLU masks differ at {int((~agree).sum())} of {agree.numel()} "
              "elements (compared where they agree)", flush=True)
    if off > 2e-3:
        ck.failed += 1
        print(f"FAIL rank {ck.rank} {name}: the ReLU masks differ at {off:.2%} of the elements", flush=True)
    close_rel(ck, name, got[agree], ref[agree], tol)


def ops_or_skip(rank):
    """fusednorm.torch, or None (the C++ ops are not built: every module would
    be torch.nn's fallback, so the module cases would prove nothing)."""
    import fusednorm.torch as ft
    if not ft.ops_available():
        if rank == 0:
            print(f"SKIP module cases: fusednorm.torch ops not available ({ft.ops_unavailable_reason()}); "
                  "set FNORM_TORCH_OPS", flush=True)
        return None
    return ft


def bn_params(C, seed):
    g = torch.Generator(device="cuda")
    g.manual_seed(seed)
    return (torch.rand(C, device="cuda", generator=g) + 0.5, torch.rand(C, device="cuda", generator=g) - 0.5,
            torch.rand(C, device="cuda", generator=g), torch.rand(C, device="cuda", generator=g) + 0.5)


def set_state(m, w, b, rm, rv):
    with torch.no_grad():
        m.weight.copy_(w)
        m.bias.copy_(b)
        m.running_mean.copy_(rm)
        m.running_var.copy_(rv)


def full_batch_ref(x, z, dy, w, b, rm, rv, fused):
    """torch's BatchNorm (+ add + relu) on the whole batch in float64: y, dx,
    dz, dgamma, dbeta, running mean and var after the step."""
    x64 = x.double().requires_grad_(True)
    w64, b64 = w.double().requires_grad_(True), b.double().requires_grad_(True)
    z64 = z.double().requires_grad_(True) if fused else None
    rm64, rv64 = rm.double(), rv.double()
    y = F.batch_norm(x64, rm64, rv64, w64, b64, True, 0.1, 1e-5)
    if fused:
        y = torch.relu(y + z64)
    y.backward(dy.double())
    return y.detach(), x64.grad, z64.grad if fused else None, w64.grad, b64.grad, rm64, rv64


def module_case(ft, ck, rank, world, name, counts, C, hw, dtype, layout, fused, seed, vs_torch):
    """ft.SyncBatchNorm on this rank's shard against float64 BatchNorm of the
    whole batch (and, where vs_torch, torch.nn.SyncBatchNorm on the shard):
    one training step, eager."""
    offs = [sum(counts[:r]) for r in range(world + 1)]
    x, z, dy = make_batch([offs[-1], C] + hw, dtype, layout, seed)
    lo, hi = offs[rank], offs[rank + 1]
    xs, zs, dys = x[lo:hi], z[lo:hi], dy[lo:hi]
    w, b, rm, rv = bn_params(C, seed + 1)
    tol = TOL[dtype]
    y_r, dx_r, dz_r, dw_r, db_r, rm_r, rv_r = full_batch_ref(x, z, dy, w, b, rm, rv, fused)
    mine = ft.SyncBatchNorm(C, activation="relu" if fused else None).cuda()
    set_state(mine, w, b, rm, rv)
    xo, zo = xs.clone().requires_grad_(True), zs.clone().requires_grad_(fused)
    yo = mine(xo, zo) if fused else mine(xo)
    yo.backward(dys)
    if hi > lo:
        close_rel(ck, f"{name} y", yo, y_r[lo:hi], tol)
        close_rel(ck, f"{name} dx", xo.grad, dx_r[lo:hi], tol)
        if fused:
            close_rel(ck, f"{name} dz", zo.grad, dz_r[lo:hi], tol)
    ck.close(f"{name} running mean", mine.running_mean, rm_r, 1e-5, 1e-4)
    ck.close(f"{name} running var", mine.running_var, rv_r, 1e-5, 1e-4)
    ck.equal(f"{name} num_batches_tracked", mine.num_batches_tracked.cpu(), torch.tensor(1))
    # Weight gradients are local (torch's too): their sum over the ranks is the whole batch's.
    dw = mine.weight.grad if mine.weight.grad is not None else torch.zeros_like(mine.weight)
    db = mine.bias.grad if mine.bias.grad is not None else torch.zeros_like(mine.bias)
    dist.all_reduce(dw)
    dist.all_reduce(db)
    close_rel(ck, f"{name} sum of local dgamma", dw, dw_r, 4 * tol)
    close_rel(ck, f"{name} sum of local dbeta", db, db_r, 4 * tol)
    if not vs_torch:
        return
    ref = torch.nn.SyncBatchNorm(C).cuda()
    set_state(ref, w, b, rm, rv)
    xt, zt = xs.clone().requires_grad_(True), zs.clone().requires_grad_(fused)
    yt = torch.relu(ref(xt) + zt) if fused else ref(xt)
    yt.backward(dys)
    if hi > lo:
        close_rel(ck, f"{name} vs torch.nn.SyncBatchNorm: y", yo, yt, 2 * tol)
        agree = (yo > 0) == (yt > 0) if fused else torch.ones_like(yo, dtype=torch.bool)
        close_agree(ck, f"{name} vs torch.nn.SyncBatchNorm: dx", xo.grad, xt.grad, 2 * tol, agree)
    ck.close(f"{name} vs torch.nn.SyncBatchNorm: running var", mine.running_var, ref.running_var, 1e-5, 1e-4)


def module_cases(ck, rank, world, seed) -> int:
    """The drop-in module, eager, one step each: NCHW (plain) and channels-last
    (BN + add + ReLU fused) in fp32/fp16/bf16, unequal per-rank batches and
    one rank with 1 sample and one with none; [N, C] input with one rank
    holding a single value per channel (and, from 3 ranks, one none). torch.nn.SyncBatchNorm
    is compared too, except with an empty rank and fp16/bf16 input: there
    torch's empty rank all-gathers its zeros in the input's dtype while the
    others send float32 statistics (torch 2.11 nn/modules/_functions.py)."""
    ft = ops_or_skip(rank)
    if ft is None:
        return 0
    n = 0
    one_zero = [1, 0] + [3 + r for r in range(world - 2)]
    for layout in ("nchw", "nhwc"):
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            for cname, counts in (("unequal", [2 + r for r in range(world)]), ("one and zero", one_zero)):
                n += 1
                name = f"module {layout} {str(dtype)[6:]} {cname}{' add_relu' if layout == 'nhwc' else ''}"
                print(f"rank {rank}: {name}", flush=True)
                vs_torch = dtype == torch.float32 or 0 not in counts
                module_case(ft, ck, rank, world, name, counts, 24, [5, 7], dtype, layout, layout == "nhwc",
                            seed + 500 + n, vs_torch)
    # [N, C]: one value per channel on rank 0 (two ranks: the other holds 2,
    # so that the whole batch has more than one).
    counts, cname = (one_zero, "one and zero") if world > 2 else ([1, 2], "one and two")
    for dtype in (torch.float32, torch.float16):
        n += 1
        name = f"module [N, C] {str(dtype)[6:]} {cname}"
        print(f"rank {rank}: {name}", flush=True)
        module_case(ft, ck, rank, world, name, counts, 16, [], dtype, "nchw", False, seed + 600 + n,
                    dtype == torch.float32 or 0 not in counts)
    return n


# ---- the drop-in under torch.compile(fullgraph=True) ---------------------------

def dynamo_ops(graphs):
    return [nd for g in graphs for nd in g.graph.nodes if nd.op == "call_function"]


def compiled_cases(ck, rank, world, seed) -> int:
    """torch.compile(fullgraph=True, inductor) of models holding
    ft.SyncBatchNorm, two training steps each, against torch.nn.SyncBatchNorm
    compiled the same way (with fullgraph=False where Dynamo refuses torch's
    module whole, which rank 0 reports): Conv2d -> SyncBatchNorm -> ReLU fp32
    NCHW with unequal batches; BN + add + ReLU fp16 channels-last with one
    rank holding 1 sample; and ours alone with a rank holding none (float64
    reference: torch's module is not run there, see module_cases). Each of
    our compiled models must be one Dynamo graph holding the library's op with
    a non-zero communicator handle."""
    ft = ops_or_skip(rank)
    if ft is None:
        return 0
    import torch._dynamo
    from torch._dynamo.backends.registry import lookup_backend
    from torch import nn
    inductor = lookup_backend("inductor")
    torch._dynamo.reset()
    torch.backends.cudnn.allow_tf32 = False  # both sides' convolutions in true fp32
    graphs = {}

    def recorder(key):
        def backend(gm, example_inputs):
            graphs.setdefault(key, []).append(gm)
            return inductor(gm, example_inputs)
        return backend

    torch_fullgraph = [True]

    def compile_torch(model, key):
        if torch_fullgraph[0]:
            return torch.compile(model, backend=recorder(key), fullgraph=True)
        return torch.compile(model, backend=recorder(key))

    def run_torch(held, *args):
        """torch's compiled module (held: {"model", "key", "fn"}); if
        fullgraph=True is refused, fullgraph=False from then on (Dynamo runs
        nothing collective while tracing, so every rank can retry alike)."""
        if held.get("fn") is None:
            held["fn"] = compile_torch(held["model"], held["key"])
        try:
            return held["fn"](*args)
        except Exception as e:  # noqa: BLE001
            if not torch_fullgraph[0]:
                raise
            torch_fullgraph[0] = False
            if rank == 0:
                msg = str(e).strip().splitlines()
                print(f"NOTE: torch.nn.SyncBatchNorm under torch.compile(fullgraph=True) refused "
                      f"({type(e).__name__}: {msg[0][:300] if msg else ''}); compared with fullgraph=False",
                      flush=True)
            held["fn"] = compile_torch(held["model"], held["key"])
            return held["fn"](*args)

    class Fused(nn.Module):
        def __init__(self, bn):
            super().__init__()
            self.bn = bn

        def forward(self, x, z):
            return torch.relu(self.bn(x) + z)

    def check_ours(name, key):
        ops = [nd for nd in dynamo_ops(graphs.get(key, [])) if "fusednorm" in str(nd.target)]
        ck.checks += 1
        if len(graphs.get(key, [])) != 1 or not ops or any(nd.args[10] == 0 for nd in ops):
            ck.failed += 1
            print(f"FAIL rank {rank} {name}: {len(graphs.get(key, []))} Dynamo graph(s), library ops "
                  f"{[str(nd.target) for nd in ops]}, comm args {[nd.args[10] for nd in ops]}", flush=True)

    n = 0
    # (a) Conv2d -> SyncBatchNorm -> ReLU, fp32 NCHW, unequal batches.
    n += 1
    name = "compiled conv-bn-relu fp32 nchw unequal"
    print(f"rank {rank}: {name}", flush=True)
    C, cnt = 16, 2 + rank
    torch.manual_seed(seed + 700)
    ref = nn.Sequential(nn.Conv2d(4, C, 3, padding=1), nn.SyncBatchNorm(C), nn.ReLU()).cuda()
    w, b, rm, rv = bn_params(C, seed + 701)
    set_state(ref[1], w, b, rm, rv)
    mine = nn.Sequential(nn.Conv2d(4, C, 3, padding=1), ft.SyncBatchNorm(C), nn.ReLU()).cuda()
    mine.load_state_dict(ref.state_dict())
    co = torch.compile(mine, backend=recorder("a ours"), fullgraph=True)
    held = {"model": ref, "key": "a torch"}
    refe = copy.deepcopy(ref)  # torch's, eager: tells a compiled torch's error from ours
    for step in range(2):
        g = torch.Generator(device="cuda")
        g.manual_seed(seed + 710 + 10 * step + rank)
        x = torch.randn(cnt, 4, 9, 11, device="cuda", generator=g)
        dy = torch.randn(cnt, C, 9, 11, device="cuda", generator=g)
        xo, xt, xe = (x.clone().requires_grad_(True) for _ in range(3))
        yo = co(xo)
        yt = run_torch(held, xt)
        ye = refe(xe)
        yo.backward(dy)
        yt.backward(dy)
        ye.backward(dy)
        close_rel(ck, f"{name} step {step} y", yo, yt, 1e-4)
        close_rel(ck, f"{name} step {step} dx", xo.grad, xt.grad, 1e-4)
        close_rel(ck, f"{name} step {step} y vs torch eager", yo, ye, 1e-4)
        close_rel(ck, f"{name} step {step} dx vs torch eager", xo.grad, xe.grad, 1e-4)
    close_rel(ck, f"{name} conv dweight", mine[0].weight.grad, ref[0].weight.grad, 4e-4)
    close_rel(ck, f"{name} bn dgamma", mine[1].weight.grad, ref[1].weight.grad, 4e-4)
    close_rel(ck, f"{name} bn dbeta", mine[1].bias.grad, ref[1].bias.grad, 4e-4)
    ck.close(f"{name} running mean", mine[1].running_mean, ref[1].running_mean, 1e-5, 1e-4)
    ck.close(f"{name} running var", mine[1].running_var, ref[1].running_var, 1e-5, 1e-4)
    check_ours(name, "a ours")
    # (b) BN + add + ReLU (ours fused), fp16 channels-last, rank 0 with one sample.
    n += 1
    name = "compiled bn-add-relu fp16 nhwc one sample"
    print(f"rank {rank}: {name}", flush=True)
    C = 32
    counts = [1] + [3 + r for r in range(world - 1)]
    w, b, rm, rv = bn_params(C, seed + 801)
    refm = Fused(nn.SyncBatchNorm(C)).cuda()
    set_state(refm.bn, w, b, rm, rv)
    mine = ft.SyncBatchNorm(C, activation="relu").cuda()
    set_state(mine, w, b, rm, rv)
    co = torch.compile(mine, backend=recorder("b ours"), fullgraph=True)
    held = {"model": refm, "key": "b torch"}
    refe = copy.deepcopy(refm)
    dw_r = 0
    for step in range(2):
        offs = [sum(counts[:r]) for r in range(world + 1)]
        x, z, dy = make_batch([offs[-1], C, 6, 10], torch.float16, "nhwc", seed + 810 + step)
        xs, zs, dys = (t[offs[rank]:offs[rank + 1]] for t in (x, z, dy))
        xo, zo = xs.clone().requires_grad_(True), zs.clone().requires_grad_(True)
        xt, zt = xs.clone().requires_grad_(True), zs.clone().requires_grad_(True)
        xe, ze = xs.clone().requires_grad_(True), zs.clone().requires_grad_(True)
        yo = co(xo, zo)
        yt = run_torch(held, xt, zt)
        ye = refe(xe, ze)
        dw_r = dw_r + full_batch_ref(x, z, dy, w, b, rm, rv, True)[3]
        yo.backward(dys)
        yt.backward(dys)
        ye.backward(dys)
        close_rel(ck, f"{name} step {step} y vs torch eager", yo, ye, 2e-2)
        agree = (yo > 0) == (ye > 0)
        close_agree(ck, f"{name} step {step} dx vs torch eager", xo.grad, xe.grad, 2e-2, agree)
        close_rel(ck, f"{name} step {step} y", yo, yt, 2e-2)
        agree = (yo > 0) == (yt > 0)
        close_agree(ck, f"{name} step {step} dx", xo.grad, xt.grad, 2e-2, agree)
        close_agree(ck, f"{name} step {step} dz", zo.grad, zt.grad, 2e-2, agree)
    # dgamma against float64 of the whole batch: a ReLU mask torch's rounding
    # flips moves a local sum by a whole dy * x_hat, more than the tolerance.
    dw = mine.weight.grad.clone()
    dist.all_reduce(dw)
    close_rel(ck, f"{name} sum of local dgamma", dw, dw_r, 4e-2)
    ck.close(f"{name} running var", mine.running_var, refm.bn.running_var, 1e-4, 1e-3)
    check_ours(name, "b ours")
    # (c) ours alone, a rank without samples, fp16 channels-last, float64 reference.
    n += 1
    name = "compiled bn-add-relu fp16 nhwc one and zero"
    print(f"rank {rank}: {name}", flush=True)
    counts = [1, 0] + [3 + r for r in range(world - 2)]
    offs = [sum(counts[:r]) for r in range(world + 1)]
    x, z, dy = make_batch([offs[-1], C, 6, 10], torch.float16, "nhwc", seed + 900)
    lo, hi = offs[rank], offs[rank + 1]
    w, b, rm, rv = bn_params(C, seed + 901)
    y_r, dx_r, dz_r, dw_r, _, rm_r, rv_r = full_batch_ref(x, z, dy, w, b, rm, rv, True)
    mine = ft.SyncBatchNorm(C, activation="relu").cuda()
    set_state(mine, w, b, rm, rv)
    co = torch.compile(mine, backend=recorder("c ours"), fullgraph=True)
    xo, zo = x[lo:hi].clone().requires_grad_(True), z[lo:hi].clone().requires_grad_(True)
    yo = co(xo, zo)
    yo.backward(dy[lo:hi])
    if hi > lo:
        close_rel(ck, f"{name} y", yo, y_r[lo:hi], 1e-2)
        close_rel(ck, f"{name} dx", xo.grad, dx_r[lo:hi], 1e-2)
        close_rel(ck, f"{name} dz", zo.grad, dz_r[lo:hi], 1e-2)
    ck.close(f"{name} running var", mine.running_var, rv_r, 1e-5, 1e-3)
    dw = mine.weight.grad if mine.weight.grad is not None else torch.zeros_like(mine.weight)
    dist.all_reduce(dw)
    close_rel(ck, f"{name} sum of local dgamma", dw, dw_r, 4e-2)
    check_ours(name, "c ours")
    torch.backends.cudnn.allow_tf32 = True
    if rank == 0:
        print(f"compiled: torch.nn.SyncBatchNorm compiled with fullgraph={torch_fullgraph[0]}; Dynamo graphs "
              f"{ {k: len(v) for k, v in graphs.items()} }", flush=True)
    return n


def worker(rank, world, queue, init, results):
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
        dist.init_process_group("nccl", init_method=init, rank=rank, world_size=world,
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
        cases += 3
        cases += module_cases(ck, rank, world, seed)
        if os.environ.get("FNORM_TEST_COMPILE", "1") != "0":
            cases += compiled_cases(ck, rank, world, seed)
        dist.barrier()
        dist.destroy_process_group()
        lib.ncclCommDestroy(comm_p)
        results.put((rank, cases, ck.checks, ck.failed, ""))
    except Exception:  # noqa: BLE001
        results.put((rank, 0, 0, 1, traceback.format_exc()))


def main() -> int:
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        print(f"SKIP: SyncBatchNorm needs 2 GPUs; {torch.cuda.device_count() if torch.cuda.is_available() else 0} "
              "visible")
        return 77
    world = int(os.environ.get("FNORM_TEST_WORLD", torch.cuda.device_count()))
    # A file rendezvous: a free TCP port picked here could be taken before rank 0
    # listens on it (the ranks' NCCL bootstrap opens ephemeral ports meanwhile).
    init = "file://" + tempfile.mktemp(prefix="fnorm-rdv-")
    ctx = mp.get_context("spawn")
    queue, results = ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, world, queue, init, results)) for r in range(world)]
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
