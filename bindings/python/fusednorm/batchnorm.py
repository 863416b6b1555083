# SPDX-License-Identifier: Apache-2.0
"""BatchNorm over libfusednorm's C ABI: the raw prototypes (added to the
package's table), the descriptor, and PyTorch-facing functions that run on
PyTorch's current stream of the input's device.

    y, saved = batch_norm_train(x, weight, bias, running_mean, running_var,
                                epilogue=BnEpilogue.ADD_RELU, z=residual)
    dx, dgamma, dbeta, dz = batch_norm_backward(dy, x, weight, saved)

`saved` carries what the backward needs (saved mean / invstd and the reserve
space with the ReLU bitmask).
"""
from __future__ import annotations

import ctypes
import enum
import functools
from dataclasses import dataclass

from . import _core
from ._core import (_Owned, _desc_of, _dtype_of, _enum, _handle_for, _on_device, _p, _ptr, _size, _sizep,
                    _status, _tensor_desc, _with_layout_of, _workspace, check)

__all__ = ["BnEpilogue", "BnAverage", "BnEngine", "BnSyncFlag", "BatchNormDesc", "BnSaved",
           "batch_norm_train", "batch_norm_infer", "batch_norm_backward"]


class BnEpilogue(enum.IntEnum):
    NONE = 0
    RELU = 1
    ADD_RELU = 2


class BnAverage(enum.IntEnum):
    EXPONENTIAL = 0
    CUMULATIVE = 1


class BnEngine(enum.IntEnum):
    AUTO = 0
    NATIVE = 1
    CUDNN = 2


class BnSyncFlag(enum.IntEnum):
    NONE = 0
    GLOBAL_WEIGHT_GRADS = 1


_BN_PROTOTYPES = {
    "fnorm_batchnorm_desc_create": (_status, [ctypes.POINTER(_p)]),
    "fnorm_batchnorm_desc_destroy": (_status, [_p]),
    "fnorm_batchnorm_desc_set": (_status, [_p, _enum, ctypes.c_double, _enum, ctypes.c_double]),
    "fnorm_batchnorm_desc_get": (_status, [_p, ctypes.POINTER(_enum), ctypes.POINTER(ctypes.c_double),
                                           ctypes.POINTER(_enum), ctypes.POINTER(ctypes.c_double)]),
    "fnorm_batchnorm_desc_set_engine": (_status, [_p, _enum]),
    "fnorm_batchnorm_desc_get_engine": (_status, [_p, ctypes.POINTER(_enum)]),
    "fnorm_batchnorm_desc_set_comm": (_status, [_p, _p, ctypes.c_uint32]),
    "fnorm_batchnorm_desc_get_comm": (_status, [_p, ctypes.POINTER(_p), ctypes.POINTER(ctypes.c_uint32)]),
    # (handle, bn, x_desc, bytes*)
    "fnorm_batchnorm_fwd_train_workspace_size": (_status, [_p, _p, _p, _sizep]),
    "fnorm_batchnorm_reserve_space_size": (_status, [_p, _p, _p, _sizep]),
    "fnorm_batchnorm_fwd_infer_workspace_size": (_status, [_p, _p, _p, _sizep]),
    "fnorm_batchnorm_bwd_workspace_size": (_status, [_p, _p, _p, _sizep]),
    # (handle, stream, bn, x_desc, x, z, gamma, beta, running_mean, running_var,
    #  num_batches_tracked, y_desc, y, saved_mean, saved_invstd, workspace,
    #  workspace_bytes, reserve, reserve_bytes)
    "fnorm_batchnorm_fwd_train": (_status, [_p] * 16 + [_size, _p, _size]),
    # (handle, stream, bn, x_desc, x, z, gamma, beta, running_mean, running_var,
    #  y_desc, y, workspace, workspace_bytes)
    "fnorm_batchnorm_fwd_infer": (_status, [_p] * 13 + [_size]),
    # (handle, stream, bn, x_desc, x, dy_desc, dy, y, gamma, beta, saved_mean,
    #  saved_invstd, reserve, reserve_bytes, dx_desc, dx, dz, dgamma, dbeta,
    #  workspace, workspace_bytes)
    "fnorm_batchnorm_bwd": (_status, [_p] * 13 + [_size] + [_p] * 6 + [_size]),
}
_core.register(_BN_PROTOTYPES)


class BatchNormDesc(_Owned):
    _destroy = staticmethod(_core.lib.fnorm_batchnorm_desc_destroy)

    def __init__(self, epilogue: BnEpilogue = BnEpilogue.NONE, eps: float = 1e-5,
                 average: BnAverage = BnAverage.EXPONENTIAL, momentum: float = 0.1,
                 engine: BnEngine = BnEngine.AUTO, comm: int | None = None, sync_flags: int = 0):
        """comm: an ncclComm_t as an int (SyncBatchNorm), or None."""
        super().__init__(_core.lib.fnorm_batchnorm_desc_create)
        check(_core.lib.fnorm_batchnorm_desc_set(self.ptr, int(epilogue), float(eps), int(average), float(momentum)))
        check(_core.lib.fnorm_batchnorm_desc_set_engine(self.ptr, int(engine)))
        if comm:
            check(_core.lib.fnorm_batchnorm_desc_set_comm(self.ptr, comm, int(sync_flags)))

    def get(self):
        e, a = _enum(), _enum()
        eps, mom = ctypes.c_double(), ctypes.c_double()
        check(_core.lib.fnorm_batchnorm_desc_get(self.ptr, ctypes.byref(e), ctypes.byref(eps), ctypes.byref(a),
                                           ctypes.byref(mom)))
        g = _enum()
        check(_core.lib.fnorm_batchnorm_desc_get_engine(self.ptr, ctypes.byref(g)))
        return BnEpilogue(e.value), eps.value, BnAverage(a.value), mom.value, BnEngine(g.value)


@functools.lru_cache(maxsize=64)
def _bn_desc(epilogue, eps, average, momentum, engine, comm=None, sync_flags=0) -> BatchNormDesc:
    return BatchNormDesc(epilogue, eps, average, momentum, engine, comm, sync_flags)


def _bn_x_desc(x):
    """x's descriptor; a SyncBatchNorm rank without samples (x.shape[0] == 0)
    describes [1, C, ...] with x's strides (the library reads only C and the
    layout then)."""
    if x.shape[0] == 0:
        return _tensor_desc(_dtype_of(x, "x"), (1,) + tuple(x.shape[1:]), tuple(x.stride()))
    return _desc_of(x, "x")


def _packed_in(t, order) -> bool:
    """t's non-trivial dimensions, taken in `order` from the fastest, are
    packed."""
    expect = 1
    for d in order:
        if t.shape[d] == 1:
            continue
        if t.stride(d) != expect:
            return False
        expect *= t.shape[d]
    return True


def _bn_layout(x):
    """x in one of the two layouts the library takes (channels-first packed,
    or channels-last: C, then the spatial dimensions, then N); any other
    (a slice, expanded, transposed) is copied to a packed tensor first."""
    if x is None or x.numel() == 0:
        return x
    n = x.dim()
    if _packed_in(x, range(n - 1, -1, -1)) or _packed_in(x, [1] + list(range(n - 1, 1, -1)) + [0]):
        return x
    return x.contiguous()


def _ptr_or_empty(t):
    return None if t is None or t.numel() == 0 else t.data_ptr()


def _size_query(fn, handle, desc, x_desc) -> int:
    n = ctypes.c_size_t()
    check(fn(handle.ptr, desc.ptr, x_desc.ptr, ctypes.byref(n)))
    return n.value


@dataclass
class BnSaved:
    """What the training forward keeps for its backward."""
    mean: object
    invstd: object
    reserve: object  # uint8 tensor or None
    epilogue: BnEpilogue
    eps: float
    engine: BnEngine
    y: object = None     # the CUDNN engine's ReLU backward reads y
    bias: object = None
    comm: int | None = None
    sync_flags: int = 0


def _vec(t, name, c, device):
    import torch
    if t is None:
        return None
    if t.dtype != torch.float32 or t.numel() != c or not t.is_contiguous():
        raise ValueError(f"{name} must be a contiguous float32 tensor of {c} elements")
    _on_device(t, name, device)
    return t


def _check_like(t, name, x):
    """t is described by x's descriptor: same dtype, shape and strides. Empty
    tensors (a SyncBatchNorm rank without samples) are never read, and
    torch.empty_like gives an empty channels-last tensor contiguous strides:
    only their shape and dtype must match."""
    if t is None:
        return
    if t.shape != x.shape or t.dtype != x.dtype or (x.numel() > 0 and t.stride() != x.stride()):
        raise ValueError(f"{name} must have x's dtype, shape and strides "
                         f"(x: {x.dtype} {tuple(x.shape)} {x.stride()}; {name}: {t.dtype} {tuple(t.shape)} {t.stride()})")


def batch_norm_train(x, weight=None, bias=None, running_mean=None, running_var=None,
                     num_batches_tracked=None, momentum: float | None = 0.1, eps: float = 1e-5,
                     epilogue: BnEpilogue = BnEpilogue.NONE, z=None, engine: BnEngine = BnEngine.AUTO,
                     out=None, comm: int | None = None, sync_flags: int = 0):
    """Training forward. momentum=None: cumulative average (needs
    num_batches_tracked, an int64 CUDA tensor of one element). comm: an
    ncclComm_t (int) for SyncBatchNorm; x may then have 0 samples. Returns
    (y, BnSaved)."""
    import torch
    if not x.is_cuda:
        raise ValueError("x must be a CUDA tensor")
    c = x.shape[1]
    x = _bn_layout(x)
    z = None if z is None or x.numel() == 0 else _with_layout_of(z, x, "z")  # read through y's descriptor
    average = BnAverage.CUMULATIVE if momentum is None else BnAverage.EXPONENTIAL
    desc = _bn_desc(int(epilogue), float(eps), int(average), 0.0 if momentum is None else float(momentum),
                    int(engine), comm, int(sync_flags))
    handle = _handle_for(x.device.index)
    stream = torch.cuda.current_stream(x.device)
    x_desc = _bn_x_desc(x)
    y = out if out is not None else torch.empty_like(x)
    _check_like(y, "out", x)
    for t, n in ((weight, "weight"), (bias, "bias"), (running_mean, "running_mean"), (running_var, "running_var")):
        _vec(t, n, c, x.device)
    saved_mean = torch.empty(c, dtype=torch.float32, device=x.device)
    saved_invstd = torch.empty(c, dtype=torch.float32, device=x.device)
    ws_bytes = _size_query(_core.lib.fnorm_batchnorm_fwd_train_workspace_size, handle, desc, x_desc)
    rs_bytes = _size_query(_core.lib.fnorm_batchnorm_reserve_space_size, handle, desc, x_desc)
    ws = _workspace(ws_bytes, x.device, None)
    reserve = torch.empty(rs_bytes, dtype=torch.uint8, device=x.device) if rs_bytes else None
    check(_core.lib.fnorm_batchnorm_fwd_train(
        handle.ptr, stream.cuda_stream, desc.ptr, x_desc.ptr, _ptr_or_empty(x), _ptr_or_empty(z), _ptr(weight),
        _ptr(bias), _ptr(running_mean), _ptr(running_var), _ptr(num_batches_tracked), x_desc.ptr,
        _ptr_or_empty(y), _ptr(saved_mean), _ptr(saved_invstd), _ptr(ws), ws_bytes, _ptr(reserve), rs_bytes))
    keep_y = y if (engine == BnEngine.CUDNN and epilogue != BnEpilogue.NONE) else None
    return y, BnSaved(saved_mean, saved_invstd, reserve, BnEpilogue(epilogue), float(eps), BnEngine(engine),
                      keep_y, bias if keep_y is not None else None, comm, int(sync_flags))


def batch_norm_infer(x, running_mean, running_var, weight=None, bias=None, eps: float = 1e-5,
                     epilogue: BnEpilogue = BnEpilogue.NONE, z=None, engine: BnEngine = BnEngine.AUTO,
                     out=None):
    import torch
    c = x.shape[1]
    x = _bn_layout(x)
    z = _with_layout_of(z, x, "z")
    desc = _bn_desc(int(epilogue), float(eps), int(BnAverage.EXPONENTIAL), 0.1, int(engine))
    handle = _handle_for(x.device.index)
    stream = torch.cuda.current_stream(x.device)
    x_desc = _desc_of(x, "x")
    y = out if out is not None else torch.empty_like(x)
    _check_like(y, "out", x)
    for t, n in ((weight, "weight"), (bias, "bias"), (running_mean, "running_mean"), (running_var, "running_var")):
        _vec(t, n, c, x.device)
    ws_bytes = _size_query(_core.lib.fnorm_batchnorm_fwd_infer_workspace_size, handle, desc, x_desc)
    ws = _workspace(ws_bytes, x.device, None)
    check(_core.lib.fnorm_batchnorm_fwd_infer(
        handle.ptr, stream.cuda_stream, desc.ptr, x_desc.ptr, _ptr(x), _ptr(z), _ptr(weight), _ptr(bias),
        _ptr(running_mean), _ptr(running_var), _desc_of(y, "out").ptr, _ptr(y), _ptr(ws), ws_bytes))
    return y


def batch_norm_backward(dy, x, weight, saved: BnSaved, want_dz: bool | None = None,
                        need_weight_grads: bool = True, dx_out=None):
    """Returns (dx, dgamma, dbeta, dz); dgamma/dbeta are None unless
    need_weight_grads, dz None unless the epilogue is ADD_RELU (and want_dz is
    not False)."""
    import torch
    c = x.shape[1]
    desc = _bn_desc(int(saved.epilogue), float(saved.eps), int(BnAverage.EXPONENTIAL), 0.1, int(saved.engine),
                    saved.comm, saved.sync_flags)
    handle = _handle_for(x.device.index)
    stream = torch.cuda.current_stream(x.device)
    x = _bn_layout(x)
    x_desc = _bn_x_desc(x)
    if x.numel() > 0:
        dy = _with_layout_of(dy, x, "dy")  # read through x's descriptor (passed as dy_desc)
    _check_like(dy, "dy", x)
    dx = dx_out if dx_out is not None else torch.empty_like(x)
    if want_dz is None:
        want_dz = saved.epilogue == BnEpilogue.ADD_RELU
    dz = torch.empty_like(x) if want_dz else None
    dgamma = torch.empty(c, dtype=torch.float32, device=x.device) if need_weight_grads else None
    dbeta = torch.empty(c, dtype=torch.float32, device=x.device) if need_weight_grads else None
    ws_bytes = _size_query(_core.lib.fnorm_batchnorm_bwd_workspace_size, handle, desc, x_desc)
    ws = _workspace(ws_bytes, x.device, None)
    rs = saved.reserve
    check(_core.lib.fnorm_batchnorm_bwd(
        handle.ptr, stream.cuda_stream, desc.ptr, x_desc.ptr, _ptr_or_empty(x), x_desc.ptr, _ptr_or_empty(dy),
        _ptr(saved.y), _ptr(weight), _ptr(saved.bias), _ptr(saved.mean), _ptr(saved.invstd), _ptr(rs),
        rs.numel() if rs is not None else 0, x_desc.ptr, _ptr_or_empty(dx), _ptr_or_empty(dz), _ptr(dgamma),
        _ptr(dbeta), _ptr(ws), ws_bytes))
    return dx, dgamma, dbeta, dz
