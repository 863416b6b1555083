# SPDX-License-Identifier: Apache-2.0
"""LayerNorm / RMSNorm (fnorm_norm_*): the raw prototypes (registered in the
package's table), `NormDesc`, the size queries, and `layer_norm()`,
`rms_norm()`, `norm_backward()` on PyTorch CUDA tensors, run on PyTorch's
current stream of the input's device.

Layouts: x, residual and dy may be any strided tensors. Those the library
cannot take (the normalized dimensions not packed, rows that do not collapse
into one stride, expanded dimensions) are copied to packed ones first; a
residual or dsum whose strides differ from x's / dy's is copied into that
layout (the library reads them through x's / dy's descriptor); the residual
sum the function allocates has x's strides, since the library writes it
through x's descriptor.
"""
from __future__ import annotations

import ctypes
import functools

from . import _core
from ._core import (NormFlag, NormMode, QuantScaling, _Owned, _axis, _desc_of, _dtype_of, _empty_with_layout_of,
                    _enum, _handle_for, _i32, _on_device, _p, _ptr, _quant_dtype_of, _rows, _rowwise, _same_layout,
                    _size, _sizep, _stat, _status, _tensor_desc, _u32, _with_layout_of, _workspace, check)

__all__ = ["NormDesc", "norm_fwd_workspace_size", "norm_bwd_workspace_size", "layer_norm", "rms_norm",
           "norm_backward", "norm_fwd_quant_workspace_size", "norm_fwd_quant_scale_size", "layer_norm_quant",
           "rms_norm_quant"]

_NORM_PROTOTYPES = {
    "fnorm_norm_desc_create": (_status, [ctypes.POINTER(_p)]),
    "fnorm_norm_desc_destroy": (_status, [_p]),
    "fnorm_norm_desc_set": (_status, [_p, _enum, _i32, ctypes.c_double]),
    "fnorm_norm_desc_get": (_status, [_p, ctypes.POINTER(_enum), ctypes.POINTER(_i32),
                                      ctypes.POINTER(ctypes.c_double)]),
    "fnorm_norm_desc_set_flags": (_status, [_p, _u32]),
    "fnorm_norm_desc_get_flags": (_status, [_p, ctypes.POINTER(_u32)]),
    # (handle, norm, x_desc, y_desc, workspace_bytes*)
    "fnorm_norm_fwd_workspace_size": (_status, [_p, _p, _p, _p, _sizep]),
    # (handle, stream, norm, x_desc, x, residual, sum, w_desc, gamma, beta,
    #  y_desc, y, mean, rstd, workspace, workspace_bytes)
    "fnorm_norm_fwd": (_status, [_p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _size]),
    # (handle, norm, x_desc, y_desc, scaling, workspace_bytes*)
    "fnorm_norm_fwd_quant_workspace_size": (_status, [_p, _p, _p, _p, _enum, _sizep]),
    # (handle, norm, x_desc, scaling, scale_bytes*)
    "fnorm_norm_fwd_quant_scale_size": (_status, [_p, _p, _p, _enum, _sizep]),
    # (handle, stream, norm, x_desc, x, residual, sum, w_desc, gamma, beta,
    #  y_desc, y, scaling, scale, amax, mean, rstd, workspace, workspace_bytes)
    "fnorm_norm_fwd_quant": (_status, [_p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _enum, _p, _p, _p, _p, _p,
                                       _size]),
    # (handle, norm, x_desc, w_desc, workspace_bytes*)
    "fnorm_norm_bwd_workspace_size": (_status, [_p, _p, _p, _p, _sizep]),
    # (handle, stream, norm, x_desc, x, dy_desc, dy, mean, rstd, w_desc, gamma,
    #  dsum, dx_desc, dx, dgamma, dbeta, workspace, workspace_bytes)
    "fnorm_norm_bwd": (_status, [_p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _size]),
}
_core.register(_NORM_PROTOTYPES)


class NormDesc(_Owned):
    """Mode, first normalized axis, epsilon and flags of a LayerNorm/RMSNorm."""
    _destroy = staticmethod(_core.lib.fnorm_norm_desc_destroy)

    def __init__(self, mode: NormMode = NormMode.LAYERNORM, begin_norm_axis: int = -1, eps: float = 1e-5,
                 flags: int = NormFlag.NONE):
        super().__init__(_core.lib.fnorm_norm_desc_create)
        check(_core.lib.fnorm_norm_desc_set(self._ptr, int(mode), int(begin_norm_axis), float(eps)))
        if flags:
            check(_core.lib.fnorm_norm_desc_set_flags(self._ptr, int(flags)))

    def get(self) -> tuple[NormMode, int, float]:
        """(mode, begin_norm_axis, epsilon) as the library holds them."""
        mode, axis, eps = _enum(), _i32(), ctypes.c_double()
        check(_core.lib.fnorm_norm_desc_get(self._ptr, ctypes.byref(mode), ctypes.byref(axis), ctypes.byref(eps)))
        return NormMode(mode.value), axis.value, eps.value

    @property
    def flags(self) -> int:
        """The NormFlag bits set, as an int."""
        f = _u32()
        check(_core.lib.fnorm_norm_desc_get_flags(self._ptr, ctypes.byref(f)))
        return f.value

    @flags.setter
    def flags(self, value: int) -> None:
        check(_core.lib.fnorm_norm_desc_set_flags(self._ptr, int(value)))


def norm_fwd_workspace_size(handle: Handle, norm: NormDesc, x_desc: TensorDesc, y_desc: TensorDesc) -> int:
    """Bytes of scratch fnorm_norm_fwd needs (validates the descriptors)."""
    n = _size()
    check(_core.lib.fnorm_norm_fwd_workspace_size(handle.ptr, norm.ptr, x_desc.ptr, y_desc.ptr, ctypes.byref(n)))
    return n.value


def norm_fwd_quant_workspace_size(handle: Handle, norm: NormDesc, x_desc: TensorDesc, y_desc: TensorDesc,
                                  scaling: QuantScaling) -> int:
    """Bytes of scratch fnorm_norm_fwd_quant needs (validates the descriptors)."""
    n = _size()
    check(_core.lib.fnorm_norm_fwd_quant_workspace_size(handle.ptr, norm.ptr, x_desc.ptr, y_desc.ptr, int(scaling),
                                                        ctypes.byref(n)))
    return n.value


def norm_fwd_quant_scale_size(handle: Handle, norm: NormDesc, x_desc: TensorDesc, scaling: QuantScaling) -> int:
    """Bytes of fnorm_norm_fwd_quant's scale: 4 per tensor, 4 * rows per token."""
    n = _size()
    check(_core.lib.fnorm_norm_fwd_quant_scale_size(handle.ptr, norm.ptr, x_desc.ptr, int(scaling), ctypes.byref(n)))
    return n.value


def norm_bwd_workspace_size(handle: Handle, norm: NormDesc, x_desc: TensorDesc,
                            w_desc: TensorDesc | None = None) -> int:
    """Bytes of scratch fnorm_norm_bwd needs (w_desc None: no dgamma/dbeta)."""
    n = _size()
    check(_core.lib.fnorm_norm_bwd_workspace_size(handle.ptr, norm.ptr, x_desc.ptr, w_desc.ptr if w_desc else None,
                                            ctypes.byref(n)))
    return n.value


def _norm_flags(zero_centered_gamma: bool, round_xhat: bool) -> int:
    return ((NormFlag.ZERO_CENTERED_GAMMA if zero_centered_gamma else NormFlag.NONE)
            | (NormFlag.ROUND_XHAT if round_xhat else NormFlag.NONE))


@functools.lru_cache(maxsize=64)
def _weight_desc(weight, bias):
    """w_desc, which describes gamma and beta together: from whichever is
    given (None for neither); both given, they must agree."""
    if weight is not None and bias is not None and (
            bias.shape != weight.shape or bias.stride() != weight.stride() or bias.dtype != weight.dtype):
        raise ValueError(f"bias must have weight's dtype, shape and strides ({weight.dtype}, "
                         f"{tuple(weight.shape)}); got ({bias.dtype}, {tuple(bias.shape)})")
    w = weight if weight is not None else bias
    return _desc_of(w, "weight" if weight is not None else "bias") if w is not None else None


def _norm_desc(mode: NormMode, begin_norm_axis: int, eps: float, flags: int) -> NormDesc:
    return NormDesc(mode, begin_norm_axis, eps, flags)



def _norm_fwd(mode: NormMode, x, weight, bias, eps, residual, zero_centered_gamma, return_stats,
              out, sum_out, mean_out, rstd_out, begin_norm_axis, stream, round_xhat=False):
    import torch
    if not x.is_cuda:
        raise ValueError("x must be a CUDA tensor")
    dev = x.device
    for t, name in ((weight, "weight"), (bias, "bias"), (residual, "residual"), (out, "out"),
                    (sum_out, "sum_out")):
        _on_device(t, name, dev)
    if sum_out is not None and residual is None:
        raise ValueError("sum_out needs residual")
    rows = _rows(x, begin_norm_axis)
    x_in = x
    x = _rowwise(x, _axis(x, begin_norm_axis))
    if x is not x_in and (out is x_in or sum_out is x_in):
        raise ValueError("x's layout is not one the library takes (it was copied): out / sum_out cannot be x")
    # residual and sum are read and written through x's descriptor.
    residual = _with_layout_of(residual, x, "residual")
    _same_layout(sum_out, "sum_out", x)
    y = torch.empty_like(x) if out is None else out
    s = None
    if residual is not None:
        s = _empty_with_layout_of(x) if sum_out is None else sum_out
    want_mean = mode == NormMode.LAYERNORM
    mean = _stat(mean_out, "mean_out", x, rows)
    rstd = _stat(rstd_out, "rstd_out", x, rows)
    if return_stats:
        if mean is None and want_mean:
            mean = torch.empty(rows, dtype=torch.float32, device=dev)
        if rstd is None:
            rstd = torch.empty(rows, dtype=torch.float32, device=dev)

    xd = _desc_of(x, "x")
    yd = _desc_of(y, "out")
    wd = _weight_desc(weight, bias)
    flags = _norm_flags(zero_centered_gamma, round_xhat)
    nd = _norm_desc(mode, int(begin_norm_axis), float(eps), flags)
    handle = _handle_for(dev.index)
    ws_bytes = norm_fwd_workspace_size(handle, nd, xd, yd)
    ws = _workspace(ws_bytes, dev, stream)
    st = (stream or torch.cuda.current_stream(dev)).cuda_stream
    check(_core.lib.fnorm_norm_fwd(handle.ptr, st, nd.ptr, xd.ptr, x.data_ptr(), _ptr(residual), _ptr(s),
                             wd.ptr if wd else None, _ptr(weight), _ptr(bias), yd.ptr, y.data_ptr(),
                             _ptr(mean), _ptr(rstd), _ptr(ws), ws_bytes))
    result = [y]
    if s is not None:
        result.append(s)
    if return_stats:
        if want_mean:
            result.append(mean)
        result.append(rstd)
    return y if len(result) == 1 else tuple(result)


def layer_norm(x, weight=None, bias=None, eps: float = 1e-5, residual=None, zero_centered_gamma: bool = False,
               return_stats: bool = False, out=None, sum_out=None, mean_out=None, rstd_out=None,
               begin_norm_axis: int = -1, stream=None, *, round_xhat: bool = False):
    """LayerNorm forward over dimensions [begin_norm_axis, x.dim()) of a CUDA
    tensor x (fp32/fp16/bf16), fp32 math, on PyTorch's current stream of x's
    device (or `stream`, a torch.cuda.Stream).

    weight, bias: optional, shaped as the normalized dimensions (or one
      dimension of their product), packed, in x's dtype or float32.
    residual: normalize s = x + residual (rounded to x's dtype) instead of x,
      and return s too (written to sum_out when given; sum_out may be x or
      residual itself).
    zero_centered_gamma: the scale applied is (1 + weight).
    round_xhat: Hugging Face's "Llama cast order" (NormFlag.ROUND_XHAT): the
      normalized value, computed in fp32, is rounded to x's dtype before
      the scale multiplies it (LlamaRMSNorm's `weight *
      hidden_states.to(input_dtype)`); combines with zero_centered_gamma.
      Without it the normalized value stays fp32 and y is rounded once.
    return_stats: also return mean and rstd, float32 tensors of [rows] (rows =
      the product of the dimensions before begin_norm_axis), for
      norm_backward. mean_out/rstd_out, when given, are written whatever
      return_stats says.
    out: y's buffer (allocated like x otherwise; may be x itself).

    Returns y; (y, s) with residual; (y, mean, rstd) with return_stats;
    (y, s, mean, rstd) with both.
    """
    return _norm_fwd(NormMode.LAYERNORM, x, weight, bias, eps, residual, zero_centered_gamma, return_stats,
                     out, sum_out, mean_out, rstd_out, begin_norm_axis, stream, round_xhat)


def rms_norm(x, weight=None, eps: float = 1e-6, residual=None, zero_centered_gamma: bool = False,
             return_stats: bool = False, out=None, sum_out=None, rstd_out=None, begin_norm_axis: int = -1,
             stream=None, *, round_xhat: bool = False):
    """RMSNorm forward: y = s * rrms * weight, rrms = 1/sqrt(mean(s^2) + eps),
    s = x or x + residual. Arguments as layer_norm's; RMSNorm has no bias and
    no mean: the only statistic is rrms, returned (and written) as rstd.
    round_xhat=True gives transformers' LlamaRMSNorm (Llama, Qwen2/3,
    Mistral, Phi3, DeepseekV3): with weight in x's dtype, y has the bits of
    `weight * (x.float() * torch.rsqrt(x.float().pow(2).mean(-1,
    keepdim=True) + eps)).to(x.dtype)` up to the summation order of the mean.

    Returns y; (y, s) with residual; (y, rstd) with return_stats;
    (y, s, rstd) with both.
    """
    return _norm_fwd(NormMode.RMSNORM, x, weight, None, eps, residual, zero_centered_gamma, return_stats,
                     out, sum_out, None, rstd_out, begin_norm_axis, stream, round_xhat)


def _norm_fwd_quant(mode: NormMode, x, weight, bias, eps, residual, zero_centered_gamma, dtype, scale,
                    return_amax, return_stats, out, sum_out, begin_norm_axis, stream, round_xhat=False):
    import torch
    if not x.is_cuda:
        raise ValueError("x must be a CUDA tensor")
    dev = x.device
    for t, name in ((weight, "weight"), (bias, "bias"), (residual, "residual"), (out, "out"),
                    (sum_out, "sum_out"), (scale, "scale")):
        _on_device(t, name, dev)
    if sum_out is not None and residual is None:
        raise ValueError("sum_out needs residual")
    qdt = _quant_dtype_of(dtype, "dtype")
    rows = _rows(x, begin_norm_axis)
    x_in = x
    x = _rowwise(x, _axis(x, begin_norm_axis))
    if x is not x_in and sum_out is x_in:
        raise ValueError("x's layout is not one the library takes (it was copied): sum_out cannot be x")
    residual = _with_layout_of(residual, x, "residual")
    _same_layout(sum_out, "sum_out", x)
    if out is not None and (out.shape != x.shape or out.dtype != dtype):
        raise ValueError(f"out must be a {dtype} tensor of x's shape {tuple(x.shape)}; got {out.dtype}, "
                         f"{tuple(out.shape)}")
    y = torch.empty(x.shape, dtype=dtype, device=dev) if out is None else _rowwise(out, _axis(x, begin_norm_axis))
    if out is not None and y is not out:
        raise ValueError("out's layout is not one the library takes (rows must collapse into one stride)")
    s = None
    if residual is not None:
        s = _empty_with_layout_of(x) if sum_out is None else sum_out
    if scale is None:
        scaling = QuantScaling.PER_TOKEN
        scale_t = torch.empty(x.shape[:_axis(x, begin_norm_axis)], dtype=torch.float32, device=dev)
    else:
        scaling = QuantScaling.PER_TENSOR
        if scale.dtype != torch.float32 or scale.numel() != 1:
            raise ValueError(f"scale must be a float32 tensor of one element (got {scale.dtype}, "
                             f"{tuple(scale.shape)})")
        scale_t = scale
    amax = torch.empty((), dtype=torch.float32, device=dev) if return_amax else None
    mean = rstd = None
    if return_stats:
        if mode == NormMode.LAYERNORM:
            mean = torch.empty(rows, dtype=torch.float32, device=dev)
        rstd = torch.empty(rows, dtype=torch.float32, device=dev)

    xd = _desc_of(x, "x")
    yd = _tensor_desc(qdt, tuple(y.shape), tuple(y.stride()))
    wd = _weight_desc(weight, bias)
    flags = _norm_flags(zero_centered_gamma, round_xhat)
    nd = _norm_desc(mode, int(begin_norm_axis), float(eps), flags)
    handle = _handle_for(dev.index)
    ws_bytes = norm_fwd_quant_workspace_size(handle, nd, xd, yd, scaling)
    ws = _workspace(ws_bytes, dev, stream)
    st = (stream or torch.cuda.current_stream(dev)).cuda_stream
    check(_core.lib.fnorm_norm_fwd_quant(handle.ptr, st, nd.ptr, xd.ptr, x.data_ptr(), _ptr(residual), _ptr(s),
                                         wd.ptr if wd else None, _ptr(weight), _ptr(bias), yd.ptr, y.data_ptr(),
                                         int(scaling), scale_t.data_ptr(), _ptr(amax), _ptr(mean), _ptr(rstd),
                                         _ptr(ws), ws_bytes))
    result = [y, scale_t]
    if s is not None:
        result.append(s)
    if return_amax:
        result.append(amax)
    if return_stats:
        if mean is not None:
            result.append(mean)
        result.append(rstd)
    return tuple(result)


def layer_norm_quant(x, weight=None, bias=None, eps: float = 1e-5, residual=None, dtype=None, scale=None,
                     return_amax: bool = False, zero_centered_gamma: bool = False, return_stats: bool = False,
                     out=None, sum_out=None, begin_norm_axis: int = -1, stream=None, *, round_xhat: bool = False):
    """LayerNorm forward writing y quantized in the same pass (fnorm_norm_fwd_quant).

    dtype: torch.float8_e4m3fn (default), torch.float8_e5m2 or torch.int8.
    scale: None for dynamic per-token scaling (one float32 scale per row is
      computed and returned, shaped as x's dimensions before the normalized
      ones), or a float32 tensor of one element (static per-tensor scaling;
      FP8 only). y = code(v / scale) with the header's rounding, saturation
      and NaN rules (v: the fp32 normalized value after weight and bias).
    return_amax: also return the largest |v| (a 0-dim float32 tensor).
    Other arguments as layer_norm (out: y's buffer, of `dtype`; round_xhat
    rounds the normalized value to x's dtype before weight, as there).

    Returns (y, scale), then s with residual, amax with return_amax, and
    mean, rstd with return_stats, in that order.
    """
    import torch
    return _norm_fwd_quant(NormMode.LAYERNORM, x, weight, bias, eps, residual, zero_centered_gamma,
                           torch.float8_e4m3fn if dtype is None else dtype, scale, return_amax, return_stats, out,
                           sum_out, begin_norm_axis, stream, round_xhat)


def rms_norm_quant(x, weight=None, eps: float = 1e-6, residual=None, dtype=None, scale=None,
                   return_amax: bool = False, zero_centered_gamma: bool = False, return_stats: bool = False,
                   out=None, sum_out=None, begin_norm_axis: int = -1, stream=None, *, round_xhat: bool = False):
    """RMSNorm forward writing y quantized (arguments and results as
    layer_norm_quant; RMSNorm has no bias and returns rstd only)."""
    import torch
    return _norm_fwd_quant(NormMode.RMSNORM, x, weight, None, eps, residual, zero_centered_gamma,
                           torch.float8_e4m3fn if dtype is None else dtype, scale, return_amax, return_stats, out,
                           sum_out, begin_norm_axis, stream, round_xhat)


def norm_backward(mode: NormMode, dy, x_or_sum, mean, rstd, weight=None, dsum=None,
                  zero_centered_gamma: bool = False, need_dgamma: bool = True, need_dbeta: bool = True,
                  dx_out=None, dgamma_out=None, dbeta_out=None, param_dtype=None,
                  begin_norm_axis: int = -1, stream=None, *, round_xhat: bool = False):
    """LayerNorm/RMSNorm backward on PyTorch CUDA tensors, on PyTorch's current
    stream of dy's device (or `stream`).

    mode: NormMode.LAYERNORM or NormMode.RMSNORM.
    dy: the gradient of y. x_or_sum: the tensor that was normalized (x, or
      the forward's s with a residual). mean, rstd: the forward's statistics
      (mean is None for RMSNorm).
    weight: the forward's gamma (None: scale 1); zero_centered_gamma and
      round_xhat as in the forward (round_xhat: dgamma sums dy times the
      normalized value rounded to x's dtype; dx keeps the fp32 formula).
    dsum: the gradient that reached s from the residual path; it is added
      into dx, which is then also the residual's gradient.
    need_dgamma: compute dgamma (only when weight is given).
    need_dbeta: compute dbeta (LayerNorm only). Without weight, dbeta is
      shaped as x's normalized dimensions, in param_dtype (default x's).
    dx_out, dgamma_out, dbeta_out: output buffers (allocated otherwise).

    dgamma and dbeta are summed over rows in a fixed order (the same bits run
    to run). The workspace is allocated from PyTorch after the size query.
    Returns (dx, dgamma, dbeta), with None for what was not computed.
    """
    import torch
    mode = NormMode(mode)
    x = x_or_sum
    if not dy.is_cuda:
        raise ValueError("dy must be a CUDA tensor")
    dev = dy.device
    for t, name in ((x, "x_or_sum"), (weight, "weight"), (dsum, "dsum"), (dx_out, "dx_out"),
                    (dgamma_out, "dgamma_out"), (dbeta_out, "dbeta_out")):
        _on_device(t, name, dev)
    rows = _rows(x, begin_norm_axis)
    axis = _axis(x, begin_norm_axis)
    x = _rowwise(x, axis)
    dy = _rowwise(dy, axis)
    # dsum is read through dy's descriptor.
    dsum = _with_layout_of(dsum, dy, "dsum")
    if mode == NormMode.LAYERNORM:
        mean = _stat(mean, "mean", x, rows)
    elif mean is not None:
        raise ValueError("RMSNorm takes no mean")
    rstd = _stat(rstd, "rstd", x, rows)
    want_dgamma = need_dgamma and weight is not None
    want_dbeta = need_dbeta and mode == NormMode.LAYERNORM

    dx = torch.empty_like(x) if dx_out is None else dx_out
    # dgamma/dbeta take w_desc's shape and dtype. Without weight there is no
    # gamma to copy them from: use x's normalized dimensions, packed.
    if weight is not None:
        param_shape, pdt = tuple(weight.shape), weight.dtype
    else:
        param_shape = tuple(x.shape[_axis(x, begin_norm_axis):])
        pdt = param_dtype if param_dtype is not None else x.dtype
    for t, name in ((dgamma_out, "dgamma_out"), (dbeta_out, "dbeta_out")):
        # w_desc describes gamma, dgamma and dbeta alike.
        if t is not None and (tuple(t.shape) != param_shape or t.dtype != pdt or not t.is_contiguous()):
            raise ValueError(f"{name} must be a contiguous {pdt} tensor of shape {param_shape}")
    dgamma = dbeta = None
    if want_dgamma:
        dgamma = torch.empty(param_shape, dtype=pdt, device=dev) if dgamma_out is None else dgamma_out
    if want_dbeta:
        dbeta = torch.empty(param_shape, dtype=pdt, device=dev) if dbeta_out is None else dbeta_out

    xd = _desc_of(x, "x_or_sum")
    dyd = _desc_of(dy, "dy")
    dxd = _desc_of(dx, "dx_out")
    wd = None
    if weight is not None:
        wd = _desc_of(weight, "weight")
    elif want_dbeta:
        wd = _tensor_desc(_dtype_of(dbeta, "dbeta"), param_shape, tuple(dbeta.stride()))
    flags = _norm_flags(zero_centered_gamma, round_xhat)
    # Backward uses the saved rstd, not epsilon; any valid epsilon will do.
    nd = _norm_desc(mode, int(begin_norm_axis), 1e-5, flags)
    handle = _handle_for(dev.index)
    ws_bytes = norm_bwd_workspace_size(handle, nd, xd, wd)
    ws = _workspace(ws_bytes, dev, stream)
    st = (stream or torch.cuda.current_stream(dev)).cuda_stream
    check(_core.lib.fnorm_norm_bwd(handle.ptr, st, nd.ptr, xd.ptr, x.data_ptr(), dyd.ptr, dy.data_ptr(),
                             _ptr(mean), _ptr(rstd), wd.ptr if wd else None, _ptr(weight), _ptr(dsum),
                             dxd.ptr, dx.data_ptr(), _ptr(dgamma), _ptr(dbeta), _ptr(ws), ws_bytes))
    return dx, dgamma, dbeta


