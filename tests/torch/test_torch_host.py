#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""fusednorm.torch without a GPU: on CPU tensors every module is torch.nn's
own computation (the fallback), bit for bit; convert() swaps classes in place
keeping the very parameter tensors; convert(fuse=True) finds the BN->ReLU,
BN->add->ReLU and Linear->activation patterns of a ResNet-style model and an
MLP and computes the same; state_dict keys are torch's; where the C++ ops
are built, each module's torch.compile graph (traced on fake CUDA tensors)
calls them, and the norm ops' fake kernels promise csrc/norm.cpp's outputs. Runs
where PyTorch imports (the C++ ops need not build: without them the modules
fall back the same way, and the compile checks skip); exit 77 where it does
not.
"""
import copy
import os
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
try:
    import torch
    import torch.nn.functional as F
    from torch import nn
except Exception as e:  # noqa: BLE001 - any import failure means: no PyTorch here
    print(f"SKIP: PyTorch is not importable ({type(e).__name__}: {e})")
    sys.exit(77)
sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))
import fusednorm.torch as ft  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "tests", "common"))
from torch_models import BasicBlock as Block  # noqa: E402


class Mlp(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.act = nn.GELU(approximate="tanh")
        self.fc2 = nn.Linear(4 * d, d)
        self.fc3 = nn.Linear(d, d)

    def forward(self, x):
        h = x + self.fc2(self.act(self.fc1(self.norm(x))))
        return F.relu(self.fc3(h))


class Host(unittest.TestCase):
    def test_fallback_is_torch(self):
        torch.manual_seed(0)
        pairs = [(ft.LayerNorm(32), nn.LayerNorm(32), torch.randn(4, 32)),
                 (ft.RMSNorm(32), nn.RMSNorm(32), torch.randn(4, 32)),
                 (ft.BatchNorm1d(5), nn.BatchNorm1d(5), torch.randn(7, 5)),
                 (ft.BatchNorm2d(3), nn.BatchNorm2d(3), torch.randn(4, 3, 5, 5)),
                 (ft.BatchNorm3d(3), nn.BatchNorm3d(3), torch.randn(2, 3, 2, 5, 5)),
                 (ft.Linear(32, 8), nn.Linear(32, 8), torch.randn(4, 32))]
        for mine, ref, x in pairs:
            mine.load_state_dict(ref.state_dict())
            self.assertEqual(list(mine.state_dict()), list(ref.state_dict()))
            for train in (True, False):
                mine.train(train)
                ref.train(train)
                self.assertTrue(torch.equal(mine(x), ref(x)), type(mine).__name__)
            for k, v in ref.state_dict().items():
                self.assertTrue(torch.equal(mine.state_dict()[k], v), k)

    def test_activations_and_z(self):
        x, z = torch.randn(4, 3, 5, 5), torch.randn(4, 3, 5, 5)
        ref = nn.BatchNorm2d(3)
        mine = ft.BatchNorm2d(3, activation="relu")
        mine.load_state_dict(ref.state_dict())
        self.assertTrue(torch.equal(mine(x, z), F.relu(ref(x) + z)))
        lin = ft.Linear(8, 4, activation="gelu_tanh")
        self.assertTrue(torch.equal(lin(torch.ones(2, 8)), F.gelu(F.linear(torch.ones(2, 8), lin.weight, lin.bias),
                                                                 approximate="tanh")))
        with self.assertRaises(ValueError):
            ft.Linear(8, 4, activation="gelu")
        with self.assertRaises(ValueError):
            ft.BatchNorm2d(3, activation="sigmoid")

    def test_convert_fuse(self):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                              Block(8, 8, 1), Block(8, 16, 2))
        ref = copy.deepcopy(model)
        params = [id(p) for p in model.parameters()]
        fused = ft.convert(model, fuse=True)
        self.assertEqual(params, [id(p) for p in model.parameters()])
        self.assertEqual(fused.fused_epilogues, 5)
        self.assertEqual(model[4].bn2.activation, "relu")
        x = torch.randn(2, 3, 8, 8)
        self.assertTrue(torch.allclose(fused(x), ref(x), atol=1e-6))
        mlp = Mlp()
        ref = copy.deepcopy(mlp)
        fm = ft.convert(mlp, fuse=True)
        self.assertEqual(fm.fused_epilogues, 2)
        self.assertEqual((mlp.fc1.activation, mlp.fc3.activation), ("gelu_tanh", "relu"))
        self.assertIs(type(mlp.fc2), nn.Linear)  # nothing fuses into it: torch's stays
        x = torch.randn(3, 16)
        self.assertTrue(torch.allclose(fm(x), ref(x), atol=1e-6))

    def test_prenorm_add_norm_fx(self):
        """A pre-norm block written with torch.nn: each `x + sublayer(...)`
        feeding the next norm becomes one add & norm (fx), same results."""
        class Blk(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.ln1, self.ln2 = nn.LayerNorm(d), nn.RMSNorm(d)
                self.f1, self.f2 = nn.Linear(d, d, bias=False), nn.Linear(d, d)

            def forward(self, x):
                x = x + self.f1(self.ln1(x))
                return x + F.gelu(self.f2(self.ln2(x)), approximate="tanh")

        ref = nn.Sequential(Blk(16), Blk(16), nn.LayerNorm(16))
        m = ft.convert(copy.deepcopy(ref), fuse=True)
        self.assertEqual(m.fused_add_norms, 4)  # into blocks[0].ln2, blocks[1].ln1 / ln2, the final norm
        self.assertEqual(m.fused_epilogues, 2)
        x = torch.randn(3, 16, requires_grad=True)
        a, b = ref(x), m(x)
        self.assertTrue(torch.equal(a, b))
        ga, = torch.autograd.grad(a.sum(), x)
        gb, = torch.autograd.grad(b.sum(), x)
        self.assertTrue(torch.allclose(ga, gb, atol=1e-6))
        self.assertEqual(sorted(m.state_dict()), sorted(ref.state_dict()))  # (an fx trace orders them by use)

    def test_hf_models_on_cpu(self):
        """transformers models converted: every norm swapped (checked on a
        CUDA probe where there is a device), the report says so, and on CPU
        tensors the model computes what it did, bit for bit, fused or not."""
        try:
            import transformers as T
        except Exception as e:  # noqa: BLE001
            self.skipTest(f"transformers not importable: {e}")
        if not ft.ops_available():
            self.skipTest(f"the C++ ops are not built: {ft.ops_unavailable_reason()}")
        small = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, vocab_size=100, pad_token_id=0)
        for mcls, cfg in ((T.LlamaForCausalLM, T.LlamaConfig(**small)),
                          (T.Qwen3ForCausalLM, T.Qwen3Config(**small, head_dim=16)),
                          (T.Gemma2ForCausalLM, T.Gemma2Config(**small, head_dim=16)),
                          (T.Phi3ForCausalLM, T.Phi3Config(**small)),
                          (T.GPT2LMHeadModel, T.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=100))):
            with self.subTest(model=mcls.__name__):
                torch.manual_seed(0)
                ref = mcls(cfg).eval()
                model = ft.convert(copy.deepcopy(ref), fuse=True)
                rep = model.fusednorm_report
                norms = [n for n, m in ref.named_modules() if type(m).__name__.endswith(("RMSNorm", "LayerNorm"))]
                self.assertEqual(sorted(n for n, _, _ in rep.swapped), sorted(norms), str(rep))
                self.assertEqual(len(rep.fused), 2 * cfg.num_hidden_layers, str(rep))
                self.assertEqual(list(model.state_dict()), list(ref.state_dict()))
                ids = torch.randint(1, 100, (2, 9))
                with torch.no_grad():
                    a = ref(input_ids=ids, use_cache=False).logits
                    b = model(input_ids=ids, use_cache=False).logits
                self.assertTrue(torch.equal(a, b))
                c = copy.deepcopy(model)
                with torch.no_grad():
                    self.assertTrue(torch.equal(c(input_ids=ids, use_cache=False).logits, a))

    def test_hf_fused_under_activation_checkpointing(self):
        """convert(fuse=True) with transformers' gradient checkpointing, both
        reentrant (the layer runs without grad in the first pass) and not
        (the recomputation must save what the first pass saved): the same
        loss and gradients as the original model."""
        try:
            import transformers as T
        except Exception as e:  # noqa: BLE001
            self.skipTest(f"transformers not importable: {e}")
        if not ft.ops_available():
            self.skipTest(f"the C++ ops are not built: {ft.ops_unavailable_reason()}")
        cfg = T.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
                            num_key_value_heads=2, vocab_size=100, pad_token_id=0)
        for reentrant in (True, False):
            with self.subTest(use_reentrant=reentrant):
                torch.manual_seed(0)
                ref = T.LlamaForCausalLM(cfg).train()
                model = ft.convert(copy.deepcopy(ref), fuse=True).train()
                for m in (ref, model):
                    m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
                ids = torch.randint(1, 100, (2, 9))
                a = ref(input_ids=ids, labels=ids, use_cache=False).loss
                b = model(input_ids=ids, labels=ids, use_cache=False).loss
                a.backward()
                b.backward()
                self.assertTrue(torch.equal(a, b))
                for (n, p), q in zip(ref.named_parameters(), model.parameters()):
                    self.assertIsNotNone(q.grad, n)
                    self.assertTrue(torch.allclose(p.grad, q.grad, atol=1e-6), n)

    def test_sync_batchnorm_conversion(self):
        model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU())
        sync = ft.SyncBatchNorm.convert_sync_batchnorm(model)
        self.assertIsInstance(sync[1], ft.SyncBatchNorm)
        self.assertIsInstance(sync[1], nn.SyncBatchNorm)
        self.assertIs(sync[1].weight, model[1].weight)

    def test_rms_default_eps_is_torchs(self):
        """RMSNorm's eps=None (the modules' _RMS_EPS, and csrc/norm.cpp's) is what
        torch's rms_norm adds: float32's epsilon for float32, float16 and
        bfloat16 input, not the input dtype's."""
        from fusednorm.torch import modules
        self.assertEqual(modules._RMS_EPS, torch.finfo(torch.float32).eps)
        torch.manual_seed(0)
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            x = (0.05 * torch.randn(8, 64)).to(dtype)
            y = torch.rms_norm(x, (64,), None, None)
            self.assertTrue(torch.equal(y, torch.rms_norm(x, (64,), None, modules._RMS_EPS)), str(dtype))
            if dtype != torch.float32:
                self.assertFalse(torch.equal(y, torch.rms_norm(x, (64,), None, torch.finfo(dtype).eps)), str(dtype))


class GroupNormHost(unittest.TestCase):
    """GroupNorm without a GPU: torch.nn's computation on CPU tensors, the
    swap, the FX GroupNorm -> SiLU fusion and the diffusers fusions."""

    def test_module_is_torchs_on_cpu(self):
        torch.manual_seed(0)
        ref = nn.GroupNorm(4, 12)
        nn.init.normal_(ref.weight)
        nn.init.normal_(ref.bias)
        ours = ft.GroupNorm(4, 12)
        ours.load_state_dict(ref.state_dict())
        self.assertEqual(list(ours.state_dict()), list(ref.state_dict()))
        x = torch.randn(3, 12, 5, 7)
        self.assertTrue(torch.equal(ours(x), ref(x)))
        scale, shift = torch.randn(3, 24, 1, 1).chunk(2, dim=1)
        want = F.silu(ref(x) * (1 + scale) + shift)
        self.assertTrue(torch.equal(ft.group_norm(x, 4, ref.weight, ref.bias, 1e-5, activation="silu", scale=scale,
                                                  shift=shift), want))
        with self.assertRaises(ValueError):
            ft.GroupNorm(4, 12, activation="relu")
        with self.assertRaises(RuntimeError):  # torch's own error: 5 groups do not divide 12 channels
            ft.group_norm(x, 5)

    def test_convert_fuses_groupnorm_silu(self):
        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.norm = nn.GroupNorm(2, 8)
                self.act = nn.SiLU()
                self.conv = nn.Conv2d(8, 8, 3, padding=1)
                self.norm2 = nn.GroupNorm(4, 8)

            def forward(self, x):
                h = self.conv(self.act(self.norm(x)))
                return F.silu(self.norm2(h)) + x

        torch.manual_seed(1)
        model = Block()
        ref = copy.deepcopy(model)
        x = torch.randn(2, 8, 6, 6)
        out = ft.convert(model, fuse=True)
        self.assertEqual((type(model.norm), model.norm.activation, model.norm2.activation),
                         (ft.GroupNorm, "silu", "silu"))
        self.assertEqual(out.fused_epilogues, 2)
        self.assertTrue(torch.allclose(out(x), ref(x), rtol=1e-6, atol=1e-6))

    def test_diffusers_vae_fusion(self):
        try:
            from diffusers import AutoencoderKL
        except Exception as e:  # noqa: BLE001
            self.skipTest(f"diffusers is not importable here ({type(e).__name__})")
        torch.manual_seed(2)
        vae = AutoencoderKL(block_out_channels=[32, 64], down_block_types=["DownEncoderBlock2D"] * 2,
                            up_block_types=["UpDecoderBlock2D"] * 2, layers_per_block=1, latent_channels=4,
                            norm_num_groups=8, sample_size=32).eval()
        ref = copy.deepcopy(vae)
        z = torch.randn(1, 4, 8, 8)
        out = ft.convert(vae, fuse=True)
        self.assertIs(out, vae)  # not FX-traceable: the model itself, fused in place
        report = vae.fusednorm_report
        resnets = [n for n, m in vae.named_modules() if type(m).__name__ == "FusedResnetBlock2D"]
        n_resnets = sum(type(m).__name__ == "ResnetBlock2D" for m in ref.modules())
        self.assertEqual(len(resnets), n_resnets, str(report))
        self.assertIsInstance(vae.decoder.conv_act, nn.Identity)
        self.assertEqual(vae.decoder.conv_norm_out.activation, "silu")
        self.assertFalse(any(type(m) is nn.GroupNorm for m in vae.modules()), str(report))
        with torch.no_grad():
            self.assertTrue(torch.equal(vae.decode(z).sample, ref.decode(z).sample))
        self.assertEqual(set(vae.state_dict()), set(ref.state_dict()))
        import pickle
        again = pickle.loads(pickle.dumps(vae))
        self.assertEqual(type(again.decoder.up_blocks[0].resnets[0]).__name__, "FusedResnetBlock2D")

class BuildTool(unittest.TestCase):
    def test_compiles_in_a_fresh_interpreter(self):
        # `python -m fusednorm.torch.build` imports fusednorm.torch first, which
        # may have loaded ops already; PyTorch's extension builder imports what
        # it built, and a second registration of the namespace aborts the
        # process. So the compile runs in a child interpreter, and this one
        # only copies the file it wrote.
        import json
        import subprocess
        import tempfile
        from unittest import mock

        from fusednorm.torch import build
        calls = []

        def child(cmd, env=None):
            calls.append(cmd)
            args = json.loads(cmd[-1])
            with open(os.path.join(args["dir"], build.NAME + ".so"), "wb") as f:
                f.write(b"built")
            return subprocess.CompletedProcess(cmd, 0)

        with tempfile.TemporaryDirectory() as dest, mock.patch("subprocess.run", child), \
                mock.patch("torch.utils.cpp_extension.load", side_effect=AssertionError("compiled in this process")):
            out = build.build(dest, False)
            with open(out, "rb") as f:
                self.assertEqual(f.read(), b"built")
            self.assertTrue(os.path.exists(os.path.join(dest, build.NAME + ".json")))
        self.assertEqual(len(calls), 1)
        self.assertEqual(calls[0][0], sys.executable)
        srcs = json.loads(calls[0][-1])["sources"]
        self.assertEqual(srcs, build.sources())  # every csrc/*.cpp: ops.cpp and one file per op
        self.assertIn(os.path.join(build.CSRC, "ops.cpp"), srcs)

    def test_failed_compile_is_reported(self):
        import subprocess
        import tempfile
        from unittest import mock

        from fusednorm.torch import build
        with tempfile.TemporaryDirectory() as dest, \
                mock.patch("subprocess.run", lambda cmd, env=None: subprocess.CompletedProcess(cmd, 3)):
            self.assertEqual(build.main(["--dest", dest]), 1)
            self.assertEqual(os.listdir(dest), [])


class Compile(unittest.TestCase):
    """torch.compile reaches the library's ops: Dynamo's graph of each module,
    traced on fake CUDA tensors (no GPU needed; running the graphs is the GPU
    suite's part), calls torch.ops.fusednorm, not torch's operators."""

    def test_functorch_check_under_dynamo(self):
        # Dynamo wraps peek_interpreter_stack()'s None as an object that
        # `is not None` holds for: every torch.compile'd module took torch's
        # path, as under a functorch transform.
        from fusednorm.torch import modules

        def f(x):
            return x + (1.0 if modules._torch_only() else 0.0)

        x = torch.zeros(3)
        torch._dynamo.reset()
        got = {"eager": f(x), "vmap": torch.vmap(f)(x),
               "compile": torch.compile(f, backend="eager", fullgraph=True)(x),
               "compile(vmap)": torch.compile(torch.vmap(f), backend="eager", fullgraph=True)(x)}
        self.assertEqual({k: bool(v.sum() > 0) for k, v in got.items()},
                         {"eager": False, "vmap": True, "compile": False, "compile(vmap)": True})

    def graph(self, make, *inputs):
        """(target, args) of each call in Dynamo's graph of make()(*inputs),
        module and inputs made on fake CUDA tensors."""
        from torch._subclasses.fake_tensor import FakeTensorMode
        nodes = []

        def backend(gm, example_inputs):
            nodes.extend((str(n.target), n.args) for n in gm.graph.nodes if n.op == "call_function")
            return gm

        torch._dynamo.reset()
        with FakeTensorMode(allow_non_fake_inputs=True):
            module = make()
            args = [torch.randn(shape, device="cuda", dtype=dtype) for shape, dtype in inputs]
            torch.compile(module, backend=backend, fullgraph=True)(*args)
        return nodes

    def test_compiled_norms_call_the_ops(self):
        # The norms only: the fake kernels of Linear's and BatchNorm's
        # forwards ask the library for the aux / reserve size, which needs a
        # device (the GPU suite checks their graphs); the gate above is theirs too.
        if not ft.ops_available():
            self.skipTest(f"the C++ ops are not built: {ft.ops_unavailable_reason()}")
        bf16 = torch.bfloat16
        cases = [("LayerNorm", lambda: ft.LayerNorm(64, device="cuda", dtype=bf16), (8, 64), (0, 1, 1e-5)),
                 ("RMSNorm", lambda: ft.RMSNorm(64, 1e-6, device="cuda", dtype=bf16), (2, 8, 64), (1, 2, 1e-6)),
                 ("RMSNorm eps=None", lambda: ft.RMSNorm(64, device="cuda", dtype=bf16), (8, 64),
                  (1, 1, torch.finfo(torch.float32).eps))]
        for what, make, shape, mode_axis_eps in cases:
            nodes = self.graph(make, (shape, bf16))
            calls = [args for target, args in nodes if target == "fusednorm.norm"]
            self.assertEqual(len(calls), 1, f"{what}: fusednorm.norm is not in the compiled graph: {nodes}")
            self.assertEqual(tuple(calls[0][3:6]), mode_axis_eps, what)

    def test_compiled_group_norm_calls_the_op(self):
        if not ft.ops_available():
            self.skipTest(f"the C++ ops are not built: {ft.ops_unavailable_reason()}")
        bf16 = torch.bfloat16
        nodes = self.graph(lambda: ft.GroupNorm(4, 16, device="cuda", dtype=bf16, activation="silu"),
                           ((2, 16, 5, 5), bf16))
        calls = [args for target, args in nodes if target == "fusednorm.group_norm"]
        self.assertEqual(len(calls), 1, f"fusednorm.group_norm is not in the compiled graph: {nodes}")
        self.assertEqual((calls[0][1], calls[0][7]), (4, 1))  # groups, SiLU

    def test_group_norm_fakes(self):
        if not ft.ops_available():
            self.skipTest(f"the C++ ops are not built: {ft.ops_unavailable_reason()}")
        from torch._subclasses.fake_tensor import FakeTensorMode
        ops = torch.ops.fusednorm
        with FakeTensorMode():
            x = torch.randn(2, 8, 3, 5, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
            w = torch.randn(8, device="cuda")
            sc, sh = torch.randn(2, 16, 1, 1, device="cuda", dtype=torch.bfloat16).chunk(2, dim=1)
            y, mean, rstd = ops.group_norm_fwd(x, 4, w, w, sc, sh, 1e-5, 1)
            self.assertEqual((y.shape, y.stride()), (x.shape, x.stride()))
            self.assertEqual((tuple(mean.shape), rstd.dtype), ((8,), torch.float32))
            dx, dw, db, ds, dh = ops.group_norm_bwd(y, x, mean, rstd, 4, w, w, sc, sh, 1, True, True, True, True)
            self.assertEqual((dx.stride(), dw.shape, dw.dtype, ds.shape, ds.dtype),
                             (x.stride(), (8,), torch.float32, (2, 8), torch.bfloat16))
            xs = torch.randn(2, 8, 3, 10, device="cuda")[..., :5]  # neither layout: contiguous output
            self.assertTrue(ops.group_norm(xs, 4, None, None, None, None, 1e-5, 0).is_contiguous())

    def test_norm_fakes(self):
        """The norm ops' fake kernels promise what csrc/norm.cpp returns: y and dx
        in x's layout, one float32 statistic per row (mean empty for
        RMSNorm), dgamma/dbeta packed in the weight's dtype or empty."""
        if not ft.ops_available():
            self.skipTest(f"the C++ ops are not built: {ft.ops_unavailable_reason()}")
        from torch._subclasses.fake_tensor import FakeTensorMode
        ops = torch.ops.fusednorm
        with FakeTensorMode():
            x = torch.randn(6, 4, 40, device="cuda", dtype=torch.bfloat16)[..., :32]  # rows 40 apart
            w = torch.randn(32, device="cuda")
            for mode in (0, 1):
                b = w if mode == 0 else None
                y, mean, rstd = ops.norm_fwd(x, w, b, mode, 2, 1e-5, 0)
                self.assertEqual((y.shape, y.stride(), y.dtype), (x.shape, torch.empty_like(x).stride(), x.dtype))
                self.assertEqual((tuple(rstd.shape), rstd.dtype), ((24,), torch.float32))
                self.assertEqual((tuple(mean.shape), mean.dtype), ((24,) if mode == 0 else (0,), torch.float32))
                dx, dg, db = ops.norm_bwd(torch.empty_like(y), x, mean, rstd, w, b, mode, 2, True, True, 0)
                self.assertEqual((dx.shape, dx.stride(), dx.dtype), (x.shape, y.stride(), x.dtype))
                self.assertEqual((tuple(dg.shape), dg.dtype), ((32,), torch.float32))
                self.assertEqual((tuple(db.shape), db.dtype), ((32,) if mode == 0 else (0,),
                                                              torch.float32 if mode == 0 else x.dtype))
                self.assertEqual(ops.norm(x, w, b, mode, 2, 1e-5, 0).stride(), y.stride())

    def test_batchnorm_fake_under_a_dynamic_batch(self):
        """Under symbolic sizes (Dynamo recompiling with a dynamic batch) the
        training forward's fake answers the reserve size as an expression of
        x's own symbols: an unbacked size would be a pending symbol that the
        compiled graph never returns (the autograd node saves the reserve)."""
        if not ft.ops_available():
            self.skipTest(f"the C++ ops are not built: {ft.ops_unavailable_reason()}")
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch._dynamo.source import LocalSource
        from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext
        ops = torch.ops.fusednorm
        env = ShapeEnv()
        mode = FakeTensorMode(shape_env=env)
        ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] + [DimDynamic.STATIC] * 3)
        x = mode.from_tensor(torch.empty(5, 8, 3, 7, device="meta", dtype=torch.float16),
                             source=LocalSource("x"), symbolic_context=ctx)
        with mode:
            self.assertIsInstance(x.shape[0], torch.SymInt)
            for epilogue, want in ((0, lambda n: 0), (1, lambda n: (max(n, 1) * 168 + 31) // 32 * 4)):
                *_, reserve = ops.bn_fwd_train(x, None, None, None, None, None, None, 0.1, 1e-5, epilogue, 0, 0)
                size = reserve.shape[0]
                self.assertFalse(env.pending_fresh_unbacked_symbols, f"epilogue {epilogue}: an unbacked size")
                if isinstance(size, torch.SymInt):
                    self.assertLessEqual(size.node.expr.free_symbols, x.shape[0].node.expr.free_symbols)
                    for n in (2, 5, 33):  # (Dynamo specializes batches 0 and 1: concrete sizes)
                        got = int(size.node.expr.subs(x.shape[0].node.expr, n))
                        self.assertEqual(got, want(n), f"epilogue {epilogue}, batch {n}")
                else:
                    self.assertEqual(size, want(5))


if __name__ == "__main__":
    print(f"torch {torch.__version__}; C++ ops: {ft.ops_available()} ({ft.ops_unavailable_reason()})")
    unittest.main(verbosity=2)
