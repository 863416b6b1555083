# SPDX-License-Identifier: Apache-2.0
"""The fully-connected layer (fnorm_linear_*) in the package's three layers:

- the raw functions, registered in the package's `lib` and `_PROTOTYPES`
  (so the binding test checks them against api/fusednorm.h);
- `LinearDesc` and the size queries (checked: they raise FusedNormError);
- `linear()` / `linear_backward()` on PyTorch CUDA tensors, and
  `LinearFunction`, an autograd.Function over them.

Nothing here needs a GPU until a handle is created.
"""
from __future__ import annotations

import ctypes
import enum
import functools

from . import _core
from ._core import (Handle, _dtype_of, _handle_for, _on_device, _Owned, _ptr, _rowwise, _tensor_desc, _workspace,
                    check)

__all__ = ["LinearEpilogue", "WeightLayout", "LinearFlag", "LinearDesc", "linear_aux_size",
           "linear_fwd_workspace_size", "linear_bwd_workspace_size", "linear", "linear_backward",
           "LinearFunction"]


# Copied from api/fusednorm.h; tests/linear/test_linear_python.py checks them.
class LinearEpilogue(enum.IntEnum):
    NONE = 0
    BIAS = 1
    BIAS_RELU = 2
    BIAS_GELU = 3


class WeightLayout(enum.IntEnum):
    KN = 0  # w is [k, n]: y = x w
    NK = 1  # w is [n, k] (torch.nn.Linear.weight): y = x w^T


class LinearFlag(enum.IntEnum):
    NONE = 0
    ALLOW_TF32 = 1


_p = ctypes.c_void_p
_enum = ctypes.c_int
_u32 = ctypes.c_uint32
_size = ctypes.c_size_t
_sizep = ctypes.POINTER(ctypes.c_size_t)
_status = _enum

_LINEAR_PROTOTYPES = {
    "fnorm_linear_desc_create": (_status, [ctypes.POINTER(_p)]),
    "fnorm_linear_desc_destroy": (_status, [_p]),
    "fnorm_linear_desc_set": (_status, [_p, _enum, _enum, _u32]),
    "fnorm_linear_desc_get": (_status, [_p, ctypes.POINTER(_enum), ctypes.POINTER(_enum), ctypes.POINTER(_u32)]),
    # (handle, desc, y_desc, aux_bytes*)
    "fnorm_linear_aux_size": (_status, [_p, _p, _p, _sizep]),
    # (handle, desc, x_desc, w_desc, y_desc, workspace_bytes*)
    "fnorm_linear_fwd_workspace_size": (_status, [_p, _p, _p, _p, _p, _sizep]),
    # (handle, stream, desc, x_desc, x, w_desc, w, bias, y_desc, y, aux, aux_bytes, workspace, workspace_bytes)
    "fnorm_linear_fwd": (_status, [_p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _size, _p, _size]),
    # (handle, desc, x_desc, w_desc, dy_desc, x_producer, workspace_bytes*)
    "fnorm_linear_bwd_workspace_size": (_status, [_p, _p, _p, _p, _p, _p, _sizep]),
    # (handle, stream, desc, x_desc, x, w_desc, w, dy_desc, dy, aux, aux_bytes, x_producer, x_aux,
    #  x_aux_bytes, dx_desc, dx, dw, db, x_db, workspace, workspace_bytes)
    "fnorm_linear_bwd": (_status, [_p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _size, _p, _p, _size, _p, _p, _p, _p, _p,
                                   _p, _size]),
}
_core.register(_LINEAR_PROTOTYPES)

_ACTIVATIONS = {None: LinearEpilogue.BIAS, "relu": LinearEpilogue.BIAS_RELU, "gelu": LinearEpilogue.BIAS_GELU}


class LinearDesc(_Owned):
    """Epilogue, weight layout and flags of a fully-connected layer. Raises
    FusedNormError (NOT_SUPPORTED_BUILD) when the library was built without
    cuBLASLt; size queries and launches raise it when libcublasLt cannot be
    opened at run time (the message names it)."""
    _destroy = staticmethod(_core.lib.fnorm_linear_desc_destroy)

    def __init__(self, epilogue: LinearEpilogue = LinearEpilogue.NONE, weight_layout: WeightLayout = WeightLayout.KN,
                 flags: int = LinearFlag.NONE):
        super().__init__(_core.lib.fnorm_linear_desc_create)
        check(_core.lib.fnorm_linear_desc_set(self._ptr, int(epilogue), int(weight_layout), int(flags)))

    def get(self) -> tuple[LinearEpilogue, WeightLayout, int]:
        e, l, f = _enum(), _enum(), _u32()
        check(_core.lib.fnorm_linear_desc_get(self._ptr, ctypes.byref(e), ctypes.byref(l), ctypes.byref(f)))
        return LinearEpilogue(e.value), WeightLayout(l.value), f.value


def linear_aux_size(handle: Handle, desc: LinearDesc, y_desc) -> int:
    n = _size()
    check(_core.lib.fnorm_linear_aux_size(handle.ptr, desc.ptr, y_desc.ptr, ctypes.byref(n)))
    return n.value


def linear_fwd_workspace_size(handle: Handle, desc: LinearDesc, x_desc, w_desc, y_desc) -> int:
    n = _size()
    check(_core.lib.fnorm_linear_fwd_workspace_size(handle.ptr, desc.ptr, x_desc.ptr, w_desc.ptr, y_desc.ptr,
                                              ctypes.byref(n)))
    return n.value


def linear_bwd_workspace_size(handle: Handle, desc: LinearDesc, x_desc, w_desc, dy_desc,
                              x_producer: LinearDesc | None = None) -> int:
    n = _size()
    check(_core.lib.fnorm_linear_bwd_workspace_size(handle.ptr, desc.ptr, x_desc.ptr, w_desc.ptr, dy_desc.ptr,
                                              x_producer.ptr if x_producer else None, ctypes.byref(n)))
    return n.value


# Descriptors are immutable once built here and launches only read them.
@functools.lru_cache(maxsize=64)
def _linear_desc(epilogue: LinearEpilogue, layout: WeightLayout, flags: int) -> LinearDesc:
    return LinearDesc(epilogue, layout, flags)


def _layout_of(weight_layout) -> WeightLayout:
    if isinstance(weight_layout, str):
        return WeightLayout[weight_layout.upper()]
    return WeightLayout(weight_layout)


def _epilogue_of(has_bias: bool, activation) -> LinearEpilogue:
    if activation not in _ACTIVATIONS:
        raise ValueError(f"activation must be None, 'relu' or 'gelu'; got {activation!r}")
    if not has_bias:
        if activation is not None:
            raise ValueError("an activation needs a bias (the epilogues are BIAS_RELU and BIAS_GELU)")
        return LinearEpilogue.NONE
    return _ACTIVATIONS[activation]


def _desc_of(t, what: str):
    return _tensor_desc(_dtype_of(t, what), tuple(t.shape), tuple(t.stride()))


def linear(x, weight, bias=None, activation=None, weight_layout="nk", save_aux: bool = False,
           allow_tf32: bool = False, out=None, stream=None):
    """y = act(x @ W + bias) on CUDA tensors of one dtype (fp32/fp16/bf16), on
    PyTorch's current stream of x's device (or `stream`).

    weight: [n, k] with weight_layout "nk" (torch.nn.Linear.weight), [k, n]
      with "kn". bias: [n] or None. activation: None, "relu" or "gelu" (tanh
      approximation; needs a bias). x: [..., k] whose leading dimensions
      collapse into rows. save_aux: also return the aux buffer (a uint8
      tensor) that linear_backward needs for relu/gelu.
    Returns y, or (y, aux) with save_aux.
    """
    import torch
    if not x.is_cuda:
        raise ValueError("x must be a CUDA tensor")
    dev = x.device
    for t, name in ((weight, "weight"), (bias, "bias"), (out, "out")):
        _on_device(t, name, dev)
    layout = _layout_of(weight_layout)
    epi = _epilogue_of(bias is not None, activation)
    x, weight = _rowwise(x), _rowwise(weight)
    n = weight.shape[0] if layout == WeightLayout.NK else weight.shape[1]
    if bias is not None and (bias.dtype != x.dtype or bias.numel() != n or not bias.is_contiguous()):
        raise ValueError(f"bias must be a contiguous {x.dtype} tensor of {n} elements")
    y = torch.empty(*x.shape[:-1], n, dtype=x.dtype, device=dev) if out is None else out
    desc = _linear_desc(epi, layout, LinearFlag.ALLOW_TF32 if allow_tf32 else LinearFlag.NONE)
    handle = _handle_for(dev.index)
    xd, wd, yd = _desc_of(x, "x"), _desc_of(weight, "weight"), _desc_of(y, "out")
    aux = None
    if save_aux and epi in (LinearEpilogue.BIAS_RELU, LinearEpilogue.BIAS_GELU):
        aux = torch.empty(linear_aux_size(handle, desc, yd), dtype=torch.uint8, device=dev)
    ws_bytes = linear_fwd_workspace_size(handle, desc, xd, wd, yd)
    ws = _workspace(ws_bytes, dev, stream)
    st = (stream or torch.cuda.current_stream(dev)).cuda_stream
    check(_core.lib.fnorm_linear_fwd(handle.ptr, st, desc.ptr, xd.ptr, x.data_ptr(), wd.ptr, weight.data_ptr(),
                               _ptr(bias), yd.ptr, y.data_ptr(), _ptr(aux), aux.numel() if aux is not None else 0,
                               _ptr(ws), ws_bytes))
    return (y, aux) if save_aux else y


def linear_backward(dy, x, weight, aux=None, has_bias: bool = True, activation=None, weight_layout="nk",
                    need_dx: bool = True, need_dw: bool = True, need_db: bool = True, allow_tf32: bool = False,
                    x_producer_activation=None, x_aux=None, need_x_db: bool = False, dx_out=None, dw_out=None,
                    db_out=None, x_db_out=None, stream=None):
    """Backward of linear(): (dx, dw, db), None where not asked for (db also
    when there is no bias). dy: the gradient of y; aux: linear()'s aux for
    relu/gelu.

    Chained layers: when x is the output of an earlier linear() with
    activation x_producer_activation ("relu"/"gelu") and aux x_aux, dx is the
    gradient with respect to that layer's pre-activation, and with need_x_db
    a fourth result is that layer's bias gradient: (dx, dw, db, x_db).
    dx_out, dw_out, db_out, x_db_out: output buffers (allocated otherwise;
    dw_out must have weight's strides).
    """
    import torch
    if not dy.is_cuda:
        raise ValueError("dy must be a CUDA tensor")
    dev = dy.device
    for t, name in ((x, "x"), (weight, "weight"), (aux, "aux"), (x_aux, "x_aux")):
        _on_device(t, name, dev)
    layout = _layout_of(weight_layout)
    epi = _epilogue_of(has_bias, activation)
    flags = LinearFlag.ALLOW_TF32 if allow_tf32 else LinearFlag.NONE
    desc = _linear_desc(epi, layout, flags)
    prod = None
    if x_producer_activation is not None:
        prod = _linear_desc(_epilogue_of(True, x_producer_activation), WeightLayout.NK, LinearFlag.NONE)
    handle = _handle_for(dev.index)
    x, dy, weight = _rowwise(x), _rowwise(dy), _rowwise(weight)
    xd, wd, dyd = _desc_of(x, "x"), _desc_of(weight, "weight"), _desc_of(dy, "dy")
    for t, name in ((dx_out, "dx_out"), (dw_out, "dw_out"), (db_out, "db_out"), (x_db_out, "x_db_out")):
        _on_device(t, name, dev)
    dx = (torch.empty(x.shape, dtype=x.dtype, device=dev) if dx_out is None else dx_out) if need_dx else None
    dw = (torch.empty(weight.shape, dtype=weight.dtype, device=dev) if dw_out is None else dw_out) \
        if need_dw else None
    if dw is not None and (dw.shape != weight.shape or dw.stride() != weight.stride()):
        raise ValueError("dw is written with weight's shape and strides: make weight contiguous, or pass dw_out "
                         "laid out as weight")
    n = dy.shape[-1]
    db = (torch.empty(n, dtype=dy.dtype, device=dev) if db_out is None else db_out) \
        if (need_db and has_bias) else None
    x_db = None
    if prod is not None and need_x_db:
        x_db = torch.empty(x.shape[-1], dtype=x.dtype, device=dev) if x_db_out is None else x_db_out
    dxd = _desc_of(dx, "dx") if dx is not None else None
    ws_bytes = linear_bwd_workspace_size(handle, desc, xd, wd, dyd, prod)
    ws = _workspace(ws_bytes, dev, stream)
    st = (stream or torch.cuda.current_stream(dev)).cuda_stream
    check(_core.lib.fnorm_linear_bwd(handle.ptr, st, desc.ptr, xd.ptr, x.data_ptr(), wd.ptr, weight.data_ptr(), dyd.ptr,
                               dy.data_ptr(), _ptr(aux), aux.numel() if aux is not None else 0,
                               prod.ptr if prod else None, _ptr(x_aux), x_aux.numel() if x_aux is not None else 0,
                               dxd.ptr if dxd else None, _ptr(dx), _ptr(dw), _ptr(db), _ptr(x_db), _ptr(ws),
                               ws_bytes))
    return (dx, dw, db, x_db) if prod is not None else (dx, dw, db)


def _autograd_function():
    import torch

    class _LinearFunction(torch.autograd.Function):
        """y = act(x @ weight^T + bias) (weight [n, k], as nn.Linear) with
        the backward on fnorm_linear_bwd. Inputs must be contiguous."""

        @staticmethod
        def forward(ctx, x, weight, bias, activation):
            need_aux = activation is not None
            res = linear(x, weight, bias, activation, "nk", save_aux=need_aux)
            y, aux = res if need_aux else (res, None)
            ctx.save_for_backward(x, weight, aux)
            ctx.activation = activation
            ctx.has_bias = bias is not None
            return y

        @staticmethod
        def backward(ctx, dy):
            x, weight, aux = ctx.saved_tensors
            dx, dw, db = linear_backward(dy.contiguous(), x, weight, aux, ctx.has_bias, ctx.activation, "nk",
                                         need_dx=ctx.needs_input_grad[0], need_dw=ctx.needs_input_grad[1],
                                         need_db=ctx.has_bias and ctx.needs_input_grad[2])
            return dx, dw, db, None

    return _LinearFunction


class _LazyFunction:
    """LinearFunction.apply(x, weight, bias, activation): built on first use so
    that importing the package does not import torch."""

    @functools.cached_property
    def _fn(self):
        return _autograd_function()

    def apply(self, x, weight, bias=None, activation=None):
        return self._fn.apply(x, weight, bias, activation)


LinearFunction = _LazyFunction()
