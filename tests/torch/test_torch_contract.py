#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""fusednorm.torch against torch.nn's own contract (issue 26), on the GPU.

PyTorch states what its modules must do as data: the sample inputs of
torch.testing._internal.common_modules.module_db (constructor and forward
arguments, error inputs), checked by PyTorch's test/test_modules.py. This
suite takes the samples of every class the drop-in replaces (LayerNorm,
RMSNorm, BatchNorm1d/2d/3d, Linear, GroupNorm; SyncBatchNorm with BatchNorm's samples,
one process, no process group: torch's SyncBatchNorm is then a BatchNorm) in
float32, float16 and bfloat16, training and eval, and checks each sample
against its torch.nn twin (same parameters):

  forward       output shape, dtype, memory format; values (see "closeness")
  backward      input and parameter gradients (closeness)
  stats         BatchNorm running_mean / running_var / num_batches_tracked
  gradgrad      second order (create_graph=True), float32: never None,
                close to torch's
  noncontig     non-contiguous input and gradient (test_modules' recipe) give
                the contiguous results
  memformat     channels-last input: output and input gradient in torch's
                memory format, values as with the contiguous input
  save_load     torch.save / torch.load of the module (same output), of the
                state_dict (weights_only too), pickle / deepcopy
  repr          repr() equal to torch's
  factory       device= / dtype= reach every parameter and buffer
  to            .to(cpu) forward, .to(cuda) forward, .to_empty from meta
  errors        module_db's error inputs raise torch's error type and message
  signature     constructor and forward signatures keep torch's parameters
                (names, order, defaults); forward(input=...) works
  fx            torch.fx.symbolic_trace records the module as one call_module
  autocast      under torch.autocast(fp16/bf16): torch's output dtype, values
  onnx          torch.onnx.export (both exporters) of converted models: only
                standard ONNX operators, onnx.checker passes
plus zero-centred gamma (RMSNorm and LayerNorm against torch with 1 + w).

Closeness: against a float64 reference (torch's module in float64 on the
same values), ours must be no further than twice torch's own distance, or
within 8 units of the dtype's epsilon times the reference's largest
magnitude: max|ours - ref64| <= max(2 max|torch - ref64|, 8 eps scale). So a
case passes when ours is as accurate as torch.nn, whoever is closer; the
BatchNorm fp16/bf16 input-gradient distances are tallied (issue 26 item 9).

The half-precision BatchNorm samples run twice: the module converted with
.to(dtype) as test_modules does (fp16 running statistics: torch's path, the
library takes float32 vectors) and with float32 parameters and a half input
(mixed precision, the library's path). Each case counts the library calls
it made (a wrapper around the extension's entry points), so a case that
silently fell back is visible in the summary.

Exit 77 without PyTorch or a GPU; 1 when any case fails. Prints
"N passed, N failed, N skipped" last.
"""
from __future__ import annotations

import collections
import copy
import inspect
import io
import os
import pickle
import sys
import tempfile
import traceback
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "common"))
from torch_prologue import load  # noqa: E402

torch, F, fn = load(ROOT)
from torch import nn  # noqa: E402

import fusednorm.torch as ft  # noqa: E402
from fusednorm.torch import modules as M  # noqa: E402

try:
    from torch.testing._internal.common_modules import ModuleErrorEnum, module_db
except Exception as e:  # noqa: BLE001 - module_db needs expecttest (a test-only dependency of torch)
    print(f"SKIP: torch.testing._internal.common_modules is not importable ({type(e).__name__}: {e})")
    sys.exit(77)

DEV = torch.device("cuda")
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
EPS = {torch.float32: torch.finfo(torch.float32).eps, torch.float16: torch.finfo(torch.float16).eps,
       torch.bfloat16: torch.finfo(torch.bfloat16).eps}
NAMES = {"nn.LayerNorm": (ft.LayerNorm, nn.LayerNorm), "nn.RMSNorm": (ft.RMSNorm, nn.RMSNorm),
         "nn.BatchNorm1d": (ft.BatchNorm1d, nn.BatchNorm1d), "nn.BatchNorm2d": (ft.BatchNorm2d, nn.BatchNorm2d),
         "nn.BatchNorm3d": (ft.BatchNorm3d, nn.BatchNorm3d), "nn.Linear": (ft.Linear, nn.Linear),
         "nn.GroupNorm": (ft.GroupNorm, nn.GroupNorm)}
BN_NAMES = ("nn.BatchNorm1d", "nn.BatchNorm2d", "nn.BatchNorm3d")

# ---- library call counting ------------------------------------------------------

CALLS = collections.Counter()


def _counting(name, f):
    def wrapper(*args):
        y = f(*args)
        if y is not None:
            CALLS[name] += 1
        return y
    return wrapper


if ft.ops_available():
    M._ext_norm = _counting("norm", M._ext_norm)
    M._ext_bn = _counting("bn", M._ext_bn)
    M._ext_linear = _counting("linear", M._ext_linear)
    # GroupNorm has no eager entry: its module calls the registered op
    # whenever groupnorm._lib_takes answers True.
    from fusednorm.torch import groupnorm as _G
    _takes = _G._lib_takes

    def _gn_takes(*args):
        ok = _takes(*args)
        if ok:
            CALLS["groupnorm"] += 1
        return ok
    _G._lib_takes = _gn_takes

# ---- results --------------------------------------------------------------------

RESULTS = []            # (case, status, detail)
LIB_CASES = collections.Counter()
BN_DX = []              # (case, err ours, err torch) for half-precision BatchNorm dx


class Skip(Exception):
    pass


def run_case(name, fnc):
    before = sum(CALLS.values())
    try:
        fnc()
        RESULTS.append((name, "pass", ""))
    except Skip as e:
        RESULTS.append((name, "skip", str(e)))
    except Exception as e:  # noqa: BLE001 - every case reported
        tb = traceback.format_exc().strip().splitlines()
        RESULTS.append((name, "FAIL", f"{type(e).__name__}: {str(e)[:400]} [{tb[-3].strip() if len(tb) > 2 else ''}]"))
    if sum(CALLS.values()) > before:
        LIB_CASES[name.split(" ")[0]] += 1


# ---- helpers ----------------------------------------------------------------------

def tree_map(obj, f):
    if isinstance(obj, (tuple, list)):
        return type(obj)(tree_map(o, f) for o in obj)
    if isinstance(obj, dict):
        return {k: tree_map(v, f) for k, v in obj.items()}
    if isinstance(obj, torch.Tensor):
        return f(obj)
    return obj


def tensors(obj):
    out = []
    tree_map(obj, lambda t: out.append(t) or t)
    return out


def fresh(args, kwargs, dtype=None, requires_grad=None):
    def f(t):
        u = t.detach().clone()
        if dtype is not None and u.is_floating_point():
            u = u.to(dtype)
        u.requires_grad_(t.requires_grad if requires_grad is None else (requires_grad and u.is_floating_point()))
        return u
    return tree_map(args, f), tree_map(kwargs, f)


def max_err(a, b):
    if a is None or b is None:
        raise AssertionError(f"a gradient is None (ours {a is None}, reference {b is None})")
    if a.numel() == 0:
        return 0.0
    d = (a.double() - b.double()).abs()
    if torch.isnan(d).any():
        return float("inf")
    return d.max().item()


def closeness(ours, theirs, ref64, dtype, what):
    """ours no further from the float64 reference than max(2x torch's
    distance, 8 eps scale); shapes and dtypes equal to torch's."""
    if tuple(ours.shape) != tuple(theirs.shape):
        raise AssertionError(f"{what}: shape {tuple(ours.shape)} vs torch {tuple(theirs.shape)}")
    if ours.dtype != theirs.dtype:
        raise AssertionError(f"{what}: dtype {ours.dtype} vs torch {theirs.dtype}")
    if ours.numel() == 0:
        return 0.0, 0.0
    e_o, e_t = max_err(ours, ref64), max_err(theirs, ref64)
    scale = max(ref64.double().abs().max().item(), 1e-3)
    bound = max(2 * e_t, 8 * EPS[dtype] * scale)
    if not e_o <= bound:
        raise AssertionError(f"{what}: |ours - f64| {e_o:.3g} > bound {bound:.3g} (|torch - f64| {e_t:.3g}, "
                             f"scale {scale:.3g}, {dtype})")
    return e_o, e_t


def same_format(a, b, what):
    for fmt in (torch.channels_last, torch.channels_last_3d):
        try:
            ia, ib = a.is_contiguous(memory_format=fmt), b.is_contiguous(memory_format=fmt)
        except RuntimeError:
            continue
        if a.numel() and a.dim() == {torch.channels_last: 4, torch.channels_last_3d: 5}[fmt] and ia != ib:
            raise AssertionError(f"{what}: {fmt} ours {ia}, torch {ib} (strides {a.stride()} vs {b.stride()})")
    if a.is_contiguous() != b.is_contiguous():
        raise AssertionError(f"{what}: contiguous ours {a.is_contiguous()}, torch {b.is_contiguous()}")


def twins(name, cargs, ckwargs, dtype, mixed, training, sync=False):
    """(ours, torch's, torch's float64 copy), same parameters and buffers."""
    ocls, tcls = NAMES[name]
    if sync:
        ocls, tcls = ft.SyncBatchNorm, nn.SyncBatchNorm
    torch.manual_seed(0)
    tm = tcls(*cargs, **ckwargs)
    with torch.no_grad():  # parameters away from their init values, the same in all three
        for p in tm.parameters():
            p.copy_(torch.rand_like(p) + 0.5 if p.dim() == 1 and "weight" in _pname(tm, p) else torch.randn_like(p))
    om = ocls(*cargs, **ckwargs)
    om.load_state_dict(tm.state_dict())
    r64 = copy.deepcopy(tm).to(DEV).double()
    pdt = torch.float32 if mixed else dtype
    tm, om = tm.to(DEV).to(pdt), om.to(DEV).to(pdt)
    for m in (tm, om, r64):
        m.train(training)
    return om, tm, r64


def _pname(m, p):
    for n, q in m.named_parameters():
        if q is p:
            return n
    return ""


def call(m, args, kwargs):
    return m(*args, **kwargs)


def grads_of(out, inputs, gout):
    diff = [t for t in inputs if t.requires_grad]
    if not out.requires_grad or not diff:
        return []
    return list(torch.autograd.grad(out, diff, gout, allow_unused=True))


def samples(info, dtype, training, requires_grad=True):
    return info.module_inputs_func(info, device=DEV, dtype=dtype, requires_grad=requires_grad, training=training)


# ---- per-sample checks ----------------------------------------------------------------

def check_parity(name, info, si, sample, dtype, training, mixed, sync):
    cargs, ckw = sample.constructor_input.args, sample.constructor_input.kwargs
    fa, fk = sample.forward_input.args, sample.forward_input.kwargs
    om, tm, r64 = twins(name, cargs, ckw, dtype, mixed, training, sync)
    (a1, k1), (a2, k2) = fresh(fa, fk), fresh(fa, fk)
    a3, k3 = fresh(fa, fk, torch.float64)
    y1, y2, y3 = call(om, a1, k1), call(tm, a2, k2), call(r64, a3, k3)
    closeness(y1, y2, y3, dtype, "forward y")
    same_format(y1, y2, "forward y")
    if y2.requires_grad:
        if y1.grad_fn is None:
            raise AssertionError("output has no grad_fn where torch's has one")
        g = torch.randn_like(y3)
        ins1 = tensors((a1, k1)) + list(om.parameters())
        ins2 = tensors((a2, k2)) + list(tm.parameters())
        ins3 = tensors((a3, k3)) + list(r64.parameters())
        g1 = grads_of(y1, ins1, g.to(y1.dtype))
        g2 = grads_of(y2, ins2, g.to(y2.dtype))
        g3 = grads_of(y3, ins3, g)
        if len(g1) != len(g2):
            raise AssertionError(f"{len(g1)} gradients vs torch's {len(g2)}")
        for i, (u, v, w) in enumerate(zip(g1, g2, g3)):
            if (u is None) != (v is None):
                raise AssertionError(f"gradient {i}: ours None {u is None}, torch None {v is None}")
            if u is None:
                continue
            e_o, e_t = closeness(u, v, w, dtype, f"gradient {i}")
            if i == 0:
                same_format(u, v, "input gradient")
                if name in BN_NAMES and dtype != torch.float32 and mixed:
                    BN_DX.append((f"{name} {sample.desc} {dtype}", e_o, e_t))
    if training and name in BN_NAMES:
        for buf in ("running_mean", "running_var"):
            b1, b2, b3 = getattr(om, buf), getattr(tm, buf), getattr(r64, buf)
            if (b1 is None) != (b2 is None):
                raise AssertionError(f"{buf}: None ours {b1 is None}, torch {b2 is None}")
            if b1 is not None:
                closeness(b1, b2, b3, dtype if not mixed else torch.float32, buf)
        if om.num_batches_tracked is not None and om.num_batches_tracked.item() != tm.num_batches_tracked.item():
            raise AssertionError(f"num_batches_tracked {om.num_batches_tracked.item()} vs "
                                 f"{tm.num_batches_tracked.item()}")


def check_gradgrad(name, info, sample, training, sync):
    cargs, ckw = sample.constructor_input.args, sample.constructor_input.kwargs
    fa, fk = sample.forward_input.args, sample.forward_input.kwargs
    om, tm, r64 = twins(name, cargs, ckw, torch.float32, False, training, sync)
    results = []
    for m, dt in ((om, torch.float32), (tm, torch.float32), (r64, torch.float64)):
        a, k = fresh(fa, fk, dt)
        ins = [t for t in tensors((a, k)) + list(m.parameters()) if t.requires_grad]
        y = call(m, a, k)
        if not y.requires_grad or not ins:
            raise Skip("no differentiable output in this mode")
        gen = torch.Generator(device=DEV).manual_seed(1)
        g = torch.randn(y.shape, device=DEV, dtype=torch.float64, generator=gen).to(dt)
        first = torch.autograd.grad(y, ins, g, create_graph=True, allow_unused=True)
        if all(f is None or f.numel() == 0 for f in first):
            raise Skip("zero-element sample: no second-order values")
        s = sum((f.double() * torch.randn(f.shape, device=DEV, dtype=torch.float64, generator=gen)).sum()
                for f in first if f is not None)
        if not isinstance(s, torch.Tensor) or not s.requires_grad:
            raise AssertionError(f"the first-order gradient has no graph ({type(m).__module__})")
        second = torch.autograd.grad(s, ins, allow_unused=True)
        results.append((first, second))
    (f1, s1), (f2, s2), (f3, s3) = results
    for i, (u, v, w) in enumerate(zip(s1, s2, s3)):
        if (u is None) != (v is None):
            raise AssertionError(f"second-order gradient {i}: ours None {u is None}, torch None {v is None}")
        if u is not None:
            closeness(u, v, w, torch.float32, f"second-order gradient {i}")


def check_noncontig(name, info, sample, dtype, training, mixed, sync):
    cargs, ckw = sample.constructor_input.args, sample.constructor_input.kwargs
    fa, fk = sample.forward_input.args, sample.forward_input.kwargs
    if not any(t.dim() > 0 for t in tensors((fa, fk))):
        raise Skip("no input that can be non-contiguous")
    om, _, _ = twins(name, cargs, ckw, dtype, mixed, training, sync)
    om2 = copy.deepcopy(om)

    def nc(t):
        if t.dim() == 0:
            return t
        u = torch.repeat_interleave(t.detach(), 2, dim=-1)[..., ::2]
        return u.requires_grad_(t.requires_grad)
    a1, k1 = fresh(fa, fk)
    a2, k2 = tree_map(fresh(fa, fk)[0], nc), tree_map(fresh(fa, fk)[1], nc)
    y1, y2 = call(om, a1, k1), call(om2, a2, k2)
    # float32: test_modules' tolerances; half precision (which test_modules does
    # not run): 8 units of the dtype's epsilon, relative and absolute
    tol = {} if dtype == torch.float32 else dict(rtol=8 * EPS[dtype], atol=8 * EPS[dtype])
    torch.testing.assert_close(y2, y1, msg=lambda m: f"non-contiguous input: {m}", **tol)
    if y1.requires_grad:
        g = torch.randn_like(y1)
        g2 = nc(g)
        i1 = tensors((a1, k1)) + list(om.parameters())
        i2 = tensors((a2, k2)) + list(om2.parameters())
        for u, v in zip(grads_of(y1, i1, g), grads_of(y2, i2, g2)):
            if u is not None:
                torch.testing.assert_close(v, u, **(dict(atol=1e-4, rtol=0) if dtype == torch.float32 else tol))


# Modules whose channels-last output deliberately differs from torch's CUDA
# output (see check_memformat).
KEEPS_INPUT_FORMAT = {"nn.GroupNorm"}


def check_memformat(name, info, sample, dtype, training, mixed, sync):
    cargs, ckw = sample.constructor_input.args, sample.constructor_input.kwargs
    fa, fk = sample.forward_input.args, sample.forward_input.kwargs
    xs = tensors((fa, fk))
    if not xs or xs[0].dim() not in (4, 5):
        raise Skip("no 4-D or 5-D input")
    fmt = torch.channels_last if xs[0].dim() == 4 else torch.channels_last_3d
    om, tm, r64 = twins(name, cargs, ckw, dtype, mixed, training, sync)
    om_c = copy.deepcopy(om)

    def cl(t):
        return t.detach().clone().to(memory_format=fmt).requires_grad_(t.requires_grad) if t.dim() in (4, 5) else t
    (a0, k0) = fresh(fa, fk)
    (a1, k1) = tree_map(fresh(fa, fk)[0], cl), tree_map(fresh(fa, fk)[1], cl)
    (a2, k2) = tree_map(fresh(fa, fk)[0], cl), tree_map(fresh(fa, fk)[1], cl)
    y0 = call(om_c, a0, k0)
    y1, y2 = call(om, a1, k1), call(tm, a2, k2)
    # GroupNorm keeps a channels-last input's layout in y and dx, as
    # torch's own group_norm does on the CPU (and BatchNorm on CUDA);
    # torch's CUDA group_norm returns contiguous tensors, which would steer
    # the next convolution back to NCHW. Ours is held to the input's layout.
    keeps = name in KEEPS_INPUT_FORMAT
    x_cl = tensors((a1, k1))[0]
    same_format(y1, torch.empty_like(x_cl) if keeps else y2, "channels-last output")
    # test_modules' tolerances for float32; half precision (not in
    # test_modules): 8 units of the dtype's epsilon (torch.nn's own fp16
    # BatchNorm3d differs by 4.6e-5 between the layouts on the H100)
    tol = dict(atol=3e-3, rtol=7e-3) if dtype == torch.float32 else dict(atol=8 * EPS[dtype], rtol=8 * EPS[dtype])
    torch.testing.assert_close(y1, y0, **tol)
    if y1.requires_grad and training:
        g = torch.rand_like(y2)
        gi1 = torch.autograd.grad(y1, [t for t in tensors((a1, k1)) if t.requires_grad], g.to(y1.dtype))
        gi2 = torch.autograd.grad(y2, [t for t in tensors((a2, k2)) if t.requires_grad], g)
        for u, v in zip(gi1, gi2):
            same_format(u, torch.empty_like(u, memory_format=fmt) if keeps else v, "channels-last input gradient")


def check_save_load(name, info, sample, dtype, training, mixed, sync):
    cargs, ckw = sample.constructor_input.args, sample.constructor_input.kwargs
    fa, fk = sample.forward_input.args, sample.forward_input.kwargs
    om, _, _ = twins(name, cargs, ckw, dtype, mixed, training, sync)
    om.eval()  # the running statistics stay put, so outputs compare
    a, k = fresh(fa, fk, requires_grad=False)
    sd = om.state_dict()
    with torch.no_grad():
        y = call(om, a, k)
        with tempfile.TemporaryFile() as f:
            torch.save(om, f)
            f.seek(0)
            m2 = torch.load(f, weights_only=False)
            if type(m2) is not type(om):
                raise AssertionError(f"loaded a {type(m2)}")
            torch.testing.assert_close(call(m2, a, k), y, rtol=0, atol=0)
        with tempfile.TemporaryFile() as f:
            torch.save(sd, f)
            f.seek(0)
            torch.testing.assert_close(torch.load(f), sd)
            f.seek(0)
            torch.testing.assert_close(torch.load(f, weights_only=True), sd)
        m3 = pickle.loads(pickle.dumps(om))
        torch.testing.assert_close(call(m3, a, k), y, rtol=0, atol=0)
        torch.testing.assert_close(call(copy.deepcopy(om), a, k), y, rtol=0, atol=0)


def check_repr(name, sample, sync):
    cargs, ckw = sample.constructor_input.args, sample.constructor_input.kwargs
    ocls, tcls = (ft.SyncBatchNorm, nn.SyncBatchNorm) if sync else NAMES[name]
    a, b = repr(ocls(*cargs, **ckw)), repr(tcls(*cargs, **ckw))
    if a != b:
        raise AssertionError(f"repr {a!r} vs torch's {b!r}")
    str(ocls(*cargs, **ckw))


def check_factory(name, sample, dtype, sync):
    cargs, ckw = sample.constructor_input.args, dict(sample.constructor_input.kwargs)
    ocls = ft.SyncBatchNorm if sync else NAMES[name][0]
    m = ocls(*cargs, **ckw, device=DEV, dtype=dtype)
    for n, t in list(m.named_parameters()) + list(m.named_buffers()):
        if t.device.type != DEV.type or (t.is_floating_point() and t.dtype != dtype):
            raise AssertionError(f"{n} on {t.device} / {t.dtype}")


def check_to(name, sample, dtype, training, sync):
    cargs, ckw = sample.constructor_input.args, sample.constructor_input.kwargs
    fa, fk = sample.forward_input.args, sample.forward_input.kwargs
    ocls, tcls = (ft.SyncBatchNorm, nn.SyncBatchNorm) if sync else NAMES[name]
    m = ocls(*cargs, **ckw).to(DEV).to(dtype)
    m.train(training)
    a, k = fresh(fa, fk, requires_grad=False)
    m(*a, **k)
    if not sync:  # torch's SyncBatchNorm refuses CPU input
        m.cpu()
        ac, kc = tree_map(a, lambda t: t.cpu()), tree_map(k, lambda t: t.cpu())
        t_ref = tcls(*cargs, **ckw).to(dtype)
        t_ref.load_state_dict(m.state_dict())
        t_ref.train(training)
        with torch.no_grad():
            torch.testing.assert_close(m(*ac, **kc), t_ref(*ac, **kc), rtol=0, atol=0)
        m.to(DEV)
        m(*a, **k)
    for p in list(m.parameters()) + list(m.buffers()):
        if p.device.type != DEV.type:
            raise AssertionError("a tensor left behind by .to(cuda)")
    for swap in (False, True):
        torch.__future__.set_swap_module_params_on_conversion(swap)
        try:
            with torch.device("meta"):
                mm = ocls(*cargs, **ckw)
            mm.to_empty(device=DEV)
            if not all(isinstance(p, nn.Parameter) and p.device.type == DEV.type for p in mm.parameters()):
                raise AssertionError(f"to_empty (swap={swap}) left a parameter off the device")
        finally:
            torch.__future__.set_swap_module_params_on_conversion(False)


def check_errors(name, info, dtype, training, sync):
    ocls, tcls = (ft.SyncBatchNorm, nn.SyncBatchNorm) if sync else NAMES[name]
    n = 0
    for err in info.module_error_inputs_func(info, device=DEV, dtype=dtype, requires_grad=False, training=training):
        mi = err.module_error_input
        c_args, c_kw = mi.constructor_input.args, mi.constructor_input.kwargs
        if err.error_on == ModuleErrorEnum.CONSTRUCTION_ERROR:
            try:
                ocls(*c_args, **c_kw)
            except err.error_type as e:
                import re
                if not re.search(err.error_regex, str(e)):
                    raise AssertionError(f"error {str(e)!r} does not match {err.error_regex!r}")
            else:
                raise AssertionError(f"no {err.error_type.__name__} at construction")
        else:
            m = ocls(*c_args, **c_kw).to(DEV).to(dtype)
            m.train(training)
            try:
                m(*mi.forward_input.args, **mi.forward_input.kwargs)
            except err.error_type as e:
                import re
                if not re.search(err.error_regex, str(e)):
                    raise AssertionError(f"error {str(e)!r} does not match {err.error_regex!r}")
            except Exception as e:  # noqa: BLE001
                raise AssertionError(f"{type(e).__name__} ({e}) where torch raises {err.error_type.__name__}")
            else:
                raise AssertionError(f"no {err.error_type.__name__} at forward")
        n += 1
    if n == 0:
        raise Skip("no error inputs in this mode")


def check_autocast(name, sample, dtype, training, sync):
    """The module in float32 (as under AMP), input float32, autocast to dtype."""
    cargs, ckw = sample.constructor_input.args, sample.constructor_input.kwargs
    fa, fk = sample.forward_input.args, sample.forward_input.kwargs
    om, tm, r64 = twins(name, cargs, ckw, torch.float32, False, training, sync)
    a1, k1 = fresh(fa, fk, torch.float32)
    a2, k2 = fresh(fa, fk, torch.float32)
    with torch.autocast("cuda", dtype=dtype):
        y1, y2 = call(om, a1, k1), call(tm, a2, k2)
    if y1.dtype != y2.dtype:
        raise AssertionError(f"autocast({dtype}) output dtype {y1.dtype}, torch's {y2.dtype}")
    a3, k3 = fresh(fa, fk, torch.float64)
    closeness(y1, y2, call(r64, a3, k3), y2.dtype if y2.dtype != torch.float32 else dtype, "autocast y")
    if y2.requires_grad:
        g = torch.randn_like(y2)
        d1 = grads_of(y1, tensors((a1, k1)) + list(om.parameters()), g)
        d2 = grads_of(y2, tensors((a2, k2)) + list(tm.parameters()), g)
        for u, v in zip(d1, d2):
            if (u is None) != (v is None) or (u is not None and u.dtype != v.dtype):
                raise AssertionError("autocast gradient: None or dtype differs from torch's")


# ---- whole-module checks ---------------------------------------------------------------

def check_signature(ocls, tcls):
    so, st = inspect.signature(ocls.__init__), inspect.signature(tcls.__init__)
    po = [p for p in so.parameters.values() if p.kind not in (p.KEYWORD_ONLY, p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    pt = [p for p in st.parameters.values() if p.kind not in (p.KEYWORD_ONLY, p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    if any(p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL) for p in so.parameters.values()):
        raise AssertionError(f"constructor hides its signature: {so}")
    if [(p.name, p.default) for p in po] != [(p.name, p.default) for p in pt]:
        raise AssertionError(f"constructor {so} vs torch's {st}")
    fo, ftt = inspect.signature(ocls.forward), inspect.signature(tcls.forward)
    if list(fo.parameters)[:2] != list(ftt.parameters)[:2]:
        raise AssertionError(f"forward {fo} vs torch's {ftt}")


def check_forward_kwarg(ocls, tcls, cargs, x):
    om, tm = ocls(*cargs).to(DEV), tcls(*cargs).to(DEV)
    om.load_state_dict(tm.state_dict())
    name = list(inspect.signature(tcls.forward).parameters)[1]
    torch.testing.assert_close(om(**{name: x}), tm(**{name: x}))


class Net(nn.Module):
    def __init__(self, rms=True):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.bn3 = nn.BatchNorm1d(8)
        self.ln = nn.LayerNorm(8)
        self.rms = nn.RMSNorm(8) if rms else nn.LayerNorm(8)
        self.fc = nn.Linear(8, 8)
        self.fc2 = nn.Linear(8, 4)

    def forward(self, x):
        h = F.relu(self.bn(self.conv(x)))
        h = h.mean(dim=(2, 3))
        h = self.bn3(h)
        h = self.fc(self.ln(h))
        return self.fc2(F.gelu(self.rms(h), approximate="tanh"))


def check_fx():
    torch.manual_seed(0)
    ref = Net().to(DEV)
    model = ft.convert(copy.deepcopy(ref))
    gm = torch.fx.symbolic_trace(model)
    mods = {n.target for n in gm.graph.nodes if n.op == "call_module"}
    want = {"conv", "bn", "bn3", "ln", "rms", "fc", "fc2"}
    if mods != want:
        raise AssertionError(f"call_module nodes {sorted(mods)}, expected {sorted(want)}")
    x = torch.randn(4, 3, 8, 8, device=DEV)
    model.eval()
    gm.eval()
    torch.testing.assert_close(gm(x), model(x))
    for cls in (ft.LayerNorm, ft.RMSNorm):  # as the traced root: torch's functional form
        torch.fx.symbolic_trace(cls(8))
    torch.fx.symbolic_trace(ft.Linear(8, 4))  # (torch.nn's BatchNorm cannot be the root: _check_input_dim)


def _export(model, x, dynamo):
    import onnx
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            return torch.onnx.export(model, (x,), dynamo=True, verbose=False).model_proto
        f = io.BytesIO()
        torch.onnx.export(model, (x,), f, dynamo=False)
        return onnx.load_from_string(f.getvalue())


def check_onnx(dynamo, rms=True):
    """A converted model exports as torch.nn's does; where torch.nn's own model
    does not export (the TorchScript exporter has no aten::rms_norm), neither
    need ours, and the case says so."""
    import onnx
    torch.manual_seed(0)
    ref = Net(rms).to(DEV).eval()
    model = ft.convert(copy.deepcopy(ref)).eval()
    x = torch.randn(2, 3, 8, 8, device=DEV)
    try:
        _export(copy.deepcopy(ref), x, dynamo)
    except Exception as e:  # noqa: BLE001
        raise Skip(f"torch.nn's model does not export either: {type(e).__name__}: {str(e)[:120]}")
    proto = _export(model, x, dynamo)
    onnx.checker.check_model(proto)
    domains = {n.domain for n in proto.graph.node}
    if not domains <= {"", "ai.onnx"}:
        raise AssertionError(f"non-standard ONNX domains {domains}")
    ops = {n.op_type for n in proto.graph.node}
    if not ({"LayerNormalization", "BatchNormalization"} & ops or "ReduceMean" in ops):
        raise AssertionError(f"no normalization in the exported graph: {sorted(ops)}")
    try:
        import onnxruntime as ort
    except Exception:  # noqa: BLE001 - the structure is checked; values need onnxruntime
        return
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    out = sess.run(None, {sess.get_inputs()[0].name: x.cpu().numpy()})[0]
    torch.testing.assert_close(torch.from_numpy(out), ref(x).detach().cpu(), atol=1e-4, rtol=1e-4)


def check_zero_centered(cls, tcls, dtype):
    torch.manual_seed(0)
    d = 96
    m = cls(d, zero_centered=True).to(DEV)
    if m.weight.abs().max().item() != 0:
        raise AssertionError("zero-centred weight not initialised to 0")
    with torch.no_grad():
        m.weight.normal_(0, 0.3)
    t = tcls(d).to(DEV)
    with torch.no_grad():
        t.weight.copy_(m.weight + 1)
        if getattr(t, "bias", None) is not None:
            t.bias.copy_(m.bias)
    m, t = m.to(dtype), t.to(dtype)
    r64 = copy.deepcopy(t).double()
    x = torch.randn(33, d, device=DEV, dtype=dtype)
    x1, x2, x3 = x.clone().requires_grad_(), x.clone().requires_grad_(), x.double().requires_grad_()
    y1, y2, y3 = m(x1), t(x2), r64(x3)
    closeness(y1, y2, y3, dtype, "zero-centred y")
    g = torch.randn_like(y3)
    y1.backward(g.to(dtype))
    y2.backward(g.to(dtype))
    y3.backward(g)
    closeness(x1.grad, x2.grad, x3.grad, dtype, "zero-centred dx")
    closeness(m.weight.grad, t.weight.grad, r64.weight.grad, dtype, "zero-centred dweight")
    if "zero_centered=True" not in repr(m):
        raise AssertionError(f"repr {m!r}")


# ---- driver ---------------------------------------------------------------------

def main():
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, ops: {ft.ops_available()} "
          f"({ft.ops_unavailable_reason()})", flush=True)
    if not ft.ops_available():
        print("ERROR: the fusednorm.torch C++ ops did not build; every module would be torch's fallback")
        return 1
    # FNORM_CONTRACT_ONLY="nn.LayerNorm,nn.RMSNorm,models": a part of the suite
    # (the whole-model checks are "models"), to run parts side by side
    only = [w for w in os.environ.get("FNORM_CONTRACT_ONLY", "").split(",") if w]
    infos = {i.name: i for i in module_db if i.name in NAMES and (not only or i.name in only)}
    quick = bool(os.environ.get("FNORM_TEST_QUICK"))
    for name, info in infos.items():
        targets = [(name, False)] + ([(name, True)] if name in BN_NAMES else [])
        for _, sync in targets:
            label = ("nn.SyncBatchNorm[" + name[3:] + "]") if sync else name
            for training in (True, False):
                mode = "train" if training else "eval"
                for dtype in DTYPES:
                    dn = str(dtype).replace("torch.", "")
                    variants = [False] + ([True] if name in BN_NAMES and dtype != torch.float32 else [])
                    for si, sample in enumerate(samples(info, dtype, training)):
                        if sample.forward_input is None:
                            continue
                        for mixed in variants:
                            tag = f"{label} {sample.desc or 'default'} {dn}{' fp32-params' if mixed else ''} {mode}"
                            run_case(f"{tag} forward+backward", lambda: check_parity(
                                name, info, si, sample, dtype, training, mixed, sync))
                            run_case(f"{tag} noncontig", lambda: check_noncontig(
                                name, info, sample, dtype, training, mixed, sync))
                            run_case(f"{tag} memformat", lambda: check_memformat(
                                name, info, sample, dtype, training, mixed, sync))
                            if not quick or dtype == torch.float32:
                                run_case(f"{tag} save_load", lambda: check_save_load(
                                    name, info, sample, dtype, training, mixed, sync))
                        tag = f"{label} {sample.desc or 'default'} {dn} {mode}"
                        if dtype == torch.float32:
                            run_case(f"{tag} gradgrad", lambda: check_gradgrad(name, info, sample, training, sync))
                            run_case(f"{tag} repr", lambda: check_repr(name, sample, sync))
                            run_case(f"{tag} to", lambda: check_to(name, sample, dtype, training, sync))
                        else:
                            run_case(f"{tag} autocast", lambda: check_autocast(name, sample, dtype, training, sync))
                        run_case(f"{tag} factory", lambda: check_factory(name, sample, dtype, sync))
                    if info.module_error_inputs_func is not None:
                        run_case(f"{label} {dn} {mode} errors", lambda: check_errors(name, info, dtype, training,
                                                                                     sync))
    if only and "models" not in only:
        infos = {}
    for ocls, tcls, cargs, x in () if only and "models" not in only else ((ft.LayerNorm, nn.LayerNorm, (8,), torch.randn(3, 8, device=DEV)),
                                 (ft.RMSNorm, nn.RMSNorm, (8,), torch.randn(3, 8, device=DEV)),
                                 (ft.BatchNorm1d, nn.BatchNorm1d, (8,), torch.randn(3, 8, device=DEV)),
                                 (ft.BatchNorm2d, nn.BatchNorm2d, (8,), torch.randn(3, 8, 4, 4, device=DEV)),
                                 (ft.BatchNorm3d, nn.BatchNorm3d, (8,), torch.randn(3, 8, 2, 4, 4, device=DEV)),
                                 (ft.SyncBatchNorm, nn.SyncBatchNorm, (8,), torch.randn(3, 8, 4, 4, device=DEV)),
                                 (ft.Linear, nn.Linear, (8, 4), torch.randn(3, 8, device=DEV)),
                                 (ft.GroupNorm, nn.GroupNorm, (2, 8), torch.randn(3, 8, 4, 4, device=DEV))):
        run_case(f"{tcls.__name__} signature", lambda: check_signature(ocls, tcls))
        run_case(f"{tcls.__name__} forward(keyword)", lambda: check_forward_kwarg(ocls, tcls, cargs, x))
    if not only or "models" in only:
        run_case("model fx symbolic_trace", check_fx)
        for dyn in (True, False):
            for rms in (True, False):
                run_case(f"model onnx export ({'dynamo' if dyn else 'torchscript'}, "
                         f"{'RMSNorm' if rms else 'no RMSNorm'})", lambda: check_onnx(dyn, rms))
        for cls, tcls in ((ft.RMSNorm, nn.RMSNorm), (ft.LayerNorm, nn.LayerNorm)):
            for dtype in DTYPES:
                run_case(f"{tcls.__name__} zero_centered {str(dtype)[6:]}",
                         lambda: check_zero_centered(cls, tcls, dtype))

    n = collections.Counter(s for _, s, _ in RESULTS)
    fails = [(c, d) for c, s, d in RESULTS if s == "FAIL"]
    skips = collections.Counter(d for _, s, d in RESULTS if s == "skip")
    for c, d in fails:
        print(f"FAIL {c}: {d}")
    print("skips by reason:", dict(skips))
    print("cases that ran the library, by module:", dict(LIB_CASES), "library calls:", dict(CALLS))
    if BN_DX:
        closer = sum(1 for _, o, t in BN_DX if o < t)
        tie = sum(1 for _, o, t in BN_DX if o == t)
        worst = max(BN_DX, key=lambda r: r[1] / max(r[2], 1e-30))
        print(f"BatchNorm fp16/bf16 dx vs float64: ours closer in {closer}, torch closer in "
              f"{len(BN_DX) - closer - tie}, equal in {tie} of {len(BN_DX)} cases; max |ours-f64| "
              f"{max(r[1] for r in BN_DX):.3g}, max |torch-f64| {max(r[2] for r in BN_DX):.3g}; "
              f"largest ratio ours/torch {worst[1] / max(worst[2], 1e-30):.2f} ({worst[0]})")
        for c, o, t in BN_DX:
            print(f"  bn-dx {c}: ours {o:.3g} torch {t:.3g}")
    print(f"{n['pass']} passed, {n['FAIL']} failed, {n['skip']} skipped")
    return 1 if n["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
