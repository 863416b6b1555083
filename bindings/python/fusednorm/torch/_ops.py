# SPDX-License-Identifier: Apache-2.0
"""The C++ ops (csrc/*.cpp): found already compiled, bound to the library
the binding loaded, and given their fake (meta) implementations for
torch.compile. Nothing is compiled at import: a wheel built with PyTorch
present holds them, a Meson build compiles them when PyTorch is importable,
and `python -m fusednorm.torch.build` makes them for an install without.

`available()` says whether the ops are there; `reason()` why not. Without
them every module falls back to torch.nn.functional, and the import warns
once with that reason.
"""
from __future__ import annotations

import ctypes
import importlib
import importlib.util
import json
import math
import os
import warnings

import torch

from .. import _core
from . import build as _build_tool

_REASON = None
ext = None  # the extension module (the eager fast path: ext.norm, ext.batch_norm, ...)


def _import_extension():
    """The compiled ops, from (in turn) $FNORM_TORCH_OPS (a file), the package
    (fusednorm.torch.fusednorm_torch_ops), the per-user cache that
    `python -m fusednorm.torch.build` writes to. Raises ImportError saying
    where it looked and what to do."""
    path = os.environ.get("FNORM_TORCH_OPS")
    if not path:
        try:
            return importlib.import_module(f"{__package__}.{_build_tool.NAME}")
        except ModuleNotFoundError:
            pass
        path = os.path.join(_build_tool.cache_dir(torch.__version__), _build_tool.module_file())
        if not os.path.exists(path):
            raise ImportError(
                f"the C++ ops are not built for PyTorch {torch.__version__} (looked in the package and {path}); "
                "build them once with `python -m fusednorm.torch.build`")
    stamp_file = os.path.join(os.path.dirname(path), _build_tool.NAME + ".json")
    if os.path.exists(stamp_file):
        with open(stamp_file) as f:
            built_for = json.load(f)
        now = _build_tool.stamp(torch.__version__)
        if built_for != now:
            raise ImportError(f"{path} was built for {built_for}, this is {now}: rebuild with "
                              "`python -m fusednorm.torch.build`")
    spec = importlib.util.spec_from_file_location(_build_tool.NAME, path)
    if spec is None:
        raise ImportError(f"{path} is not an extension module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_ENTRY_POINTS = ("norm", "add_norm", "bn", "linear")  # the op files' EagerEntries (csrc/)


def _load_extension() -> None:
    global ext
    module = _import_extension()
    missing = [n for n in _ENTRY_POINTS if not hasattr(module, n)]
    if missing:
        raise ImportError(f"{module.__file__} lacks {', '.join(missing)}: it was built from an older fusednorm; "
                          "rebuild with `python -m fusednorm.torch.build`")
    ext = module
    names = torch.ops.fusednorm._abi_names()
    torch.ops.fusednorm._bind_abi([ctypes.cast(getattr(_core.lib, n), ctypes.c_void_p).value for n in names])


def _load() -> None:
    global _REASON
    if os.environ.get("FNORM_TORCH_DISABLE"):
        _REASON = "FNORM_TORCH_DISABLE is set"
        return
    try:
        _load_extension()
        _register_fakes()
    except Exception as e:  # noqa: BLE001 - any failure: the modules fall back to torch
        _REASON = f"{type(e).__name__}: {e}"
        warnings.warn(f"fusednorm.torch: the library's ops are not in use, every module runs torch.nn's code: "
                      f"{_REASON}", RuntimeWarning, stacklevel=3)


def available() -> bool:
    return _REASON is None


def reason() -> str | None:
    return _REASON


# ---- fake implementations ---------------------------------------------------

def _concrete(*shapes) -> bool:
    return all(isinstance(s, int) for shape in shapes for s in shape)


def _register_fakes() -> None:
    from .. import batchnorm as _bn
    from .. import linear as _lin
    lib = torch.library

    @lib.register_fake("fusednorm::norm_fwd")
    def _norm_fwd(x, weight, bias, mode, axis, eps, flags=0):
        rows = math.prod(x.shape[:axis])
        f32 = dict(dtype=torch.float32, device=x.device)
        mean = x.new_empty((rows,), **f32) if mode == 0 else x.new_empty((0,), **f32)
        return torch.empty_like(x), mean, x.new_empty((rows,), **f32)

    @lib.register_fake("fusednorm::norm_bwd")
    def _norm_bwd(dy, x, mean, rstd, weight, bias, mode, axis, need_dgamma, need_dbeta, flags=0, dsum=None):
        w = weight if weight is not None else bias
        dg = torch.empty_like(w, memory_format=torch.contiguous_format) \
            if need_dgamma and weight is not None else x.new_empty((0,))
        db = torch.empty_like(w, memory_format=torch.contiguous_format) \
            if need_dbeta and mode == 0 and w is not None else x.new_empty((0,))
        return torch.empty_like(x), dg, db

    @lib.register_fake("fusednorm::norm")
    def _norm(x, weight, bias, mode, axis, eps, flags=0):
        return torch.empty_like(x)

    # add & norm: y and the sum come back packed, whatever x's layout
    @lib.register_fake("fusednorm::add_norm_fwd")
    def _add_norm_fwd(x, residual, weight, bias, mode, axis, eps, flags=0):
        rows = math.prod(x.shape[:axis])
        f32 = dict(dtype=torch.float32, device=x.device)
        mean = x.new_empty((rows,), **f32) if mode == 0 else x.new_empty((0,), **f32)
        return x.new_empty(x.shape), x.new_empty(x.shape), mean, x.new_empty((rows,), **f32)

    @lib.register_fake("fusednorm::add_norm")
    def _add_norm(x, residual, weight, bias, mode, axis, eps, flags=0):
        return x.new_empty(x.shape), x.new_empty(x.shape)

    @lib.register_fake("fusednorm::norm_quant")
    def _norm_quant(x, weight, bias, residual, scale, mode, axis, eps, dtype, want_amax):
        f32 = dict(dtype=torch.float32, device=x.device)
        y = x.new_empty(x.shape, dtype=dtype)
        scales = x.new_empty(x.shape[:axis], **f32) if scale is None else x.new_empty((0,), **f32)
        s = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device) if residual is not None \
            else x.new_empty((0,))
        amax = x.new_empty((), **f32) if want_amax else x.new_empty((0,), **f32)
        return y, scales, s, amax

    def _reserve_bytes(x, epilogue, eps, momentum, comm, sync_flags):
        if not _concrete(x.shape, x.stride()):
            # Symbolic sizes (a dynamic batch): the op's engine is AUTO, whose
            # reserve is NATIVE's (fnorm_batchnorm_reserve_space_size): none
            # without a ReLU, else one bit per element in 32-bit words, an empty
            # batch counted as one sample. A size in x's symbols, not an
            # unbacked one: the autograd node saves the reserve, which is not
            # among the compiled graph's outputs.
            if int(epilogue) == 0:
                return 0
            elements = torch.sym_max(x.shape[0], 1) * math.prod(x.shape[1:])
            return (elements + 31) // 32 * 4
        dims = (1,) + tuple(x.shape[1:]) if x.shape[0] == 0 else tuple(x.shape)
        desc = _bn._bn_desc(int(epilogue), float(eps), 1 if momentum < 0 else 0,
                            0.0 if momentum < 0 else float(momentum), 0, comm or None, int(sync_flags))
        xd = _core._tensor_desc(_core._dtype_of(x, "x"), dims, tuple(x.stride()))
        return _bn._size_query(_core.lib.fnorm_batchnorm_reserve_space_size, _core._handle_for(x.device.index),
                               desc, xd)

    @lib.register_fake("fusednorm::bn_fwd_train")
    def _bn_fwd_train(x, weight, bias, running_mean, running_var, nbt, z, momentum, eps, epilogue, comm,
                      sync_flags):
        c = x.shape[1]
        f32 = dict(dtype=torch.float32, device=x.device)
        rs = _reserve_bytes(x, epilogue, eps, momentum, comm, sync_flags)
        return (torch.empty_like(x), x.new_empty((c,), **f32), x.new_empty((c,), **f32),
                x.new_empty((rs,), dtype=torch.uint8))

    @lib.register_fake("fusednorm::bn_fwd_infer")
    def _bn_fwd_infer(x, weight, bias, running_mean, running_var, z, eps, epilogue):
        return torch.empty_like(x)

    @lib.register_fake("fusednorm::bn_bwd")
    def _bn_bwd(dy, x, weight, saved_mean, saved_invstd, reserve, eps, epilogue, comm, sync_flags, need_dz,
                need_weight_grads):
        c = x.shape[1]
        f32 = dict(dtype=torch.float32, device=x.device)
        dz = torch.empty_like(x) if need_dz else x.new_empty((0,))
        dg = x.new_empty((c,) if need_weight_grads else (0,), **f32)
        db = x.new_empty((c,) if need_weight_grads else (0,), **f32)
        return torch.empty_like(x), dg, db, dz

    @lib.register_fake("fusednorm::batch_norm")
    def _batch_norm(x, weight, bias, running_mean, running_var, nbt, z, momentum, eps, epilogue, comm,
                    sync_flags):
        return torch.empty_like(x)

    def _gn_like(x):
        # csrc/groupnorm.cpp's group_norm: x's layout when it is one of the library's two, else contiguous
        if x.is_contiguous() or (x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last)) or \
                (x.dim() == 5 and x.is_contiguous(memory_format=torch.channels_last_3d)):
            return torch.empty_like(x)
        return x.new_empty(x.shape)

    @lib.register_fake("fusednorm::group_norm_fwd")
    def _group_norm_fwd(x, groups, weight, bias, scale, shift, eps, act):
        f32 = dict(dtype=torch.float32, device=x.device)
        return _gn_like(x), x.new_empty((x.shape[0] * groups,), **f32), x.new_empty((x.shape[0] * groups,), **f32)

    @lib.register_fake("fusednorm::group_norm_bwd")
    def _group_norm_bwd(dy, x, mean, rstd, groups, weight, bias, scale, shift, act, need_dweight, need_dbias,
                        need_dscale, need_dshift):
        n, c = x.shape[0], x.shape[1]
        w = weight if weight is not None else bias
        s = scale if scale is not None else shift
        dw = x.new_empty((c,), dtype=w.dtype) if need_dweight and weight is not None else x.new_empty((0,))
        db = x.new_empty((c,), dtype=w.dtype) if need_dbias and bias is not None else x.new_empty((0,))
        ds = x.new_empty((n, c), dtype=s.dtype) if need_dscale and scale is not None else x.new_empty((0,))
        dh = x.new_empty((n, c), dtype=s.dtype) if need_dshift and shift is not None else x.new_empty((0,))
        return _gn_like(x), dw, db, ds, dh

    @lib.register_fake("fusednorm::group_norm")
    def _group_norm(x, groups, weight, bias, scale, shift, eps, act):
        return _gn_like(x)

    def _aux_bytes(y, act, has_bias):
        if act == 0:
            return 0
        if not _concrete(y.shape):
            return torch.library.get_ctx().new_dynamic_size()
        epi = _lin._epilogue_of(has_bias, {1: "relu", 2: "gelu"}[act])
        desc = _lin._linear_desc(epi, _lin.WeightLayout.NK, _lin.LinearFlag.NONE)
        yd = _core._tensor_desc(_core._dtype_of(y, "y"), tuple(y.shape), tuple(y.stride()))
        return _lin.linear_aux_size(_core._handle_for(y.device.index), desc, yd)

    @lib.register_fake("fusednorm::linear_fwd")
    def _linear_fwd(x, weight, bias, act, save_aux):
        y = x.new_empty((*x.shape[:-1], weight.shape[0]))
        n = _aux_bytes(y, act, bias is not None) if save_aux else 0
        return y, x.new_empty((n,), dtype=torch.uint8)

    @lib.register_fake("fusednorm::linear_bwd")
    def _linear_bwd(dy, x, weight, aux, has_bias, act, need_dx, need_dw, need_db):
        dx = x.new_empty(x.shape) if need_dx else x.new_empty((0,))
        dw = torch.empty_like(weight) if need_dw else x.new_empty((0,), dtype=weight.dtype)
        db = dy.new_empty((dy.shape[-1],)) if need_db and has_bias else dy.new_empty((0,))
        return dx, dw, db

    @lib.register_fake("fusednorm::linear")
    def _linear(x, weight, bias, act):
        return x.new_empty((*x.shape[:-1], weight.shape[0]))


_load()
