# SPDX-License-Identifier: Apache-2.0
"""Training steps of Hugging Face transformers models: torch, ours
(fusednorm.torch.convert), ours with fuse=True, and Liger-Kernel's norms
(bench_torch.py --only hf; issue 36).

Each model is built from its family's config (4 layers, GPT-2 6, the widths
below, vocab 32000, random weights, bf16, dropout 0 so that the losses of
the variants are comparable), trained with AdamW (fused) on
random tokens with the model's own loss (labels = input ids). Variants, all
from the same weights: torch (the model as built), ours (convert(model)),
ours_fuse (convert(model, fuse=True)), liger (Liger-Kernel's
apply_liger_kernel_to_<family>(rms_norm=True, everything else False,
model=...); GPT-2: its nn.LayerNorms swapped for LigerLayerNorm by hand, as it
has no apply function for GPT-2). Eager: median ms of interleaved rounds.
Compile: torch.compile of each variant but Liger's (default mode), the
compiled torch model against compiled ours, at the first token set only;
compilation is outside the timing.

Rows: {"op": "hf_train_step", "model", "family", "d", "layers", "tokens":
[batch, seq], "mode": "eager" | "compile", "fuse", "step_ms", "torch_ms",
"vs_torch", "liger_ms", "vs_liger", "max_rel_loss_gap" (over the timed steps,
ours against torch, both from the same weights and data), "liger_max_rel_loss_gap",
"swapped", "fused"}.
"""
from __future__ import annotations

import copy
import importlib
import inspect
import statistics
import time

import torch
from torch import nn

import fusednorm.torch as ft

DEV = torch.device("cuda")
VOCAB = 32000


def configs():
    """(label, family, model class name, config class name, config kwargs, d, layers)"""
    common = dict(vocab_size=VOCAB, max_position_embeddings=4096, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return [
        ("Llama d2048", "llama", "LlamaForCausalLM", "LlamaConfig",
         dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=4, num_attention_heads=16,
              num_key_value_heads=8, **common), 2048, 4),
        ("Llama d4096", "llama", "LlamaForCausalLM", "LlamaConfig",
         dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=4, num_attention_heads=32,
              num_key_value_heads=8, **common), 4096, 4),
        ("Qwen2 d1536", "qwen2", "Qwen2ForCausalLM", "Qwen2Config",
         dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=4, num_attention_heads=12,
              num_key_value_heads=2, **common), 1536, 4),
        ("Qwen3 d2048", "qwen3", "Qwen3ForCausalLM", "Qwen3Config",
         dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=4, num_attention_heads=16,
              num_key_value_heads=8, head_dim=128, **common), 2048, 4),
        ("Mistral d4096", "mistral", "MistralForCausalLM", "MistralConfig",
         dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=4, num_attention_heads=32,
              num_key_value_heads=8, sliding_window=None, **common), 4096, 4),
        ("Gemma2 d2304", "gemma2", "Gemma2ForCausalLM", "Gemma2Config",
         dict(hidden_size=2304, intermediate_size=9216, num_hidden_layers=4, num_attention_heads=8,
              num_key_value_heads=4, head_dim=256, **common), 2304, 4),
        ("GPT-2 d1024", "gpt2", "GPT2LMHeadModel", "GPT2Config",
         dict(n_embd=1024, n_layer=6, n_head=16, n_positions=4096, vocab_size=VOCAB, resid_pdrop=0.0,
              embd_pdrop=0.0, attn_pdrop=0.0), 1024, 6),
    ]


def build(model_cls, cfg_cls, kw):
    import transformers as T
    cfg = getattr(T, cfg_cls)(**kw)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return getattr(T, model_cls)(cfg).to(DEV, torch.bfloat16)


def liger_variant(ref, family):
    """A copy of ref with Liger-Kernel's norms (its apply function with
    rms_norm only), the transformers module's globals restored after (the
    apply functions also patch the classes module-wide)."""
    m = copy.deepcopy(ref)
    if family == "gpt2":
        from liger_kernel.transformers import LigerLayerNorm
        for name, mod in list(m.named_modules()):
            for cname, child in list(mod.named_children()):
                if type(child) is nn.LayerNorm:
                    new = LigerLayerNorm(child.normalized_shape[0], eps=child.eps).to(DEV, torch.bfloat16)
                    new.load_state_dict(child.state_dict())
                    setattr(mod, cname, new)
        return m
    import liger_kernel.transformers as L
    fn = getattr(L, f"apply_liger_kernel_to_{family}")
    modeling = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    saved = dict(vars(modeling))
    kwargs = {}
    for p in inspect.signature(fn).parameters.values():
        if p.name == "model":
            kwargs["model"] = m
        elif p.name == "rms_norm":
            kwargs[p.name] = True
        elif isinstance(p.default, bool):
            kwargs[p.name] = False
    try:
        fn(**kwargs)
    finally:
        for k, v in saved.items():
            setattr(modeling, k, v)
    return m


def make_step(model, ids):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)

    def step():
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return step


def timed(steps_fns, rounds, warmup, steps):
    """Median ms per variant over interleaved rounds, and each one's losses
    (one per timed step, the first round's: the same data and weights)."""
    res = {k: [] for k in steps_fns}
    losses = {}
    for r in range(rounds):
        for k, fnc in steps_fns.items():
            for _ in range(warmup if r == 0 else 1):
                fnc()
            torch.cuda.synchronize()
            ts, ls = [], []
            for _ in range(steps):
                t0 = time.perf_counter()
                lv = fnc()
                torch.cuda.synchronize()
                ts.append((time.perf_counter() - t0) * 1e3)
                ls.append(float(lv))
            res[k].append(statistics.median(ts))
            losses.setdefault(k, ls)
    return {k: statistics.median(v) for k, v in res.items()}, losses


def gap(a, b):
    return max(abs(x - y) / max(abs(y), 1e-9) for x, y in zip(a, b))


def bench_hf(quick=False, modes=("eager", "compile"), only=None, tokens=None, profiler=None):
    """profiler: bench_torch.profile_step, for rows "hf_train_step_profile"
    (GPU time per step by kernel family of each variant, eager only)."""
    rows = []
    steps, warmup, rounds = (4, 2, 2) if quick else (6, 2, 3)
    token_sets = tokens or ([(4, 1024), (8, 2048)] if not quick else [(4, 1024)])
    try:
        import liger_kernel  # noqa: F401
        liger_err = None
    except Exception as e:  # noqa: BLE001
        liger_err = f"{type(e).__name__}: {e}"
    for label, family, mcls, ccls, kw, d, layers in configs():
        if only and not any(o.lower() in label.lower() for o in only):
            continue
        ref = build(mcls, ccls, kw)
        ours = ft.convert(copy.deepcopy(ref))
        ours_fuse = ft.convert(copy.deepcopy(ref), fuse=True)
        rep = ours_fuse.fusednorm_report
        print(f"{label}: {len(rep.swapped)} swapped, {len(rep.fused)} fused, {len(rep.left)} left", flush=True)
        variants = {"torch": ref, "ours": ours, "ours_fuse": ours_fuse}
        lerr = liger_err
        if lerr is None:
            try:
                variants["liger"] = liger_variant(ref, family)
            except Exception as e:  # noqa: BLE001 - the row says why
                lerr = f"{type(e).__name__}: {e}"
        for mode in modes:
            for batch, seq in token_sets:
                if mode == "compile" and (batch, seq) != token_sets[0]:
                    continue  # compile rows at the first token set only (compile time)
                g = torch.Generator(DEV).manual_seed(7)
                ids = torch.randint(3, VOCAB, (batch, seq), device=DEV, generator=g)
                # every variant starts from the same weights each time (compiled:
                # torch and ours; Liger's Triton kernels are left out there)
                models = {k: copy.deepcopy(m) for k, m in variants.items() if mode == "eager" or k != "liger"}
                if mode == "compile":
                    torch._dynamo.reset()
                    torch._dynamo.config.cache_size_limit = 64
                    models = {k: torch.compile(m) for k, m in models.items()}
                fns = {k: make_step(m, ids) for k, m in models.items()}
                try:
                    ms, losses = timed(fns, rounds, warmup, steps)
                except Exception as e:  # noqa: BLE001
                    rows.append({"op": "hf_train_step", "model": label, "tokens": [batch, seq], "mode": mode,
                                 "error": f"{type(e).__name__}: {str(e)[:300]}"})
                    print(rows[-1], flush=True)
                    continue
                if profiler is not None and mode == "eager" and (batch, seq) == token_sets[0]:
                    for k, fnc in fns.items():
                        fam, names = profiler(fnc, steps=2)
                        rows.append({"op": "hf_train_step_profile", "model": label, "tokens": [batch, seq],
                                     "variant": k, "us_per_step": fam, "step_ms": round(ms[k], 3),
                                     "norm_kernels": names})
                        print("profile", label, k, fam, flush=True)
                for fuse in (False, True):
                    k = "ours_fuse" if fuse else "ours"
                    row = {"op": "hf_train_step", "model": label, "family": family, "d": d, "layers": layers,
                           "tokens": [batch, seq], "mode": mode, "fuse": fuse, "step_ms": round(ms[k], 3),
                           "torch_ms": round(ms["torch"], 3), "vs_torch": round(ms["torch"] / ms[k], 3),
                           "max_rel_loss_gap": float(f"{gap(losses[k], losses['torch']):.3g}"),
                           "swapped": len((ours_fuse if fuse else ours).fusednorm_report.swapped),
                           "fused": len(rep.fused) if fuse else 0}
                    if "liger" in ms:
                        row.update(liger_ms=round(ms["liger"], 3), vs_liger=round(ms["liger"] / ms[k], 3),
                                   liger_max_rel_loss_gap=float(f"{gap(losses['liger'], losses['torch']):.3g}"))
                    else:
                        row.update(liger_ms=None, vs_liger=None, liger_note=lerr)
                    rows.append(row)
                    print(row, flush=True)
                del models, fns
                torch.cuda.empty_cache()
        del variants, ref, ours, ours_fuse
        torch.cuda.empty_cache()
    return rows
