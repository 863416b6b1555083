# SPDX-License-Identifier: Apache-2.0
"""convert(model, fuse=False): libfusednorm's modules swapped into a model.

Swapping changes each module's class in place (its parameters and buffers,
hence optimizer state and state_dict, stay the very same tensors): the
torch.nn classes replaced are LayerNorm, RMSNorm, BatchNorm1d/2d/3d,
SyncBatchNorm and GroupNorm (exact classes only: a user's subclass is left alone), and the
norms of Hugging Face transformers models (LlamaRMSNorm, GemmaRMSNorm, ...:
see hf.py), each in its family's rounding order and checked against its own
forward before it is kept.

nn.Linear is swapped only where an epilogue fuses into it (fuse=True, a
Linear with a bias followed by ReLU / GELU(tanh)): a plain Linear runs the
same cuBLASLt matrix product in torch as in the library, so swapping it buys
nothing (`swap(model)` still swaps every exact class, Linear included).

fuse=True also
- fuses the residual adds of Hugging Face decoder layers (Llama, Mistral,
  Qwen2/3, Phi3, Gemma 1/2/3) with the norms that read them (hf.py);
- fuses GroupNorm -> SiLU (and the time embedding's scale / shift between
  them) in diffusers' ResnetBlock2D and conv_norm_out -> conv_act of its
  encoders, decoders and UNets (groupnorm.py; diffusers' models are not
  FX-traceable);
- rewrites, with torch.fx, `h = a + b` feeding a LayerNorm / RMSNorm into
  one add & norm (pre-norm blocks written with torch.nn), BN -> ReLU into
  BN with the ReLU epilogue, GroupNorm -> SiLU (nn.SiLU, F.silu, Tensor.silu)
  into GroupNorm with the SiLU activation,
  BN -> (+ residual) -> ReLU into BN+Add+ReLU, and Linear (with a bias) ->
  ReLU / GELU(approximate="tanh") into the Linear's epilogue, where the
  module is called once and its output (and the sum's) feeds only the
  activation; the ReLU may be nn.ReLU, F.relu, torch.relu or Tensor.relu (in
  place or not), the add `a + b`, `a += b` or torch.add without alpha. The
  result is a torch.fx.GraphModule sharing the model's modules. A model FX
  cannot trace symbolically (transformers' models) is returned as it is, its
  epilogues unfused, and the report says why.

What convert did is in the returned model's `fusednorm_report`
(hf.ConvertReport: swapped, fused, left with the reason), logged at INFO on
the "fusednorm.torch" logger.
"""
from __future__ import annotations

import logging
import operator

import torch
import torch.nn.functional as F
from torch import fx, nn

from . import groupnorm as G
from . import hf
from . import modules as M

_SWAPS = {
    nn.LayerNorm: M.LayerNorm,
    nn.RMSNorm: M.RMSNorm,
    nn.BatchNorm1d: M.BatchNorm1d,
    nn.BatchNorm2d: M.BatchNorm2d,
    nn.BatchNorm3d: M.BatchNorm3d,
    nn.SyncBatchNorm: M.SyncBatchNorm,
    nn.Linear: M.Linear,
    nn.GroupNorm: G.GroupNorm,
}
_OURS = tuple(set(_SWAPS.values()))
log = logging.getLogger("fusednorm.torch")
_BN = (M.BatchNorm1d, M.BatchNorm2d, M.BatchNorm3d, M.SyncBatchNorm)


def swap(model: nn.Module, linear: bool = True) -> nn.Module:
    """The class swap alone, in place; returns model. linear=False leaves
    nn.Linear modules as they are (normalization only)."""
    for mod in model.modules():
        new = _SWAPS.get(type(mod))
        if new is None or (new is M.Linear and not linear):
            continue
        mod.__class__ = new
        if new in _BN or new is M.Linear or new is G.GroupNorm:
            mod.activation = None
        else:
            mod.zero_centered = False
            mod.round_xhat = False
    return model


class _Tracer(fx.Tracer):
    def is_leaf_module(self, m, qualname):
        return isinstance(m, _OURS) or super().is_leaf_module(m, qualname)


def _is_relu(node, gm) -> bool:
    if node.op == "call_module":
        return isinstance(gm.get_submodule(node.target), nn.ReLU)
    if node.op == "call_function":
        return node.target in (F.relu, torch.relu, torch.relu_) and len(node.args) == 1
    if node.op == "call_method":
        return node.target in ("relu", "relu_") and len(node.args) == 1
    return False


def _gelu_tanh(node, gm) -> bool:
    if node.op == "call_module":
        m = gm.get_submodule(node.target)
        return isinstance(m, nn.GELU) and m.approximate == "tanh"
    if node.op == "call_function" and node.target is F.gelu:
        return len(node.args) == 1 and node.kwargs.get("approximate") == "tanh"
    return False


def _is_silu(node, gm) -> bool:
    if node.op == "call_module":
        return type(gm.get_submodule(node.target)) is nn.SiLU
    if node.op == "call_function":
        return node.target in (F.silu, torch.nn.functional.silu) and len(node.args) == 1
    if node.op == "call_method":
        return node.target in ("silu", "silu_") and len(node.args) == 1
    return False


def _is_add(node) -> bool:
    if node.op == "call_function" and node.target in (operator.add, operator.iadd, torch.add):
        return len(node.args) == 2 and not node.kwargs
    if node.op == "call_method" and node.target in ("add", "add_"):
        return len(node.args) == 2 and not node.kwargs
    return False


def _only_user(node):
    users = list(node.users)
    return users[0] if len(users) == 1 else None


def _single_calls(gm):
    """The call_module nodes of modules called once, with one argument."""
    calls = {}
    for n in gm.graph.nodes:
        if n.op == "call_module":
            calls[n.target] = calls.get(n.target, 0) + 1
    return [n for n in gm.graph.nodes
            if n.op == "call_module" and calls[n.target] == 1 and len(n.args) == 1 and not n.kwargs]


def fuse(model: nn.Module, linear: bool = True) -> fx.GraphModule:
    """The epilogue rewrite of a swapped model (see the module's text).
    linear=False: no nn.Linear is swapped for an epilogue."""
    gm = fx.GraphModule(model, _Tracer().trace(model), model.__class__.__name__)
    fused = 0
    for n in _single_calls(gm):
        bn = gm.get_submodule(n.target)
        user = _only_user(n)
        if user is None:
            continue
        if type(bn) in (nn.Linear, M.Linear) and getattr(bn, "activation", None) is None and bn.bias is not None:
            act = "relu" if _is_relu(user, gm) else ("gelu_tanh" if _gelu_tanh(user, gm) else None)
            if act and (type(bn) is M.Linear or linear):
                bn.__class__ = M.Linear
                bn.activation = act
                user.replace_all_uses_with(n)
                gm.graph.erase_node(user)
                fused += 1
            continue
        if type(bn) is G.GroupNorm and bn.activation is None and _is_silu(user, gm):
            bn.activation = "silu"
            user.replace_all_uses_with(n)
            gm.graph.erase_node(user)
            fused += 1
            continue
        if not isinstance(bn, _BN) or bn.activation is not None:
            continue
        if _is_relu(user, gm):
            bn.activation = "relu"
            user.replace_all_uses_with(n)
            gm.graph.erase_node(user)
            fused += 1
        elif _is_add(user):
            relu = _only_user(user)
            if relu is None or not _is_relu(relu, gm):
                continue
            z = user.args[1] if user.args[0] is n else user.args[0]
            if z is n or not isinstance(z, fx.Node):
                continue
            # The residual may be computed after the BN (torchvision computes the
            # downsample after bn2): the fused call goes where both exist.
            with gm.graph.inserting_before(user):
                new = gm.graph.call_module(n.target, (n.args[0], z))
            bn.activation = "relu"
            relu.replace_all_uses_with(new)
            gm.graph.erase_node(relu)
            gm.graph.erase_node(user)
            gm.graph.erase_node(n)
            fused += 1
    gm.fused_add_norms = _fuse_add_norms(gm)
    gm.graph.lint()
    gm.recompile()
    gm.fused_epilogues = fused
    return gm


def _fuse_add_norms(gm) -> int:
    """`h = a + b` feeding one of this package's LayerNorm / RMSNorm (called
    once, h possibly used again: the residual stream of a pre-norm block)
    becomes `y, h = hf.add_norm(norm, a, b)`: one pass forward and backward.
    In-place adds stay (later uses of a would see another value)."""
    fused = 0
    for n in _single_calls(gm):
        if type(gm.get_submodule(n.target)) not in (M.LayerNorm, M.RMSNorm):
            continue
        add = n.args[0]
        if not isinstance(add, fx.Node) or not _is_add(add) or add.target in (operator.iadd, "add_"):
            continue
        a, b = add.args
        if not (isinstance(a, fx.Node) and isinstance(b, fx.Node)) or a is b:
            continue
        with gm.graph.inserting_before(add):
            mod = gm.graph.get_attr(n.target)
            pair = gm.graph.call_function(hf.add_norm, (mod, b, a))
            y = gm.graph.call_function(operator.getitem, (pair, 0))
            s = gm.graph.call_function(operator.getitem, (pair, 1))
        n.replace_all_uses_with(y)
        add.replace_all_uses_with(s)
        gm.graph.erase_node(n)
        gm.graph.erase_node(add)
        fused += 1
    return fused


def convert(model: nn.Module, fuse: bool = False, linear: bool = True):
    """Swap libfusednorm's modules into `model` in place and return it; with
    fuse=True return the fx.GraphModule with the fused epilogues (the model
    itself where FX cannot trace it). linear=False keeps every nn.Linear
    torch's. The returned model's `fusednorm_report` says what was swapped,
    fused and left."""
    report = hf.ConvertReport()
    before = {n: type(m) for n, m in model.named_modules()}
    swap(model, linear=False)
    for n, m in model.named_modules():
        if type(m) is not before[n]:
            report.swapped.append((n, before[n].__name__, f"fusednorm.torch.{type(m).__name__}"))
    hf.swap_norms(model, report)
    out = model
    if fuse:
        hf.fuse_layers(model, report)
        G.fuse_diffusers(model, report)
        # The FX rewrite only where it has something to fuse (a traced copy of
        # a model with nothing to fuse would only add a GraphModule layer).
        if any(isinstance(m, _BN) or type(m) in (M.LayerNorm, M.RMSNorm) or
               (type(m) is G.GroupNorm and m.activation is None) or
               (type(m) in (nn.Linear, M.Linear) and m.bias is not None) for m in model.modules()):
            try:
                out = globals()["fuse"](model, linear)
            except Exception as e:  # noqa: BLE001 - FX cannot trace it: the model as it is, and why
                msg = str(e).splitlines()[0][:160] if str(e) else ""
                report.notes.append(f"epilogue rewrite not done: torch.fx cannot trace {type(model).__name__} "
                                    f"({type(e).__name__}: {msg})")
            else:
                if out.fused_epilogues:
                    report.fused.append(("", f"{out.fused_epilogues} epilogues (BN+ReLU, BN+Add+ReLU, Linear+act, "
                                             f"GroupNorm+SiLU)"))
                if out.fused_add_norms:
                    report.fused.append(("", f"{out.fused_add_norms} residual adds with the norms that read them"))
        if out is model:
            object.__setattr__(model, "fused_epilogues", 0)
            object.__setattr__(model, "fused_add_norms", 0)
    plain = [n for n, m in model.named_modules() if type(m) is nn.Linear]
    if plain:
        report.notes.append(f"{len(plain)} nn.Linear left as torch's (no epilogue fuses into them; the matrix "
                            f"product would be the same cuBLASLt call)")
    object.__setattr__(out, "fusednorm_report", report)
    log.info("%s", report)
    return out
