#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""fusednorm.torch without a GPU: on CPU tensors every module is torch.nn's
own computation (the fallback), bit for bit; convert() swaps classes in place
keeping the very parameter tensors; convert(fuse=True) finds the BN->ReLU,
BN->add->ReLU and Linear->activation patterns of a ResNet-style model and an
MLP and computes the same; state_dict keys are torch's. Runs where PyTorch
imports (the C++ ops need not build: without them the modules fall back the
same way); exit 77 where it does not.
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
        self.assertEqual((mlp.fc1.activation, mlp.fc2.activation, mlp.fc3.activation), ("gelu_tanh", None, "relu"))
        x = torch.randn(3, 16)
        self.assertTrue(torch.allclose(fm(x), ref(x), atol=1e-6))

    def test_sync_batchnorm_conversion(self):
        model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU())
        sync = ft.SyncBatchNorm.convert_sync_batchnorm(model)
        self.assertIsInstance(sync[1], ft.SyncBatchNorm)
        self.assertIsInstance(sync[1], nn.SyncBatchNorm)
        self.assertIs(sync[1].weight, model[1].weight)


if __name__ == "__main__":
    print(f"torch {torch.__version__}; C++ ops: {ft.ops_available()} ({ft.ops_unavailable_reason()})")
    unittest.main(verbosity=2)
