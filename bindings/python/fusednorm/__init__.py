# SPDX-License-Identifier: Apache-2.0
"""Python binding of libfusednorm's C ABI (ctypes), in three layers:

- `lib`: the raw functions with their argument types (the low layer);
- `check(status)`: raises FusedNormError with the library's message;
- `Handle`, `TensorDesc`, the op descriptors and size queries, and the
  PyTorch-facing functions (`layer_norm`, `rms_norm`, `norm_backward`,
  `batch_norm_train`, `batch_norm_infer`, `batch_norm_backward`,
  `group_norm`, `group_norm_backward`, `linear`, `linear_backward`): the
  idiomatic layer. These take PyTorch CUDA tensors and run on PyTorch's
  current stream of the input's device.

Layout: `_core` (library loading, prototypes, check, owned handles and
descriptors, shared helpers) and one module per op (`norm`, `batchnorm`,
`groupnorm`, `linear`); this file only re-exports. `fusednorm.torch` holds
the PyTorch modules (nn.LayerNorm & co. replacements). Assigning
`fusednorm.lib` switches every op to another loaded build (bench/ab_norm.py
does).
"""
from __future__ import annotations

import sys
import types

from . import _core
from ._core import *  # noqa: F401,F403
from ._core import (_PROTOTYPES, _Owned, _axis, _desc_of, _dtype_of, _handle_for, _on_device,  # noqa: F401
                    _ptr, _rows, _stat, _tensor_desc, _workspace)
from . import norm, batchnorm, groupnorm, linear  # noqa: E402,F401
from .norm import *  # noqa: F401,F403
from .norm import _norm_desc  # noqa: F401
from .batchnorm import *  # noqa: F401,F403
from .groupnorm import *  # noqa: F401,F403

__all__ = _core.__all__ + norm.__all__ + batchnorm.__all__ + groupnorm.__all__


class _Package(types.ModuleType):
    """`fusednorm.lib = L` reaches the core (where every op looks it up)."""

    def __setattr__(self, name, value):
        if name == "lib":
            _core.lib = value
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
