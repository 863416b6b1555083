# SPDX-License-Identifier: Apache-2.0
"""Hugging Face transformers' norms and decoder layers on libfusednorm's
kernels, found by class name and attributes (transformers is never imported).

Norms. A transformers norm is its own nn.Module class (LlamaRMSNorm,
GemmaRMSNorm, ...), and each family rounds in its own order:
- "llama" (Llama, Mistral, Qwen2/3, Phi3, DeepseekV3, ...): x_hat = x.float()
  * rsqrt(mean(x^2) + eps), rounded to the input's dtype, times the weight in
  the weight's dtype: `weight * x_hat.to(input_dtype)`. The library's
  ROUND_XHAT flag; the output's dtype is the promotion of the two (float32
  for float32 weights and bfloat16 input, as transformers gives).
- "gemma" (Gemma 1/2/3): all in float32, `x_hat * (1 + weight.float())`,
  one rounding to the input's dtype. The ZERO_CENTERED_GAMMA flag.
- "fp32": all in float32, `x_hat * weight`, one rounding (what torch.nn does).
A module is swapped by changing its class to a subclass of its own class
(isinstance, parameters, state_dict and optimizer state stay as they are)
whose forward runs the library and, where the library does not take a call
(a CPU tensor, a dtype mix it refuses, a functorch transform, ...), the
module's own forward. The order is taken from the known classes below, then
checked: before a swap is kept, a copy of the module with random weights
runs the original forward and ours on random input, and ours must equal it
within one rounding of the output's dtype (element by element); a class not
in the table is swapped if one of the orders passes that check. Without a
CUDA device nothing can be checked: known classes are swapped unchecked and
the report says so, others are left.

Decoder layers (convert(fuse=True)). A pre-norm transformer layer computes
`h = residual + attn(norm1(residual)); out = h + mlp(norm2(h))`: the add and
the norm that reads its result are one pass of the library's add & norm
(forward: read x and the residual, write the sum and the normalized output;
backward: the sum's gradient added in). The mid-layer pair is fused in each
layer; the layer's last add is fused with the next layer's input norm (or the
model's final norm): the layer returns the real sum, and the norm output it
computed is handed to the next norm, which takes it only when its input is
that very tensor, unmodified, under the same grad mode and with no
saved-tensor hooks active (activation checkpointing); else it computes as
usual. Layers are taken by class name and their forward's source must have
the expected statements in order; anything else is left, with the reason in
the report.

Under torch.compile the swapped norms and fused layers run transformers' own
code: Inductor fuses each norm with the add before it and the casts around
it into one kernel, forward and backward, and compiled steps with the
library's ops in the graph measured 0.98-0.99x the compiled original
(H100, Llama d2048 / GPT-2, 4 x 1024 tokens): the rule is Inductor's
kernels under torch.compile, the library's in eager mode.
"""
from __future__ import annotations

import copy
import inspect
import logging
import re
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from . import _ops
from . import modules as M

log = logging.getLogger("fusednorm.torch")

_LLAMA, _GEMMA, _FP32 = "llama", "gemma", "fp32"
_ORDER_FLAGS = {_LLAMA: M._ROUND_XHAT, _GEMMA: M._ZERO_CENTERED, _FP32: 0}

# Known RMSNorm classes and their order (transformers 4.4x - 5.x).
_KNOWN_RMS = {
    **{n: _LLAMA for n in ("LlamaRMSNorm", "MistralRMSNorm", "MixtralRMSNorm", "Qwen2RMSNorm", "Qwen2MoeRMSNorm",
                           "Qwen3RMSNorm", "Qwen3MoeRMSNorm", "Phi3RMSNorm", "DeepseekV2RMSNorm",
                           "DeepseekV3RMSNorm", "Ministral3RMSNorm", "SmolLM3RMSNorm", "GraniteRMSNorm",
                           "Glm4RMSNorm", "HeliumRMSNorm", "T5LayerNorm")},
    **{n: _GEMMA for n in ("GemmaRMSNorm", "Gemma2RMSNorm", "Gemma3RMSNorm")},
}
_RMS_ORDERS = (_LLAMA, _GEMMA, _FP32)


@dataclass
class ConvertReport:
    """What convert() did: swapped modules (name, original class, what runs
    now), modules left as they were (name, class, why), fused decoder layers
    (name, what was fused) and notes."""
    swapped: list = field(default_factory=list)
    left: list = field(default_factory=list)
    fused: list = field(default_factory=list)
    notes: list = field(default_factory=list)

    def __str__(self):
        lines = [f"fusednorm.torch.convert: {len(self.swapped)} swapped, {len(self.fused)} fused, "
                 f"{len(self.left)} left"]
        lines += [f"  swapped {n or '<root>'}: {c} -> {w}" for n, c, w in self.swapped]
        lines += [f"  fused   {n or '<root>'}: {w}" for n, w in self.fused]
        lines += [f"  left    {n or '<root>'}: {c}: {w}" for n, c, w in self.left]
        lines += [f"  note: {t}" for t in self.notes]
        return "\n".join(lines)


# ---- the swapped norm ---------------------------------------------------------

class _HFNorm:
    """Mixed in before the transformers class. Per instance: _fn_mode,
    _fn_flags, _fn_eps (the attribute holding epsilon), _fn_promote (the
    output's dtype is the promotion of the weight's and the input's)."""

    _fn_stash = None

    def forward(self, x, *args, **kwargs):
        if args or kwargs or not isinstance(x, Tensor) or M._compiling():
            # under torch.compile, transformers' own code: Inductor fuses the
            # norm with its neighbours, and the compiled steps measured no
            # faster with the library's op in the graph (README, "torch.compile")
            return super().forward(x, *args, **kwargs)
        y = M._take_stash(self, x)  # the previous layer's add & norm computed it already
        if y is not None:
            return y
        y = _norm_call(self, x)
        return super().forward(x) if y is None else y

    def __reduce_ex__(self, protocol):
        # pickled as the transformers class it came from plus the order: the
        # swapped class is made anew on load
        base = type(self).__mro__[2]
        state = {k: v for k, v in self.__dict__.items() if k != "_fn_stash"}
        return (_rebuild, (base,), state)


def _rebuild(base):
    obj = object.__new__(_fused_class(base))
    return obj


_FUSED_CLASSES: dict = {}


def _fused_class(base):
    cls = _FUSED_CLASSES.get(base)
    if cls is None:
        cls = type("Fused" + base.__name__, (_HFNorm, base), {"__module__": __name__})
        _FUSED_CLASSES[base] = cls
    return cls


def _lib_takes(x: Tensor, w, b) -> bool:
    return (M._ON and x.is_cuda and x.dtype in M._FLOATS and x.numel() > 0 and not M._torch_only()
            and not M._dual_level() and M._params_ok(w, b, x))


def _finish(self, y, x):
    w = self._parameters.get("weight")
    if self.__dict__["_fn_promote"] and w is not None and w.dtype is not x.dtype:
        return y.to(torch.promote_types(w.dtype, x.dtype))
    return y


def _norm_call(self, x: Tensor):
    """The library's output for this call, or None (the module's own forward
    runs)."""
    d = self.__dict__
    p = self._parameters
    w, b = p.get("weight"), p.get("bias")
    cols = w.shape[-1] if w is not None else x.shape[-1]
    if x.dim() == 0 or x.shape[-1] != cols or (w is not None and w.dim() != 1) or \
            (b is not None and b.shape != (cols,)):
        return None
    eps = float(getattr(self, d["_fn_eps"]))
    mode, flags = d["_fn_mode"], d["_fn_flags"]
    if M._ON and not M._compiling():
        y = M._ext_norm(x, w, b, (cols,), eps, mode, flags)
        if y is not None:
            return _finish(self, y, x)
    if not _lib_takes(x, w, b):
        return None
    axis = x.dim() - 1
    y = torch.ops.fusednorm.norm(M._rowwise(x, axis), w, b, mode, axis, eps, flags)
    return _finish(self, y, x)


def add_norm(norm: nn.Module, x: Tensor, residual: Tensor):
    """(norm(residual + x), residual + x) through the library's add & norm
    where `norm` is a swapped transformers norm (or one of this package's
    LayerNorm / RMSNorm) and the call is one it takes; else the two steps."""
    d = norm.__dict__
    if isinstance(norm, _HFNorm) and isinstance(x, Tensor) and isinstance(residual, Tensor) \
            and residual.dtype is x.dtype and residual.shape == x.shape:
        p = norm._parameters
        w, b = p.get("weight"), p.get("bias")
        if w is not None and w.dim() == 1 and x.dim() > 0 and x.shape[-1] == w.shape[0] \
                and (b is None or b.shape == w.shape) and _lib_takes(x, w, b):
            eps = float(getattr(norm, d["_fn_eps"]))
            r = M._ext_add_norm(x, residual, w, b, eps, d["_fn_mode"], d["_fn_flags"]) \
                if not M._compiling() else None
            if r is None:
                r = torch.ops.fusednorm.add_norm(x, residual, w, b, d["_fn_mode"], x.dim() - 1, eps, d["_fn_flags"])
            return _finish(norm, r[0], x), r[1]
    elif isinstance(norm, (M.RMSNorm, M.LayerNorm)) and type(norm) in (M.RMSNorm, M.LayerNorm):
        ln = isinstance(norm, M.LayerNorm)
        return M._add_norm(x, residual, M._LAYERNORM if ln else M._RMSNORM, norm.normalized_shape, norm.weight,
                           norm.bias if ln else None, norm.eps, norm._flags())
    s = residual + x
    return norm(s), s


# ---- finding and checking norms -------------------------------------------------

def _eps_attr(mod):
    for a in ("variance_epsilon", "eps", "epsilon"):
        v = mod.__dict__.get(a)
        if isinstance(v, float) or (isinstance(v, int) and not isinstance(v, bool)):
            return a
    return None


def _candidate(mod):
    """(mode, orders to try, eps attribute) for a transformers-style norm
    class, or a reason it is not one."""
    cls = type(mod)
    name = cls.__name__
    if isinstance(mod, (_HFNorm, M.LayerNorm, M.RMSNorm)) or cls.__module__.startswith("torch."):
        return None
    is_rms = name.endswith("RMSNorm") or name == "T5LayerNorm"
    is_ln = not is_rms and name.endswith("LayerNorm")
    if not (is_rms or is_ln):
        return None
    if isinstance(mod, nn.LayerNorm):
        return "a subclass of torch.nn.LayerNorm with its own forward: not recognised"
    w = mod._parameters.get("weight")
    b = mod._parameters.get("bias")
    if not isinstance(w, Tensor) or w.dim() != 1 or w.numel() == 0:
        return "no one-dimensional weight"
    if set(mod._parameters) - {"weight", "bias"} or mod._buffers or mod._modules:
        return "holds more than weight and bias"
    if is_rms and b is not None:
        return "an RMSNorm with a bias"
    eps = _eps_attr(mod)
    if eps is None:
        return "no epsilon attribute (variance_epsilon / eps)"
    if is_rms:
        known = _KNOWN_RMS.get(name)
        orders = (known,) + tuple(o for o in _RMS_ORDERS if o != known) if known else _RMS_ORDERS
        return M._RMSNORM, orders, eps, known is not None
    return M._LAYERNORM, (_FP32, _LLAMA), eps, False


def _install(mod, mode, order, eps_attr):
    base = type(mod)
    mod.__class__ = _fused_class(base)
    d = mod.__dict__
    d["_fn_mode"], d["_fn_flags"], d["_fn_eps"] = mode, _ORDER_FLAGS[order], eps_attr
    d["_fn_order"] = order
    d["_fn_promote"] = order == _LLAMA


def _uninstall(mod, base):
    mod.__class__ = base
    for k in ("_fn_mode", "_fn_flags", "_fn_eps", "_fn_order", "_fn_promote", "_fn_stash", "_fn_next"):
        mod.__dict__.pop(k, None)


_MANT = {torch.float32: (23, -126), torch.float16: (10, -14), torch.bfloat16: (7, -126)}


def ulps(ours: Tensor, ref: Tensor, dtype: torch.dtype) -> Tensor:
    """|ours - ref| in units in the last place of ref in `dtype` (subnormals
    included); both as float64."""
    mant, emin = _MANT[dtype]
    o, r = ours.double(), ref.double()
    e = torch.floor(torch.log2(r.abs().clamp_min(2.0 ** (emin - mant)))).clamp_min(emin)
    return (o - r).abs() / torch.exp2(e - mant)


def _one_rounding(ours: Tensor, ref: Tensor, computed: torch.dtype, roundings: int = 1):
    """(ok, exact fraction): ours within one rounding of ref, element by
    element: one unit in the last place of ref's dtype or of the dtype ours
    was computed in (the input's), whichever is coarser, for each rounding
    the order makes (Llama's two: x_hat, then the product; a unit of x_hat
    is up to two of the product). Float32 on both sides: 16 units (the two
    sums of squares are added in different orders, which moves float32
    results by a few units); NaN never passes."""
    if ours.dtype is not ref.dtype or ours.shape != ref.shape:
        return False, 0.0
    if not (torch.isfinite(ours).all() and torch.isfinite(ref).all()):
        return False, 0.0
    coarse = computed if _MANT[computed][0] < _MANT[ref.dtype][0] else ref.dtype
    bound = 16.0 if coarse is torch.float32 else float(roundings)
    ok = bool((ulps(ours, ref, coarse) <= bound).all())
    return ok, float((ours == ref).double().mean())


def _probe_dtypes(wdtype):
    if wdtype is torch.float32:
        return (torch.float32, torch.bfloat16)  # float32 weights also meet bf16 activations (autocast)
    return (wdtype,)


def _check(mod, mode, order, eps_attr, device):
    """Run a copy with random weights, both forwards, on random input: the
    library's must be within one rounding of the module's own."""
    base = type(mod)
    probe = copy.deepcopy(mod).to(device)
    g = torch.Generator(device=device).manual_seed(0x5eed)
    w = probe._parameters["weight"]
    cols = w.shape[0]
    with torch.no_grad():
        w.copy_(torch.randn(w.shape, generator=g, device=device, dtype=torch.float32).mul_(0.5).add_(
            0.0 if order == _GEMMA else 1.0))
        if probe._parameters.get("bias") is not None:
            probe.bias.copy_(torch.randn(cols, generator=g, device=device, dtype=torch.float32))
        results = []
        for dt in _probe_dtypes(w.dtype):
            x = torch.randn((67, cols), generator=g, device=device, dtype=torch.float32).mul_(2.0).to(dt)
            ref = probe(x)
            _install(probe, mode, order, eps_attr)
            try:
                ours = probe(x)
            except Exception as e:  # noqa: BLE001 - the library refused: this order is not taken
                return False, 0.0, f"{dt}: {type(e).__name__}: {str(e)[:200]}"
            finally:
                _uninstall(probe, base)
            ok, exact = _one_rounding(ours, ref, dt, 2 if order == _LLAMA else 1)
            if not ok:
                return False, exact, f"{dt}: differs by more than one rounding"
            results.append(exact)
    return True, min(results), ""


# ---- decoder layers ---------------------------------------------------------------

_PRE = ("PRE", ("residual=hidden_states", "hidden_states=self.input_layernorm(hidden_states)",
                "=self.self_attn(hidden_states=hidden_states,", "hidden_states=residual+",
                "residual=hidden_states", "hidden_states=self.post_attention_layernorm(hidden_states)",
                "hidden_states=self.mlp(hidden_states)", "hidden_states=residual+", "returnhidden_states"))
_SANDWICH = ("SANDWICH", ("residual=hidden_states", "hidden_states=self.input_layernorm(hidden_states)",
                          "=self.self_attn(hidden_states=hidden_states,",
                          "hidden_states=self.post_attention_layernorm(hidden_states)",
                          "hidden_states=residual+hidden_states", "residual=hidden_states",
                          "hidden_states=self.pre_feedforward_layernorm(hidden_states)",
                          "hidden_states=self.mlp(hidden_states)",
                          "hidden_states=self.post_feedforward_layernorm(hidden_states)",
                          "hidden_states=residual+hidden_states", "returnhidden_states"))
_LAYERS = {
    **{n: _PRE for n in ("LlamaDecoderLayer", "MistralDecoderLayer", "Qwen2DecoderLayer", "Qwen3DecoderLayer",
                         "Phi3DecoderLayer", "GemmaDecoderLayer")},
    **{n: _SANDWICH for n in ("Gemma2DecoderLayer", "Gemma3DecoderLayer")},
}


def _source_matches(cls, pattern) -> bool:
    try:
        src = inspect.getsource(cls.forward)
    except (OSError, TypeError):
        return False
    body = re.sub(r"#[^\n]*", "", src)
    body = re.sub(r"\s+", "", body)
    pos = 0  # (the signature holds none of the statements)
    for stmt in pattern:
        i = body.find(stmt, pos)
        if i < 0:
            return False
        pos = i + len(stmt)
    return True


def _arg_names(cls):
    sig = inspect.signature(cls.forward)
    names = [p.name for p in sig.parameters.values()
             if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return tuple(names[2:])  # after self, hidden_states


def _attn_kwargs(names, args, kwargs):
    if len(args) > len(names):
        raise TypeError(f"{len(args)} positional arguments after hidden_states; the layer takes {len(names)}")
    kw = dict(zip(names, args))
    kw.update(kwargs)
    return kw


def _hand_on(self, m, h):
    """The layer's last add, with the next norm fused in where there is one:
    the norm's output is stashed for the next norm's call on this very sum."""
    nxt = self.__dict__.get("_fn_next")
    if nxt is None or (not M._compiling() and M._saved_tensor_hooks()):
        return h + m
    y, s = add_norm(nxt, m, h)
    nxt._fn_stash = (s, y, None if M._compiling() else s._version, torch.is_grad_enabled())
    return s


class _PreLayer:
    """Llama-style layer: the mid add with post_attention_layernorm, the last
    add with the next input norm."""

    def forward(self, hidden_states, *args, **kwargs):
        if M._compiling():  # Inductor fuses the adds and norms itself (see _HFNorm.forward)
            return super().forward(hidden_states, *args, **kwargs)
        kw = _attn_kwargs(self.__dict__["_fn_args"], args, kwargs)
        residual = hidden_states
        a, _ = self.self_attn(hidden_states=self.input_layernorm(hidden_states), **kw)
        drop = self.__dict__["_fn_drop"]
        if drop:
            a = self.resid_attn_dropout(a)
        x, h = add_norm(self.post_attention_layernorm, a, residual)
        m = self.mlp(x)
        if drop:
            m = self.resid_mlp_dropout(m)
        return _hand_on(self, m, h)


class _SandwichLayer:
    """Gemma 2/3 layer: the mid add with pre_feedforward_layernorm, the last
    add with the next input norm."""

    def forward(self, hidden_states, *args, **kwargs):
        if M._compiling():
            return super().forward(hidden_states, *args, **kwargs)
        kw = _attn_kwargs(self.__dict__["_fn_args"], args, kwargs)
        residual = hidden_states
        a, _ = self.self_attn(hidden_states=self.input_layernorm(hidden_states), **kw)
        a = self.post_attention_layernorm(a)
        x, h = add_norm(self.pre_feedforward_layernorm, a, residual)
        m = self.post_feedforward_layernorm(self.mlp(x))
        return _hand_on(self, m, h)


class _GPT2Block:
    """GPT-2's block: the mid add with ln_2, the last add with the next ln_1
    (or the final ln_f). Cross-attention (encoder_hidden_states) runs the
    block's own forward."""

    def forward(self, hidden_states, *args, **kwargs):
        kw = _attn_kwargs(self.__dict__["_fn_args"], args, kwargs)
        if kw.get("encoder_hidden_states") is not None or M._compiling():
            return super().forward(hidden_states, *args, **kwargs)
        kw.pop("encoder_hidden_states", None)
        kw.pop("encoder_attention_mask", None)
        residual = hidden_states
        a, _ = self.attn(self.ln_1(hidden_states), **kw)
        x, h = add_norm(self.ln_2, a, residual)
        return _hand_on(self, self.mlp(x), h)


_GPT2 = ("GPT2", ("residual=hidden_states", "hidden_states=self.ln_1(hidden_states)",
                  "=self.attn(hidden_states,", "hidden_states=attn_output+residual",
                  "ifencoder_hidden_statesisnotNone:", "residual=hidden_states",
                  "hidden_states=self.ln_2(hidden_states)", "feed_forward_hidden_states=self.mlp(hidden_states)",
                  "hidden_states=residual+feed_forward_hidden_states", "returnhidden_states"))
_LAYERS["GPT2Block"] = _GPT2
_LAYER_MIXIN = {"PRE": _PreLayer, "SANDWICH": _SandwichLayer, "GPT2": _GPT2Block}
_FUSED_KINDS = (_PreLayer, _SandwichLayer, _GPT2Block)
# per kind: (the entry norm, the norm its mid add feeds, the submodules it needs)
_KIND = {
    "PRE": ("input_layernorm", "post_attention_layernorm",
            ("input_layernorm", "self_attn", "mlp", "post_attention_layernorm")),
    "SANDWICH": ("input_layernorm", "pre_feedforward_layernorm",
                 ("input_layernorm", "self_attn", "mlp", "post_attention_layernorm", "pre_feedforward_layernorm",
                  "post_feedforward_layernorm")),
    "GPT2": ("ln_1", "ln_2", ("ln_1", "attn", "ln_2", "mlp")),
}
_FUSED_LAYERS: dict = {}


def _layer_class(base, kind):
    cls = _FUSED_LAYERS.get(base)
    if cls is None:
        mixin = _LAYER_MIXIN[kind]

        def __reduce_ex__(self, protocol, _base=base):
            return (_rebuild_layer, (_base, kind), dict(self.__dict__))

        cls = type("Fused" + base.__name__, (mixin, base), {"__module__": __name__, "__reduce_ex__": __reduce_ex__})
        _FUSED_LAYERS[base] = cls
    return cls


def _rebuild_layer(base, kind):
    return object.__new__(_layer_class(base, kind))


# ---- entry points used by convert ---------------------------------------------------

def swap_norms(model: nn.Module, report: ConvertReport) -> int:
    """Swap the transformers-style norms of `model` (checked as the module's
    text says). Returns how many were swapped."""
    cuda = torch.cuda.is_available()
    verdicts = {}  # (class, weight dtype, cols, eps) -> (order or None, detail)
    n = 0
    for name, mod in model.named_modules():
        c = _candidate(mod)
        if c is None:
            continue
        cls = type(mod)
        if isinstance(c, str):
            report.left.append((name, cls.__name__, c))
            continue
        if not _ops.available():
            report.left.append((name, cls.__name__, f"the library's ops are not in use: {_ops.reason()}"))
            continue
        mode, orders, eps_attr, known = c
        w = mod._parameters["weight"]
        key = (cls, w.dtype, w.shape[0], getattr(mod, eps_attr), bool(mod._parameters.get("bias") is not None))
        verdict = verdicts.get(key)
        if verdict is None:
            if not cuda:
                verdict = (orders[0], "not checked: no CUDA device") if known else \
                    (None, "not a known class, and no CUDA device to check an order on")
            else:
                # A known class keeps its order when it passes; otherwise the
                # passing order with the most bit-identical outputs (two
                # roundings and one can both be within one rounding).
                device = w.device if w.is_cuda else torch.device("cuda", torch.cuda.current_device())
                verdict, why, best = (None, ""), [], -1.0
                for order in orders:
                    ok, exact, msg = _check(mod, mode, order, eps_attr, device)
                    if ok and exact > best:
                        verdict, best = (order, f"checked: {exact:.4%} of a probe's outputs bit-identical"), exact
                        if known and order == orders[0]:
                            break
                    elif not ok:
                        why.append(f"{order}: {msg}")
                if verdict[0] is None:
                    verdict = (None, "no order reproduces its forward within one rounding (" + "; ".join(why) + ")")
            verdicts[key] = verdict
        order, detail = verdict
        if order is None:
            report.left.append((name, cls.__name__, detail))
            continue
        _install(mod, mode, order, eps_attr)
        report.swapped.append((name, cls.__name__, f"library {'RMSNorm' if mode else 'LayerNorm'}, "
                                                   f"{order} order ({detail})"))
        n += 1
    return n


def _fusable_norm(norm) -> bool:
    return isinstance(norm, _HFNorm) or type(norm) in (M.RMSNorm, M.LayerNorm)


def fuse_layers(model: nn.Module, report: ConvertReport) -> int:
    """Fuse the adds of known decoder layers with the norms that read them
    (see the module's text). Returns the number of layers fused."""
    names = {id(m): n for n, m in model.named_modules()}
    fused = []
    for name, mod in model.named_modules():
        kind = _LAYERS.get(type(mod).__name__)
        if kind is None or isinstance(mod, _FUSED_KINDS):
            continue
        cls = type(mod)
        key, pattern = kind
        _, mid, needs = _KIND[key]
        if any(not hasattr(mod, a) for a in needs):
            report.left.append((name, cls.__name__, "decoder layer without the expected submodules"))
            continue
        if not _source_matches(cls, pattern):
            report.left.append((name, cls.__name__, "decoder layer whose forward differs from the known pattern "
                                                    "(not fused)"))
            continue
        if not _fusable_norm(getattr(mod, mid)):
            report.left.append((name, cls.__name__, f"{mid} was not swapped, so its add is not fused"))
            continue
        drop = key == "PRE" and hasattr(mod, "resid_attn_dropout")
        mod.__class__ = _layer_class(cls, key)
        d = mod.__dict__
        d["_fn_args"], d["_fn_drop"], d["_fn_next"] = _arg_names(cls), drop, None
        d["_fn_kind"] = key
        fused.append(mod)
        report.fused.append((name, f"residual add + {mid}"))
    # The last add of each layer with the next norm: layers in a ModuleList,
    # the next one's input norm, the last one's the final `norm` beside the list.
    for pname, parent in model.named_modules():
        for cname, child in parent.named_children():
            if not isinstance(child, nn.ModuleList) or not len(child):
                continue
            layers = list(child)
            if not all(isinstance(m, _FUSED_KINDS) for m in layers):
                continue
            final, fname = None, None
            for a in ("norm", "ln_f", "final_layernorm"):
                if isinstance(getattr(parent, a, None), nn.Module):
                    final, fname = getattr(parent, a), a
                    break
            for i, layer in enumerate(layers):
                if i + 1 < len(layers):
                    entry = _KIND[layers[i + 1].__dict__["_fn_kind"]][0]
                    nxt, what = getattr(layers[i + 1], entry), f"the next layer's {entry}"
                else:
                    nxt, what = final, f"{(pname + '.') if pname else ''}{fname}"
                if nxt is not None and _fusable_norm(nxt):
                    layer.__dict__["_fn_next"] = nxt  # not a submodule: no state_dict entry
                    report.fused.append((names.get(id(layer), ""), f"residual add + {what}"))
    return len(fused)
