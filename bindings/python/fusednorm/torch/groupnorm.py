# SPDX-License-Identifier: Apache-2.0
"""GroupNorm on libfusednorm's kernels: `group_norm` (with the SiLU
activation and diffusers' per-sample scale / shift fused in), the drop-in
`GroupNorm` module (a torch.nn.GroupNorm subclass: same parameters,
state_dict keys, constructor and forward), and the diffusers fusions that
convert(fuse=True) applies.

The library takes CUDA tensors of fp32 / fp16 / bf16 in either of its two
layouts (packed channels-first, or channels-last: NHWC / NDHWC) with weight
and bias in x's dtype or float32; any other layout is made contiguous first
and the output is contiguous. y and dx keep x's layout: a channels-last x
gives channels-last y and dx, as torch.nn.GroupNorm does on the CPU (torch's
CUDA group_norm returns contiguous tensors, which steer the next convolution
back to NCHW). Everything else (CPU tensors, other dtypes,
empty tensors, a group count that does not divide C, ONNX export,
TorchScript tracing, functorch transforms, forward-mode AD) runs
torch.nn.functional's composition, as torch.nn does.

Rounding: the library computes in fp32 and rounds y once; torch's
composition `silu(group_norm(x) * (1 + scale) + shift)` in fp16 / bf16 rounds
after each op, so the two differ by about one rounding of the output.
Autocast: group_norm is on autocast's fp32 list (float32 in, float32 out),
and so is this op.

Under torch.compile the registered op `torch.ops.fusednorm.group_norm` is in
the graph (with its fake kernel and autograd).
"""
from __future__ import annotations

import inspect
import re
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import _ops
from . import hf
from . import modules as M

__all__ = ["GroupNorm", "group_norm"]

_ACTS = {None: 0, "silu": 1}  # fnorm_gn_activation_t


def _nc(t: Tensor, x: Tensor) -> Tensor:
    """scale / shift ([N, C] or [N, C, 1, ...]) as [N, C, 1, ...] for x."""
    return t.reshape(x.shape[0], x.shape[1], *([1] * (x.dim() - 2)))


def _torch_group_norm(x, num_groups, weight, bias, eps, act, scale, shift):
    y = F.group_norm(x, num_groups, weight, bias, eps)
    if scale is not None:
        y = y * (1 + _nc(scale, x))
    if shift is not None:
        y = y + _nc(shift, x)
    return F.silu(y) if act else y


def _modulation_ok(t, x) -> bool:
    if t is None:
        return True
    n, c = x.shape[0], x.shape[1]
    shape_ok = tuple(t.shape[:2]) == (n, c) and all(s == 1 for s in t.shape[2:])
    return shape_ok and t.is_cuda and (t.dtype is x.dtype or t.dtype is torch.float32)


def _lib_takes(x, num_groups, weight, bias, eps, scale, shift) -> bool:
    if not (_ops.available() and isinstance(x, Tensor) and x.is_cuda and x.dtype in M._FLOATS
            and 2 <= x.dim() <= 8 and x.numel() > 0 and eps >= 0):
        return False
    if M._torch_only() or M._dual_level():
        return False
    c = x.shape[1]
    if num_groups <= 0 or c % num_groups:
        return False  # torch's error message
    if not M._params_ok(weight, bias, x):
        return False
    if (scale is not None and shift is not None) and scale.dtype is not shift.dtype:
        return False
    return _modulation_ok(scale, x) and _modulation_ok(shift, x)


def group_norm(x: Tensor, num_groups: int, weight: Optional[Tensor] = None, bias: Optional[Tensor] = None,
               eps: float = 1e-5, *, activation: Optional[str] = None, scale: Optional[Tensor] = None,
               shift: Optional[Tensor] = None) -> Tensor:
    """`F.group_norm(x, num_groups, weight, bias, eps)`, then with scale /
    shift (N * C values each, [N, C] or [N, C, 1, ...], any strides)
    `* (1 + scale) + shift`, then with activation="silu" `F.silu`: one pass
    forward, one backward (gradients for x, weight, bias, scale and shift)."""
    if activation not in _ACTS:
        raise ValueError(f"activation must be None or 'silu'; got {activation!r}")
    act = _ACTS[activation]
    if not _lib_takes(x, num_groups, weight, bias, eps, scale, shift):
        return _torch_group_norm(x, num_groups, weight, bias, eps, act, scale, shift)
    return torch.ops.fusednorm.group_norm(x, num_groups, weight, bias, scale, shift, float(eps), act)


class GroupNorm(nn.GroupNorm):
    """torch.nn.GroupNorm on the library's kernels. activation="silu" fuses
    the SiLU that follows (what convert(fuse=True) sets); forward's optional
    scale / shift are the per-sample modulation of `group_norm`."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True, device=None,
                 dtype=None, *, activation: Optional[str] = None):
        super().__init__(num_groups, num_channels, eps, affine, device, dtype)
        if activation not in _ACTS:
            raise ValueError(f"activation must be None or 'silu'; got {activation!r}")
        self.activation = activation

    def extra_repr(self):
        s = super().extra_repr()
        return s + (f", activation={self.activation!r}" if getattr(self, "activation", None) else "")

    def forward(self, input: Tensor, scale: Optional[Tensor] = None, shift: Optional[Tensor] = None) -> Tensor:
        if isinstance(input, M._Proxy):
            args = (input,) if scale is None and shift is None else (input, scale, shift)
            out = M._fx_call(self, args)
            if out is not None:
                return out
        return group_norm(input, self.num_groups, self.weight, self.bias, self.eps,
                          activation=getattr(self, "activation", None), scale=scale, shift=shift)


# ---- diffusers -------------------------------------------------------------------
# diffusers' models are not FX-traceable; their GroupNorm -> SiLU pairs sit in
# two places, fused here when the class's forward is the known code:
# ResnetBlock2D (norm1 -> nonlinearity; norm2 [-> * (1 + scale) + shift] ->
# nonlinearity) and the encoders' / decoders' / UNets' conv_norm_out ->
# conv_act.

def _body(cls) -> Optional[str]:
    try:
        src = inspect.getsource(cls.forward)
    except (OSError, TypeError):
        return None
    return re.sub(r"\s+", "", re.sub(r"#[^\n]*", "", src))


_RESNET = ("hidden_states=input_tensor", "hidden_states=self.norm1(hidden_states)",
           "hidden_states=self.nonlinearity(hidden_states)", "ifself.upsampleisnotNone:",
           "input_tensor=self.upsample(input_tensor)", "hidden_states=self.upsample(hidden_states)",
           "elifself.downsampleisnotNone:", "input_tensor=self.downsample(input_tensor)",
           "hidden_states=self.downsample(hidden_states)", "hidden_states=self.conv1(hidden_states)",
           "ifself.time_emb_projisnotNone:", "ifnotself.skip_time_act:", "temb=self.nonlinearity(temb)",
           "temb=self.time_emb_proj(temb)[:,:,None,None]", 'ifself.time_embedding_norm=="default":',
           "hidden_states=hidden_states+temb", "hidden_states=self.norm2(hidden_states)",
           'elifself.time_embedding_norm=="scale_shift":', "time_scale,time_shift=torch.chunk(temb,2,dim=1)",
           "hidden_states=self.norm2(hidden_states)", "hidden_states=hidden_states*(1+time_scale)+time_shift",
           "else:", "hidden_states=self.norm2(hidden_states)", "hidden_states=self.nonlinearity(hidden_states)",
           "hidden_states=self.dropout(hidden_states)", "hidden_states=self.conv2(hidden_states)",
           "ifself.conv_shortcutisnotNone:", "input_tensor=self.conv_shortcut(input_tensor)",
           "output_tensor=(input_tensor+hidden_states)/self.output_scale_factor", "returnoutput_tensor")


def _gn(norm, x, scale=None, shift=None):
    return group_norm(x, norm.num_groups, norm.weight, norm.bias, norm.eps, activation="silu", scale=scale,
                      shift=shift)


class _ResnetBlock2D:
    """diffusers' ResnetBlock2D.forward with each GroupNorm -> (scale, shift)
    -> SiLU in one call (the statements otherwise as diffusers has them)."""

    def forward(self, input_tensor, temb, *args, **kwargs):
        if args or kwargs:  # diffusers' deprecated `scale` argument: its own code
            return super().forward(input_tensor, temb, *args, **kwargs)
        hidden_states = _gn(self.norm1, input_tensor)
        if self.upsample is not None:
            if hidden_states.shape[0] >= 64:
                input_tensor = input_tensor.contiguous()
                hidden_states = hidden_states.contiguous()
            input_tensor = self.upsample(input_tensor)
            hidden_states = self.upsample(hidden_states)
        elif self.downsample is not None:
            input_tensor = self.downsample(input_tensor)
            hidden_states = self.downsample(hidden_states)
        hidden_states = self.conv1(hidden_states)
        if self.time_emb_proj is not None:
            if not self.skip_time_act:
                temb = self.nonlinearity(temb)
            temb = self.time_emb_proj(temb)[:, :, None, None]
        if self.time_embedding_norm == "default":
            if temb is not None:
                hidden_states = hidden_states + temb
            hidden_states = _gn(self.norm2, hidden_states)
        elif self.time_embedding_norm == "scale_shift":
            if temb is None:
                raise ValueError(f" `temb` should not be None when `time_embedding_norm` is "
                                 f"{self.time_embedding_norm}")
            time_scale, time_shift = torch.chunk(temb, 2, dim=1)
            hidden_states = _gn(self.norm2, hidden_states, time_scale, time_shift)
        else:
            hidden_states = _gn(self.norm2, hidden_states)
        hidden_states = self.dropout(hidden_states)
        hidden_states = self.conv2(hidden_states)
        if self.conv_shortcut is not None:
            if self.training:
                input_tensor = input_tensor.contiguous()
            input_tensor = self.conv_shortcut(input_tensor)
        return (input_tensor + hidden_states) / self.output_scale_factor


_FUSED: dict = {}


def _fused_class(base):
    cls = _FUSED.get(base)
    if cls is None:
        def __reduce_ex__(self, protocol, _base=base):
            return (_rebuild, (_base,), dict(self.__dict__))

        cls = type("Fused" + base.__name__, (_ResnetBlock2D, base),
                   {"__module__": __name__, "__reduce_ex__": __reduce_ex__})
        _FUSED[base] = cls
    return cls


def _rebuild(base):
    return object.__new__(_fused_class(base))


def _silu_module(m) -> bool:
    return type(m) is nn.SiLU


def fuse_diffusers(model: nn.Module, report) -> int:
    """The diffusers fusions (see above) on a model whose nn.GroupNorm were
    swapped; returns how many GroupNorm -> SiLU pairs were fused."""
    fused = 0
    for name, mod in model.named_modules():
        cls = type(mod)
        if cls.__name__ == "ResnetBlock2D" and not isinstance(mod, _ResnetBlock2D):
            if not (type(getattr(mod, "norm1", None)) is GroupNorm and type(getattr(mod, "norm2", None)) is GroupNorm
                    and mod.norm1.activation is None and mod.norm2.activation is None
                    and _silu_module(getattr(mod, "nonlinearity", None))):
                report.left.append((name, cls.__name__, "norms or nonlinearity are not GroupNorm / SiLU (not fused)"))
                continue
            if not hf._source_matches(cls, _RESNET):
                report.left.append((name, cls.__name__, "forward differs from the known ResnetBlock2D (not fused)"))
                continue
            mod.__class__ = _fused_class(cls)
            report.fused.append((name, "norm1 + SiLU, norm2 (+ scale / shift) + SiLU"))
            fused += 2
        elif type(getattr(mod, "conv_norm_out", None)) is GroupNorm and _silu_module(getattr(mod, "conv_act", None)):
            body = _body(cls)
            if body is None or mod.conv_norm_out.activation is not None:
                continue
            # conv_norm_out's output feeds conv_act alone (and conv_act takes nothing else)
            pair = re.search(r"sample=self\.conv_norm_out\(sample(,latent_embeds)?\)sample=self\.conv_act\(sample\)",
                             body)
            if body.count("self.conv_act(") != 1 or pair is None:
                report.left.append((name, cls.__name__, "conv_norm_out -> conv_act not in the known form (not fused)"))
                continue
            mod.conv_norm_out.activation = "silu"
            mod.conv_act = nn.Identity()
            report.fused.append((name, "conv_norm_out + conv_act (SiLU; conv_act is now Identity)"))
            fused += 1
    return fused
