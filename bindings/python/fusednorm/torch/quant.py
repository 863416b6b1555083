# SPDX-License-Identifier: Apache-2.0
"""LayerNorm / RMSNorm writing a quantized output in one pass, as PyTorch
functions: `rms_norm_quant` and `layer_norm_quant` return `(y_q, scale)`
(then the residual sum and amax when asked). The C++ op
`torch.ops.fusednorm.norm_quant` (csrc/norm.cpp) runs the library's kernel;
its fake implementation (_ops.py) lets torch.compile trace it. Without the
op (not built) or for what the library refuses (CPU tensors, other dtypes)
the same rules run as a PyTorch composition in fp32 (`reference_quant`).

The rules (api/fusednorm.h, fnorm_norm_fwd_quant): v is the fp32 normalized
value after weight and bias; M = 448 (float8_e4m3fn), 57344 (float8_e5m2),
127 (int8). Per-token scale s_r = max(amax_r / M, s_min), s_min = 1/(M*512)
for FP8 and 2^-23 for INT8; static scale: the caller's float32 scalar
tensor. FP8 codes: (v / s).clamp(-M, M) rounded to nearest even; INT8:
(v / s) rounded to nearest even, clamped to [-127, 127].
"""
from __future__ import annotations

import struct

import torch
import torch.nn.functional as F

from . import _ops

__all__ = ["rms_norm_quant", "layer_norm_quant", "reference_quant", "QUANT_MAX"]

QUANT_MAX = {torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0, torch.int8: 127.0}
_FLOATS = (torch.float32, torch.float16, torch.bfloat16)
_LAYERNORM, _RMSNORM = 0, 1
_ON = _ops.available()
if _ON:
    _op = torch.ops.fusednorm.norm_quant.default


def _f32(v: float) -> float:
    return struct.unpack("f", struct.pack("f", v))[0]


# The smallest per-token scale, as the kernel's fp32: 1 / (M * 512), or FLT_EPSILON for int8.
_MIN_SCALE = {torch.float8_e4m3fn: _f32(1 / (448.0 * 512)), torch.float8_e5m2: _f32(1 / (57344.0 * 512)),
              torch.int8: torch.finfo(torch.float32).eps}


def _min_scale(dtype) -> float:
    return _MIN_SCALE[dtype]


def reference_quant(v, dtype, scale=None):
    """The quantization rules applied to v (float32) with PyTorch ops:
    returns (codes, scale), scale per row (v's last dimension is the row)
    when `scale` is None."""
    m = QUANT_MAX[dtype]
    v = v.float()
    if scale is None:
        amax = v.abs().amax(-1, keepdim=True)
        # amax / M correctly rounded (the header's rule; PyTorch multiplies a
        # CUDA tensor by the reciprocal of a Python scalar divisor).
        s = (amax.double() / m).float().clamp(min=_min_scale(dtype))
        out_scale = s.squeeze(-1)
    else:
        s = out_scale = scale
    t = v / s
    if dtype == torch.int8:
        q = t.round().clamp(-127, 127).to(torch.int8)
    else:
        q = t.clamp(-m, m).to(dtype)
    return q, out_scale


def _reference(mode, x, weight, bias, eps, residual, dtype, scale, return_amax, axis):
    s = x if residual is None else (x + residual)
    shape = s.shape[axis:]
    v = s.float()
    w = weight.float() if weight is not None else None
    if mode == _LAYERNORM:
        v = F.layer_norm(v, shape, w, bias.float() if bias is not None else None, eps)
    else:
        v = F.rms_norm(v, shape, w, eps)
    flat = v.reshape(*v.shape[:axis], -1)
    q, sc = reference_quant(flat, dtype, scale)
    out = [q.reshape(v.shape), sc]
    if residual is not None:
        out.append(s)
    if return_amax:
        out.append(v.abs().amax())
    return tuple(out)


def _norm_quant(mode, x, weight, bias, eps, residual, dtype, scale, return_amax, begin_norm_axis):
    if dtype not in QUANT_MAX:
        raise TypeError(f"dtype must be torch.float8_e4m3fn, torch.float8_e5m2 or torch.int8; got {dtype}")
    if dtype == torch.int8 and scale is not None:
        raise ValueError("int8 output is per-token (dynamic) only: pass scale=None")
    axis = begin_norm_axis + x.dim() if begin_norm_axis < 0 else begin_norm_axis
    p = weight if weight is not None else bias
    lib_ok = (_ON and x.is_cuda and x.dtype in _FLOATS and (p is None or p.dtype in (x.dtype, torch.float32))
              and (residual is None or (residual.dtype == x.dtype and residual.shape == x.shape)))
    if not lib_ok:
        return _reference(mode, x, weight, bias, eps, residual, dtype, scale, return_amax, axis)
    from .._core import _rowwise, _with_layout_of
    x = _rowwise(x, axis)
    if residual is not None:
        residual = _with_layout_of(residual, x, "residual")
    y, scales, s, amax = _op(x, weight, bias, residual, scale, mode, axis, float(eps), dtype, return_amax)
    out = [y, scales if scale is None else scale]
    if residual is not None:
        out.append(s)
    if return_amax:
        out.append(amax)
    return tuple(out)


def rms_norm_quant(x, weight=None, eps: float = 1e-6, residual=None, scale=None, dtype=torch.float8_e4m3fn,
                   return_amax: bool = False, begin_norm_axis: int = -1):
    """RMSNorm of x (or of x + residual, rounded to x's dtype), quantized.

    scale: None (dynamic per-token: one float32 scale per row, returned,
      shaped as x's dimensions before begin_norm_axis) or a float32 tensor of
      one element (static; FP8 only).
    Returns (y_q, scale); with residual (y_q, scale, x + residual); amax (a
    0-dim float32: the largest |v|, before scaling) last when return_amax.
    """
    return _norm_quant(_RMSNORM, x, weight, None, eps, residual, dtype, scale, return_amax, begin_norm_axis)


def layer_norm_quant(x, weight=None, bias=None, eps: float = 1e-5, residual=None, scale=None,
                     dtype=torch.float8_e4m3fn, return_amax: bool = False, begin_norm_axis: int = -1):
    """LayerNorm, quantized: arguments and results as rms_norm_quant."""
    return _norm_quant(_LAYERNORM, x, weight, bias, eps, residual, dtype, scale, return_amax, begin_norm_axis)
