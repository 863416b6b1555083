#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""fusednorm.torch on Hugging Face transformers models (issue 36), on the GPU.

Each family (Llama, Mistral, Qwen2, Qwen3, Phi3, Gemma, Gemma2, Gemma3) is
built from a small config with random weights (transformers is imported
only here, never by the library):
- convert() swaps every norm of the model (Qwen3's per-head q_norm/k_norm
  included), in the family's order, and says so in its report;
- norm numerics: the swapped module against the original on fresh random
  input: bf16 with bf16 weights within one rounding and nearly all bits
  equal (the fraction printed; the rest are reduction-order ties), fp16 and
  float32 weights within one rounding of the original's output dtype; NaN
  never passes;
- the model's logits with convert(model) against the original's, and with
  convert(model, fuse=True) bit-identical to convert(model)'s (the fused
  add & norm computes the same sums and norms);
- 20 AdamW steps: the converted model's losses track the original's;
- state_dict keys, deepcopy and pickling of a converted model;
- torch.compile of a converted Llama: the same logits as eager.
Also add_rms_norm / add_layer_norm against torch (forward, both gradients,
the sum's gradient), opcheck of the add_norm op, and convert's Linear rule.
Exit 77 without PyTorch, a GPU, or transformers (SKIP with the reason).
"""
from __future__ import annotations

import copy
import io
import os
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "common"))
from torch_prologue import load  # noqa: E402

torch, F, fn = load(ROOT)
from torch import nn  # noqa: E402

import fusednorm.torch as ft  # noqa: E402
from fusednorm.torch import hf  # noqa: E402

try:
    import transformers  # noqa: F401
except Exception as e:  # noqa: BLE001
    print(f"SKIP: transformers is not importable ({type(e).__name__}: {e})")
    sys.exit(77)
if not ft.ops_available():
    print(f"ERROR: the drop-in's ops are not in use: {ft.ops_unavailable_reason()}")
    sys.exit(1)

DEV = torch.device("cuda")
SMALL = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=1000, max_position_embeddings=512, pad_token_id=0,
             bos_token_id=1, eos_token_id=2)


def families():
    """(name, model class, config, expected order, norm classes)"""
    import transformers as T
    out = [
        ("llama", T.LlamaForCausalLM, T.LlamaConfig(**SMALL), "llama"),
        ("mistral", T.MistralForCausalLM, T.MistralConfig(**SMALL, sliding_window=None), "llama"),
        ("qwen2", T.Qwen2ForCausalLM, T.Qwen2Config(**SMALL), "llama"),
        ("qwen3", T.Qwen3ForCausalLM, T.Qwen3Config(**SMALL, head_dim=64), "llama"),
        ("phi3", T.Phi3ForCausalLM, T.Phi3Config(**SMALL), "llama"),
        ("gemma", T.GemmaForCausalLM, T.GemmaConfig(**SMALL, head_dim=64), "gemma"),
        ("gemma2", T.Gemma2ForCausalLM, T.Gemma2Config(**SMALL, head_dim=64), "gemma"),
        ("gemma3", T.Gemma3ForCausalLM, T.Gemma3TextConfig(**SMALL, head_dim=64), "gemma"),
        # torch.nn.LayerNorm: swapped by class; its blocks' adds fused
        ("gpt2", T.GPT2LMHeadModel, T.GPT2Config(n_embd=256, n_layer=2, n_head=4, vocab_size=1000,
                                                 n_positions=512, resid_pdrop=0.0, embd_pdrop=0.0,
                                                 attn_pdrop=0.0), None),
    ]
    return out


def build(cls, cfg, dtype=torch.bfloat16, seed=0):
    torch.manual_seed(seed)
    cfg = copy.deepcopy(cfg)
    cfg._attn_implementation = "sdpa"
    m = cls(cfg).to(DEV, dtype)
    # Gemma's norms start at zero and Llama's at one: random weights make the
    # orders differ in their results (the checks below would pass with any
    # order on constant weights)
    with torch.no_grad():
        for mod in m.modules():
            if type(mod).__name__.endswith("RMSNorm"):
                mod.weight.normal_(0.0 if "Gemma" in type(mod).__name__ else 1.0, 0.3)
    return m


def norm_modules(model):
    return [(n, m) for n, m in model.named_modules() if type(m).__name__.endswith("RMSNorm")]


def ulp_check(ours, ref, computed=None):
    """(max difference in units in the last place of the coarser of ref's
    dtype and `computed` (the input's), fraction of bit-identical elements);
    asserts finiteness and dtype."""
    assert ours.dtype == ref.dtype, (ours.dtype, ref.dtype)
    assert torch.isfinite(ours).all() and torch.isfinite(ref).all(), "non-finite output"
    computed = computed or ref.dtype
    coarse = computed if hf._MANT[computed][0] < hf._MANT[ref.dtype][0] else ref.dtype
    return float(hf.ulps(ours, ref, coarse).max()), float((ours == ref).double().mean())


class Families(unittest.TestCase):
    def test_families(self):
        for name, cls, cfg, order in families():
            with self.subTest(family=name):
                self._family(name, cls, cfg, order)

    def _family(self, name, cls, cfg, order):
        ref = build(cls, cfg)
        model = copy.deepcopy(ref)
        keys = list(model.state_dict().keys())
        params = [id(p) for p in model.parameters()]
        out = ft.convert(model)
        self.assertIs(out, model)
        rep = model.fusednorm_report
        norms = norm_modules(model)
        swapped = {n for n, _, _ in rep.swapped}
        if order is None:  # GPT-2: torch.nn.LayerNorm
            norms = []
            lns = [n for n, m in ref.named_modules() if type(m) is nn.LayerNorm]
            self.assertEqual(sorted(swapped), sorted(lns), str(rep))
        else:
            self.assertTrue(norms)
        for n, m in norms:
            self.assertIn(n, swapped, f"{name}: {n} not swapped:\n{rep}")
            self.assertIsInstance(m, hf._HFNorm)
            self.assertEqual(m.__dict__["_fn_order"], order, n)
        if name == "qwen3":
            self.assertTrue(any(n.endswith("q_norm") for n in swapped) and any(n.endswith("k_norm") for n in swapped))
        self.assertEqual(keys, list(model.state_dict().keys()))
        self.assertEqual(params, [id(p) for p in model.parameters()])
        print(f"{name}: {len(rep.swapped)} swapped; e.g. {rep.swapped[0][2]}")

        # the norms, alone, on fresh random input
        seen = set()
        for n, m in norms:
            key = (type(m).__mro__[2], m.weight.shape[0])
            if key in seen:
                continue
            seen.add(key)
            orig = copy.deepcopy(m)
            hf._uninstall(orig, type(m).__mro__[2])
            cols = m.weight.shape[0]
            g = torch.Generator(device=DEV).manual_seed(len(seen))
            for wdt, xdt in ((torch.bfloat16, torch.bfloat16), (torch.float16, torch.float16),
                             (torch.float32, torch.bfloat16), (torch.float32, torch.float32)):
                a, b = copy.deepcopy(orig).to(wdt), copy.deepcopy(m).to(wdt)
                x = (torch.randn(4096, cols, device=DEV, generator=g) * 3).to(xdt)
                with torch.no_grad():
                    r, o = a(x), b(x)
                ulps, exact = ulp_check(o, r, xdt)
                print(f"  {name} {type(orig).__name__}[{cols}] w {wdt} x {xdt}: {exact:.5%} bit-identical, "
                      f"max {ulps:.2f} eps*|ref|")
                # float32 on both sides: a few units (the sums of squares in another order)
                # Llama's order rounds twice (x_hat, then the product): a unit of x_hat
                # moves the product by up to two of its own
                bound = 16.0 if (wdt, xdt) == (torch.float32, torch.float32) else (2.0 if order == "llama" else 1.0)
                self.assertLessEqual(ulps, bound, f"{name} {wdt}/{xdt}: more than one rounding")
                if wdt is torch.bfloat16:
                    self.assertGreater(exact, 0.999, f"{name}: bf16 outputs not (nearly) bit-identical")

        # whole model: logits, unfused and fused
        ids = torch.randint(3, SMALL["vocab_size"], (2, 64), device=DEV, generator=torch.Generator(DEV).manual_seed(1))
        ref.eval(), model.eval()
        with torch.no_grad():
            lr = ref(input_ids=ids, use_cache=False).logits.float()
            lo = model(input_ids=ids, use_cache=False).logits.float()
        err = float((lo - lr).abs().max() / lr.abs().max())
        print(f"  {name} logits: converted vs original, max rel {err:.2e}")
        self.assertLess(err, 5e-2)
        fused = ft.convert(copy.deepcopy(model), fuse=True).eval()
        frep = fused.fusednorm_report
        self.assertEqual(len(frep.fused), 2 * cfg.num_hidden_layers, str(frep))  # mid add, last add
        with torch.no_grad():
            lf = fused(input_ids=ids, use_cache=False).logits.float()
        self.assertTrue(torch.equal(lf, lo), f"{name}: fused logits differ from unfused "
                                             f"(max {float((lf - lo).abs().max()):.3e})")

        # training: 20 AdamW steps from the same weights
        ref.train(), fused.train()
        gaps = train_gap(ref, fused)
        print(f"  {name} 20 AdamW steps: max rel loss gap {max(gaps):.2e}")
        self.assertLess(max(gaps), 2e-2)

        # pickling and deepcopy keep the swap
        buf = io.BytesIO()
        torch.save(fused, buf)
        buf.seek(0)
        back = torch.load(buf, weights_only=False)
        with torch.no_grad():
            lb = back(input_ids=ids, use_cache=False).logits.float()
        self.assertTrue(torch.equal(lb, lf))
        if norms:
            self.assertIsInstance(dict(back.named_modules())[norms[0][0]], hf._HFNorm)


def train_gap(ref, ours, steps=20):
    out = []
    a, b = copy.deepcopy(ref), copy.deepcopy(ours)
    b.load_state_dict(a.state_dict())
    oa = torch.optim.AdamW(a.parameters(), lr=1e-4)
    ob = torch.optim.AdamW(b.parameters(), lr=1e-4)
    g = torch.Generator(DEV).manual_seed(2)
    for _ in range(steps):
        ids = torch.randint(3, SMALL["vocab_size"], (2, 64), device=DEV, generator=g)
        la = a(input_ids=ids, labels=ids, use_cache=False).loss
        lb = b(input_ids=ids, labels=ids, use_cache=False).loss
        for opt, loss in ((oa, la), (ob, lb)):
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        out.append(abs(float(lb) - float(la)) / abs(float(la)))
    return out


class Compiled(unittest.TestCase):
    def test_llama_compiled(self):
        import transformers as T
        ref = build(T.LlamaForCausalLM, T.LlamaConfig(**SMALL))
        ours = ft.convert(copy.deepcopy(ref), fuse=True)
        ids = torch.randint(3, SMALL["vocab_size"], (2, 64), device=DEV, generator=torch.Generator(DEV).manual_seed(3))
        with torch.no_grad():
            eager = ours(input_ids=ids, use_cache=False).logits.float()
        torch._dynamo.reset()
        comp = torch.compile(ours)
        loss = comp(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        with torch.no_grad():
            lc = comp(input_ids=ids, use_cache=False).logits.float()
        err = float((lc - eager).abs().max() / eager.abs().max())
        print(f"compiled converted Llama vs eager: max rel {err:.2e}")
        self.assertLess(err, 2e-2)


class AddNorm(unittest.TestCase):
    def test_functional(self):
        g = torch.Generator(DEV).manual_seed(4)
        for dt in (torch.float32, torch.float16, torch.bfloat16):
            for rms in (True, False):
                for cols in (1, 7, 1000, 4104):
                    x = torch.randn(33, cols, device=DEV, generator=g).to(dt).requires_grad_()
                    r = torch.randn(33, cols, device=DEV, generator=g).to(dt).requires_grad_()
                    w = (torch.rand(cols, device=DEV, generator=g) + 0.5).to(dt).requires_grad_()
                    b = None if rms else (torch.rand(cols, device=DEV, generator=g) - 0.5).to(dt).requires_grad_()
                    if rms:
                        y, s = ft.add_rms_norm(x, r, cols, w, 1e-6)
                    else:
                        y, s = ft.add_layer_norm(x, r, cols, w, b, 1e-5)
                    s_ref = (x.detach() + r.detach()).double().requires_grad_()
                    y_ref = F.rms_norm(s_ref, (cols,), w.detach().double(), 1e-6) if rms else \
                        F.layer_norm(s_ref, (cols,), w.detach().double(), b.detach().double(), 1e-5)
                    tol = {torch.float32: 1e-4, torch.float16: 4e-3, torch.bfloat16: 3e-2}[dt]
                    self.assertTrue(torch.equal(s, (x + r).detach()), "sum")
                    torch.testing.assert_close(y.double(), y_ref, atol=tol, rtol=tol)
                    dy = torch.randn_like(y)
                    ds = torch.randn_like(s)
                    gx, gr, gw = torch.autograd.grad((y, s), (x, r, w), (dy, ds))
                    gs_ref, = torch.autograd.grad(y_ref, s_ref, dy.double())
                    gs_ref = gs_ref + ds.double()
                    sc = float(gs_ref.abs().max())
                    self.assertTrue(torch.isfinite(gx).all())
                    torch.testing.assert_close(gx.double(), gs_ref, atol=tol * sc, rtol=tol)
                    self.assertTrue(torch.equal(gx, gr), "the residual's gradient is x's")
                    self.assertEqual(gw.shape, w.shape)

    def test_opcheck_and_compile(self):
        x = torch.randn(16, 64, device=DEV, dtype=torch.bfloat16, requires_grad=True)
        r = torch.randn(16, 64, device=DEV, dtype=torch.bfloat16, requires_grad=True)
        w = torch.randn(64, device=DEV, dtype=torch.bfloat16, requires_grad=True)
        torch.library.opcheck(torch.ops.fusednorm.add_norm.default, (x, r, w, None, 1, 1, 1e-6, 2))
        torch.library.opcheck(torch.ops.fusednorm.add_norm.default, (x, r, w, None, 1, 1, 1e-6, 0))

        def f(x, r, w):
            y, s = ft.add_rms_norm(x, r, 64, w, 1e-6, round_xhat=True)
            return (y.float() * 2).sum() + s.float().sum()
        torch._dynamo.reset()
        cf = torch.compile(f, fullgraph=True)
        a = f(x, r, w)
        c = cf(x, r, w)
        torch.testing.assert_close(c, a, rtol=1e-3, atol=1e-2)
        ga = torch.autograd.grad(a, (x, r, w))
        gc = torch.autograd.grad(c, (x, r, w))
        for p, q in zip(ga, gc):
            torch.testing.assert_close(q.float(), p.float(), rtol=2e-2, atol=2e-2)

    def test_round_xhat_module(self):
        """RMSNorm(round_xhat=True) is transformers' Llama order: bf16 output
        equal to `w * x_hat.to(bf16)` on nearly every element."""
        g = torch.Generator(DEV).manual_seed(5)
        m = ft.RMSNorm(2048, eps=1e-6, round_xhat=True).to(DEV, torch.bfloat16)
        with torch.no_grad():
            m.weight.normal_(1.0, 0.3, generator=g)
        x = (torch.randn(4096, 2048, device=DEV, generator=g) * 3).bfloat16()
        xf = x.float()
        ref = m.weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(torch.bfloat16)
        with torch.no_grad():
            ours = m(x)
        ulps, exact = ulp_check(ours, ref)
        print(f"RMSNorm(round_xhat=True) vs Llama's formula: {exact:.5%} bit-identical, max {ulps:.2f}")
        self.assertLessEqual(ulps, 2.0)  # two roundings (x_hat, then the product)
        self.assertGreater(exact, 0.999)
        plain = ft.RMSNorm(2048, eps=1e-6).to(DEV, torch.bfloat16)
        plain.load_state_dict(m.state_dict())
        with torch.no_grad():
            self.assertFalse(torch.equal(plain(x), ours), "the flag changes no output")


class PreNormFx(unittest.TestCase):
    def test_torch_nn_prenorm_stack(self):
        """x + sublayer(norm(x)) written with torch.nn, on the GPU in bf16: the
        fused add & norm gives the unfused forward's bits; gradients within
        bf16 rounding (the fused backward adds the residual's gradient in fp32)."""
        class Blk(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.ln1, self.ln2 = nn.LayerNorm(d), nn.RMSNorm(d, eps=1e-6)
                self.f1, self.f2 = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)

            def forward(self, x):
                x = x + self.f1(self.ln1(x))
                return x + self.f2(self.ln2(x))

        torch.manual_seed(0)
        ref = nn.Sequential(Blk(1024), Blk(1024), nn.LayerNorm(1024)).to(DEV, torch.bfloat16)
        plain = ft.convert(copy.deepcopy(ref))
        fused = ft.convert(copy.deepcopy(ref), fuse=True)
        self.assertEqual(fused.fused_add_norms, 4)
        x = torch.randn(8, 512, 1024, device=DEV, dtype=torch.bfloat16, requires_grad=True)
        a, b = plain(x), fused(x)
        self.assertTrue(torch.equal(a, b))
        dy = torch.randn_like(a)
        names = sorted(n for n, _ in plain.named_parameters())
        pp, fp = dict(plain.named_parameters()), dict(fused.named_parameters())
        ga = torch.autograd.grad(a, [x] + [pp[n] for n in names], dy)
        gb = torch.autograd.grad(b, [x] + [fp[n] for n in names], dy)
        for p, q in zip(ga, gb):
            self.assertTrue(torch.isfinite(q).all())
            torch.testing.assert_close(q.float(), p.float(), rtol=3e-2, atol=3e-2 * float(p.abs().max()))


class LinearRule(unittest.TestCase):
    def test_linear_left_or_fused(self):
        m = nn.Sequential(nn.Linear(16, 32, bias=False), nn.Linear(32, 32), nn.GELU(approximate="tanh"),
                          nn.Linear(32, 8)).to(DEV)
        out = ft.convert(copy.deepcopy(m))
        self.assertEqual([type(c) for c in out], [nn.Linear, nn.Linear, nn.GELU, nn.Linear])
        fused = ft.convert(copy.deepcopy(m), fuse=True)
        self.assertEqual(fused.fused_epilogues, 1)
        self.assertIsInstance(fused.get_submodule("1"), ft.Linear)
        self.assertIs(type(fused.get_submodule("0")), nn.Linear)
        self.assertIs(type(fused.get_submodule("3")), nn.Linear)
        x = torch.randn(5, 16, device=DEV)
        torch.testing.assert_close(fused(x), m(x), atol=1e-5, rtol=1e-5)


if __name__ == "__main__":
    unittest.main(verbosity=2)
