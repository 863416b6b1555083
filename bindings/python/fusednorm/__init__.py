"""Python binding of libfusednorm's C ABI (ctypes), in three layers:

- `lib`: the raw functions with their argument types (the low layer);
- `check(status)`: raises FusedNormError with the library's message;
- `Handle`, `TensorDesc`, `NormDesc`, the workspace-size helpers and the
  PyTorch-facing `layer_norm()`, `rms_norm()` and `norm_backward()`: the
  idiomatic layer. These take PyTorch CUDA tensors and run on PyTorch's
  current stream of the input's device.

The library is looked up in $FNORM_LIB, then next to this package's source
tree (build/src), then by the loader's usual search (libfusednorm.so.0).
Nothing here needs a GPU until a handle is created; PyTorch is imported only
by the functions that take tensors.
"""
from __future__ import annotations

import ctypes
import enum
import functools
import math
import os
import threading

__all__ = ["Status", "DType", "NormMode", "NormFlag", "FusedNormError", "lib", "check",
           "last_error_message", "version", "Handle", "TensorDesc", "NormDesc",
           "norm_fwd_workspace_size", "norm_bwd_workspace_size",
           "layer_norm", "rms_norm", "norm_backward"]


# Enums: copied from api/fusednorm.h; tests/bindings/test_python.py parses the
# header and fails if any of these drift from it.
class Status(enum.IntEnum):
    SUCCESS = 0
    BAD_PARAM = 1000
    BAD_PARAM_NULL_POINTER = 1001
    BAD_PARAM_SHAPE = 1002
    INSUFFICIENT_WORKSPACE = 1003
    NOT_SUPPORTED = 2000
    NOT_SUPPORTED_BUILD = 2001
    INTERNAL_ERROR = 3000
    ALLOC_FAILED = 3001
    NO_DEVICE = 4000
    CUDA_ERROR = 5000
    CUBLAS_ERROR = 5001
    CUDNN_ERROR = 5002
    NCCL_ERROR = 5003


class DType(enum.IntEnum):
    FLOAT32 = 0
    FLOAT16 = 1
    BFLOAT16 = 2


class NormMode(enum.IntEnum):
    LAYERNORM = 0
    RMSNORM = 1


class NormFlag(enum.IntEnum):
    """Bits of a NormDesc's flags (OR them as ints)."""
    NONE = 0
    ZERO_CENTERED_GAMMA = 1


MAX_RANK = 8


def _load():
    candidates = []
    if os.environ.get("FNORM_LIB"):
        candidates.append(os.environ["FNORM_LIB"])
    here = os.path.dirname(os.path.abspath(__file__))
    candidates.append(os.path.join(here, "..", "..", "..", "build", "src", "libfusednorm.so"))
    candidates.append("libfusednorm.so.0")
    errors = []
    for c in candidates:
        try:
            return ctypes.CDLL(c)
        except OSError as e:
            errors.append(f"{c}: {e}")
    raise OSError("libfusednorm not found; set FNORM_LIB. Tried:\n  " + "\n  ".join(errors))


lib = _load()

# Argument types, one per C type of the header. Handles, descriptors, streams
# and device pointers are all c_void_p: callers pass the int that
# torch.Tensor.data_ptr() / torch.cuda.Stream.cuda_stream give, or None for
# NULL. The header's `float *mean, float *rstd` and `const void *` are the
# same pointer at the ABI level; typing them c_void_p lets device addresses
# (ints) through without casts. C enums are int-sized.
_p = ctypes.c_void_p
_enum = ctypes.c_int
_i32 = ctypes.c_int32
_u32 = ctypes.c_uint32
_size = ctypes.c_size_t
_i64p = ctypes.POINTER(ctypes.c_int64)
_sizep = ctypes.POINTER(ctypes.c_size_t)
_status = _enum

# name: (result, [arguments]) in the header's order. The binding test checks
# each entry's arity and argument kinds against api/fusednorm.h.
_PROTOTYPES = {
    "fnorm_get_version": (_u32, []),
    "fnorm_get_error_string": (ctypes.c_char_p, [_status]),
    "fnorm_status_category": (_status, [_status]),
    "fnorm_get_last_error_message": (_size, [ctypes.c_char_p, _size]),
    "fnorm_create": (_status, [ctypes.POINTER(_p)]),
    "fnorm_destroy": (_status, [_p]),
    "fnorm_get_device": (_status, [_p, ctypes.POINTER(ctypes.c_int)]),
    "fnorm_tensor_desc_create": (_status, [ctypes.POINTER(_p)]),
    "fnorm_tensor_desc_destroy": (_status, [_p]),
    "fnorm_tensor_desc_set": (_status, [_p, _enum, _i32, _i64p, _i64p]),
    "fnorm_tensor_desc_get": (_status, [_p, ctypes.POINTER(_enum), ctypes.POINTER(_i32), _i64p, _i64p, _i32]),
    "fnorm_tensor_desc_get_elements": (_status, [_p, _i64p]),
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
    # (handle, norm, x_desc, w_desc, workspace_bytes*)
    "fnorm_norm_bwd_workspace_size": (_status, [_p, _p, _p, _p, _sizep]),
    # (handle, stream, norm, x_desc, x, dy_desc, dy, mean, rstd, w_desc, gamma,
    #  dsum, dx_desc, dx, dgamma, dbeta, workspace, workspace_bytes)
    "fnorm_norm_bwd": (_status, [_p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _size]),
}
for _name, (_res, _args) in _PROTOTYPES.items():
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args


# ---------------------------------------------------------------------------
# Checked layer
# ---------------------------------------------------------------------------

class FusedNormError(RuntimeError):
    """A failed library call: `status` (a Status when known) and the library's
    thread-local message, which names the function and the argument."""

    def __init__(self, status: int, message: str):
        try:
            self.status = Status(status)
        except ValueError:
            self.status = status
        self.message = message
        super().__init__(f"{lib.fnorm_get_error_string(status).decode()}: {message}")


def last_error_message() -> str:
    n = lib.fnorm_get_last_error_message(None, 0)
    buf = ctypes.create_string_buffer(n + 1)
    lib.fnorm_get_last_error_message(buf, n + 1)
    return buf.value.decode(errors="replace")


def check(status: int) -> None:
    if status != Status.SUCCESS:
        raise FusedNormError(status, last_error_message())


def version() -> tuple[int, int, int]:
    v = lib.fnorm_get_version()
    return v // 10000, (v // 100) % 100, v % 100


# ---------------------------------------------------------------------------
# Idiomatic layer: owned objects
# ---------------------------------------------------------------------------

class _Owned:
    """An opaque library object destroyed with its Python owner. A failed
    create leaves nothing to free; a failed set after create is freed by
    __del__ (the pointer is already owned)."""
    _destroy = None

    def __init__(self, create):
        self._ptr = _p()
        check(create(ctypes.byref(self._ptr)))

    @property
    def ptr(self):
        return self._ptr

    def close(self):
        if self._ptr:
            type(self)._destroy(self._ptr)
            self._ptr = _p()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone
            pass


class Handle(_Owned):
    """A handle bound to the calling thread's current CUDA device. Raises
    FusedNormError with status NO_DEVICE where there is no driver or GPU."""
    _destroy = staticmethod(lib.fnorm_destroy)

    def __init__(self):
        super().__init__(lib.fnorm_create)

    @property
    def device(self) -> int:
        d = ctypes.c_int()
        check(lib.fnorm_get_device(self._ptr, ctypes.byref(d)))
        return d.value


class TensorDesc(_Owned):
    """dtype, sizes and strides (in elements; None: packed row-major)."""
    _destroy = staticmethod(lib.fnorm_tensor_desc_destroy)

    def __init__(self, dtype: DType, dims, strides=None):
        super().__init__(lib.fnorm_tensor_desc_create)
        dims = [int(d) for d in dims]
        d = (ctypes.c_int64 * max(1, len(dims)))(*dims)
        s = None
        if strides is not None:
            strides = [int(v) for v in strides]
            s = (ctypes.c_int64 * max(1, len(strides)))(*strides)
        check(lib.fnorm_tensor_desc_set(self._ptr, int(dtype), len(dims), d, s))

    def get(self) -> tuple[DType, list[int], list[int]]:
        """(dtype, dims, strides) as the library holds them."""
        dt, rank = _enum(), _i32()
        dims = (ctypes.c_int64 * MAX_RANK)()
        strides = (ctypes.c_int64 * MAX_RANK)()
        check(lib.fnorm_tensor_desc_get(self._ptr, ctypes.byref(dt), ctypes.byref(rank), dims, strides,
                                        MAX_RANK))
        n = rank.value
        return DType(dt.value), list(dims[:n]), list(strides[:n])

    @property
    def elements(self) -> int:
        e = ctypes.c_int64()
        check(lib.fnorm_tensor_desc_get_elements(self._ptr, ctypes.byref(e)))
        return e.value


class NormDesc(_Owned):
    """Mode, first normalized axis, epsilon and flags of a LayerNorm/RMSNorm."""
    _destroy = staticmethod(lib.fnorm_norm_desc_destroy)

    def __init__(self, mode: NormMode = NormMode.LAYERNORM, begin_norm_axis: int = -1, eps: float = 1e-5,
                 flags: int = NormFlag.NONE):
        super().__init__(lib.fnorm_norm_desc_create)
        check(lib.fnorm_norm_desc_set(self._ptr, int(mode), int(begin_norm_axis), float(eps)))
        if flags:
            check(lib.fnorm_norm_desc_set_flags(self._ptr, int(flags)))

    def get(self) -> tuple[NormMode, int, float]:
        """(mode, begin_norm_axis, epsilon) as the library holds them."""
        mode, axis, eps = _enum(), _i32(), ctypes.c_double()
        check(lib.fnorm_norm_desc_get(self._ptr, ctypes.byref(mode), ctypes.byref(axis), ctypes.byref(eps)))
        return NormMode(mode.value), axis.value, eps.value

    @property
    def flags(self) -> int:
        """The NormFlag bits set, as an int."""
        f = _u32()
        check(lib.fnorm_norm_desc_get_flags(self._ptr, ctypes.byref(f)))
        return f.value

    @flags.setter
    def flags(self, value: int) -> None:
        check(lib.fnorm_norm_desc_set_flags(self._ptr, int(value)))


def norm_fwd_workspace_size(handle: Handle, norm: NormDesc, x_desc: TensorDesc, y_desc: TensorDesc) -> int:
    """Bytes of scratch fnorm_norm_fwd needs (validates the descriptors)."""
    n = _size()
    check(lib.fnorm_norm_fwd_workspace_size(handle.ptr, norm.ptr, x_desc.ptr, y_desc.ptr, ctypes.byref(n)))
    return n.value


def norm_bwd_workspace_size(handle: Handle, norm: NormDesc, x_desc: TensorDesc,
                            w_desc: TensorDesc | None = None) -> int:
    """Bytes of scratch fnorm_norm_bwd needs (w_desc None: no dgamma/dbeta)."""
    n = _size()
    check(lib.fnorm_norm_bwd_workspace_size(handle.ptr, norm.ptr, x_desc.ptr, w_desc.ptr if w_desc else None,
                                            ctypes.byref(n)))
    return n.value


# ---------------------------------------------------------------------------
# Idiomatic layer: PyTorch tensors
# ---------------------------------------------------------------------------

# Descriptors are immutable once built here and launches only read them
# (thread-safe per the header), so equal ones are shared between calls: this
# saves a create/set/destroy round of ctypes calls per tensor per call.
@functools.lru_cache(maxsize=512)
def _tensor_desc(dtype: DType, dims: tuple, strides: tuple) -> TensorDesc:
    return TensorDesc(dtype, dims, strides)


@functools.lru_cache(maxsize=64)
def _norm_desc(mode: NormMode, begin_norm_axis: int, eps: float, flags: int) -> NormDesc:
    return NormDesc(mode, begin_norm_axis, eps, flags)


_handles: dict[int, Handle] = {}
_handles_lock = threading.Lock()


def _handle_for(device_index: int) -> Handle:
    """One handle per device for the process (a handle is thread-safe)."""
    import torch
    with _handles_lock:
        h = _handles.get(device_index)
        if h is None:
            with torch.cuda.device(device_index):  # fnorm_create binds the current device
                h = _handles[device_index] = Handle()
        return h


def _dtype_of(t, what: str) -> DType:
    import torch
    table = {torch.float32: DType.FLOAT32, torch.float16: DType.FLOAT16, torch.bfloat16: DType.BFLOAT16}
    try:
        return table[t.dtype]
    except KeyError:
        raise TypeError(f"{what}: dtype {t.dtype} is not float32, float16 or bfloat16") from None


def _desc_of(t, what: str) -> TensorDesc:
    return _tensor_desc(_dtype_of(t, what), tuple(t.shape), tuple(t.stride()))


def _on_device(t, what: str, device) -> None:
    """The library cannot tell which device a pointer lives on; catch a tensor
    on the wrong device here rather than as a fault in the kernel."""
    if t is not None and t.device != device:
        raise ValueError(f"{what} is on {t.device}, x is on {device}")


def _like_x(t, what: str, x) -> None:
    """residual, sum, dsum have no descriptor of their own: the library reads
    them through x_desc, so their layout must be x's exactly."""
    if t is not None and (t.shape != x.shape or t.stride() != x.stride() or t.dtype != x.dtype):
        raise ValueError(f"{what} must have x's dtype, shape and strides ({x.dtype}, {tuple(x.shape)}, "
                         f"{x.stride()}); got ({t.dtype}, {tuple(t.shape)}, {t.stride()})")


def _ptr(t):
    return t.data_ptr() if t is not None else None


def _axis(x, begin_norm_axis: int) -> int:
    axis = begin_norm_axis + x.dim() if begin_norm_axis < 0 else begin_norm_axis
    if not 0 <= axis < x.dim():
        raise ValueError(f"begin_norm_axis {begin_norm_axis} is out of range for a rank-{x.dim()} x")
    return axis


def _rows(x, begin_norm_axis: int) -> int:
    return math.prod(x.shape[:_axis(x, begin_norm_axis)])


def _stat(t, name: str, x, rows: int):
    """A caller's mean/rstd buffer: fp32, `rows` packed elements on x's device."""
    import torch
    if t is None:
        return None
    if t.dtype != torch.float32 or t.numel() != rows or not t.is_contiguous():
        raise ValueError(f"{name} must be a contiguous float32 tensor of {rows} elements "
                         f"(got {t.dtype}, {tuple(t.shape)})")
    _on_device(t, name, x.device)
    return t


def _workspace(nbytes: int, device, stream):
    """Scratch from PyTorch's caching allocator. Freed when the caller returns,
    while the launch may still be running: the allocator only reuses it in
    order on the current stream, so tell it about any other stream."""
    import torch
    if not nbytes:
        return None
    ws = torch.empty(nbytes, dtype=torch.uint8, device=device)
    if stream is not None:
        ws.record_stream(stream)
    return ws


def _norm_fwd(mode: NormMode, x, weight, bias, eps, residual, zero_centered_gamma, return_stats,
              out, sum_out, mean_out, rstd_out, begin_norm_axis, stream):
    import torch
    if not x.is_cuda:
        raise ValueError("x must be a CUDA tensor")
    dev = x.device
    for t, name in ((weight, "weight"), (bias, "bias"), (residual, "residual"), (out, "out"),
                    (sum_out, "sum_out")):
        _on_device(t, name, dev)
    if sum_out is not None and residual is None:
        raise ValueError("sum_out needs residual")
    _like_x(residual, "residual", x)
    _like_x(sum_out, "sum_out", x)
    rows = _rows(x, begin_norm_axis)
    y = torch.empty_like(x) if out is None else out
    s = None
    if residual is not None:
        s = torch.empty_like(x) if sum_out is None else sum_out
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
    # w_desc describes gamma and beta together: build it from whichever exists.
    if weight is not None and bias is not None and (
            bias.shape != weight.shape or bias.stride() != weight.stride() or bias.dtype != weight.dtype):
        raise ValueError(f"bias must have weight's dtype, shape and strides ({weight.dtype}, "
                         f"{tuple(weight.shape)}); got ({bias.dtype}, {tuple(bias.shape)})")
    w = weight if weight is not None else bias
    wd = _desc_of(w, "weight" if weight is not None else "bias") if w is not None else None
    flags = NormFlag.ZERO_CENTERED_GAMMA if zero_centered_gamma else NormFlag.NONE
    nd = _norm_desc(mode, int(begin_norm_axis), float(eps), flags)
    handle = _handle_for(dev.index)
    ws_bytes = norm_fwd_workspace_size(handle, nd, xd, yd)
    ws = _workspace(ws_bytes, dev, stream)
    st = (stream or torch.cuda.current_stream(dev)).cuda_stream
    check(lib.fnorm_norm_fwd(handle.ptr, st, nd.ptr, xd.ptr, x.data_ptr(), _ptr(residual), _ptr(s),
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
               begin_norm_axis: int = -1, stream=None):
    """LayerNorm forward over dimensions [begin_norm_axis, x.dim()) of a CUDA
    tensor x (fp32/fp16/bf16), fp32 math, on PyTorch's current stream of x's
    device (or `stream`, a torch.cuda.Stream).

    weight, bias: optional, shaped as the normalized dimensions (or one
      dimension of their product), packed, in x's dtype or float32.
    residual: normalize s = x + residual (rounded to x's dtype) instead of x,
      and return s too (written to sum_out when given; sum_out may be x or
      residual itself).
    zero_centered_gamma: the scale applied is (1 + weight).
    return_stats: also return mean and rstd, float32 tensors of [rows] (rows =
      the product of the dimensions before begin_norm_axis), for
      norm_backward. mean_out/rstd_out, when given, are written whatever
      return_stats says.
    out: y's buffer (allocated like x otherwise; may be x itself).

    Returns y; (y, s) with residual; (y, mean, rstd) with return_stats;
    (y, s, mean, rstd) with both.
    """
    return _norm_fwd(NormMode.LAYERNORM, x, weight, bias, eps, residual, zero_centered_gamma, return_stats,
                     out, sum_out, mean_out, rstd_out, begin_norm_axis, stream)


def rms_norm(x, weight=None, eps: float = 1e-6, residual=None, zero_centered_gamma: bool = False,
             return_stats: bool = False, out=None, sum_out=None, rstd_out=None, begin_norm_axis: int = -1,
             stream=None):
    """RMSNorm forward: y = s * rrms * weight, rrms = 1/sqrt(mean(s^2) + eps),
    s = x or x + residual. Arguments as layer_norm's; RMSNorm has no bias and
    no mean: the only statistic is rrms, returned (and written) as rstd.

    Returns y; (y, s) with residual; (y, rstd) with return_stats;
    (y, s, rstd) with both.
    """
    return _norm_fwd(NormMode.RMSNORM, x, weight, None, eps, residual, zero_centered_gamma, return_stats,
                     out, sum_out, None, rstd_out, begin_norm_axis, stream)


def norm_backward(mode: NormMode, dy, x_or_sum, mean, rstd, weight=None, dsum=None,
                  zero_centered_gamma: bool = False, need_dgamma: bool = True, need_dbeta: bool = True,
                  dx_out=None, dgamma_out=None, dbeta_out=None, param_dtype=None,
                  begin_norm_axis: int = -1, stream=None):
    """LayerNorm/RMSNorm backward on PyTorch CUDA tensors, on PyTorch's current
    stream of dy's device (or `stream`).

    mode: NormMode.LAYERNORM or NormMode.RMSNORM.
    dy: the gradient of y. x_or_sum: the tensor that was normalized (x, or
      the forward's s with a residual). mean, rstd: the forward's statistics
      (mean is None for RMSNorm).
    weight: the forward's gamma (None: scale 1); zero_centered_gamma as in
      the forward.
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
    _like_x(dsum, "dsum", x)
    rows = _rows(x, begin_norm_axis)
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
    flags = NormFlag.ZERO_CENTERED_GAMMA if zero_centered_gamma else NormFlag.NONE
    # Backward uses the saved rstd, not epsilon; any valid epsilon will do.
    nd = _norm_desc(mode, int(begin_norm_axis), 1e-5, flags)
    handle = _handle_for(dev.index)
    ws_bytes = norm_bwd_workspace_size(handle, nd, xd, wd)
    ws = _workspace(ws_bytes, dev, stream)
    st = (stream or torch.cuda.current_stream(dev)).cuda_stream
    check(lib.fnorm_norm_bwd(handle.ptr, st, nd.ptr, xd.ptr, x.data_ptr(), dyd.ptr, dy.data_ptr(),
                             _ptr(mean), _ptr(rstd), wd.ptr if wd else None, _ptr(weight), _ptr(dsum),
                             dxd.ptr, dx.data_ptr(), _ptr(dgamma), _ptr(dbeta), _ptr(ws), ws_bytes))
    return dx, dgamma, dbeta


from . import linear  # noqa: E402,F401 - the fully-connected layer; registers its prototypes above
from .batchnorm import *  # noqa: E402,F401,F403 - BatchNorm; registers its prototypes above
from . import batchnorm as _batchnorm  # noqa: E402
__all__ += _batchnorm.__all__
