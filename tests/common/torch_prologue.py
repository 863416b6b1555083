# SPDX-License-Identifier: Apache-2.0
"""The start every PyTorch-based GPU test shares: exit 77 (a skip, with the
reason) without PyTorch or a CUDA device, 99 when libfusednorm cannot be
loaded (set FNORM_LIB); otherwise return (torch, torch.nn.functional, the
fusednorm binding)."""
import os
import sys


def load(root: str):
    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:  # noqa: BLE001 - any import failure means: no PyTorch here
        print(f"SKIP: PyTorch is not importable ({type(e).__name__}: {e})")
        sys.exit(77)
    if not torch.cuda.is_available():
        print("SKIP: torch.cuda.is_available() is False (no GPU or no driver)")
        sys.exit(77)
    sys.path.insert(0, os.path.join(root, "bindings", "python"))
    try:
        import fusednorm as fn
    except (OSError, AttributeError) as e:  # not found, or a library without this ABI's symbols
        print(f"ERROR: cannot load libfusednorm (set FNORM_LIB): {e}")
        sys.exit(99)
    return torch, F, fn
