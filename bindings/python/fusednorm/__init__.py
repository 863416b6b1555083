"""Python binding of libfusednorm's C ABI (ctypes), in three layers:

- `lib`: the raw functions with their argument types (the low layer);
- `check(status)`: raises FusedNormError with the library's message;
- `Handle`, `TensorDesc`, `NormDesc` and `layer_norm()`: the idiomatic layer.
  `layer_norm()` takes PyTorch CUDA tensors when PyTorch is installed.

The library is looked up in $FNORM_LIB, then next to this package's source
tree (build/src), then by the loader's usual search (libfusednorm.so.0).
"""
from __future__ import annotations

import ctypes
import enum
import os

__all__ = ["Status", "DType", "NormMode", "FusedNormError", "lib", "check", "Handle",
           "TensorDesc", "NormDesc", "layer_norm", "version"]


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

_p = ctypes.c_void_p
_i32 = ctypes.c_int32
_i64p = ctypes.POINTER(ctypes.c_int64)
_status = ctypes.c_int
_PROTOTYPES = {
    "fnorm_get_version": (ctypes.c_uint32, []),
    "fnorm_get_error_string": (ctypes.c_char_p, [_status]),
    "fnorm_status_category": (_status, [_status]),
    "fnorm_get_last_error_message": (ctypes.c_size_t, [ctypes.c_char_p, ctypes.c_size_t]),
    "fnorm_create": (_status, [ctypes.POINTER(_p)]),
    "fnorm_destroy": (_status, [_p]),
    "fnorm_get_device": (_status, [_p, ctypes.POINTER(ctypes.c_int)]),
    "fnorm_tensor_desc_create": (_status, [ctypes.POINTER(_p)]),
    "fnorm_tensor_desc_destroy": (_status, [_p]),
    "fnorm_tensor_desc_set": (_status, [_p, ctypes.c_int, _i32, _i64p, _i64p]),
    "fnorm_tensor_desc_get": (_status, [_p, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(_i32), _i64p, _i64p, _i32]),
    "fnorm_tensor_desc_get_elements": (_status, [_p, _i64p]),
    "fnorm_norm_desc_create": (_status, [ctypes.POINTER(_p)]),
    "fnorm_norm_desc_destroy": (_status, [_p]),
    "fnorm_norm_desc_set": (_status, [_p, ctypes.c_int, _i32, ctypes.c_double]),
    "fnorm_norm_desc_get": (_status, [_p, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(_i32), ctypes.POINTER(ctypes.c_double)]),
    "fnorm_layernorm_fwd_workspace_size": (_status, [_p, _p, _p, ctypes.POINTER(ctypes.c_size_t)]),
    "fnorm_layernorm_fwd": (_status, [_p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, _p, ctypes.c_size_t]),
}
for _name, (_res, _args) in _PROTOTYPES.items():
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args


class FusedNormError(RuntimeError):
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


class _Owned:
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
    """A handle bound to the current CUDA device."""
    _destroy = staticmethod(lib.fnorm_destroy)

    def __init__(self):
        super().__init__(lib.fnorm_create)


class TensorDesc(_Owned):
    _destroy = staticmethod(lib.fnorm_tensor_desc_destroy)

    def __init__(self, dtype: DType, dims, strides=None):
        super().__init__(lib.fnorm_tensor_desc_create)
        d = (ctypes.c_int64 * len(dims))(*dims)
        s = (ctypes.c_int64 * len(strides))(*strides) if strides is not None else None
        check(lib.fnorm_tensor_desc_set(self._ptr, int(dtype), len(dims), d, s))


class NormDesc(_Owned):
    _destroy = staticmethod(lib.fnorm_norm_desc_destroy)

    def __init__(self, mode: NormMode = NormMode.LAYERNORM, begin_norm_axis: int = -1, eps: float = 1e-5):
        super().__init__(lib.fnorm_norm_desc_create)
        check(lib.fnorm_norm_desc_set(self._ptr, int(mode), begin_norm_axis, eps))


def _torch_dtype(t) -> DType:
    import torch
    return {torch.float32: DType.FLOAT32, torch.float16: DType.FLOAT16, torch.bfloat16: DType.BFLOAT16}[t.dtype]


_handles: dict[int, Handle] = {}


def _handle_for(device_index: int) -> Handle:
    import torch
    h = _handles.get(device_index)
    if h is None:
        with torch.cuda.device(device_index):
            h = _handles[device_index] = Handle()
    return h


def layer_norm(x, weight=None, bias=None, eps: float = 1e-5, begin_norm_axis: int = -1,
               out=None, mean=None, rstd=None, stream=None):
    """LayerNorm forward on PyTorch CUDA tensors, on PyTorch's current stream
    (or `stream`, a torch.cuda.Stream). Returns y (allocated unless `out`)."""
    import torch
    y = torch.empty_like(x) if out is None else out
    dt = _torch_dtype(x)
    xd = TensorDesc(dt, list(x.shape), list(x.stride()))
    yd = TensorDesc(dt, list(y.shape), list(y.stride()))
    wd = None
    if weight is not None or bias is not None:
        w = weight if weight is not None else bias
        wd = TensorDesc(_torch_dtype(w), list(w.shape), list(w.stride()))
    nd = NormDesc(NormMode.LAYERNORM, begin_norm_axis, eps)
    ws = ctypes.c_size_t()
    check(lib.fnorm_layernorm_fwd_workspace_size(nd.ptr, xd.ptr, yd.ptr, ctypes.byref(ws)))
    workspace = torch.empty(ws.value, dtype=torch.uint8, device=x.device) if ws.value else None
    s = (stream or torch.cuda.current_stream(x.device)).cuda_stream
    check(lib.fnorm_layernorm_fwd(
        _handle_for(x.device.index).ptr, s, nd.ptr, xd.ptr, x.data_ptr(),
        wd.ptr if wd else None,
        weight.data_ptr() if weight is not None else None,
        bias.data_ptr() if bias is not None else None,
        yd.ptr, y.data_ptr(),
        mean.data_ptr() if mean is not None else None,
        rstd.data_ptr() if rstd is not None else None,
        workspace.data_ptr() if workspace is not None else None, ws.value))
    return y
