# SPDX-License-Identifier: Apache-2.0
"""GroupNorm (+ SiLU, + per-sample scale / shift) over libfusednorm's C ABI
(fnorm_groupnorm_*): the raw prototypes (registered in the package's table),
`GroupNormDesc`, the size queries, and `group_norm()` / `group_norm_backward()`
on PyTorch CUDA tensors, run on PyTorch's current stream of the input's
device (or the `stream` given).

    y, mean, rstd = group_norm(x, 32, weight, bias, eps=1e-6, scale=s, shift=t,
                               activation=GnActivation.SILU, return_stats=True)
    dx, dgamma, dbeta, dscale, dshift = group_norm_backward(
        dy, x, mean, rstd, 32, weight, bias, scale=s, shift=t, activation=GnActivation.SILU)

computes, per sample and group of C / G consecutive channels (fp32 math):
v = (x - mean) * rstd * weight + bias, then v * (1 + scale[n, c]) + shift[n, c]
when scale / shift are given, then silu(v) with SILU (diffusers'
ResnetBlock2D with time_embedding_norm "scale_shift"; F.silu(F.group_norm(...))
without them).

Layouts: x may be channels-first (NCHW, NCDHW, [N, C, L], [N, C]) or
channels-last (NHWC / NDHWC); any other (a slice, expanded, transposed) is
copied to a packed tensor first. y and dx get x's layout, dy is read in it
(copied when its strides differ). scale / shift: [N, C] or [N, C, 1, ...]
with any strides (the halves of `temb.chunk(2, dim=1)` are taken as they are);
dscale / dshift have scale's strides.
"""
from __future__ import annotations

import ctypes
import enum
import functools

from . import _core
from ._core import (_Owned, _desc_of, _enum, _handle_for, _on_device, _overlaps, _p, _ptr, _size, _sizep, _status,
                    _with_layout_of, _workspace, check)
from .batchnorm import _bn_layout  # GroupNorm takes BatchNorm's two layouts, told apart the same way

__all__ = ["GnActivation", "GroupNormDesc", "groupnorm_fwd_workspace_size", "groupnorm_bwd_workspace_size",
           "group_norm", "group_norm_backward"]


class GnActivation(enum.IntEnum):
    """What follows the normalization (fnorm_gn_activation_t)."""
    NONE = 0
    SILU = 1


_f64 = ctypes.c_double
_GN_PROTOTYPES = {
    "fnorm_groupnorm_desc_create": (_status, [ctypes.POINTER(_p)]),
    "fnorm_groupnorm_desc_destroy": (_status, [_p]),
    "fnorm_groupnorm_desc_set": (_status, [_p, ctypes.c_int64, _f64, _enum]),
    "fnorm_groupnorm_desc_get": (_status, [_p, ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(_f64),
                                           ctypes.POINTER(_enum)]),
    # (handle, gn, x_desc, workspace_bytes*)
    "fnorm_groupnorm_fwd_workspace_size": (_status, [_p, _p, _p, _sizep]),
    # (handle, stream, gn, x_desc, x, w_desc, gamma, beta, ss_desc, scale, shift,
    #  y_desc, y, mean, rstd, workspace, workspace_bytes)
    "fnorm_groupnorm_fwd": (_status, [_p] * 16 + [_size]),
    # (handle, gn, x_desc, w_desc, ss_desc, workspace_bytes*)
    "fnorm_groupnorm_bwd_workspace_size": (_status, [_p, _p, _p, _p, _p, _sizep]),
    # (handle, stream, gn, x_desc, x, dy_desc, dy, mean, rstd, w_desc, gamma,
    #  beta, ss_desc, scale, shift, dx_desc, dx, dgamma, dbeta, dscale, dshift,
    #  workspace, workspace_bytes)
    "fnorm_groupnorm_bwd": (_status, [_p] * 22 + [_size]),
}
_core.register(_GN_PROTOTYPES)


class GroupNormDesc(_Owned):
    """Number of groups, epsilon and activation of a GroupNorm. Defaults: 32
    groups, epsilon 1e-5, no activation (torch.nn.GroupNorm(32, C))."""
    _destroy = staticmethod(_core.lib.fnorm_groupnorm_desc_destroy)

    def __init__(self, groups: int = 32, eps: float = 1e-5, activation: GnActivation = GnActivation.NONE):
        super().__init__(_core.lib.fnorm_groupnorm_desc_create)
        check(_core.lib.fnorm_groupnorm_desc_set(self._ptr, int(groups), float(eps), int(activation)))

    def set(self, groups: int, eps: float, activation: GnActivation = GnActivation.NONE) -> None:
        """fnorm_groupnorm_desc_set: groups >= 1, epsilon finite, >= 0 and
        representable in fp32. A refused set leaves the descriptor as it was."""
        check(_core.lib.fnorm_groupnorm_desc_set(self._ptr, int(groups), float(eps), int(activation)))

    def get(self) -> tuple[int, float, GnActivation]:
        """(groups, epsilon, activation) as the library holds them."""
        g, eps, act = ctypes.c_int64(), _f64(), _enum()
        check(_core.lib.fnorm_groupnorm_desc_get(self._ptr, ctypes.byref(g), ctypes.byref(eps), ctypes.byref(act)))
        return g.value, eps.value, GnActivation(act.value)


def groupnorm_fwd_workspace_size(handle, gn: GroupNormDesc, x_desc) -> int:
    """Bytes of scratch fnorm_groupnorm_fwd needs (validates the descriptors;
    touches no GPU)."""
    n = _size()
    check(_core.lib.fnorm_groupnorm_fwd_workspace_size(handle.ptr, gn.ptr, x_desc.ptr, ctypes.byref(n)))
    return n.value


def groupnorm_bwd_workspace_size(handle, gn: GroupNormDesc, x_desc, w_desc=None, ss_desc=None) -> int:
    """Bytes of scratch fnorm_groupnorm_bwd needs; w_desc None: no dgamma /
    dbeta, ss_desc None: no dscale / dshift will be asked for."""
    n = _size()
    check(_core.lib.fnorm_groupnorm_bwd_workspace_size(handle.ptr, gn.ptr, x_desc.ptr,
                                                       w_desc.ptr if w_desc else None,
                                                       ss_desc.ptr if ss_desc else None, ctypes.byref(n)))
    return n.value


@functools.lru_cache(maxsize=64)
def _gn_desc(groups: int, eps: float, activation: int) -> GroupNormDesc:
    return GroupNormDesc(groups, eps, activation)


def _ptr_or_empty(t):
    return None if t is None or t.numel() == 0 else t.data_ptr()


def _like(t, ref, what: str, ref_name: str):
    """t, which ref's descriptor describes too: ref's dtype and shape, and
    its strides (t is copied into them when they differ)."""
    import torch
    if t is None or ref is None:
        return t
    if t.shape != ref.shape or t.dtype != ref.dtype:
        raise ValueError(f"{what} must have {ref_name}'s dtype and shape ({ref.dtype}, {tuple(ref.shape)}); "
                         f"got ({t.dtype}, {tuple(t.shape)})")
    if t.stride() == ref.stride():
        return t
    return torch.empty_strided(ref.shape, ref.stride(), dtype=ref.dtype, device=ref.device).copy_(t)


def _params(weight, bias, scale, shift, x):
    """weight / bias (C packed values, one descriptor) and scale / shift
    ([N, C] or [N, C, 1, ...], one descriptor, any strides that do not
    overlap) as the library takes them, and the tensors the two descriptors
    are built from (None when absent):
    (weight, bias, scale, shift, w, s)."""
    for t, name in ((weight, "weight"), (bias, "bias"), (scale, "scale"), (shift, "shift")):
        _on_device(t, name, x.device)
    n, c = x.shape[0], x.shape[1]
    if weight is not None and not weight.is_contiguous():
        weight = weight.contiguous()
    if weight is None and bias is not None and not bias.is_contiguous():
        bias = bias.contiguous()
    bias = _like(bias, weight, "bias", "weight")
    w = weight if weight is not None else bias
    if w is not None and w.numel() != c:
        raise ValueError(f"weight / bias must hold C = {c} values; got shape {tuple(w.shape)}")
    if scale is not None and _overlaps(scale):
        scale = scale.contiguous()
    if scale is None and shift is not None and _overlaps(shift):
        shift = shift.contiguous()
    shift = _like(shift, scale, "shift", "scale")
    s = scale if scale is not None else shift
    if s is not None and (tuple(s.shape[:2]) != (n, c) or any(d != 1 for d in s.shape[2:])):
        raise ValueError(f"scale / shift must be [N, C] or [N, C, 1, ...] with N, C = {n}, {c}; "
                         f"got shape {tuple(s.shape)}")
    return weight, bias, scale, shift, w, s


def group_norm(x, num_groups: int, weight=None, bias=None, eps: float = 1e-5, scale=None, shift=None,
               activation: GnActivation = GnActivation.NONE, return_stats: bool = False, out=None, stream=None):
    """GroupNorm forward (training and inference alike) of a CUDA tensor x
    [N, C, spatial...] (fp32 / fp16 / bf16), fp32 math.

    num_groups: G, dividing C. weight, bias: C values each (optional), in x's
      dtype or float32. scale, shift: the per-sample modulation (optional;
      see the module's docstring), in x's dtype or float32.
    activation: GnActivation.SILU gives silu(group_norm(x)).
    out: y's buffer (x's dtype, shape and strides; may be x itself).
    return_stats: also return mean and rstd, float32 [N, G], for
      group_norm_backward.

    Returns y, or (y, mean, rstd) with return_stats.
    """
    import torch
    if not x.is_cuda:
        raise ValueError("x must be a CUDA tensor")
    if x.dim() < 2:
        raise ValueError(f"x must be [N, C, ...]; got shape {tuple(x.shape)}")
    dev = x.device
    _on_device(out, "out", dev)
    x_in = x
    x = _bn_layout(x)
    if x is not x_in and out is x_in:
        raise ValueError("x's layout is not one the library takes (it was copied): out cannot be x")
    weight, bias, scale, shift, w, s = _params(weight, bias, scale, shift, x)
    y = torch.empty_like(x) if out is None else out
    if y.shape != x.shape or y.dtype != x.dtype or (x.numel() > 0 and y.stride() != x.stride()):
        raise ValueError(f"out must have x's dtype, shape and strides ({x.dtype}, {tuple(x.shape)}, {x.stride()}); "
                         f"got ({y.dtype}, {tuple(y.shape)}, {y.stride()})")
    n = x.shape[0]
    mean = rstd = None
    if return_stats:
        mean = torch.empty((n, int(num_groups)), dtype=torch.float32, device=dev)
        rstd = torch.empty((n, int(num_groups)), dtype=torch.float32, device=dev)
    xd = _desc_of(x, "x")
    yd = _desc_of(y, "out")
    wd = _desc_of(w, "weight" if weight is not None else "bias") if w is not None else None
    sd = _desc_of(s, "scale" if scale is not None else "shift") if s is not None else None
    gd = _gn_desc(int(num_groups), float(eps), int(activation))
    handle = _handle_for(dev.index)
    ws_bytes = groupnorm_fwd_workspace_size(handle, gd, xd)
    ws = _workspace(ws_bytes, dev, stream)
    st = (stream or torch.cuda.current_stream(dev)).cuda_stream
    check(_core.lib.fnorm_groupnorm_fwd(handle.ptr, st, gd.ptr, xd.ptr, _ptr_or_empty(x), wd.ptr if wd else None,
                                        _ptr(weight), _ptr(bias), sd.ptr if sd else None, _ptr(scale), _ptr(shift),
                                        yd.ptr, _ptr_or_empty(y), _ptr_or_empty(mean), _ptr_or_empty(rstd),
                                        _ptr(ws), ws_bytes))
    return (y, mean, rstd) if return_stats else y


def group_norm_backward(dy, x, mean, rstd, num_groups: int, weight=None, bias=None, scale=None, shift=None,
                        activation: GnActivation = GnActivation.NONE, need_weight_grads: bool = True,
                        need_scale_shift_grads: bool = True, dx_out=None, stream=None):
    """GroupNorm backward from the forward's statistics: the gradient of the
    function group_norm computed with the same arguments (shift is read only
    with SILU, whose derivative is recomputed from x; bias with SILU or for
    dscale).

    mean, rstd: group_norm's (return_stats=True), N * G float32 values.
    need_weight_grads: dgamma / dbeta (when weight or bias was given), in
      weight's dtype and shape. need_scale_shift_grads: dscale / dshift (when
      scale or shift was given), in scale's dtype, shape and strides.
    dx_out: dx's buffer (x's layout; may be dy or x itself).

    Every sum is deterministic (the same bits run to run).
    Returns (dx, dgamma, dbeta, dscale, dshift), None for what was not computed.
    """
    import torch
    if not dy.is_cuda:
        raise ValueError("dy must be a CUDA tensor")
    dev = dy.device
    for t, name in ((x, "x"), (mean, "mean"), (rstd, "rstd"), (dx_out, "dx_out")):
        _on_device(t, name, dev)
    x = _bn_layout(x)
    dy = _with_layout_of(dy, x, "dy") if x.numel() > 0 else dy
    n = x.shape[0]
    for t, name in ((mean, "mean"), (rstd, "rstd")):
        if t is not None and (t.dtype != torch.float32 or t.numel() != n * int(num_groups)
                              or not t.is_contiguous()):
            raise ValueError(f"{name} must be a contiguous float32 tensor of N * G = {n * int(num_groups)} elements "
                             f"(got {t.dtype}, {tuple(t.shape)})")
    weight, bias, scale, shift, w, s = _params(weight, bias, scale, shift, x)
    dx = torch.empty_like(x) if dx_out is None else dx_out
    if dx.shape != x.shape or dx.dtype != x.dtype or (x.numel() > 0 and dx.stride() != x.stride()):
        raise ValueError(f"dx_out must have x's dtype, shape and strides ({x.dtype}, {tuple(x.shape)}, "
                         f"{x.stride()}); got ({dx.dtype}, {tuple(dx.shape)}, {dx.stride()})")
    dgamma = dbeta = dscale = dshift = None
    if need_weight_grads and w is not None:
        dgamma, dbeta = torch.empty_like(w), torch.empty_like(w)
    if need_scale_shift_grads and s is not None:
        dscale = torch.empty_strided(s.shape, s.stride(), dtype=s.dtype, device=dev)
        dshift = torch.empty_strided(s.shape, s.stride(), dtype=s.dtype, device=dev)
    xd = _desc_of(x, "x")
    dyd = _desc_of(dy, "dy")
    dxd = _desc_of(dx, "dx_out")
    wd = _desc_of(w, "weight" if weight is not None else "bias") if w is not None else None
    sd = _desc_of(s, "scale" if scale is not None else "shift") if s is not None else None
    # The backward uses the saved rstd, not epsilon: any valid one will do.
    gd = _gn_desc(int(num_groups), 1e-5, int(activation))
    handle = _handle_for(dev.index)
    # The query with the launch's descriptors: gamma / scale given make the
    # launch describe w_desc / ss_desc, whatever gradients are asked for.
    ws_bytes = groupnorm_bwd_workspace_size(handle, gd, xd, wd, sd)
    ws = _workspace(ws_bytes, dev, stream)
    st = (stream or torch.cuda.current_stream(dev)).cuda_stream
    check(_core.lib.fnorm_groupnorm_bwd(handle.ptr, st, gd.ptr, xd.ptr, _ptr_or_empty(x), dyd.ptr, _ptr_or_empty(dy),
                                        _ptr_or_empty(mean), _ptr_or_empty(rstd), wd.ptr if wd else None,
                                        _ptr(weight), _ptr(bias), sd.ptr if sd else None, _ptr(scale), _ptr(shift),
                                        dxd.ptr, _ptr_or_empty(dx), _ptr(dgamma), _ptr(dbeta), _ptr(dscale),
                                        _ptr(dshift), _ptr(ws), ws_bytes))
    return dx, dgamma, dbeta, dscale, dshift
