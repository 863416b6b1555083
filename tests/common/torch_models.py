# SPDX-License-Identifier: Apache-2.0
"""Test models shared by the PyTorch drop-in's tests and its benchmark.
Import after PyTorch is known to import (tests/common/torch_prologue.py, or
the test's own guard)."""
from torch import nn


class BasicBlock(nn.Module):
    """torchvision's BasicBlock shape: conv-BN-ReLU, conv-BN, the identity or
    a 1x1 downsample (computed after bn2, as torchvision does) added, ReLU."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)
