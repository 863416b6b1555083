# SPDX-License-Identifier: Apache-2.0
"""torch.nn modules on libfusednorm's kernels: each a subclass of the module
it replaces (same parameters, buffers and state_dict keys; load_state_dict
works both ways; torch's constructor and forward signatures), with the same
results as torch.nn where the library does not take the case.

A call goes one of two ways:
- eager (the usual case): one call of the C++ extension's entry point with the
  module's tensors, which runs the op and returns its output, or returns None
  where the module's Python path must run;
- the Python path: torch.compile and torch.export (the registered
  torch.ops.fusednorm ops, with fake kernels and autocast rules), FX symbolic
  tracing (the module records itself as one call_module node, as torch.nn's
  modules are leaves of FX's tracer), ONNX export and TorchScript tracing
  (torch.nn.functional's ops, which export as standard ONNX operators),
  functorch transforms, LayerNorm/RMSNorm under forward-mode AD (a
  dual_level: torch's ops carry the tangents), layouts that need a copy (and
  RMSNorm's channels-last
  output), empty tensors and every case the library refuses (CPU tensors,
  dtypes, parameter dtype mixes): torch.nn.functional, as torch.nn does.

Empty inputs never reach the library: torch.nn's own path returns torch's
empty output and keeps torch's running-statistics behaviour (BatchNorm counts
the batch in num_batches_tracked and leaves the running averages). The
exception is a SyncBatchNorm rank without samples while the statistics are
synchronized: it takes part in the library's collectives, as the others do.

Autocast follows torch's rules for each op: LayerNorm computes and returns
float32 (layer_norm is on autocast's fp32 list), Linear runs in the autocast
dtype, RMSNorm and BatchNorm in the input's dtype.

Double backward (create_graph=True) differentiates torch's formula for the
op, recomputed from the saved inputs: a gradient penalty or a Hessian-vector
product gets real second derivatives, never None.
"""
from __future__ import annotations

from typing import Optional, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn import init

from . import _ops

__all__ = ["LayerNorm", "RMSNorm", "AddLayerNorm", "AddRMSNorm", "add_layer_norm", "add_rms_norm", "BatchNorm1d",
           "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", "Linear"]

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)
_F32 = torch.float32
_ON = _ops.available()
_Proxy = torch.fx.Proxy
_compiling = torch.compiler.is_compiling
if _ON:
    _ext_norm, _ext_bn, _ext_linear = _ops.ext.norm, _ops.ext.bn, _ops.ext.linear
    _ext_add_norm = _ops.ext.add_norm

_LAYERNORM, _RMSNORM = 0, 1
_ZERO_CENTERED = 1  # fnorm_norm_flag_t FNORM_NORM_FLAG_ZERO_CENTERED_GAMMA
_ROUND_XHAT = 2  # FNORM_NORM_FLAG_ROUND_XHAT: x_hat rounded to x's dtype before the scale (Llama's order)
# RMSNorm's eps=None, torch's rule (ATen's rms_norm and its decomposition): the
# machine epsilon of the type it computes in, float32 for every dtype the
# library takes (torch's documentation says x's dtype; the code is what runs).
_RMS_EPS = torch.finfo(torch.float32).eps
_EPI_NONE, _EPI_RELU, _EPI_ADD_RELU = 0, 1, 2
_ACTS = {None: 0, "relu": 1, "gelu_tanh": 2}


def _torch_only() -> bool:
    """torch's own operators must run: ONNX export (they translate to standard
    ONNX operators), a TorchScript trace (it records only ATen operators), a
    functorch transform (vmap, grad: no rules for the custom ops).
    The interpreter is tested by its type: under torch.compile, Dynamo wraps
    peek_interpreter_stack()'s None in an object for which `is not None`
    holds."""
    return (torch.onnx.is_in_onnx_export() or torch.jit.is_tracing()
            or isinstance(torch._C._functorch.peek_interpreter_stack(), torch._C._functorch.CInterpreter))


def _dual_level() -> bool:
    """Inside torch.autograd.forward_ad.dual_level(): inputs may carry
    tangents, which torch's functional ops propagate (LayerNorm/RMSNorm take
    that path there; the library's ops have no forward-mode formula)."""
    return torch.autograd.forward_ad._current_level >= 0


def _fx_call(module, args):
    """Under torch.fx symbolic tracing: the module recorded as one call_module
    node (what FX's tracer does for torch.nn's modules, its leaves), so the
    traced graph calls this module at run time. None when the module is the
    traced root itself (its forward is then traced as torch.nn's is)."""
    tracer = args[0].tracer
    try:
        path = tracer.path_of_module(module)
    except NameError:
        return None
    if not path:
        return None
    return tracer.create_proxy("call_module", path, tuple(args), {})


def _rowwise(x, axis):
    from .._core import _rowwise as rw
    return rw(x, axis)


def _params_ok(w, b, x) -> bool:
    """weight and bias as the library takes them: one dtype, x's or float32
    (a device mismatch is an error from the op, as from torch)."""
    p = w if w is not None else b
    if p is None:
        return True
    return (p.dtype is x.dtype or p.dtype is _F32) and (w is None or b is None or w.dtype is b.dtype)


def _channels_last_format(x):
    """channels_last / channels_last_3d when x is laid out so (and not also
    contiguous), else None."""
    if x.dim() == 4 and not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last):
        return torch.channels_last
    if x.dim() == 5 and not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last_3d):
        return torch.channels_last_3d
    return None


class _Relayout(torch.autograd.Function):
    """t in memory format `fmt`; its gradient goes back in `back`'s."""

    @staticmethod
    def forward(ctx, t, fmt, back):
        ctx.back = back
        return t.contiguous(memory_format=fmt)

    @staticmethod
    def backward(ctx, g):
        return g.contiguous(memory_format=ctx.back), None, None


# ---- LayerNorm / RMSNorm ------------------------------------------------------

def _take_stash(module, x):
    """The output a fused decoder layer's add & norm computed for this module
    on this very tensor x (hf.py), or None: taken once, only while x is
    unmodified and under the grad mode it was computed in (a reentrant
    activation checkpoint runs the layer without grad and hands on the same
    tensor: its norm output has no graph). Plain attributes and an identity
    test, which torch.compile traces without a graph break."""
    st = module._fn_stash
    if st is None:
        return None
    module._fn_stash = None
    s, y, version, grad = st
    if s is x and (version is None or x._version == version) and grad == torch.is_grad_enabled() \
            and not _saved_tensor_hooks():
        return y
    return None


def _saved_tensor_hooks() -> bool:
    """Saved-tensor hooks are active: a non-reentrant activation checkpoint
    (whose recomputation must save what the first pass saved, so a layer may
    not take another layer's norm output) or activation offloading."""
    return torch._C._autograd._top_saved_tensors_default_hooks(False) is not None


def _norm_flags(zero_centered, round_xhat) -> int:
    return (_ZERO_CENTERED if zero_centered else 0) | (_ROUND_XHAT if round_xhat else 0)


def _torch_norm(x, mode, shape, w, b, eps, flags):
    """torch's operators computing what the library computes for these flags
    (the fallback): fp32 math, x_hat rounded to x's dtype first with
    ROUND_XHAT, the output in x's dtype."""
    if not flags & _ROUND_XHAT:
        if flags & _ZERO_CENTERED and w is not None:
            w = w + 1
        if mode == _LAYERNORM:
            return F.layer_norm(x, shape, w, b, eps)
        return F.rms_norm(x, shape, w, eps)  # eps None: torch's own default for x's dtype, as torch.nn
    xf = x.float()
    xh = F.layer_norm(xf, shape, None, None, eps) if mode == _LAYERNORM else F.rms_norm(xf, shape, None, eps)
    y = xh.to(x.dtype).float()
    if w is not None:
        y = y * (w.float() + 1 if flags & _ZERO_CENTERED else w.float())
    if b is not None:
        y = y + b.float()
    return y.to(x.dtype)


class _NormMixin:
    _mode = _LAYERNORM
    _fn_stash = None  # hf.py's hand-over (see _take_stash)

    def _init_zero_centered(self):
        if self.elementwise_affine and self.zero_centered:
            with torch.no_grad():
                self.weight.zero_()

    def _flags(self) -> int:
        d = self.__dict__
        return (_ZERO_CENTERED if d.get("zero_centered") else 0) | (_ROUND_XHAT if d.get("round_xhat") else 0)

    def extra_repr(self):
        s = super().extra_repr()
        s += ", zero_centered=True" if getattr(self, "zero_centered", False) else ""
        return s + (", round_xhat=True" if getattr(self, "round_xhat", False) else "")

    def _python_forward(self, input):
        if isinstance(input, _Proxy):
            out = _fx_call(self, (input,))
            if out is not None:
                return out
        ln = self._mode == _LAYERNORM
        w = self.weight
        b = self.bias if ln else None
        flags = self._flags()
        if _ON and not _torch_only() and not _dual_level() and isinstance(input, Tensor) and input.is_cuda \
                and input.dtype in _FLOATS \
                and input.numel() > 0 and _params_ok(w, b, input) \
                and tuple(input.shape[input.dim() - len(self.normalized_shape):]) == tuple(self.normalized_shape):
            axis = input.dim() - len(self.normalized_shape)
            eps = self.eps if self.eps is not None else _RMS_EPS
            fmt = None if ln else _channels_last_format(input)
            if fmt is not None:  # torch's rms_norm keeps a channels-last layout (input and gradient)
                x = _Relayout.apply(input, torch.contiguous_format, fmt)
                y = torch.ops.fusednorm.norm(x, w, b, self._mode, axis, eps, flags)
                return _Relayout.apply(y, fmt, torch.contiguous_format)
            x = _rowwise(input, axis)
            return torch.ops.fusednorm.norm(x, w, b, self._mode, axis, eps, flags)
        return _torch_norm(input, self._mode, self.normalized_shape, w, b, self.eps, flags)


class LayerNorm(_NormMixin, nn.LayerNorm):
    """torch.nn.LayerNorm on libfusednorm's kernels (fp32/fp16/bf16 CUDA
    input; weight and bias in the input's dtype or float32).
    zero_centered=True: the scale applied is (1 + weight), weight initialised
    to 0 (the library's ZERO_CENTERED_GAMMA flag). round_xhat=True: the
    normalized value is rounded to the input's dtype before the scale (the
    library's ROUND_XHAT flag: Hugging Face Llama's order)."""

    _mode = _LAYERNORM

    def __init__(self, normalized_shape: Union[int, list, torch.Size], eps: float = 1e-5,
                 elementwise_affine: bool = True, bias: bool = True, device=None, dtype=None, *,
                 zero_centered: bool = False, round_xhat: bool = False) -> None:
        self.zero_centered = bool(zero_centered)
        self.round_xhat = bool(round_xhat)
        super().__init__(normalized_shape, eps, elementwise_affine, bias, device, dtype)

    def reset_parameters(self) -> None:
        super().reset_parameters()
        self._init_zero_centered()

    def forward(self, input: Tensor) -> Tensor:
        if self._fn_stash is not None:
            y = _take_stash(self, input)
            if y is not None:
                return y
        if _ON and not _compiling():
            p = self._parameters
            try:
                y = _ext_norm(input, p["weight"], p["bias"], self.normalized_shape, self.eps, _LAYERNORM,
                              self._flags())
            except KeyError:  # a parametrization replaced the parameter
                y = None
            if y is not None:
                return y
        return self._python_forward(input)


class RMSNorm(_NormMixin, nn.RMSNorm):
    """torch.nn.RMSNorm on libfusednorm's kernels; eps=None means
    torch.finfo(torch.float32).eps for float32, float16 and bfloat16 input,
    as torch's (the epsilon of the float32 it computes in, not of x's dtype).
    zero_centered=True: the scale applied is (1 + weight), weight initialised
    to 0 (Gemma's RMSNorm, Liger-Kernel's offset=1.0 with zeros init).
    round_xhat=True: x * rrms is rounded to the input's dtype before the scale,
    as Hugging Face's LlamaRMSNorm does (`weight * x_hat.to(input_dtype)`;
    Liger-Kernel's casting_mode="llama"); the product is then rounded once to
    the input's dtype."""

    _mode = _RMSNORM

    def __init__(self, normalized_shape: Union[int, list, torch.Size], eps: Optional[float] = None,
                 elementwise_affine: bool = True, device=None, dtype=None, *, zero_centered: bool = False,
                 round_xhat: bool = False) -> None:
        self.zero_centered = bool(zero_centered)
        self.round_xhat = bool(round_xhat)
        super().__init__(normalized_shape, eps, elementwise_affine, device, dtype)

    def reset_parameters(self) -> None:
        super().reset_parameters()
        self._init_zero_centered()

    def forward(self, x: Tensor) -> Tensor:
        if self._fn_stash is not None:
            y = _take_stash(self, x)
            if y is not None:
                return y
        if _ON and not _compiling():
            try:
                y = _ext_norm(x, self._parameters["weight"], None, self.normalized_shape, self.eps, _RMSNORM,
                              self._flags())
            except KeyError:  # a parametrization replaced the parameter
                y = None
            if y is not None:
                return y
        return self._python_forward(x)


# ---- Add & norm -------------------------------------------------------------------

def _add_norm(x, residual, mode, shape, w, b, eps, flags):
    """(y, s) with s = x + residual (x's dtype) and y = norm(s): one pass of
    the library forward and backward (the backward adds the gradient that
    reached s), torch's operators where the library does not take the case."""
    shape = tuple(shape)
    nd = len(shape)
    if _ON and nd == 1 and not _compiling():  # the eager entry (None: the op's path below)
        r = _ext_add_norm(x, residual, w, b, eps if eps is not None else _RMS_EPS, mode, flags)
        if r is not None:
            return r
    if _ON and not _torch_only() and not _dual_level() and isinstance(x, Tensor) and x.is_cuda \
            and x.dtype in _FLOATS and isinstance(residual, Tensor) and residual.dtype is x.dtype \
            and residual.shape == x.shape and x.numel() > 0 and 0 < nd <= x.dim() and _params_ok(w, b, x) \
            and tuple(x.shape[x.dim() - nd:]) == shape:
        e = eps if eps is not None else _RMS_EPS
        return torch.ops.fusednorm.add_norm(x, residual, w, b, mode, x.dim() - nd, e, flags)
    s = x + residual
    return _torch_norm(s, mode, shape, w, b, eps, flags), s


def add_rms_norm(x: Tensor, residual: Tensor, normalized_shape, weight: Optional[Tensor] = None,
                 eps: Optional[float] = None, *, zero_centered: bool = False, round_xhat: bool = False):
    """(y, s): s = x + residual rounded to x's dtype (the residual stream of a
    pre-norm transformer), y = rms_norm(s) over normalized_shape, in one pass
    forward and backward. Both are differentiable; s is what the next
    residual add takes. eps=None: float32's machine epsilon (torch's rule);
    zero_centered / round_xhat as RMSNorm's."""
    return _add_norm(x, residual, _RMSNORM, _shape(normalized_shape), weight, None, eps,
                     _norm_flags(zero_centered, round_xhat))


def add_layer_norm(x: Tensor, residual: Tensor, normalized_shape, weight: Optional[Tensor] = None,
                   bias: Optional[Tensor] = None, eps: float = 1e-5, *, zero_centered: bool = False,
                   round_xhat: bool = False):
    """(y, s): s = x + residual rounded to x's dtype, y = layer_norm(s), in
    one pass forward and backward (as add_rms_norm). Runs in the inputs'
    dtype (no autocast cast)."""
    return _add_norm(x, residual, _LAYERNORM, _shape(normalized_shape), weight, bias, eps,
                     _norm_flags(zero_centered, round_xhat))


def _shape(normalized_shape):
    return (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)


class AddLayerNorm(LayerNorm):
    """LayerNorm whose forward(x, residual) returns (layer_norm(x + residual),
    x + residual) in one pass (add_layer_norm with the module's parameters)."""

    def forward(self, x: Tensor, residual: Tensor):  # type: ignore[override]
        return _add_norm(x, residual, _LAYERNORM, self.normalized_shape, self.weight, self.bias, self.eps,
                         self._flags())


class AddRMSNorm(RMSNorm):
    """RMSNorm whose forward(x, residual) returns (rms_norm(x + residual),
    x + residual) in one pass (add_rms_norm with the module's parameters)."""

    def forward(self, x: Tensor, residual: Tensor):  # type: ignore[override]
        return _add_norm(x, residual, _RMSNORM, self.normalized_shape, self.weight, None, self.eps, self._flags())


# ---- BatchNorm ------------------------------------------------------------------

def _bn_layout(x):
    if x.is_contiguous() or (x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last)) or \
            (x.dim() == 5 and x.is_contiguous(memory_format=torch.channels_last_3d)):
        return x
    from ..batchnorm import _bn_layout as layout
    return layout(x)


class _BatchNormMixin:
    """forward(input, z=None): BN, then with activation="relu" the ReLU
    epilogue (BN+ReLU), with z as well BN+Add+ReLU (relu(bn(input) + z)); z
    without an activation gives bn(input) + z. momentum=None is the cumulative
    average. In eval mode (running statistics kept) the inference kernel
    runs."""

    _sync = False

    def _init_activation(self, activation):
        if activation not in (None, "relu"):
            raise ValueError(f"activation must be None or 'relu'; got {activation!r}")
        self.activation = activation

    def extra_repr(self):
        s = super().extra_repr()
        return s + (f", activation={self.activation!r}" if getattr(self, "activation", None) else "")

    def _lib_ok(self, x, z, empty_ok=False) -> bool:
        """The library takes fp32/fp16/bf16 CUDA input with float32
        per-channel vectors (model.half() makes them fp16: torch's path).
        empty_ok: an empty x too (a SyncBatchNorm rank without samples)."""
        if not (_ON and x.is_cuda and x.dtype in _FLOATS and (x.numel() > 0 or empty_ok) and x.dim() <= 8):
            return False
        w, rm = self.weight, self.running_mean
        if (w is not None and (w.dtype is not _F32 or self.bias is None or self.bias.dtype is not _F32)) or \
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

    def forward(self, input: Tensor, z: Optional[Tensor] = None) -> Tensor:
        if isinstance(input, _Proxy):
            out = _fx_call(self, (input,) if z is None else (input, z))
            if out is not None:
                return out
        self._check_input_dim(input)
        if _ON and not _compiling():
            p, b = self._parameters, self._buffers
            try:
                y = _ext_bn(input, p["weight"], p["bias"], b["running_mean"], b["running_var"],
                            b["num_batches_tracked"], z, self.momentum, self.eps, self.activation == "relu",
                            self.training, self.track_running_stats, self._comm(input) if self._sync else 0)
            except KeyError:  # a parametrization replaced a parameter
                y = None
            if y is not None:
                return y
        return self._python_forward(input, z)

    def _python_forward(self, x, z):
        act = getattr(self, "activation", None) == "relu"
        bn_training = self.training or (self.running_mean is None and self.running_var is None)
        if _torch_only() or not self._lib_ok(x, z, empty_ok=self._sync) or not self.eps > 0:
            return self._torch_forward(x, z, act)
        # Under SyncBatchNorm every rank takes the library's collectives, a rank
        # with no samples or one value per channel too (torch's path there
        # would wait in torch's all-gather while the others wait in ours).
        comm = self._comm(x) if bn_training else 0
        if comm == 0 and (x.numel() == 0 or (bn_training and x.numel() // x.shape[1] == 1)):
            return self._torch_forward(x, z, act)  # torch's empty batch; its "more than 1 value per channel" error
        x = _bn_layout(x)
        if z is not None and z.stride() != x.stride():
            z = torch.empty_like(x).copy_(z)  # read through x's descriptor
        ops = torch.ops.fusednorm
        if not bn_training:
            if torch.is_grad_enabled() and (x.requires_grad or (self.weight is not None and self.weight.requires_grad)
                                            or (z is not None and z.requires_grad)):
                return self._torch_forward(x, z, act)  # no inference backward in the library
            if z is not None and not act:
                return ops.bn_fwd_infer(x, self.weight, self.bias, self.running_mean, self.running_var, None,
                                        self.eps, _EPI_NONE) + z
            epi = _EPI_ADD_RELU if (act and z is not None) else (_EPI_RELU if act else _EPI_NONE)
            return ops.bn_fwd_infer(x, self.weight, self.bias, self.running_mean, self.running_var,
                                    z if epi == _EPI_ADD_RELU else None, self.eps, epi)
        track = self.training and self.track_running_stats
        rm = self.running_mean if track else None
        rv = self.running_var if track else None
        nbt = self.num_batches_tracked if track else None  # the library counts it, once
        momentum = -1.0 if self.momentum is None else float(self.momentum)
        if z is not None and not act:
            return ops.batch_norm(x, self.weight, self.bias, rm, rv, nbt, None, momentum, self.eps, _EPI_NONE, comm,
                                  0) + z
        epi = _EPI_ADD_RELU if (act and z is not None) else (_EPI_RELU if act else _EPI_NONE)
        return ops.batch_norm(x, self.weight, self.bias, rm, rv, nbt, z if epi == _EPI_ADD_RELU else None, momentum,
                              self.eps, epi, comm, 0)


class BatchNorm1d(_BatchNormMixin, nn.BatchNorm1d):
    def __init__(self, num_features: int, eps: float = 1e-5, momentum: Optional[float] = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device=None, dtype=None, *,
                 activation: Optional[str] = None) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)
        self._init_activation(activation)


class BatchNorm2d(_BatchNormMixin, nn.BatchNorm2d):
    def __init__(self, num_features: int, eps: float = 1e-5, momentum: Optional[float] = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device=None, dtype=None, *,
                 activation: Optional[str] = None) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)
        self._init_activation(activation)


class BatchNorm3d(_BatchNormMixin, nn.BatchNorm3d):
    def __init__(self, num_features: int, eps: float = 1e-5, momentum: Optional[float] = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device=None, dtype=None, *,
                 activation: Optional[str] = None) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)
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
    _sync = True

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: Optional[float] = 0.1, affine: bool = True,
                 track_running_stats: bool = True, process_group=None, device=None, dtype=None, *,
                 activation: Optional[str] = None) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, process_group, device, dtype)
        self._init_activation(activation)

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def _torch_forward(self, x, z, act):
        y = nn.SyncBatchNorm.forward(self, x)
        if z is not None:
            y = y + z
        return F.relu(y) if act else y

    def _comm(self, x):
        """The communicator's handle (0: statistics stay local). Under
        torch.compile the lookup runs while Dynamo traces, outside the graph,
        and the handle enters the graph as a constant (_nccl.comm_of)."""
        if not (self.training and x.is_cuda):
            return 0
        from . import _nccl
        return _nccl.comm_of(self.process_group, x.device.index, self.always_sync)

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

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None, *,
                 activation: Optional[str] = None) -> None:
        super().__init__(in_features, out_features, bias, device, dtype)
        if activation not in _ACTS:
            raise ValueError(f"activation must be None, 'relu' or 'gelu_tanh'; got {activation!r}")
        self.activation = activation

    def extra_repr(self):
        s = super().extra_repr()
        return s + (f", activation={self.activation!r}" if getattr(self, "activation", None) else "")

    def forward(self, input: Tensor) -> Tensor:
        if _ON and not _compiling():
            p = self._parameters
            try:
                y = _ext_linear(input, p["weight"], p["bias"], _ACTS[self.activation])
            except KeyError:  # a parametrization replaced a parameter
                y = None
            if y is not None:
                return y
        return self._python_forward(input)

    def _python_forward(self, x):
        if isinstance(x, _Proxy):
            out = _fx_call(self, (x,))
            if out is not None:
                return out
        act = getattr(self, "activation", None)
        w, b = self.weight, self.bias
        if _ON and isinstance(x, Tensor) and not _torch_only() and x.is_cuda and x.dtype in _FLOATS and 2 <= x.dim() <= 8 and \
                x.numel() > 0 and w.numel() > 0 and w.dtype is x.dtype and \
                (b.dtype is x.dtype if b is not None else act is None):
            x = _rowwise(x, -1)
            return torch.ops.fusednorm.linear(x, w if w.is_contiguous() else w.contiguous(), b, _ACTS[act])
        y = F.linear(x, w, b)
        if act == "relu":
            return F.relu(y)
        if act == "gelu_tanh":
            return F.gelu(y, approximate="tanh")
        return y
