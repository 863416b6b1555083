"""The Python binding: its enums match the C header, errors carry the
library's message, descriptors round-trip. Needs no GPU."""
import os
import re
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))

import fusednorm as fn  # noqa: E402


def header_enum(prefix):
    text = open(os.path.join(ROOT, "api", "fusednorm.h")).read()
    return {m.group(1): int(m.group(2)) for m in re.finditer(rf"\b{prefix}(\w+)\s*=\s*(\d+)", text)}


class BindingTest(unittest.TestCase):
    def test_enums_match_header(self):
        self.assertEqual(header_enum("FNORM_STATUS_"), {s.name: s.value for s in fn.Status})
        self.assertEqual(header_enum("FNORM_DTYPE_"), {d.name: d.value for d in fn.DType})
        self.assertEqual(header_enum("FNORM_NORM_"), {m.name: m.value for m in fn.NormMode})

    def test_version(self):
        text = open(os.path.join(ROOT, "api", "fusednorm_version.h")).read()
        want = tuple(int(re.search(rf"FNORM_VERSION_{k} (\d+)", text).group(1)) for k in ("MAJOR", "MINOR", "PATCH"))
        self.assertEqual(fn.version(), want)

    def test_errors_name_the_argument(self):
        with self.assertRaises(fn.FusedNormError) as cm:
            fn.TensorDesc(fn.DType.FLOAT16, [4, 0])
        self.assertEqual(cm.exception.status, fn.Status.BAD_PARAM)
        self.assertIn("dims[1]", str(cm.exception))
        with self.assertRaises(fn.FusedNormError) as cm:
            fn.NormDesc(eps=-1.0)
        self.assertIn("epsilon", str(cm.exception))

    def test_workspace_query(self):
        x = fn.TensorDesc(fn.DType.BFLOAT16, [8, 4096])
        nd = fn.NormDesc()
        import ctypes
        ws = ctypes.c_size_t(99)
        fn.check(fn.lib.fnorm_layernorm_fwd_workspace_size(nd.ptr, x.ptr, x.ptr, ctypes.byref(ws)))
        self.assertEqual(ws.value, 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
