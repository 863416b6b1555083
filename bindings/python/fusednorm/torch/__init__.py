# SPDX-License-Identifier: Apache-2.0
"""libfusednorm as PyTorch modules: drop-in subclasses of torch.nn's
LayerNorm, RMSNorm, BatchNorm1d/2d/3d, SyncBatchNorm, GroupNorm and Linear, and
`convert(model, fuse=False)` that swaps them into a model, Hugging Face
transformers' norms included (with fuse=True it fuses their decoder layers'
residual adds with the norms, and rewrites BN->ReLU and BN->add->ReLU into
fused epilogues); add_rms_norm / add_layer_norm (add & norm in one pass).

The ops are C++ (csrc/*.cpp, TORCH_LIBRARY "fusednorm", autograd in C++,
fake implementations for torch.compile), built on first import;
`ops_available()` / `ops_unavailable_reason()` say whether they are in use.
Without them (or for what the library refuses) the modules run
torch.nn.functional.
"""
from . import _ops
from .convert import convert, fuse, swap
from .groupnorm import GroupNorm, group_norm
from .hf import ConvertReport
from .modules import (AddLayerNorm, AddRMSNorm, BatchNorm1d, BatchNorm2d, BatchNorm3d, Linear, LayerNorm, RMSNorm,
                      SyncBatchNorm, add_layer_norm, add_rms_norm)
from .quant import layer_norm_quant, rms_norm_quant

__all__ = ["LayerNorm", "RMSNorm", "AddLayerNorm", "AddRMSNorm", "add_layer_norm", "add_rms_norm", "BatchNorm1d",
           "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", "GroupNorm", "group_norm", "Linear", "convert", "fuse",
           "swap", "ConvertReport", "ops_available", "ops_unavailable_reason", "layer_norm_quant", "rms_norm_quant"]


def ops_available() -> bool:
    return _ops.available()


def ops_unavailable_reason():
    return _ops.reason()
