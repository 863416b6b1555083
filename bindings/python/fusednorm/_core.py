# SPDX-License-Identifier: Apache-2.0
"""The binding's private core: loading libfusednorm, the ctypes prototypes
(every op module registers its own table here through `register`), the enums
shared by all ops, `check` and the error type, owned handles and tensor
descriptors, and the helpers every op's PyTorch-facing function uses (dtype
and device checks, layouts, workspace from PyTorch's allocator).

Op modules (`norm`, `batchnorm`, `linear`) reach the library through
`_core.lib` at call time, so that assigning `fusednorm.lib` (bench/ab_norm.py
switches builds that way) reaches every op.

The library is looked up in $FNORM_LIB, then inside this package (a wheel's
fusednorm/_lib), then next to a source tree (build/src), then by the
loader's usual search (libfusednorm.so.0): `import fusednorm` from a wheel
needs no environment variable.
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

__all__ = ["Status", "DType", "NormMode", "NormFlag", "QuantScaling", "FusedNormError", "lib", "check",
           "last_error_message", "version", "Handle", "TensorDesc", "MAX_RANK"]


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
    # One-byte quantized outputs (fnorm_norm_fwd_quant's y only).
    FLOAT8_E4M3 = 3
    FLOAT8_E5M2 = 4
    INT8 = 5


class NormMode(enum.IntEnum):
    LAYERNORM = 0
    RMSNORM = 1


class QuantScaling(enum.IntEnum):
    """How a quantized output is scaled (fnorm_quant_scaling_t)."""
    PER_TENSOR = 0
    PER_TOKEN = 1


class NormFlag(enum.IntEnum):
    """Bits of a NormDesc's flags (OR them as ints)."""
    NONE = 0
    ZERO_CENTERED_GAMMA = 1
    ROUND_XHAT = 2


MAX_RANK = 8


def _cudart_candidates():
    """Where a CUDA runtime may be when the loader's search has none: PyTorch's
    CUDA wheels (nvidia/cu13/lib, nvidia/cuda_runtime/lib on sys.path), then
    $CUDA_HOME and /usr/local/cuda."""
    import sys
    dirs = []
    for p in sys.path:
        dirs += [os.path.join(p, "nvidia", "cu13", "lib"), os.path.join(p, "nvidia", "cuda_runtime", "lib")]
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            dirs += [os.path.join(root, "lib64"), os.path.join(root, "lib")]
    for d in dirs:
        if os.path.isdir(d):
            for name in sorted(os.listdir(d), reverse=True):
                if name.startswith("libcudart.so."):
                    yield os.path.join(d, name)


def _load():
    """libfusednorm from, in turn: $FNORM_LIB; the wheel's own copy
    (fusednorm/_lib); a source tree's build/src; the loader's search
    (libfusednorm.so.0, e.g. a prefix install). If the library is there but
    its CUDA runtime is not on the loader's path, one from PyTorch's CUDA
    wheels or the toolkit is loaded first."""
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = []
    if os.environ.get("FNORM_LIB"):
        candidates.append(os.environ["FNORM_LIB"])
    candidates.append(os.path.join(here, "_lib", "libfusednorm.so"))
    candidates.append(os.path.join(here, "..", "..", "..", "build", "src", "libfusednorm.so"))
    candidates.append("libfusednorm.so.0")
    errors = []
    for c in candidates:
        if os.sep in c and not os.path.exists(c):
            errors.append(f"{c}: no such file")
            continue
        try:
            return ctypes.CDLL(c)
        except OSError as e:
            if "libcudart" in str(e):
                for rt in _cudart_candidates():
                    try:
                        ctypes.CDLL(rt, mode=ctypes.RTLD_GLOBAL)
                        return ctypes.CDLL(c)
                    except OSError:
                        continue
            errors.append(f"{c}: {e}")
    raise OSError("libfusednorm could not be loaded (set FNORM_LIB to its path). Tried:\n  " + "\n  ".join(errors))


lib = _load()


def _lib():
    """The library now in use (`fusednorm.lib` may have been reassigned)."""
    return lib

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
}


def _apply(library, table) -> None:
    for name, (res, args) in table.items():
        f = getattr(library, name)
        f.restype = res
        f.argtypes = args


def register(table) -> None:
    """Add an op module's prototypes to the package's table (the binding tests
    check every entry against api/fusednorm.h) and type them on `lib`."""
    _PROTOTYPES.update(table)
    _apply(lib, table)


_apply(lib, _PROTOTYPES)


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
        super().__init__(f"{_lib().fnorm_get_error_string(status).decode()}: {message}")


def last_error_message() -> str:
    n = _lib().fnorm_get_last_error_message(None, 0)
    buf = ctypes.create_string_buffer(n + 1)
    _lib().fnorm_get_last_error_message(buf, n + 1)
    return buf.value.decode(errors="replace")


def check(status: int) -> None:
    if status != Status.SUCCESS:
        raise FusedNormError(status, last_error_message())


def version() -> tuple[int, int, int]:
    v = _lib().fnorm_get_version()
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
        super().__init__(_lib().fnorm_create)

    @property
    def device(self) -> int:
        d = ctypes.c_int()
        check(_lib().fnorm_get_device(self._ptr, ctypes.byref(d)))
        return d.value


class TensorDesc(_Owned):
    """dtype, sizes and strides (in elements; None: packed row-major)."""
    _destroy = staticmethod(lib.fnorm_tensor_desc_destroy)

    def __init__(self, dtype: DType, dims, strides=None):
        super().__init__(_lib().fnorm_tensor_desc_create)
        dims = [int(d) for d in dims]
        d = (ctypes.c_int64 * max(1, len(dims)))(*dims)
        s = None
        if strides is not None:
            strides = [int(v) for v in strides]
            s = (ctypes.c_int64 * max(1, len(strides)))(*strides)
        check(_lib().fnorm_tensor_desc_set(self._ptr, int(dtype), len(dims), d, s))

    def get(self) -> tuple[DType, list[int], list[int]]:
        """(dtype, dims, strides) as the library holds them."""
        dt, rank = _enum(), _i32()
        dims = (ctypes.c_int64 * MAX_RANK)()
        strides = (ctypes.c_int64 * MAX_RANK)()
        check(_lib().fnorm_tensor_desc_get(self._ptr, ctypes.byref(dt), ctypes.byref(rank), dims, strides,
                                        MAX_RANK))
        n = rank.value
        return DType(dt.value), list(dims[:n]), list(strides[:n])

    @property
    def elements(self) -> int:
        e = ctypes.c_int64()
        check(_lib().fnorm_tensor_desc_get_elements(self._ptr, ctypes.byref(e)))
        return e.value


# ---------------------------------------------------------------------------
# Idiomatic layer: PyTorch tensors
# ---------------------------------------------------------------------------

# Descriptors are immutable once built here and launches only read them
# (thread-safe per the header), so equal ones are shared between calls: this
# saves a create/set/destroy round of ctypes calls per tensor per call.
@functools.lru_cache(maxsize=512)
def _tensor_desc(dtype: DType, dims: tuple, strides: tuple) -> TensorDesc:
    return TensorDesc(dtype, dims, strides)


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


def _quant_dtype_of(dtype, what: str) -> DType:
    """The library's quantized dtype for a torch dtype (float8_e4m3fn,
    float8_e5m2, int8)."""
    import torch
    table = {torch.float8_e4m3fn: DType.FLOAT8_E4M3, torch.float8_e5m2: DType.FLOAT8_E5M2, torch.int8: DType.INT8}
    try:
        return table[dtype]
    except KeyError:
        raise TypeError(f"{what}: dtype {dtype} is not float8_e4m3fn, float8_e5m2 or int8") from None


def _desc_of(t, what: str) -> TensorDesc:
    return _tensor_desc(_dtype_of(t, what), tuple(t.shape), tuple(t.stride()))


def _on_device(t, what: str, device) -> None:
    """The library cannot tell which device a pointer lives on; catch a tensor
    on the wrong device here rather than as a fault in the kernel."""
    if t is not None and t.device != device:
        raise ValueError(f"{what} is on {t.device}, x is on {device}")


def _same_layout(t, what: str, x) -> None:
    """A caller's tensor that the library reads or writes through x's
    descriptor (residual, sum_out, dsum, z...): x's dtype, shape and strides
    exactly, or the library would index it wrongly."""
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




def _overlaps(t) -> bool:
    """Whether two elements of t share memory (a dimension of stride 0, or
    strides that interleave): such a tensor cannot be written, and the library
    takes none as input either."""
    dims = sorted((st, sz) for sz, st in zip(t.shape, t.stride()) if sz > 1)
    span = 1
    for st, sz in dims:
        if st < span:
            return True
        span = st * sz
    return False


def _rowwise(t, axis: int = -1):
    """t laid out as the row-wise ops (LayerNorm/RMSNorm, linear) take it: the
    dimensions from `axis` on packed, and the ones before it collapsing into
    one row stride >= their product (packed, or a slice of a wider tensor);
    any other layout (transposed, expanded, strided columns) is copied to a
    packed tensor first."""
    if t is None or t.dim() == 0:
        return t
    axis = axis + t.dim() if axis < 0 else axis
    shape, stride = t.shape, t.stride()
    expect = 1
    for d in range(t.dim() - 1, axis - 1, -1):
        if shape[d] != 1 and stride[d] != expect:
            return t.contiguous()
        expect *= shape[d]
    cols = expect
    expect = None
    for d in range(axis - 1, -1, -1):
        if shape[d] == 1:
            continue
        if expect is None:
            if stride[d] < cols:
                return t.contiguous()
        elif stride[d] != expect:
            return t.contiguous()
        expect = stride[d] * shape[d]
    return t


def _with_layout_of(t, x, what: str):
    """t (read through x's descriptor) in x's layout: t itself when its
    strides are x's, else a copy made with x's strides. x must not overlap
    itself (see _overlaps)."""
    import torch
    if t is None:
        return None
    if t.shape != x.shape or t.dtype != x.dtype:
        raise ValueError(f"{what} must have x's dtype and shape ({x.dtype}, {tuple(x.shape)}); "
                         f"got ({t.dtype}, {tuple(t.shape)})")
    if t.stride() == x.stride():
        return t
    return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device).copy_(t)


def _empty_with_layout_of(x):
    """An output the library writes through x's descriptor (the residual sum,
    dz...): x's strides, so that a slice's row stride or a channels-last
    layout is honoured. torch.empty_like(x) would give a packed tensor for a
    non-dense x, and the library would write past its end (issue 16)."""
    import torch
    return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
