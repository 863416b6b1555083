# SPDX-License-Identifier: Apache-2.0
"""The Python binding of the fully-connected layer (fusednorm.linear): its
enums and ctypes prototypes match api/fusednorm.h, the descriptor round-trips
and errors name the argument. Needs no GPU: the size queries (which take a
handle) skip when Handle() reports NO_DEVICE."""
import ctypes
import os
import re
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))

import fusednorm as fn  # noqa: E402
from fusednorm import linear as fl  # noqa: E402

with open(os.path.join(ROOT, "api", "fusednorm.h")) as f:
    HEADER_CODE = re.sub(r"/\*.*?\*/", " ", f.read(), flags=re.S)


def header_enum(typedef_name):
    m = re.search(rf"typedef\s+enum\s+{typedef_name}\s*\{{(.*?)\}}", HEADER_CODE, re.S)
    assert m, f"enum {typedef_name} not in the header"
    items = re.findall(r"\b(FNORM_\w+)\s*=\s*(\d+)", m.group(1))
    prefix = os.path.commonprefix([n for n, _ in items])
    prefix = prefix[:prefix.rfind("_") + 1]
    return {n[len(prefix):]: int(v) for n, v in items}


def header_functions():
    out = {}
    for m in re.finditer(r"FNORM_API\s+([^;{]*?)\b(fnorm_\w+)\s*\(([^)]*)\)\s*;", HEADER_CODE, re.S):
        params = " ".join(m.group(3).split())
        out[m.group(2)] = (m.group(1).strip(), [] if params in ("", "void") else [p.strip() for p in params.split(",")])
    return out


OPAQUE = ("fnorm_handle_t", "fnorm_tensor_desc_t", "fnorm_linear_desc_t", "fnorm_stream_t")
INT_SIZES = {"uint32_t": 4, "int32_t": 4, "size_t": ctypes.sizeof(ctypes.c_size_t), "fnorm_status_t": 4,
             "fnorm_linear_epilogue_t": 4, "fnorm_linear_weight_layout_t": 4}


def c_kind(param):
    if "*" in param or any(re.search(rf"\b{t}\b", param) for t in OPAQUE):
        return ("ptr",)
    for t, size in INT_SIZES.items():
        if re.search(rf"\b{t}\b", param):
            return ("int", size)
    raise AssertionError(f"unknown C parameter type: {param!r}")


def ctypes_kind(t):
    if t in (ctypes.c_void_p, ctypes.c_char_p) or issubclass(t, ctypes._Pointer):
        return ("ptr",)
    return ("int", ctypes.sizeof(t))


class EnumsAndPrototypes(unittest.TestCase):
    def test_enums_match_header(self):
        self.assertEqual(header_enum("fnorm_linear_epilogue"), {e.name: e.value for e in fl.LinearEpilogue})
        self.assertEqual(header_enum("fnorm_linear_weight_layout"), {e.name: e.value for e in fl.WeightLayout})
        self.assertEqual(header_enum("fnorm_linear_flag"), {e.name: e.value for e in fl.LinearFlag})

    def test_prototypes_match_header(self):
        funcs = {k: v for k, v in header_functions().items() if k.startswith("fnorm_linear_")}
        self.assertEqual(len(funcs), 9)
        self.assertEqual(sorted(funcs), sorted(fl._LINEAR_PROTOTYPES))
        for name, (result, params) in funcs.items():
            res, args = fn._PROTOTYPES[name]  # registered in the package's table
            with self.subTest(function=name):
                self.assertEqual(ctypes_kind(res), c_kind(result))
                self.assertEqual(len(args), len(params), f"{name}: arity")
                for i, (p, a) in enumerate(zip(params, args)):
                    self.assertEqual(ctypes_kind(a), c_kind(p), f"{name} parameter {i} ({p})")


class Host(unittest.TestCase):
    def setUp(self):
        try:
            fl.LinearDesc()
        except fn.FusedNormError as e:
            if e.status == fn.Status.NOT_SUPPORTED_BUILD:
                self.skipTest("this build has no cuBLASLt")
            raise

    def test_desc_round_trip(self):
        d = fl.LinearDesc()
        self.assertEqual(d.get(), (fl.LinearEpilogue.NONE, fl.WeightLayout.KN, 0))
        d = fl.LinearDesc(fl.LinearEpilogue.BIAS_GELU, fl.WeightLayout.NK, fl.LinearFlag.ALLOW_TF32)
        self.assertEqual(d.get(), (fl.LinearEpilogue.BIAS_GELU, fl.WeightLayout.NK, 1))

    def test_errors_name_the_argument(self):
        for kwargs, needle in (({"epilogue": 9}, "epilogue"), ({"weight_layout": 5}, "weight_layout"),
                               ({"flags": 8}, "flags")):
            with self.assertRaises(fn.FusedNormError) as cm:
                fl.LinearDesc(**kwargs)
            self.assertEqual(cm.exception.status, fn.Status.BAD_PARAM)
            self.assertIn(needle, str(cm.exception))

    def test_size_queries(self):
        try:
            h = fn.Handle()
        except fn.FusedNormError as e:
            if e.status == fn.Status.NO_DEVICE:
                self.skipTest(f"no CUDA device: {e.message}")
            raise
        d = fl.LinearDesc(fl.LinearEpilogue.BIAS_RELU, fl.WeightLayout.NK)
        y = fn.TensorDesc(fn.DType.FLOAT16, [8192, 1024])
        self.assertEqual(fl.linear_aux_size(h, d, y), 8192 * 1024 // 8)
        x = fn.TensorDesc(fn.DType.FLOAT16, [8192, 784])
        w = fn.TensorDesc(fn.DType.FLOAT16, [1024, 784])
        self.assertGreaterEqual(fl.linear_fwd_workspace_size(h, d, x, w, y), 32 << 20)
        self.assertGreaterEqual(fl.linear_bwd_workspace_size(h, d, x, w, y), (32 << 20) + 8192 * 1024 * 2)
        w_bad = fn.TensorDesc(fn.DType.FLOAT16, [1024, 100])  # k = 100, x has 784
        with self.assertRaises(fn.FusedNormError) as cm:
            fl.linear_fwd_workspace_size(h, d, x, w_bad, y)
        self.assertEqual(cm.exception.status, fn.Status.BAD_PARAM_SHAPE)
        self.assertIn("w_desc", str(cm.exception))


if __name__ == "__main__":
    unittest.main(verbosity=2)
