"""torch.nn modules on libfusednorm's kernels: each a subclass of the module
it replaces (same parameters, buffers and state_dict keys; load_state_dict
works both ways), calling the C++ ops of csrc/ops.cpp when the library takes
the case and torch.nn.functional otherwise (CPU tensors, dtypes or dtype
mixes it refuses, the ops not built), with the same results.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from . import _ops

__all__ = ["LayerNorm", "RMSNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", "Linear"]

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)
_ON = _ops.available()
# Eager calls go straight to the extension's functions (pybind11: the
# autograd function and kernel, no torch.ops argument parsing: several
# microseconds a call); under torch.compile the registered ops, which Dynamo
# and AOTAutograd trace with their fake implementations.
_compiling = torch.compiler.is_compiling
if _ON:
    _norm_op = torch.ops.fusednorm.norm.default
    _batch_norm_op = torch.ops.fusednorm.batch_norm.default
    _bn_infer_op = torch.ops.fusednorm.bn_fwd_infer.default
    _linear_op = torch.ops.fusednorm.linear.default
    _norm_ext, _batch_norm_ext, _bn_infer_ext, _linear_ext = (_ops.ext.norm, _ops.ext.batch_norm, _ops.ext.bn_infer,
                                                              _ops.ext.linear)

_LAYERNORM, _RMSNORM = 0, 1
_EPI_NONE, _EPI_RELU, _EPI_ADD_RELU = 0, 1, 2
_ACTS = {None: 0, "relu": 1, "gelu_tanh": 2}


def _rowwise(x, axis):
    from .._core import _rowwise as rw
    return rw(x, axis)


_F32 = torch.float32


def _params_ok(w, b, x) -> bool:
    """weight and bias as the library takes them: one dtype, x's or float32
    (a device mismatch is an error from the op, as from torch)."""
    p = w if w is not None else b
    if p is None:
        return True
    return (p.dtype is x.dtype or p.dtype is _F32) and (w is None or b is None or w.dtype is b.dtype)


# ---- LayerNorm / RMSNorm ------------------------------------------------------

class LayerNorm(nn.LayerNorm):
    """torch.nn.LayerNorm on libfusednorm's kernels (fp32/fp16/bf16 CUDA
    input; weight and bias in the input's dtype or float32)."""

    def forward(self, x):
        w, b = self.weight, self.bias
        if _ON and x.is_cuda and x.dtype in _FLOATS and _params_ok(w, b, x):
            axis = x.dim() - len(self.normalized_shape)
            if not x.is_contiguous():
                x = _rowwise(x, axis)
            return (_norm_op if _compiling() else _norm_ext)(x, w, b, _LAYERNORM, axis, self.eps)
        return F.layer_norm(x, self.normalized_shape, w, b, self.eps)


class RMSNorm(nn.RMSNorm):
    """torch.nn.RMSNorm on libfusednorm's kernels; eps=None means
    torch.finfo(x.dtype).eps, as torch's."""

    def forward(self, x):
        w = self.weight
        if _ON and x.is_cuda and x.dtype in _FLOATS and _params_ok(w, None, x):
            axis = x.dim() - len(self.normalized_shape)
            eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
            if not x.is_contiguous():
                x = _rowwise(x, axis)
            return (_norm_op if _compiling() else _norm_ext)(x, w, None, _RMSNORM, axis, eps)
        return F.rms_norm(x, self.normalized_shape, w, self.eps)


# ---- BatchNorm ------------------------------------------------------------------

def _bn_layout(x):
    if x.is_contiguous() or (x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last)) or \
            (x.dim() == 5 and x.is_contiguous(memory_format=torch.channels_last_3d)):
        return x
    from ..batchnorm import _bn_layout as layout
    return layout(x)


class _BatchNormMixin:
    """forward(x, z=None): BN, then with activation="relu" the ReLU epilogue
    (BN+ReLU), with z as well BN+Add+ReLU (relu(bn(x) + z)); z without an
    activation gives bn(x) + z. momentum=None is the cumulative average. In
    eval mode (running statistics kept) the inference kernel runs."""

    def _init_activation(self, activation):
        if activation not in (None, "relu"):
            raise ValueError(f"activation must be None or 'relu'; got {activation!r}")
        self.activation = activation

    def extra_repr(self):
        s = super().extra_repr()
        return s + (f", activation={self.activation!r}" if getattr(self, "activation", None) else "")

    def _lib_ok(self, x, z) -> bool:
        """The library takes fp32/fp16/bf16 CUDA input with float32
        per-channel vectors (model.half() makes them fp16: torch's path)."""
        if not (_ON and x.is_cuda and x.dtype in _FLOATS):
            return False
        w, rm = self.weight, self.running_mean
        if (w is not None and (w.dtype is not _F32 or self.bias.dtype is not _F32)) or \
                (rm is not None and (rm.dtype is not _F32 or self.running_var.dtype is not _F32)):
            return False
        return z is None or (z.dtype is x.dtype and z.shape == x.shape)

    def _torch_forward(self, x, z, act):
        """torch.nn's BatchNorm forward (the fallback), then the epilogue."""
        y = super().forward(x)
        if z is not None:
            y = y + z
        return F.relu(y) if act else y

    def _comm(self, x):
        return 0

    def forward(self, x, z=None):
        self._check_input_dim(x)
        act = getattr(self, "activation", None) == "relu"
        if not self._lib_ok(x, z):
            return self._torch_forward(x, z, act)
        x = _bn_layout(x)
        if z is not None and z.stride() != x.stride():
            z = torch.empty_like(x).copy_(z)  # read through x's descriptor
        bn_training = self.training or (self.running_mean is None and self.running_var is None)
        compiling = _compiling()
        if not bn_training:
            _bn_infer = _bn_infer_op if compiling else _bn_infer_ext
            if torch.is_grad_enabled() and (x.requires_grad or (self.weight is not None and self.weight.requires_grad)
                                            or (z is not None and z.requires_grad)):
                return self._torch_forward(x, z, act)  # no inference backward in the library
            if z is not None and not act:
                return _bn_infer(x, self.weight, self.bias, self.running_mean, self.running_var, None, self.eps,
                                 _EPI_NONE) + z
            epi = _EPI_ADD_RELU if (act and z is not None) else (_EPI_RELU if act else _EPI_NONE)
            return _bn_infer(x, self.weight, self.bias, self.running_mean, self.running_var,
                             z if epi == _EPI_ADD_RELU else None, self.eps, epi)
        track = self.training and self.track_running_stats
        rm = self.running_mean if track else None
        rv = self.running_var if track else None
        nbt = self.num_batches_tracked if track else None  # the library counts it, once
        momentum = -1.0 if self.momentum is None else float(self.momentum)
        comm = self._comm(x)
        _batch_norm = _batch_norm_op if compiling else _batch_norm_ext
        if z is not None and not act:
            return _batch_norm(x, self.weight, self.bias, rm, rv, nbt, None, momentum, self.eps, _EPI_NONE, comm,
                               0) + z
        epi = _EPI_ADD_RELU if (act and z is not None) else (_EPI_RELU if act else _EPI_NONE)
        return _batch_norm(x, self.weight, self.bias, rm, rv, nbt, z if epi == _EPI_ADD_RELU else None, momentum,
                           self.eps, epi, comm, 0)


class BatchNorm1d(_BatchNormMixin, nn.BatchNorm1d):
    def __init__(self, *args, activation=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._init_activation(activation)


class BatchNorm2d(_BatchNormMixin, nn.BatchNorm2d):
    def __init__(self, *args, activation=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._init_activation(activation)


class BatchNorm3d(_BatchNormMixin, nn.BatchNorm3d):
    def __init__(self, *args, activation=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._init_activation(activation)


class SyncBatchNorm(_BatchNormMixin, nn.SyncBatchNorm):
    """torch.nn.SyncBatchNorm over the library's NCCL path: statistics are
    combined across the process group's ranks through a communicator made
    for that group (ncclGetUniqueId / ncclCommInitRank on the libnccl the
    library uses; the id broadcast with torch.distributed), never torch's own.
    Weight gradients stay local, as torch's (DDP reduces them). With one rank,
    or outside training, it is BatchNorm; `always_sync = True` uses the
    communicator even with one rank (tests)."""

    always_sync = False

    def __init__(self, *args, activation=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._init_activation(activation)

    def _check_input_dim(self, x):
        if x.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {x.dim()}D input)")

    def _torch_forward(self, x, z, act):
        y = nn.SyncBatchNorm.forward(self, x)
        if z is not None:
            y = y + z
        return F.relu(y) if act else y

    def _comm(self, x):
        import torch.distributed as dist
        if not (self.training and dist.is_available() and dist.is_initialized()):
            return 0
        group = self.process_group or dist.group.WORLD
        if dist.get_world_size(group) == 1 and not self.always_sync:
            return 0
        from . import _nccl
        return _nccl.comm_for(group, x.device)

    @classmethod
    def convert_sync_batchnorm(cls, module, process_group=None):
        """torch's convert_sync_batchnorm, making this class (activation kept)."""
        out = module
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and not isinstance(module, nn.SyncBatchNorm):
            out = cls(module.num_features, module.eps, module.momentum, module.affine, module.track_running_stats,
                      process_group, activation=getattr(module, "activation", None))
            if module.affine:
                with torch.no_grad():
                    out.weight = module.weight
                    out.bias = module.bias
            out.running_mean = module.running_mean
            out.running_var = module.running_var
            out.num_batches_tracked = module.num_batches_tracked
            out.training = module.training
            if hasattr(module, "qconfig"):
                out.qconfig = module.qconfig
        for name, child in module.named_children():
            out.add_module(name, cls.convert_sync_batchnorm(child, process_group))
        del module
        return out


# ---- Linear -----------------------------------------------------------------------

class Linear(nn.Linear):
    """torch.nn.Linear with an activation fused into the epilogue: None,
    "relu" or "gelu_tanh" (F.gelu(approximate="tanh")); x, weight and bias of
    one dtype (fp32/fp16/bf16) on the GPU (cuBLASLt through the library)."""

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None, activation=None):
        super().__init__(in_features, out_features, bias, device, dtype)
        if activation not in _ACTS:
            raise ValueError(f"activation must be None, 'relu' or 'gelu_tanh'; got {activation!r}")
        self.activation = activation

    def extra_repr(self):
        s = super().extra_repr()
        return s + (f", activation={self.activation!r}" if getattr(self, "activation", None) else "")

    def forward(self, x):
        act = getattr(self, "activation", None)
        w, b = self.weight, self.bias
        if _ON and x.is_cuda and x.dtype in _FLOATS and x.dim() >= 2 and w.dtype is x.dtype and \
                (b.dtype is x.dtype if b is not None else act is None):
            if not x.is_contiguous():
                x = _rowwise(x, -1)
            return (_linear_op if _compiling() else _linear_ext)(x, w if w.is_contiguous() else w.contiguous(), b,
                                                                 _ACTS[act])
        y = F.linear(x, w, b)
        if act == "relu":
            return F.relu(y)
        if act == "gelu_tanh":
            return F.gelu(y, approximate="tanh")
        return y
