#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""fusednorm.torch against torch.nn (and Liger-Kernel) in one process.

Rows (DIR/rows_torch.json, {"rows": [...]}, merged by merge_results.py):
- op "host_overhead": CPU microseconds per call of a module's forward, and
  of forward + backward, at a small shape: many calls in a loop with no
  synchronization inside (the GPU keeps up at these shapes, so the loop
  measures the host), median of 5 loops; against the torch.nn twin (BN+ReLU
  and BN+Add+ReLU against BN, add and ReLU modules). vs_torch = torch / ours.
- op "train_step": median milliseconds of a whole training step (forward,
  loss, backward, optimizer step; synchronized each step) of
  (a) a channels-last fp16 ResNet-style model (BN+ReLU, BN+Add+ReLU),
  (b) a 4-layer pre-norm MLP, d = 1024, 4096 tokens, bf16, LayerNorm,
  (c) the same with RMSNorm, (d) the LayerNorm MLP at d = 8192;
  ours = fusednorm.torch.convert(model, fuse=True) against the unconverted
  model, and for (b)-(d) the model with Liger-Kernel's LigerLayerNorm /
  LigerRMSNorm swapped in (liger_ms, vs_liger), when liger_kernel imports;
  (e) GPT-2-style and Llama-style transformer stacks (bf16 parameters,
  AdamW (fused), causal SDPA attention, micro-batches of 4-8 K tokens,
  d = 768 ... 4096): torch.nn, norms only swapped (norm_only_ms), fully
  converted with fuse=True (ms: Linear+GELU epilogues, fusednorm Linear);
  (f) ResNet-50 (bottleneck blocks, channels-last, torch.autocast fp16 and
  bf16, SGD with momentum) at batch 64, 224x224, fuse=True.
- op "train_step_profile": for (e) and (f), GPU time per step by kernel
  family from torch.profiler (norm: every normalization kernel, PyTorch's
  gamma/beta-gradient kernels and cuDNN's BatchNorm included; gemm/conv;
  attention; optimizer; other), torch.nn against the fully converted model,
  and norm_vs_torch = ours / torch's norm-kernel time.
- op "hf_train_step": Hugging Face transformers models' training steps,
  torch / convert / convert(fuse=True) / Liger-Kernel, eager and compiled
  (bench_hf.py says how; --only hf, --hf-modes, --hf-models, --hf-tokens).
Usage: bench_torch.py --out DIR [--quick] [--only host|train|llm|hf]
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import fusednorm.torch as ft  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "tests", "common"))
from torch_models import BasicBlock as Block  # noqa: E402

DEV = torch.device("cuda")
SKIP = set()  # --skip


def gpu_tag(name: str) -> str:
    n = name.lower()
    for tag in ("h200", "h100", "a100", "l40s", "b200"):
        if tag in n:
            return tag
    return "".join(c for c in n if c.isalnum())[:16] or "gpu"


# ---- host overhead ------------------------------------------------------------

def _batch_us(fn, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    us = (time.perf_counter() - t0) / calls * 1e6
    torch.cuda.synchronize()
    return us


def host_us(fn, calls: int, loops: int = 3) -> float:
    for _ in range(max(50, calls // 10)):
        fn()
    torch.cuda.synchronize()
    return statistics.median(_batch_us(fn, calls) for _ in range(loops))


def host_pair_us(fa, fb, calls: int, rounds: int = 7) -> tuple[float, float]:
    """Host us per call of fa and fb, batches of the two alternating, the
    median of each: the host's state drifts (torch.nn's own LayerNorm
    forward+backward took 213 us in one run and 310 in another, two H100
    VMs of one kind), and alternating puts both sides under the same drift."""
    for f in (fa, fb):
        for _ in range(max(50, calls // 10)):
            f()
    torch.cuda.synchronize()
    a, b = [], []
    for _ in range(rounds):
        a.append(_batch_us(fa, calls))
        b.append(_batch_us(fb, calls))
    return statistics.median(a), statistics.median(b)


class Add(nn.Module):
    def forward(self, a, b):
        return a + b


def overhead_cases():
    """(name, dtype, shape, ours, torch twin (a callable of (x, z)), needs z)."""
    d = 1024
    cases = []
    ln_t = nn.LayerNorm(d).to(DEV, torch.bfloat16)
    ln_o = ft.LayerNorm(d).to(DEV, torch.bfloat16)
    cases.append(("LayerNorm", "bf16", (16, d), ln_o, lambda x, z: ln_t(x), False))
    rms_t = nn.RMSNorm(d).to(DEV, torch.bfloat16)
    rms_o = ft.RMSNorm(d).to(DEV, torch.bfloat16)
    cases.append(("RMSNorm", "bf16", (16, d), rms_o, lambda x, z: rms_t(x), False))
    for act, with_z in ((None, False), ("relu", False), ("relu", True)):
        bn_t = nn.BatchNorm2d(64).to(DEV)
        bn_o = ft.BatchNorm2d(64, activation=act).to(DEV)
        relu = nn.ReLU()
        add = Add()
        name = "BatchNorm2d" + ("+Add" if with_z else "") + ("+ReLU" if act else "")
        if with_z:
            twin = (lambda bt, r, a: lambda x, z: r(a(bt(x), z)))(bn_t, relu, add)
        elif act:
            twin = (lambda bt, r: lambda x, z: r(bt(x)))(bn_t, relu)
        else:
            twin = (lambda bt: lambda x, z: bt(x))(bn_t)
        cases.append((name, "fp16 NHWC", (8, 64, 8, 8), bn_o, twin, with_z))
    bn1_t, bn1_o = nn.BatchNorm1d(256).to(DEV), ft.BatchNorm1d(256).to(DEV)
    cases.append(("BatchNorm1d", "fp16", (32, 256), bn1_o, lambda x, z: bn1_t(x), False))
    sbn_t, sbn_o = nn.SyncBatchNorm(64).to(DEV), ft.SyncBatchNorm(64).to(DEV)
    cases.append(("SyncBatchNorm (1 rank)", "fp16 NHWC", (8, 64, 8, 8), sbn_o, lambda x, z: sbn_t(x), False))
    for act in (None, "relu", "gelu_tanh"):
        lin_t = nn.Linear(256, 256).to(DEV, torch.bfloat16)
        lin_o = ft.Linear(256, 256, activation=act).to(DEV, torch.bfloat16)
        a = {None: nn.Identity(), "relu": nn.ReLU(), "gelu_tanh": nn.GELU(approximate="tanh")}[act]
        cases.append(("Linear" + (f"+{act}" if act else ""), "bf16", (16, 256), lin_o,
                      (lambda lt, aa: lambda x, z: aa(lt(x)))(lin_t, a), False))
    return cases


def host_profile(calls: int):
    """Where a LayerNorm / RMSNorm call's host time goes (bf16 16 x 1024), each
    layer timed alone: the C ABI through ctypes (its argument conversion is
    measured apart with a call of fnorm_get_version), our op through
    torch.ops (schema-driven argument parsing) and through the extension's
    pybind11 entry, the module; and torch's counterparts."""
    import ctypes
    import fusednorm as fn
    from fusednorm.torch import _ops
    rows = []
    d = 1024
    x = torch.randn(16, d, device=DEV, dtype=torch.bfloat16)
    w = torch.ones(d, device=DEV, dtype=torch.bfloat16)
    b = torch.zeros(d, device=DEV, dtype=torch.bfloat16)
    y = torch.empty_like(x)
    mean = torch.empty(16, device=DEV)
    rstd = torch.empty(16, device=DEV)
    dx = torch.empty_like(x)
    dg, db = torch.empty_like(w), torch.empty_like(b)
    h = fn._handle_for(0)
    xd = fn._tensor_desc(fn.DType.BFLOAT16, (16, d), (d, 1))
    wd = fn._tensor_desc(fn.DType.BFLOAT16, (d,), (1,))
    st = torch.cuda.current_stream().cuda_stream
    L = fn.lib
    for mode, name in ((fn.NormMode.LAYERNORM, "LayerNorm"), (fn.NormMode.RMSNORM, "RMSNorm")):
        nd = fn._norm_desc(mode, -1, 1e-5, 0)
        ln = mode == fn.NormMode.LAYERNORM
        ws_n = fn.norm_bwd_workspace_size(h, nd, xd, wd)
        ws = torch.empty(max(ws_n, 1), dtype=torch.uint8, device=DEV)
        fwd_args = (h.ptr, st, nd.ptr, xd.ptr, x.data_ptr(), None, None, wd.ptr, w.data_ptr(),
                    b.data_ptr() if ln else None, xd.ptr, y.data_ptr(), mean.data_ptr() if ln else None,
                    rstd.data_ptr(), None, 0)
        bwd_args = (h.ptr, st, nd.ptr, xd.ptr, x.data_ptr(), xd.ptr, y.data_ptr(), mean.data_ptr() if ln else None,
                    rstd.data_ptr(), wd.ptr, w.data_ptr(), None, xd.ptr, dx.data_ptr(), dg.data_ptr(),
                    db.data_ptr() if ln else None, ws.data_ptr(), ws_n)
        f_fwd, f_bwd = L.fnorm_norm_fwd, L.fnorm_norm_bwd
        m = ft.LayerNorm(d) if ln else ft.RMSNorm(d, eps=1e-5)
        m = m.to(DEV, torch.bfloat16)
        tm = (nn.LayerNorm(d) if ln else nn.RMSNorm(d, eps=1e-5)).to(DEV, torch.bfloat16)
        op_fwd = torch.ops.fusednorm.norm_fwd.default
        op_bwd = torch.ops.fusednorm.norm_bwd.default
        bb = b if ln else None
        _, sm, sr = op_fwd(x, w, bb, int(mode), 1, 1e-5)
        xg = x.clone().requires_grad_()
        steps = [
            ("ctypes call alone (fnorm_get_version)", lambda: L.fnorm_get_version()),
            ("C ABI fwd (ctypes)", lambda: f_fwd(*fwd_args)),
            ("C ABI bwd (ctypes)", lambda: f_bwd(*bwd_args)),
            ("op norm_fwd (torch.ops)", lambda: op_fwd(x, w, bb, int(mode), 1, 1e-5)),
            ("op norm_bwd (torch.ops)", lambda: op_bwd(y, x, sm, sr, w, bb, int(mode), 1, True, ln)),
            ("ext.norm no grad (pybind11)", lambda: _ops.ext.norm(x, w, bb, (d,), 1e-5, int(mode), False)),
            ("module forward, no grad", lambda: m(x)),
            ("module forward, grad", lambda: m(xg)),
            ("torch module forward, grad", lambda: tm(xg)),
            ("torch one kernel (x.zero_ on a copy)", lambda: y.zero_()),
        ]
        if ln:
            steps += [("torch aten.native_layer_norm (torch.ops)",
                       lambda: torch.ops.aten.native_layer_norm.default(x, [d], w, b, 1e-5)),
                      ("torch F.layer_norm, no grad", lambda: F.layer_norm(x, (d,), w, b, 1e-5))]
        for what, f in steps:
            with torch.no_grad() if "no grad" in what or "C ABI" in what or "op " in what else torch.enable_grad():
                us = host_us(f, calls)
            rows.append({"op": "host_profile", "module": name, "step": what, "dtype": "bf16", "shape": [16, d],
                         "us": round(us, 2)})
            print(f"profile {name:9s} {what:44s} {us:6.2f} us", flush=True)
    return rows


def bench_overhead(quick: bool):
    rows = []
    calls = 300 if quick else 1000
    # Warm up the whole path once (lazy initialisations), then measure.
    for _, _, shape, ours, twin, with_z in overhead_cases()[:2]:
        x = torch.randn(shape, device=DEV, dtype=torch.bfloat16)
        host_us(lambda: ours(x), 200, loops=1)
        host_us(lambda: twin(x, None), 200, loops=1)
    for name, dt, shape, ours, twin, with_z in overhead_cases():
        dtype = torch.bfloat16 if dt.startswith("bf16") else torch.float16
        x = torch.randn(shape, device=DEV, dtype=dtype)
        if "NHWC" in dt:
            x = x.contiguous(memory_format=torch.channels_last)
        z = torch.randn_like(x) if with_z else None
        xg = x.clone().requires_grad_()
        dy = torch.randn_like(x)
        # A SyncBatchNorm outside torch.distributed is a BatchNorm for both.
        f_ours = lambda: ours(x, z) if z is not None else ours(x)  # noqa: E731
        f_torch = lambda: twin(x, z)  # noqa: E731
        b_ours = lambda: (ours(xg, z) if z is not None else ours(xg)).backward(dy)  # noqa: E731
        b_torch = lambda: twin(xg, z).backward(dy)  # noqa: E731
        for kind, fo, fto in (("fwd", f_ours, f_torch), ("fwd+bwd", b_ours, b_torch)):
            uo, ut = host_pair_us(fo, fto, calls // 2)
            rows.append({"op": "host_overhead", "module": name, "pass": kind, "dtype": dt, "shape": list(shape),
                         "us": round(uo, 2), "torch_us": round(ut, 2), "vs_torch": round(ut / uo, 3)})
            print(f"host {name:24s} {kind:8s} ours {uo:6.2f} us  torch {ut:6.2f} us  x{ut / uo:.2f}", flush=True)
    rows += host_profile(calls)
    return rows


# ---- training steps -------------------------------------------------------------

class ResNetStyle(nn.Module):
    def __init__(self, width=64, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.layers = nn.Sequential(Block(width, width, 1), Block(width, width, 1), Block(width, 2 * width, 2),
                                    Block(2 * width, 2 * width, 1), Block(2 * width, 4 * width, 2),
                                    Block(4 * width, 4 * width, 1))
        self.fc = nn.Linear(4 * width, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1).float())


def resnet_fp16():
    """Convolutions in fp16, BatchNorm parameters and statistics in fp32 (the
    usual mixed-precision BN), channels-last."""
    m = ResNetStyle().to(DEV).to(memory_format=torch.channels_last)
    for mod in m.modules():
        if isinstance(mod, nn.Conv2d):
            mod.half()
    return m


class MLPBlock(nn.Module):
    def __init__(self, d, norm):
        super().__init__()
        self.norm = norm
        self.fc1 = nn.Linear(d, 4 * d)
        self.act = nn.GELU(approximate="tanh")
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


def mlp(d, norm_factory, layers=4):
    return nn.Sequential(*[MLPBlock(d, norm_factory(d)) for _ in range(layers)]).to(DEV, torch.bfloat16)


def liger_variant(model, kind):
    from liger_kernel.transformers import LigerLayerNorm, LigerRMSNorm
    m = copy.deepcopy(model)
    for blk in m:
        old = blk.norm
        if kind == "layernorm":
            new = LigerLayerNorm(old.normalized_shape[0], eps=old.eps, bias=True)
            new.load_state_dict(old.state_dict())
        else:
            new = LigerRMSNorm(old.normalized_shape[0], eps=old.eps)
            new.load_state_dict(old.state_dict())
        blk.norm = new.to(DEV, torch.bfloat16)
    return m


def step_ms(model, make_batch, steps, warmup):
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    times, losses = [], []
    for i in range(warmup + steps):
        x, loss_fn = make_batch(i)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = loss_fn(model(x))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append((time.perf_counter() - t0) * 1e3)
            losses.append(loss.item())
    return statistics.median(times), losses


def bench_train(quick: bool):
    rows = []
    steps, warmup = (10, 5) if quick else (20, 6)

    def interleave(models, make_batch):
        """Median ms per model, three rounds interleaved (clock and placement
        drift spread over all)."""
        res = {k: [] for k in models}
        loss = {}
        for _ in range(3):
            for k, m in models.items():
                ms, losses = step_ms(m, make_batch, steps, warmup)
                res[k].append(ms)
                loss[k] = losses[-1]
        return {k: statistics.median(v) for k, v in res.items()}, loss

    # (a) ResNet-style
    torch.manual_seed(0)
    ref = resnet_fp16()
    ours = ft.convert(copy.deepcopy(ref), fuse=True)
    g = torch.Generator(device=DEV).manual_seed(0)
    xs = [torch.randn(128, 3, 32, 32, device=DEV, generator=g).half().contiguous(memory_format=torch.channels_last)
          for _ in range(4)]
    ts = [torch.randint(0, 10, (128,), device=DEV, generator=g) for _ in range(4)]
    ms, loss = interleave({"torch": ref, "ours": ours},
                          lambda i: (xs[i % 4], lambda out, t=ts[i % 4]: F.cross_entropy(out, t)))
    rows.append({"op": "train_step", "model": "(a) ResNet-style, channels-last fp16, BN+ReLU and BN+Add+ReLU",
                 "shape": [128, 3, 32, 32], "dtype": "fp16", "ms": round(ms["ours"], 3),
                 "torch_ms": round(ms["torch"], 3), "vs_torch": round(ms["torch"] / ms["ours"], 3),
                 "fused_epilogues": ours.fused_epilogues, "last_loss": loss["ours"], "torch_last_loss": loss["torch"]})
    print(rows[-1], flush=True)
    del ref, ours
    torch.cuda.empty_cache()

    # (b)-(d) pre-norm MLPs
    for tag, d, kind in (("(b)", 1024, "layernorm"), ("(c)", 1024, "rmsnorm"), ("(d)", 8192, "layernorm")):
        if tag.strip("()") in SKIP:
            continue
        torch.manual_seed(0)
        factory = (lambda n: nn.LayerNorm(n)) if kind == "layernorm" else (lambda n: nn.RMSNorm(n, eps=1e-6))
        ref = mlp(d, factory)
        ours = ft.convert(copy.deepcopy(ref), fuse=True)
        models = {"torch": ref, "ours": ours, "ours_norm_only": ft.convert(copy.deepcopy(ref), fuse=True, linear=False)}
        liger_err = None
        try:
            models["liger"] = liger_variant(ref, kind)
        except Exception as e:  # noqa: BLE001 - no liger here: the row says why
            liger_err = f"{type(e).__name__}: {e}"
        x = torch.randn(4096, d, device=DEV, dtype=torch.bfloat16, generator=torch.Generator(DEV).manual_seed(1))
        ms, loss = interleave(models, lambda i: (x, lambda out: out.float().square().mean()))
        row = {"op": "train_step", "model": f"{tag} 4-layer pre-norm MLP, {kind}, d={d}, 4096 tokens, bf16",
               "shape": [4096, d], "dtype": "bf16", "ms": round(ms["ours"], 3), "torch_ms": round(ms["torch"], 3),
               "vs_torch": round(ms["torch"] / ms["ours"], 3), "fused_epilogues": ours.fused_epilogues,
               "last_loss": loss["ours"], "torch_last_loss": loss["torch"],
               "norm_only_ms": round(ms["ours_norm_only"], 3),
               "norm_only_vs_torch": round(ms["torch"] / ms["ours_norm_only"], 3)}
        if "liger" in ms:
            row.update(liger_ms=round(ms["liger"], 3), vs_liger=round(ms["liger"] / ms["ours"], 3),
                       liger_last_loss=loss["liger"])
        else:
            row["liger_error"] = liger_err
        rows.append(row)
        print(row, flush=True)
        del models, ref, ours
        torch.cuda.empty_cache()
    return rows


# ---- transformer stacks and ResNet-50 (issue 25 target 4, issue 29 target 4) -----------

class Attention(nn.Module):
    """Causal self-attention through SDPA (FX-traceable: no shape unpacking)."""

    def __init__(self, d, heads, bias):
        super().__init__()
        self.heads, self.hd = heads, d // heads
        self.qkv = nn.Linear(d, 3 * d, bias=bias)
        self.proj = nn.Linear(d, d, bias=bias)

    def forward(self, x):
        q, k, v = self.qkv(x).unflatten(-1, (3, self.heads, self.hd)).permute(2, 0, 3, 1, 4).unbind(0)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(o.transpose(1, 2).flatten(-2))


class GPTBlock(nn.Module):
    """GPT-2: pre-LayerNorm (with bias), attention, MLP 4d with GELU (tanh)."""

    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = Attention(d, heads, True)
        self.fc = nn.Linear(d, 4 * d)
        self.act = nn.GELU(approximate="tanh")
        self.out = nn.Linear(4 * d, d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.out(self.act(self.fc(self.ln2(x))))


class LlamaBlock(nn.Module):
    """Llama: pre-RMSNorm, attention and SwiGLU MLP without biases."""

    def __init__(self, d, heads, ffn):
        super().__init__()
        self.n1, self.n2 = nn.RMSNorm(d, eps=1e-5), nn.RMSNorm(d, eps=1e-5)
        self.attn = Attention(d, heads, False)
        self.gate = nn.Linear(d, ffn, bias=False)
        self.up = nn.Linear(d, ffn, bias=False)
        self.down = nn.Linear(ffn, d, bias=False)

    def forward(self, x):
        x = x + self.attn(self.n1(x))
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Stack(nn.Module):
    def __init__(self, blocks, d, final):
        super().__init__()
        self.blocks = nn.Sequential(*blocks)
        self.final = final

    def forward(self, x):
        return self.final(self.blocks(x))


def llm_configs(quick: bool):
    """(name, factory, batch, seq, d): micro-batches of 4-8 K tokens."""
    cfgs = [
        ("GPT-2 small-width, 4 layers, d=768, 12 heads", lambda: Stack([GPTBlock(768, 12) for _ in range(4)], 768,
                                                                       nn.LayerNorm(768)), 4, 1024, 768),
        ("GPT-style, 2 layers, d=2048, 16 heads", lambda: Stack([GPTBlock(2048, 16) for _ in range(2)], 2048,
                                                                nn.LayerNorm(2048)), 8, 1024, 2048),
        ("Llama-style, 2 layers, d=2048, ffn 5632, 16 heads", lambda: Stack(
            [LlamaBlock(2048, 16, 5632) for _ in range(2)], 2048, nn.RMSNorm(2048, eps=1e-5)), 2, 2048, 2048),
        ("Llama-style, 1 layer, d=4096, ffn 11008, 32 heads", lambda: Stack(
            [LlamaBlock(4096, 32, 11008)], 4096, nn.RMSNorm(4096, eps=1e-5)), 2, 4096, 4096),
    ]
    return cfgs[:2] if quick else cfgs


_NORM_KEYS = ("layer_norm", "layernorm", "rms_norm", "rmsnorm", "batch_norm", "batchnorm", "gammabeta",
              "gamma_beta", "welford", "bn_fw", "bn_bw", "rowwisemoments", "computeinternalgradients",
              "computegradientfusedparams", "cunorm", "cucomputepartgradgammabeta", "cucomputegradgammabeta")


def kernel_family(name: str) -> str:
    """A kernel's family by its (demangled) name: the library's kernels are
    in namespace fnorm (its fully-connected layer's own kernels, epilogue
    passes beside cuBLASLt, count as other)."""
    n = name.lower()
    if "fnorm::" in n:
        return "other" if ("linear" in n or "column_sums" in n) else "norm"
    if any(k in n for k in ("flash", "fmha", "attention", "sdpa", "attn")):
        return "attention"
    if "normal" not in n.replace("normalization", "") and any(k in n for k in _NORM_KEYS):
        return "norm"
    if any(k in n for k in ("gemm", "xmma", "cutlass", "nvjet", "cublas", "wgmma", "conv", "implicit", "s16816",
                            "h16816", "sm90_", "sm80_", "winograd", "fft")):
        return "gemm/conv"
    if any(k in n for k in ("adam", "multi_tensor", "foreach", "sgd")):
        return "optimizer"
    return "other"


def profile_step(step, steps=2):
    """GPU microseconds per step by kernel family (torch.profiler, CUDA
    activity), and the norm kernels' names."""
    from torch.profiler import ProfilerActivity, profile
    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    fam = {"norm": 0.0, "gemm/conv": 0.0, "attention": 0.0, "optimizer": 0.0, "other": 0.0}
    norm_names = {}
    for e in prof.key_averages():
        if not str(getattr(e, "device_type", "")).endswith("CUDA"):
            continue
        t = getattr(e, "self_device_time_total", None)
        if t is None:
            t = getattr(e, "self_cuda_time_total", 0.0)
        f = kernel_family(e.key)
        fam[f] += t / steps
        if f == "norm":
            norm_names[e.key[:90]] = round(t / steps, 1)
    fam = {k: round(v, 1) for k, v in fam.items()}
    fam["total"] = round(sum(fam.values()), 1)
    return fam, norm_names


def interleaved_step_ms(step_fns, rounds, warmup, steps):
    """Median ms per step of each variant (dict name -> step function that
    returns the loss), the variants taking turns each round so that clock
    and thermal drift fall on all of them; and each one's last loss."""
    res = {k: [] for k in step_fns}
    loss = {}
    for _ in range(rounds):
        for k, fnc in step_fns.items():
            for _ in range(warmup):
                fnc()
            torch.cuda.synchronize()
            ts = []
            for _ in range(steps):
                t0 = time.perf_counter()
                lv = fnc()
                torch.cuda.synchronize()
                ts.append((time.perf_counter() - t0) * 1e3)
            res[k].append(statistics.median(ts))
            loss[k] = lv.item()
    return {k: statistics.median(v) for k, v in res.items()}, loss


def profile_rows(model, step_fns, steps, label):
    """train_step_profile rows for torch.nn and the converted model; the
    second carries norm_vs_torch (ours / torch's norm-kernel time)."""
    rows, prof = [], {}
    for k in ("torch", "ours"):
        fam, names = profile_step(step_fns[k], steps=steps)
        prof[k] = fam
        rows.append({"op": "train_step_profile", "model": model, "variant": k, "us_per_step": fam,
                     "norm_kernels": names})
    rows[-1]["norm_vs_torch"] = round(prof["ours"]["norm"] / max(prof["torch"]["norm"], 1e-9), 3)
    print("profile", label, prof, "norm ours/torch", rows[-1]["norm_vs_torch"], flush=True)
    return rows


def bench_llm(quick: bool):
    rows = []
    steps, warmup, rounds = (6, 3, 2) if quick else (12, 4, 3)
    for name, factory, batch, seq, d in llm_configs(quick):
        torch.manual_seed(0)
        ref = factory().to(DEV, torch.bfloat16)
        models = {"torch": ref,
                  "norm_only": ft.convert(copy.deepcopy(ref), linear=False),
                  "ours": ft.convert(copy.deepcopy(ref), fuse=True)}
        opts = {k: torch.optim.AdamW(m.parameters(), lr=1e-4, fused=True) for k, m in models.items()}
        x = torch.randn(batch, seq, d, device=DEV, dtype=torch.bfloat16,
                        generator=torch.Generator(DEV).manual_seed(1))

        def make_step(k):
            m, opt = models[k], opts[k]

            def step():
                loss = m(x).float().square().mean()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                return loss
            return step
        step_fns = {k: make_step(k) for k in models}
        ms, loss = interleaved_step_ms(step_fns, rounds, warmup, steps)
        row = {"op": "train_step", "model": f"(e) {name}, {batch}x{seq} tokens, bf16, AdamW", "shape": [batch, seq, d],
               "dtype": "bf16", "ms": round(ms["ours"], 3), "torch_ms": round(ms["torch"], 3),
               "vs_torch": round(ms["torch"] / ms["ours"], 3), "norm_only_ms": round(ms["norm_only"], 3),
               "norm_only_vs_torch": round(ms["torch"] / ms["norm_only"], 3),
               "fused_epilogues": models["ours"].fused_epilogues, "last_loss": loss["ours"],
               "torch_last_loss": loss["torch"], "norm_only_last_loss": loss["norm_only"]}
        rows.append(row)
        print(row, flush=True)
        rows += profile_rows(row["model"], step_fns, steps=2, label=name)
        del models, opts, ref, step_fns
        torch.cuda.empty_cache()
    return rows


class Bottleneck(nn.Module):
    """torchvision's ResNet-50 block: 1x1, 3x3 (stride), 1x1 x4, the
    downsample computed after bn3 (as torchvision does)."""

    def __init__(self, cin, width, stride):
        super().__init__()
        cout = 4 * width
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        identity = x if self.down is None else self.down(x)
        return self.relu(out + identity)


class ResNet50(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(3, 2, 1))
        layers, cin = [], 64
        for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for i in range(blocks):
                layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
                cin = 4 * width
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(2048, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def bench_resnet50(quick: bool):
    rows = []
    steps, warmup, rounds = (5, 3, 1) if quick else (10, 4, 2)
    batch = 64
    for dtype, dn in ((torch.float16, "fp16"), (torch.bfloat16, "bf16")):
        torch.manual_seed(0)
        ref = ResNet50().to(DEV).to(memory_format=torch.channels_last)
        ours = ft.convert(copy.deepcopy(ref), fuse=True)
        models = {"torch": ref, "ours": ours}
        opts = {k: torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9) for k, m in models.items()}
        g = torch.Generator(device=DEV).manual_seed(0)
        x = torch.randn(batch, 3, 224, 224, device=DEV, generator=g).contiguous(memory_format=torch.channels_last)
        t = torch.randint(0, 1000, (batch,), device=DEV, generator=g)

        def make_step(k):
            m, opt = models[k], opts[k]

            def step():
                with torch.autocast("cuda", dtype=dtype):
                    loss = F.cross_entropy(m(x), t)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                return loss
            return step
        step_fns = {k: make_step(k) for k in models}
        ms, loss = interleaved_step_ms(step_fns, rounds, warmup, steps)
        row = {"op": "train_step", "model": f"(f) ResNet-50, channels-last, autocast {dn}, SGD, batch {batch} at 224x224",
               "shape": [batch, 3, 224, 224], "dtype": dn, "ms": round(ms["ours"], 3),
               "torch_ms": round(ms["torch"], 3), "vs_torch": round(ms["torch"] / ms["ours"], 3),
               "fused_epilogues": ours.fused_epilogues, "last_loss": loss["ours"], "torch_last_loss": loss["torch"]}
        rows.append(row)
        print(row, flush=True)
        rows += profile_rows(row["model"], step_fns, steps=1, label=f"ResNet-50 {dn}")
        del models, opts, ref, ours, step_fns
        torch.cuda.empty_cache()
    return rows


def write_hf_md(f, rows):
    hf = [r for r in rows if r["op"] == "hf_train_step" and "step_ms" in r]
    if not hf:
        return
    f.write("\n| HF model (tokens) | mode | fuse | ours ms | torch ms | vs torch | Liger ms | vs Liger | loss gap |\n"
            "|---|---|---|---:|---:|---:|---:|---:|---:|\n")
    for r in hf:
        lm = f"{r['liger_ms']:.2f}" if r.get("liger_ms") else "-"
        vl = f"{r['vs_liger']:.3f}x" if r.get("vs_liger") else "-"
        f.write(f"| {r['model']} ({r['tokens'][0]}x{r['tokens'][1]}) | {r['mode']} | {r['fuse']} | "
                f"{r['step_ms']:.2f} | {r['torch_ms']:.2f} | {r['vs_torch']:.3f}x | {lm} | {vl} | "
                f"{r['max_rel_loss_gap']:.1e} |\n")


def write_md(path, rows):
    with open(path, "w") as f:
        f.write("### PyTorch drop-in (fusednorm.torch)\n\n| module | pass | ours µs | torch µs | vs torch |\n"
                "|---|---|---:|---:|---:|\n")
        for r in rows:
            if r["op"] == "host_overhead":
                f.write(f"| {r['module']} ({r['dtype']}) | {r['pass']} | {r['us']:.1f} | {r['torch_us']:.1f} | "
                        f"{r['vs_torch']:.2f}x |\n")
        f.write("\n| training step | ours ms | torch ms | vs torch | Liger ms | vs Liger |\n|---|---:|---:|---:|---:|---:|\n")
        for r in rows:
            if r["op"] == "train_step":
                lm = f"{r['liger_ms']:.2f}" if r.get("liger_ms") else "-"
                vl = f"{r['vs_liger']:.2f}x" if r.get("vs_liger") else "-"
                f.write(f"| {r['model']} | {r['ms']:.2f} | {r['torch_ms']:.2f} | {r['vs_torch']:.2f}x | {lm} | {vl} |\n")
        f.write("\n| training step (norms only swapped) | ms | torch ms | vs torch |\n|---|---:|---:|---:|\n")
        for r in rows:
            if r["op"] == "train_step" and r.get("norm_only_ms"):
                f.write(f"| {r['model']} | {r['norm_only_ms']:.2f} | {r['torch_ms']:.2f} | "
                        f"{r['norm_only_vs_torch']:.2f}x |\n")
        fams = ("norm", "gemm/conv", "attention", "optimizer", "other", "total")
        f.write("\n| GPU us per step (torch.profiler) | variant | " + " | ".join(fams) + " | norm vs torch |\n"
                "|---|---|" + "---:|" * (len(fams) + 1) + "\n")
        for r in rows:
            if r["op"] == "train_step_profile":
                u = r["us_per_step"]
                nv = f"{r['norm_vs_torch']:.2f}x" if "norm_vs_torch" in r else ""
                f.write(f"| {r['model']} | {r['variant']} | " + " | ".join(f"{u[k]:.0f}" for k in fams) +
                        f" | {nv} |\n")
        write_hf_md(f, rows)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", choices=("host", "train", "llm", "hf"), default=None)
    ap.add_argument("--hf-modes", default="eager,compile", help="hf rows: eager,compile")
    ap.add_argument("--hf-models", default="", help="hf rows: substrings of the model labels (default all)")
    ap.add_argument("--hf-tokens", default="", help="hf rows: BxS,... (default 4x1024,8x2048)")
    ap.add_argument("--hf-profile", action="store_true", help="hf rows: GPU time by kernel family too")
    ap.add_argument("--skip", default="", help="train_step rows to leave out, by letter (e.g. d)")
    args = ap.parse_args()
    SKIP.update(args.skip.split(","))
    os.makedirs(args.out, exist_ok=True)
    if not ft.ops_available():
        print(f"bench_torch: the C++ ops are not available ({ft.ops_unavailable_reason()})", file=sys.stderr)
        return 1
    props = torch.cuda.get_device_properties(0)
    rows, errors = [], []
    def hf_rows(quick):
        from bench_hf import bench_hf
        toks = [tuple(int(v) for v in t.split("x")) for t in args.hf_tokens.split(",") if t]
        return bench_hf(quick, tuple(m for m in args.hf_modes.split(",") if m),
                        [m for m in args.hf_models.split(",") if m] or None, toks or None,
                        profile_step if args.hf_profile else None)

    for part, fn in (("host", bench_overhead), ("train", bench_train), ("llm", bench_llm),
                     ("resnet50", bench_resnet50), ("hf", hf_rows)):
        if args.only and args.only != part and not (args.only == "train" and part == "resnet50"):
            continue
        if part == "hf" and args.only != "hf":
            continue  # minutes of model builds and compiles: only when asked for
        try:
            rows += fn(args.quick)
        except Exception as e:  # noqa: BLE001 - keep the rows measured so far
            import traceback
            traceback.print_exc()
            errors.append({"op": part, "error": f"{type(e).__name__}: {e}"})
    out = {"gpu": gpu_tag(props.name), "gpu_name": props.name, "rows": rows,
           "note": f"torch {torch.__version__}; fusednorm.torch C++ ops"}
    if errors:
        out["errors"] = errors
    with open(os.path.join(args.out, "rows_torch.json"), "w") as f:
        json.dump(out, f, indent=1)
    write_md(os.path.join(args.out, "rows_torch.md"), rows)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
