# SPDX-License-Identifier: Apache-2.0
"""Host-side checks of the Python binding's layout decisions (issue 16 item
2: an output the binding allocates must have the layout of the descriptor
the library writes it through) and of the PyTorch drop-in's C ABI table.
Needs no GPU and no PyTorch: tensors are stand-ins with shape and strides.
"""
import os
import re
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))

import fusednorm as fn  # noqa: E402
from fusednorm import _core  # noqa: E402
from fusednorm import batchnorm as _bn  # noqa: E402


class T:
    """A strided tensor's geometry; contiguous() returns a packed copy."""

    def __init__(self, shape, stride=None, copied=False):
        self.shape = tuple(shape)
        if stride is None:
            stride, acc = [], 1
            for s in reversed(self.shape):
                stride.insert(0, acc)
                acc *= s
        self._stride = tuple(stride)
        self.copied = copied

    def stride(self, d=None):
        return self._stride if d is None else self._stride[d]

    def dim(self):
        return len(self.shape)

    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    def contiguous(self):
        return T(self.shape, copied=True)


class RowwiseLayout(unittest.TestCase):
    def kept(self, t, axis=-1):
        return _core._rowwise(t, axis) is t

    def test_packed_and_slices_are_taken_as_they_are(self):
        self.assertTrue(self.kept(T((1000, 17))))
        self.assertTrue(self.kept(T((1000, 12289), (12300, 1))))      # column slice of a wider tensor
        self.assertTrue(self.kept(T((4, 8, 64), (1024, 128, 1))))     # padded rows that collapse
        self.assertTrue(self.kept(T((1, 64), (7, 1))))                 # a size-1 dimension's stride is free
        self.assertTrue(self.kept(T((3, 4, 5)), axis=1))               # two normalized dimensions, packed

    def test_other_layouts_are_copied(self):
        self.assertFalse(self.kept(T((17, 1000), (1, 17))))            # transposed
        self.assertFalse(self.kept(T((1000, 64), (0, 1))))             # expanded rows
        self.assertFalse(self.kept(T((64, 1000), (1000, 2))))          # strided columns
        self.assertFalse(self.kept(T((4, 8, 64), (64, 256, 1))))            # row dimensions that do not collapse
        self.assertFalse(self.kept(T((4, 8, 64), (8 * 70, 70, 1)), axis=1))  # normalized dims not packed
        self.assertFalse(self.kept(T((1000, 64), (32, 1))))            # rows overlapping

    def test_overlaps(self):
        self.assertFalse(_core._overlaps(T((8, 16))))
        self.assertFalse(_core._overlaps(T((8, 16), (32, 1))))
        self.assertTrue(_core._overlaps(T((8, 16), (0, 1))))
        self.assertTrue(_core._overlaps(T((8, 16), (8, 1))))


class BatchNormLayout(unittest.TestCase):
    def kept(self, t):
        return _bn._bn_layout(t) is t

    def test_nchw_and_channels_last_are_taken(self):
        self.assertTrue(self.kept(T((8, 16, 5, 7))))
        n, c, h, w = 8, 16, 5, 7
        self.assertTrue(self.kept(T((n, c, h, w), (h * w * c, 1, w * c, c))))  # NHWC
        self.assertTrue(self.kept(T((n, c, 4, h, w), (4 * h * w * c, 1, h * w * c, w * c, c))))  # NDHWC
        self.assertTrue(self.kept(T((n, c))))

    def test_others_are_copied(self):
        self.assertFalse(self.kept(T((8, 16, 5, 7), (16 * 5 * 8, 5 * 8, 8, 1))))  # padded rows (a slice)
        self.assertFalse(self.kept(T((8, 16, 5, 7), (0, 35, 7, 1))))               # expanded batch
        self.assertFalse(self.kept(T((8, 16), (1, 8))))                            # transposed [N, C]


class DropInAbiTable(unittest.TestCase):
    def test_every_function_the_extension_binds_is_exported_and_typed(self):
        with open(os.path.join(ROOT, "bindings", "python", "fusednorm", "torch", "csrc", "common.hpp")) as f:
            src = f.read()
        m = re.search(r"#define FNORM_TORCH_ABI\(X\)(.*?)\n\n", src, re.S)
        self.assertIsNotNone(m)
        names = re.findall(r"X\((fnorm_\w+)\)", m.group(1))
        self.assertGreater(len(names), 20)
        with open(os.path.join(ROOT, "api", "symbols.txt")) as f:
            exported = set(f.read().split())
        for n in names:
            self.assertIn(n, exported)
            self.assertTrue(hasattr(fn.lib, n), n)  # resolvable in the loaded library


class PackageLayout(unittest.TestCase):
    def test_init_only_reexports(self):
        """Issue 15 item 7: the op code lives in _core and one module per op."""
        with open(os.path.join(ROOT, "bindings", "python", "fusednorm", "__init__.py")) as f:
            src = f.read()
        self.assertNotRegex(src, r"\ndef ")
        self.assertNotIn("ctypes.", src)
        for name in ("layer_norm", "rms_norm", "norm_backward", "batch_norm_train", "batch_norm_infer",
                     "batch_norm_backward", "group_norm", "group_norm_backward", "Handle", "TensorDesc", "NormDesc",
                     "BatchNormDesc", "GroupNormDesc", "check"):
            self.assertTrue(callable(getattr(fn, name)), name)
        self.assertTrue(callable(fn.linear.linear))

    def test_assigning_lib_reaches_the_core(self):
        old = fn.lib
        try:
            fn.lib = old
            self.assertIs(_core.lib, old)
        finally:
            fn.lib = old


if __name__ == "__main__":
    unittest.main(verbosity=2)
