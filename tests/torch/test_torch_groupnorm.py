#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""fusednorm.torch's GroupNorm on the GPU (issue 38), against a float64
reference and torch.nn on fresh random inputs, outputs poisoned first:
- group_norm forward and backward (x, weight, bias, scale, shift) over both
  layouts (NCHW / NCDHW / [N, C, L] and channels-last), fp32 / fp16 / bf16
  with float32 or data-dtype parameters, SiLU on and off, scale / shift
  packed and as views of one tensor (diffusers' `temb.chunk(2, dim=1)`),
  awkward shapes (C/G = 1, G = C, G = 1, odd spatial sizes, one sample,
  sliced input); NaN never passes;
- the module against torch.nn.GroupNorm (state_dict, output, gradients);
- torch.compile of the module (the op in the graph) matches eager;
- opcheck of the registered ops;
- a diffusers AutoencoderKL (small config, random weights; when diffusers is
  importable) converted with fuse=True decodes as the original does.
Tolerances, against float64 of the same inputs: |err| <= atol + rtol*|ref|
with (rtol, atol) float32 (1e-5, 1e-5), float16 (2e-3, 2e-3), bfloat16
(1.6e-2, 1.6e-2) for outputs, gradients scaled by the reference's largest
magnitude (sums over up to 10^5 values). Exit 77 without PyTorch or a GPU.
"""
from __future__ import annotations

import copy
import os
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "common"))
from torch_prologue import load  # noqa: E402

torch, F, fn = load(ROOT)
from torch import nn  # noqa: E402

import fusednorm.torch as ft  # noqa: E402

if not ft.ops_available():
    print(f"ERROR: the drop-in's ops are not in use: {ft.ops_unavailable_reason()}")
    sys.exit(1)

DEV = torch.device("cuda")
TOL = {torch.float32: (1e-5, 1e-5), torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 1.6e-2)}


def reference(x, g, w, b, eps, act, sc, sh):
    """float64 of the same inputs."""
    d = torch.float64
    y = F.group_norm(x.to(d), g, None if w is None else w.to(d), None if b is None else b.to(d), eps)
    shape = (x.shape[0], x.shape[1]) + (1,) * (x.dim() - 2)
    if sc is not None:
        y = y * (1 + sc.to(d).reshape(shape))
    if sh is not None:
        y = y + sh.to(d).reshape(shape)
    return F.silu(y) if act else y


def close(test, got, ref, dtype, what, scale_by_max=False):
    test.assertFalse(torch.isnan(got).any().item(), f"{what}: NaN")
    rtol, atol = TOL[dtype]
    ref = ref.to(torch.float64)
    err = (got.to(torch.float64) - ref).abs()
    if scale_by_max:
        atol = atol * max(1.0, ref.abs().max().item())
    bad = err > atol + rtol * ref.abs()
    test.assertFalse(bad.any().item(), f"{what}: {int(bad.sum())} of {err.numel()} beyond tolerance, "
                                       f"max err {err.max().item():.3g}")


def make(shape, dtype, layout, gen):
    x = torch.randn(shape, generator=gen, device=DEV, dtype=torch.float32).mul_(1.5).add_(0.3).to(dtype)
    if layout == "cl":
        x = x.to(memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d)
    elif layout == "sliced":
        big = torch.randn(*shape[:-1], shape[-1] + 3, generator=gen, device=DEV).to(dtype)
        x = big[..., 1:shape[-1] + 1]
    return x


class GroupNormGPU(unittest.TestCase):
    def case(self, shape, groups, dtype, layout="nchw", pdtype=None, affine=True, act=False, mod=None, seed=0):
        """mod: None, "packed" ([N, C]) or "chunk" (views of [N, 2C, 1, 1])."""
        gen = torch.Generator(device=DEV).manual_seed(seed)
        n, c = shape[0], shape[1]
        x = make(shape, dtype, layout, gen).requires_grad_()
        pdt = pdtype or dtype
        w = (torch.randn(c, generator=gen, device=DEV) * 0.5 + 1).to(pdt).requires_grad_() if affine else None
        b = (torch.randn(c, generator=gen, device=DEV) * 0.2).to(pdt).requires_grad_() if affine else None
        sc = sh = None
        if mod == "packed":
            sc = (torch.randn(n, c, generator=gen, device=DEV) * 0.3).to(dtype).requires_grad_()
            sh = (torch.randn(n, c, generator=gen, device=DEV) * 0.3).to(dtype).requires_grad_()
        elif mod == "chunk":
            temb = (torch.randn(n, 2 * c, 1, 1, generator=gen, device=DEV) * 0.3).to(dtype).requires_grad_()
            sc, sh = temb.chunk(2, dim=1)
        what = f"{tuple(shape)} G={groups} {dtype} {layout} p={pdt} act={act} mod={mod}"
        y = ft.group_norm(x, groups, w, b, 1e-5, activation="silu" if act else None, scale=sc, shift=sh)
        self.assertEqual(y.dtype, dtype, what)
        if layout == "cl":
            self.assertEqual(y.stride(), x.stride(), what + ": y keeps the channels-last layout")
        ref = reference(x.detach(), groups, None if w is None else w.detach(), None if b is None else b.detach(),
                        1e-5, act, None if sc is None else sc.detach(), None if sh is None else sh.detach())
        close(self, y, ref, dtype, what + " y")
        dy = torch.randn(y.shape, generator=gen, device=DEV).to(dtype)
        leaves = [t for t in (x, w, b) if t is not None]
        if mod == "packed":
            leaves += [sc, sh]
        elif mod == "chunk":
            leaves.append(temb)
        grads = torch.autograd.grad(y, leaves, dy)
        xs = [t.detach().to(torch.float64).requires_grad_() for t in leaves]
        i = 0
        x64 = xs[i]
        i += 1
        w64 = b64 = sc64 = sh64 = None
        if affine:
            w64, b64 = xs[1], xs[2]
            i = 3
        if mod == "packed":
            sc64, sh64 = xs[i], xs[i + 1]
        elif mod == "chunk":
            sc64, sh64 = xs[i].chunk(2, dim=1)
        ref64 = reference(x64, groups, w64, b64, 1e-5, act, sc64, sh64)
        want = torch.autograd.grad(ref64, xs, dy.to(torch.float64))
        names = ["dx", "dweight", "dbias", "dscale", "dshift"] if affine else ["dx", "dscale", "dshift"]
        if mod == "chunk":
            names = names[:len(names) - 2] + ["dtemb"]
        for name, g_, r_, leaf in zip(names, grads, want, leaves):
            self.assertEqual((g_.shape, g_.dtype), (leaf.shape, leaf.dtype), f"{what} {name}")
            close(self, g_, r_, leaf.dtype, f"{what} {name}", scale_by_max=True)

    def test_shapes_layouts_dtypes(self):
        cases = [((2, 64, 8, 8), 32), ((1, 32, 7, 7), 32), ((3, 12, 5, 3), 1), ((2, 16, 1, 1), 4),
                 ((1, 512, 32, 32), 32), ((4, 96, 9, 11), 8), ((2, 24, 3, 4, 5), 6), ((5, 20, 33), 5),
                 ((3, 40), 10), ((1, 16, 64, 64), 16)]
        seed = 0
        for shape, g in cases:
            for dtype in (torch.float32, torch.float16, torch.bfloat16):
                layouts = ["nchw", "cl"] if len(shape) in (4, 5) else ["nchw"]
                if len(shape) == 4:
                    layouts.append("sliced")
                for layout in layouts:
                    seed += 1
                    with self.subTest(shape=shape, dtype=dtype, layout=layout):
                        self.case(shape, g, dtype, layout, act=seed % 2 == 0, seed=seed,
                                  pdtype=torch.float32 if seed % 3 == 0 else None,
                                  mod=("packed", "chunk", None)[seed % 3] if len(shape) >= 3 else None)

    def test_epilogues_and_parameters(self):
        for act in (False, True):
            for mod in (None, "packed", "chunk"):
                for affine in (True, False):
                    with self.subTest(act=act, mod=mod, affine=affine):
                        self.case((2, 64, 16, 16), 32, torch.bfloat16, "cl", act=act, mod=mod, affine=affine,
                                  seed=100 + act * 10 + (mod is not None) + 2 * affine)

    def test_large(self):
        # batch 1, 32 groups of 2 M values each: the split statistics
        self.case((1, 512, 128, 128), 32, torch.bfloat16, "nchw", act=True, seed=7)
        self.case((1, 512, 128, 128), 32, torch.bfloat16, "cl", act=True, mod="chunk", seed=8)

    def test_module_against_torch_nn(self):
        torch.manual_seed(3)
        ref = nn.GroupNorm(8, 64).to(DEV)
        nn.init.normal_(ref.weight)
        nn.init.normal_(ref.bias)
        model = copy.deepcopy(ref)
        ft.convert(model)
        self.assertIs(type(model), ft.GroupNorm)
        self.assertEqual(list(model.state_dict()), list(ref.state_dict()))
        x = torch.randn(4, 64, 12, 12, device=DEV, requires_grad=True)
        y, y_ref = model(x), ref(x)
        close(self, y, y_ref, torch.float32, "module y")
        g = torch.autograd.grad(y.square().sum(), [x, model.weight, model.bias])
        g_ref = torch.autograd.grad(y_ref.square().sum(), [x, ref.weight, ref.bias])
        for a, r, name in zip(g, g_ref, ("dx", "dweight", "dbias")):
            close(self, a, r, torch.float32, f"module {name}", scale_by_max=True)

    def test_compiled_matches_eager(self):
        m = ft.GroupNorm(32, 128, device=DEV, dtype=torch.bfloat16, activation="silu")
        x = torch.randn(2, 128, 16, 16, device=DEV, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
        torch._dynamo.reset()
        got = torch.compile(m, fullgraph=True)(x)
        self.assertTrue(torch.equal(got, m(x)))

    def test_autocast_is_float32(self):
        m = ft.GroupNorm(4, 16, device=DEV)
        x = torch.randn(2, 16, 4, 4, device=DEV, dtype=torch.bfloat16)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = m(x)
            y_ref = nn.GroupNorm.forward(m, x)
        self.assertEqual((y.dtype, y_ref.dtype), (torch.float32, torch.float32))
        close(self, y, y_ref, torch.float32, "autocast")

    def test_double_backward(self):
        x = torch.randn(2, 8, 3, 3, device=DEV, dtype=torch.float64, requires_grad=False).float().requires_grad_()
        w = torch.randn(8, device=DEV, requires_grad=True)
        y = ft.group_norm(x, 4, w, None, activation="silu")
        (gx,) = torch.autograd.grad(y.square().sum(), [x], create_graph=True)
        (ggw,) = torch.autograd.grad(gx.sum(), [w])
        x2 = x.detach().requires_grad_()
        w2 = w.detach().requires_grad_()
        y2 = F.silu(F.group_norm(x2, 4, w2, None))
        (gx2,) = torch.autograd.grad(y2.square().sum(), [x2], create_graph=True)
        (ggw2,) = torch.autograd.grad(gx2.sum(), [w2])
        close(self, ggw, ggw2, torch.float32, "double backward", scale_by_max=True)

    def test_opcheck(self):
        x = torch.randn(2, 8, 4, 4, device=DEV, dtype=torch.bfloat16)
        w = torch.randn(8, device=DEV)
        sc, sh = torch.randn(2, 16, 1, 1, device=DEV, dtype=torch.bfloat16).chunk(2, dim=1)
        torch.library.opcheck(torch.ops.fusednorm.group_norm, (x, 4, w, w, sc, sh, 1e-5, 1),
                              test_utils=("test_schema", "test_faketensor"))
        torch.library.opcheck(torch.ops.fusednorm.group_norm_fwd, (x, 4, w, w, sc, sh, 1e-5, 1),
                              test_utils=("test_schema", "test_faketensor"))

    def test_diffusers_vae(self):
        try:
            from diffusers import AutoencoderKL
        except Exception as e:  # noqa: BLE001
            self.skipTest(f"diffusers is not importable ({type(e).__name__})")
        torch.manual_seed(4)
        vae = AutoencoderKL(block_out_channels=[64, 128], down_block_types=["DownEncoderBlock2D"] * 2,
                            up_block_types=["UpDecoderBlock2D"] * 2, layers_per_block=1, latent_channels=4,
                            norm_num_groups=32, sample_size=64).to(DEV, torch.bfloat16).eval()
        ref = copy.deepcopy(vae)
        ft.convert(vae, fuse=True)
        self.assertTrue(any(type(m).__name__ == "FusedResnetBlock2D" for m in vae.modules()))
        z = torch.randn(1, 4, 16, 16, device=DEV, dtype=torch.bfloat16)
        with torch.no_grad():
            got, want = vae.decode(z).sample, ref.decode(z).sample
            want64 = copy.deepcopy(ref).double().decode(z.double()).sample
        self.assertFalse(torch.isnan(got).any().item())
        # ours rounds each GroupNorm+SiLU once; the original twice: against
        # float64, ours is no further than the original, give or take
        e_ours = (got.double() - want64).abs().max().item()
        e_ref = (want.double() - want64).abs().max().item()
        self.assertLessEqual(e_ours, 1.5 * e_ref + 1e-2, f"decode: ours {e_ours:.3g}, original {e_ref:.3g}")


if __name__ == "__main__":
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    unittest.main(verbosity=2)
