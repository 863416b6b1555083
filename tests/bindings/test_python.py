# SPDX-License-Identifier: Apache-2.0
"""The Python binding: its enums and ctypes prototypes match the C header,
errors carry the library's message naming the argument, descriptors
round-trip. Needs no GPU: the workspace queries (which take a handle, and a
handle needs a device) skip when Handle() reports NO_DEVICE."""
import ctypes
import os
import re
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))

import fusednorm as fn  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "gen"))
import c_header  # noqa: E402  (gen/c_header.py: the one reader of the header)

with open(os.path.join(ROOT, "api", "fusednorm.h")) as f:
    HEADER = f.read()
# Comments out, so that prose mentioning a name or an "= 0" cannot match.
HEADER_CODE = c_header.strip_comments(HEADER)


def header_enum(tag, prefix=None):
    """{NAME without prefix: value} of `typedef enum <tag> {...}`; the prefix
    is what all its constants share (FNORM_STATUS_, ...) unless given (where
    the names share more than it: PER_TENSOR, PER_TOKEN)."""
    items = c_header.enum(HEADER, tag).values
    names = [n for n, _ in items]
    if prefix is None:
        prefix = os.path.commonprefix(names)
        prefix = prefix[:prefix.rfind("_") + 1]
    return {n[len(prefix):]: int(v) for n, v in items}


def header_functions():
    """{name: (result C type, [parameter C types])} for every FNORM_API function."""
    return {f.name: (f.ret, [p.ctype for p in f.params]) for f in c_header.functions(HEADER)}


# Opaque pointer typedefs (`typedef struct x *name;`) and enum typedefs, as the
# header declares them.
OPAQUE = tuple(name for _, name in c_header.opaque(HEADER) if name)
ENUMS = tuple(e.name for e in c_header.enums(HEADER))
INT_SIZES = {"int32_t": 4, "uint32_t": 4, "int": 4, "size_t": ctypes.sizeof(ctypes.c_size_t),
             "int64_t": 8, **{e: 4 for e in ENUMS}}


def c_kind(param):
    """What crosses the ABI for a C parameter or result type: ('ptr',),
    ('double',) or ('int', bytes)."""
    if "*" in param or any(re.search(rf"\b{t}\b", param) for t in OPAQUE):
        return ("ptr",)
    if re.search(r"\bdouble\b", param):
        return ("double",)
    for t, size in INT_SIZES.items():
        if re.search(rf"\b{t}\b", param):
            return ("int", size)
    raise AssertionError(f"unknown C parameter type: {param!r}")


def ctypes_kind(t):
    if t in (ctypes.c_void_p, ctypes.c_char_p) or issubclass(t, ctypes._Pointer):
        return ("ptr",)
    if t is ctypes.c_double:
        return ("double",)
    if t is ctypes.c_float:
        return ("float",)
    return ("int", ctypes.sizeof(t))


def handle_or_skip(test):
    """A handle, or skip the test where no GPU/driver is present."""
    try:
        return fn.Handle()
    except fn.FusedNormError as e:
        if e.status == fn.Status.NO_DEVICE:
            test.skipTest(f"no CUDA device: {e.message}")
        raise


class EnumsAndPrototypes(unittest.TestCase):
    def test_enums_match_header(self):
        self.assertEqual(header_enum("fnorm_status"), {s.name: s.value for s in fn.Status})
        self.assertEqual(header_enum("fnorm_dtype"), {d.name: d.value for d in fn.DType})
        self.assertEqual(header_enum("fnorm_norm_mode"), {m.name: m.value for m in fn.NormMode})
        self.assertEqual(header_enum("fnorm_norm_flag"), {f.name: f.value for f in fn.NormFlag})
        self.assertEqual(header_enum("fnorm_quant_scaling", "FNORM_QUANT_SCALING_"), {q.name: q.value for q in fn.QuantScaling})
        m = re.search(r"#define\s+FNORM_MAX_RANK\s+(\d+)", HEADER_CODE)
        self.assertEqual(int(m.group(1)), fn.MAX_RANK)

    def test_prototypes_match_header(self):
        self.assertIn("fnorm_stream_t", OPAQUE)
        self.assertIn("fnorm_batchnorm_desc_t", OPAQUE)
        self.assertIn("fnorm_bn_epilogue_t", ENUMS)
        funcs = header_functions()
        self.assertIn("fnorm_norm_bwd", funcs)  # the parser found the header's functions
        self.assertEqual(len(funcs["fnorm_norm_bwd"][1]), 18)
        self.assertEqual(sorted(funcs), sorted(fn._PROTOTYPES),
                         "functions in the header but not bound, or bound but not in the header")
        for name, (result, params) in funcs.items():
            res, args = fn._PROTOTYPES[name]
            with self.subTest(function=name):
                self.assertEqual(ctypes_kind(res), c_kind(result), f"{name}: result ({result})")
                self.assertEqual(len(args), len(params), f"{name}: arity")
                for i, (p, a) in enumerate(zip(params, args)):
                    self.assertEqual(ctypes_kind(a), c_kind(p), f"{name} parameter {i} ({p})")


class Host(unittest.TestCase):
    def test_version(self):
        with open(os.path.join(ROOT, "api", "fusednorm_version.h")) as f:
            text = f.read()
        want = tuple(int(re.search(rf"FNORM_VERSION_{k} (\d+)", text).group(1)) for k in ("MAJOR", "MINOR", "PATCH"))
        self.assertEqual(fn.version(), want)

    def test_error_string_and_category(self):
        text = fn.lib.fnorm_get_error_string(fn.Status.BAD_PARAM_SHAPE)
        self.assertTrue(text.startswith(b"FNORM_STATUS_BAD_PARAM_SHAPE"), text)
        self.assertEqual(fn.lib.fnorm_get_error_string(1234567), b"FNORM_STATUS_UNKNOWN")
        self.assertEqual(fn.lib.fnorm_status_category(fn.Status.INSUFFICIENT_WORKSPACE), fn.Status.BAD_PARAM)
        self.assertEqual(fn.lib.fnorm_status_category(fn.Status.NOT_SUPPORTED_BUILD), fn.Status.NOT_SUPPORTED)

    def test_errors_name_the_argument(self):
        with self.assertRaises(fn.FusedNormError) as cm:
            fn.TensorDesc(fn.DType.FLOAT16, [4, -1])
        self.assertEqual(cm.exception.status, fn.Status.BAD_PARAM)
        self.assertIn("dims[1]", str(cm.exception))
        with self.assertRaises(fn.FusedNormError) as cm:
            fn.NormDesc(eps=-1.0)
        self.assertEqual(cm.exception.status, fn.Status.BAD_PARAM)
        self.assertIn("epsilon", str(cm.exception))
        with self.assertRaises(fn.FusedNormError) as cm:
            fn.NormDesc(mode=7)
        self.assertEqual(cm.exception.status, fn.Status.BAD_PARAM)
        self.assertIn("mode", str(cm.exception))
        nd = fn.NormDesc()
        with self.assertRaises(fn.FusedNormError) as cm:
            nd.flags = 1 << 7
        self.assertEqual(cm.exception.status, fn.Status.BAD_PARAM)
        self.assertIn("flags", str(cm.exception))
        self.assertEqual(nd.flags, fn.NormFlag.NONE, "a failed set_flags must leave the flags as they were")

    def test_tensor_desc_round_trip(self):
        d = fn.TensorDesc(fn.DType.BFLOAT16, [3, 5, 7], [70, 14, 1])
        self.assertEqual(d.get(), (fn.DType.BFLOAT16, [3, 5, 7], [70, 14, 1]))
        self.assertEqual(d.elements, 105)
        packed = fn.TensorDesc(fn.DType.FLOAT32, [2, 6])
        self.assertEqual(packed.get(), (fn.DType.FLOAT32, [2, 6], [6, 1]))

    def test_norm_desc_round_trip(self):
        nd = fn.NormDesc()
        self.assertEqual(nd.get(), (fn.NormMode.LAYERNORM, -1, 1e-5))
        self.assertEqual(nd.flags, fn.NormFlag.NONE)
        nd.flags = fn.NormFlag.ZERO_CENTERED_GAMMA
        self.assertEqual(nd.flags, fn.NormFlag.ZERO_CENTERED_GAMMA)
        # fnorm_norm_desc_set keeps the flags.
        fn.check(fn.lib.fnorm_norm_desc_set(nd.ptr, fn.NormMode.RMSNORM, -2, 1e-6))
        self.assertEqual(nd.get(), (fn.NormMode.RMSNORM, -2, 1e-6))
        self.assertEqual(nd.flags, fn.NormFlag.ZERO_CENTERED_GAMMA)
        z = fn.NormDesc(fn.NormMode.RMSNORM, -1, 1e-6, fn.NormFlag.ZERO_CENTERED_GAMMA)
        self.assertEqual(z.flags, fn.NormFlag.ZERO_CENTERED_GAMMA)
        nd.flags = fn.NormFlag.ROUND_XHAT
        self.assertEqual(nd.flags, fn.NormFlag.ROUND_XHAT)
        both = fn.NormFlag.ZERO_CENTERED_GAMMA | fn.NormFlag.ROUND_XHAT
        nd.flags = both
        self.assertEqual(nd.flags, 3)
        with self.assertRaises(fn.FusedNormError) as cm:
            nd.flags = both | 4  # the next bit is still unknown
        self.assertEqual(cm.exception.status, fn.Status.BAD_PARAM)
        self.assertIn("0x4", str(cm.exception))
        self.assertEqual(nd.flags, both)

    def test_round_xhat_argument(self):
        """Every norm function takes round_xhat (keyword-only, after the
        existing arguments, so positional calls keep their meaning) and turns
        it into the descriptor's ROUND_XHAT bit next to ZERO_CENTERED_GAMMA."""
        import inspect
        for f in (fn.layer_norm, fn.rms_norm, fn.layer_norm_quant, fn.rms_norm_quant, fn.norm_backward):
            with self.subTest(function=f.__name__):
                p = inspect.signature(f).parameters
                self.assertEqual(p["round_xhat"].kind, inspect.Parameter.KEYWORD_ONLY)
                self.assertIs(p["round_xhat"].default, False)
                self.assertEqual(list(p)[-2:], ["stream", "round_xhat"])
        self.assertEqual(fn.norm._norm_flags(False, False), fn.NormFlag.NONE)
        self.assertEqual(fn.norm._norm_flags(True, False), fn.NormFlag.ZERO_CENTERED_GAMMA)
        self.assertEqual(fn.norm._norm_flags(False, True), fn.NormFlag.ROUND_XHAT)
        self.assertEqual(fn.norm._norm_flags(True, True), 3)
        self.assertEqual(fn._norm_desc(fn.NormMode.RMSNORM, -1, 1e-6, fn.norm._norm_flags(True, True)).flags, 3)

    def test_batchnorm_desc_round_trip_and_errors(self):
        self.assertEqual(header_enum("fnorm_bn_epilogue"), {e.name: e.value for e in fn.BnEpilogue})
        self.assertEqual(header_enum("fnorm_bn_average"), {a.name: a.value for a in fn.BnAverage})
        self.assertEqual(header_enum("fnorm_bn_engine"), {e.name: e.value for e in fn.BnEngine})
        self.assertEqual(header_enum("fnorm_bn_sync_flag"), {f.name: f.value for f in fn.BnSyncFlag})
        bn = fn.BatchNormDesc()
        self.assertEqual(bn.get(), (fn.BnEpilogue.NONE, 1e-5, fn.BnAverage.EXPONENTIAL, 0.1, fn.BnEngine.AUTO))
        bn = fn.BatchNormDesc(fn.BnEpilogue.ADD_RELU, 1e-3, fn.BnAverage.CUMULATIVE, 0.0, fn.BnEngine.CUDNN)
        self.assertEqual(bn.get(), (fn.BnEpilogue.ADD_RELU, 1e-3, fn.BnAverage.CUMULATIVE, 0.0, fn.BnEngine.CUDNN))
        for kwargs, word in (({"momentum": 2.0}, "momentum"), ({"eps": float("nan")}, "epsilon"),
                             ({"epilogue": 9}, "epilogue"), ({"engine": 7}, "engine")):
            with self.subTest(**{k: str(v) for k, v in kwargs.items()}):
                with self.assertRaises(fn.FusedNormError) as cm:
                    fn.BatchNormDesc(**kwargs)
                self.assertEqual(cm.exception.status, fn.Status.BAD_PARAM)
                self.assertIn(word, str(cm.exception))
        with self.assertRaises(fn.FusedNormError) as cm:  # unknown sync flag bits (no NCCL call is made)
            fn.BatchNormDesc(comm=0x1000, sync_flags=4)
        self.assertEqual(cm.exception.status, fn.Status.BAD_PARAM)
        self.assertIn("flags", str(cm.exception))

    def test_null_handle_is_named(self):
        # Validation runs on the host before anything touches a device, so a
        # NULL handle is reported the same with or without a GPU.
        x = fn.TensorDesc(fn.DType.FLOAT16, [8, 256])
        nd = fn.NormDesc()
        ws = ctypes.c_size_t(12345)
        st = fn.lib.fnorm_norm_fwd_workspace_size(None, nd.ptr, x.ptr, x.ptr, ctypes.byref(ws))
        self.assertEqual(st, fn.Status.BAD_PARAM_NULL_POINTER)
        self.assertIn("handle", fn.last_error_message())
        self.assertEqual(ws.value, 12345, "nothing is written on failure")
        st = fn.lib.fnorm_norm_bwd_workspace_size(None, nd.ptr, x.ptr, None, ctypes.byref(ws))
        self.assertEqual(st, fn.Status.BAD_PARAM_NULL_POINTER)
        self.assertIn("handle", fn.last_error_message())
        st = fn.lib.fnorm_norm_fwd(None, None, nd.ptr, x.ptr, 0x1000, None, None, None, None, None,
                                   x.ptr, 0x2000, None, None, None, 0)
        self.assertEqual(st, fn.Status.BAD_PARAM_NULL_POINTER)
        self.assertIn("handle", fn.last_error_message())
        st = fn.lib.fnorm_norm_bwd(None, None, nd.ptr, x.ptr, 0x1000, x.ptr, 0x2000, 0x2800, 0x3000,
                                   None, None, None, x.ptr, 0x4000, None, None, None, 0)
        self.assertEqual(st, fn.Status.BAD_PARAM_NULL_POINTER)
        self.assertIn("handle", fn.last_error_message())


class GroupNormHost(unittest.TestCase):
    """GroupNorm's descriptor and refusals through the binding, no GPU needed."""

    def test_enum_matches_header(self):
        self.assertEqual(header_enum("fnorm_gn_activation"), {a.name: a.value for a in fn.GnActivation})

    def test_desc_round_trip(self):
        gd = fn.GroupNormDesc()
        self.assertEqual(gd.get(), (32, 1e-5, fn.GnActivation.NONE))  # torch.nn.GroupNorm(32, C)
        for act in fn.GnActivation:
            gd.set(7, 1e-6, act)
            self.assertEqual(gd.get(), (7, 1e-6, act))
        self.assertEqual(fn.GroupNormDesc(1, 0.0, fn.GnActivation.SILU).get(), (1, 0.0, fn.GnActivation.SILU))
        self.assertEqual(fn.groupnorm._gn_desc(4, 1e-6, 1).get(), (4, 1e-6, fn.GnActivation.SILU))

    def test_refusals_name_the_argument(self):
        gd = fn.GroupNormDesc(7, 1e-6, fn.GnActivation.SILU)
        for args, word in (((0, 1e-5, 0), "groups"), ((-3, 1e-5, 0), "groups"),
                           ((32, float("nan"), 0), "epsilon"), ((32, -1e-5, 0), "epsilon"),
                           ((32, float("inf"), 0), "epsilon"), ((32, 1e300, 0), "epsilon"),
                           ((32, 1e-5, 2), "activation")):
            with self.subTest(args=args):
                with self.assertRaises(fn.FusedNormError) as cm:
                    gd.set(*args)
                self.assertEqual(cm.exception.status, fn.Status.BAD_PARAM)
                self.assertIn(word, cm.exception.message)
                self.assertIn("fnorm_groupnorm_desc_set", cm.exception.message)
                self.assertEqual(gd.get(), (7, 1e-6, fn.GnActivation.SILU), "a refused set changed the descriptor")
        with self.assertRaises(fn.FusedNormError) as cm:
            fn.GroupNormDesc(groups=0)
        self.assertIn("groups", str(cm.exception))

    def test_null_handle_is_named(self):
        gd = fn.GroupNormDesc()
        x = fn.TensorDesc(fn.DType.FLOAT16, [2, 64, 5, 5])
        ws = ctypes.c_size_t(12345)
        st = fn.lib.fnorm_groupnorm_fwd_workspace_size(None, gd.ptr, x.ptr, ctypes.byref(ws))
        self.assertEqual(st, fn.Status.BAD_PARAM_NULL_POINTER)
        self.assertIn("handle", fn.last_error_message())
        st = fn.lib.fnorm_groupnorm_bwd_workspace_size(None, gd.ptr, x.ptr, None, None, ctypes.byref(ws))
        self.assertEqual(st, fn.Status.BAD_PARAM_NULL_POINTER)
        self.assertIn("handle", fn.last_error_message())
        self.assertEqual(ws.value, 12345, "nothing is written on failure")
        st = fn.lib.fnorm_groupnorm_fwd(None, None, gd.ptr, x.ptr, 0x1000, None, None, None, None, None, None,
                                        x.ptr, 0x2000, None, None, None, 0)
        self.assertEqual(st, fn.Status.BAD_PARAM_NULL_POINTER)
        self.assertIn("handle", fn.last_error_message())
        st = fn.lib.fnorm_groupnorm_bwd(None, None, gd.ptr, x.ptr, 0x1000, x.ptr, 0x2000, 0x2800, 0x3000, None, None,
                                        None, None, None, None, x.ptr, 0x4000, None, None, None, None, None, 0)
        self.assertEqual(st, fn.Status.BAD_PARAM_NULL_POINTER)
        self.assertIn("handle", fn.last_error_message())

    def test_queries_validate_and_name_the_argument(self):
        h = handle_or_skip(self)
        x = fn.TensorDesc(fn.DType.BFLOAT16, [2, 64, 9, 7])
        nhwc = fn.TensorDesc(fn.DType.BFLOAT16, [2, 64, 9, 7], [64 * 63, 1, 64 * 7, 64])
        w32 = fn.TensorDesc(fn.DType.FLOAT32, [64])
        ss = fn.TensorDesc(fn.DType.BFLOAT16, [2, 64, 1, 1], [128, 1, 1, 1])  # a chunk of [N, 2C]
        for act in fn.GnActivation:
            gd = fn.GroupNormDesc(32, 1e-6, act)
            for xd in (x, nhwc):
                with self.subTest(activation=act, layout=xd.get()[2]):
                    self.assertGreaterEqual(fn.groupnorm_fwd_workspace_size(h, gd, xd), 0)
                    full = fn.groupnorm_bwd_workspace_size(h, gd, xd, w32, ss)
                    self.assertGreaterEqual(full, fn.groupnorm_bwd_workspace_size(h, gd, xd))
        # Batch 1 with 32 groups is split over the device: partial statistics
        # need scratch.
        big = fn.TensorDesc(fn.DType.BFLOAT16, [1, 512, 128, 128])
        self.assertGreater(fn.groupnorm_fwd_workspace_size(h, fn.GroupNormDesc(), big), 0)
        with self.assertRaises(fn.FusedNormError) as cm:
            fn.groupnorm_fwd_workspace_size(h, fn.GroupNormDesc(5), x)  # 5 groups do not divide 64 channels
        self.assertEqual(cm.exception.status, fn.Status.BAD_PARAM_SHAPE)
        self.assertIn("group", cm.exception.message)
        sliced = fn.TensorDesc(fn.DType.BFLOAT16, [2, 64, 9, 6], [64 * 63, 63, 7, 1])
        with self.assertRaises(fn.FusedNormError) as cm:
            fn.groupnorm_fwd_workspace_size(h, fn.GroupNormDesc(), sliced)
        self.assertEqual(cm.exception.status, fn.Status.NOT_SUPPORTED)
        with self.assertRaises(fn.FusedNormError) as cm:
            fn.groupnorm_bwd_workspace_size(h, fn.GroupNormDesc(), x, fn.TensorDesc(fn.DType.FLOAT32, [63]))
        self.assertEqual(fn.lib.fnorm_status_category(cm.exception.status), fn.Status.BAD_PARAM)
        self.assertIn("w_desc", cm.exception.message)
        with self.assertRaises(fn.FusedNormError) as cm:
            fn.groupnorm_bwd_workspace_size(h, fn.GroupNormDesc(), x, None, fn.TensorDesc(fn.DType.FLOAT32, [3, 64]))
        self.assertEqual(fn.lib.fnorm_status_category(cm.exception.status), fn.Status.BAD_PARAM)
        self.assertIn("ss_desc", cm.exception.message)
        gd = fn.GroupNormDesc()  # held: a temporary's .ptr would be freed before the call reads it
        st = fn.lib.fnorm_groupnorm_fwd_workspace_size(h.ptr, gd.ptr, x.ptr, None)
        self.assertEqual(st, fn.Status.BAD_PARAM_NULL_POINTER)
        self.assertIn("workspace_bytes", fn.last_error_message())

    def test_empty_tensors(self):
        """N = 0 or no spatial values: the size queries answer 0 and the
        launches succeed with NULL data pointers (what empty torch tensors
        give); dgamma & co. written with zeros are checked on the GPU by
        test_python_groupnorm_gpu.py."""
        h = handle_or_skip(self)
        gd = fn.GroupNormDesc(4, 1e-5, fn.GnActivation.SILU)
        for dims in ([0, 8, 3, 3], [2, 8, 0]):
            with self.subTest(dims=dims):
                x = fn.TensorDesc(fn.DType.FLOAT16, dims)
                self.assertEqual(fn.groupnorm_fwd_workspace_size(h, gd, x), 0)  # the header's "Empty tensors"
                self.assertEqual(fn.groupnorm_bwd_workspace_size(h, gd, x), 0)
                st = fn.lib.fnorm_groupnorm_fwd(h.ptr, None, gd.ptr, x.ptr, None, None, None, None, None, None, None,
                                                x.ptr, None, None, None, None, 0)
                self.assertEqual(st, fn.Status.SUCCESS, fn.last_error_message())
                st = fn.lib.fnorm_groupnorm_bwd(h.ptr, None, gd.ptr, x.ptr, None, x.ptr, None, None, None, None,
                                                None, None, None, None, None, x.ptr, None, None, None, None, None,
                                                None, 0)
                self.assertEqual(st, fn.Status.SUCCESS, fn.last_error_message())
        with self.assertRaises(fn.FusedNormError) as cm:  # C = 0: no group count divides it
            fn.groupnorm_fwd_workspace_size(h, gd, fn.TensorDesc(fn.DType.FLOAT16, [2, 0, 3]))
        self.assertEqual(cm.exception.status, fn.Status.BAD_PARAM_SHAPE)


class WorkspaceQueries(unittest.TestCase):
    """Size queries take a handle (their answer may depend on the device), so
    these need a GPU; they touch none beyond creating the handle."""

    def setUp(self):
        self.h = handle_or_skip(self)

    def test_fwd_workspace(self):
        x = fn.TensorDesc(fn.DType.BFLOAT16, [8, 4096])
        w32 = fn.TensorDesc(fn.DType.FLOAT32, [4096])
        for mode in fn.NormMode:
            for flags in fn.NormFlag:
                with self.subTest(mode=mode, flags=flags):
                    nd = fn.NormDesc(mode, -1, 1e-5, flags)
                    # 0 today, as the header documents.
                    self.assertEqual(fn.norm_fwd_workspace_size(self.h, nd, x, x), 0)
                    self.assertGreaterEqual(fn.norm_bwd_workspace_size(self.h, nd, x, w32), 0)

    def test_quant_queries(self):
        x = fn.TensorDesc(fn.DType.BFLOAT16, [3, 5, 64])
        nd = fn.NormDesc(fn.NormMode.RMSNORM, -1, 1e-6)
        for dt in (fn.DType.FLOAT8_E4M3, fn.DType.FLOAT8_E5M2, fn.DType.INT8):
            y = fn.TensorDesc(dt, [3, 5, 64])
            self.assertEqual(fn.norm_fwd_quant_workspace_size(self.h, nd, x, y, fn.QuantScaling.PER_TOKEN), 0)
        self.assertEqual(fn.norm_fwd_quant_scale_size(self.h, nd, x, fn.QuantScaling.PER_TOKEN), 15 * 4)
        self.assertEqual(fn.norm_fwd_quant_scale_size(self.h, nd, x, fn.QuantScaling.PER_TENSOR), 4)
        with self.assertRaises(fn.FusedNormError) as cm:
            fn.norm_fwd_quant_workspace_size(self.h, nd, x, fn.TensorDesc(fn.DType.INT8, [3, 5, 64]),
                                             fn.QuantScaling.PER_TENSOR)
        self.assertEqual(cm.exception.status, fn.Status.NOT_SUPPORTED)
        with self.assertRaises(fn.FusedNormError) as cm:
            fn.norm_fwd_quant_workspace_size(self.h, nd, x, x, fn.QuantScaling.PER_TOKEN)
        self.assertEqual(cm.exception.status, fn.Status.BAD_PARAM_SHAPE)
        self.assertIn("y_desc", str(cm.exception))

    def test_bwd_workspace_holds_partial_sums(self):
        # dgamma/dbeta are reduced across rows through per-block partial sums
        # in the workspace: with many rows and a w_desc there are some.
        x = fn.TensorDesc(fn.DType.FLOAT16, [8192, 4096])
        w = fn.TensorDesc(fn.DType.FLOAT16, [4096])
        for mode in fn.NormMode:
            with self.subTest(mode=mode):
                n = fn.norm_bwd_workspace_size(self.h, fn.NormDesc(mode), x, w)
                self.assertGreater(n, 0)

    def test_queries_validate_and_name_the_argument(self):
        x = fn.TensorDesc(fn.DType.FLOAT16, [8, 256])
        nd = fn.NormDesc()
        y_bad_shape = fn.TensorDesc(fn.DType.FLOAT16, [8, 128])
        with self.assertRaises(fn.FusedNormError) as cm:
            fn.norm_fwd_workspace_size(self.h, nd, x, y_bad_shape)
        self.assertEqual(fn.lib.fnorm_status_category(cm.exception.status), fn.Status.BAD_PARAM)
        self.assertIn("y_desc", cm.exception.message)
        y_bad_dtype = fn.TensorDesc(fn.DType.FLOAT32, [8, 256])
        with self.assertRaises(fn.FusedNormError) as cm:
            fn.norm_fwd_workspace_size(self.h, nd, x, y_bad_dtype)
        self.assertIn("y_desc", cm.exception.message)
        w_bad = fn.TensorDesc(fn.DType.FLOAT16, [255])
        with self.assertRaises(fn.FusedNormError) as cm:
            fn.norm_bwd_workspace_size(self.h, nd, x, w_bad)
        self.assertEqual(fn.lib.fnorm_status_category(cm.exception.status), fn.Status.BAD_PARAM)
        self.assertIn("w_desc", cm.exception.message)
        st = fn.lib.fnorm_norm_fwd_workspace_size(self.h.ptr, nd.ptr, x.ptr, x.ptr, None)
        self.assertEqual(st, fn.Status.BAD_PARAM_NULL_POINTER)
        self.assertIn("workspace_bytes", fn.last_error_message())

    def test_handle_device(self):
        self.assertGreaterEqual(self.h.device, 0)


class EmptyTensors(unittest.TestCase):
    """A tensor with a zero dimension is valid (api/fusednorm.h, "Empty
    tensors"): its descriptor holds 0 elements; with a device, the size
    queries answer 0 and a launch over it (NULL data pointers, as an empty
    torch tensor's) returns SUCCESS. Launches that write zeros (dgamma over
    zero rows) are checked on the GPU by tests/gpu/test_empty.cpp and the
    Rust and Go bindings' tests."""

    def test_descriptor(self):
        for dims in ([0, 768], [4, 0], [2, 0, 3]):
            with self.subTest(dims=dims):
                d = fn.TensorDesc(fn.DType.BFLOAT16, dims)
                self.assertEqual(d.elements, 0)
                self.assertEqual(d.get()[1], dims)
        with self.assertRaises(fn.FusedNormError) as cm:
            fn.TensorDesc(fn.DType.BFLOAT16, [0, -2])
        self.assertIn("dims[1]", str(cm.exception))

    def test_queries_and_launches(self):
        h = handle_or_skip(self)
        x = fn.TensorDesc(fn.DType.FLOAT16, [0, 768])
        w = fn.TensorDesc(fn.DType.FLOAT16, [768])
        for mode in fn.NormMode:
            with self.subTest(mode=mode):
                nd = fn.NormDesc(mode)
                self.assertEqual(fn.norm_fwd_workspace_size(h, nd, x, x), 0)
                self.assertEqual(fn.norm_bwd_workspace_size(h, nd, x, w), 0)
                st = fn.lib.fnorm_norm_fwd(h.ptr, None, nd.ptr, x.ptr, None, None, None, None, None, None,
                                           x.ptr, None, None, None, None, 0)
                self.assertEqual(st, fn.Status.SUCCESS, fn.last_error_message())
                st = fn.lib.fnorm_norm_bwd(h.ptr, None, nd.ptr, x.ptr, None, x.ptr, None, None, None,
                                           None, None, None, x.ptr, None, None, None, None, 0)
                self.assertEqual(st, fn.Status.SUCCESS, fn.last_error_message())
        bx = fn.TensorDesc(fn.DType.FLOAT16, [0, 8, 3, 3])
        bn = fn.BatchNormDesc()
        out = ctypes.c_size_t(99)
        for q in ("fnorm_batchnorm_fwd_train_workspace_size", "fnorm_batchnorm_fwd_infer_workspace_size",
                  "fnorm_batchnorm_bwd_workspace_size", "fnorm_batchnorm_reserve_space_size"):
            with self.subTest(query=q):
                out.value = 99
                fn.check(getattr(fn.lib, q)(h.ptr, bn.ptr, bx.ptr, ctypes.byref(out)))
                self.assertEqual(out.value, 0)
        st = fn.lib.fnorm_batchnorm_fwd_train(h.ptr, None, bn.ptr, bx.ptr, None, None, None, None, None, None,
                                              None, bx.ptr, None, None, None, None, 0, None, 0)
        self.assertEqual(st, fn.Status.SUCCESS, fn.last_error_message())
        # The arguments that stay meaningful are still checked.
        st = fn.lib.fnorm_batchnorm_fwd_infer(h.ptr, None, bn.ptr, bx.ptr, None, None, None, None, None, None,
                                              bx.ptr, None, None, 0)
        self.assertEqual(st, fn.Status.BAD_PARAM_NULL_POINTER)
        self.assertIn("running_mean", fn.last_error_message())
        from fusednorm import linear as fl
        try:
            ld = fl.LinearDesc(fl.LinearEpilogue.BIAS)
        except fn.FusedNormError as e:
            self.skipTest(f"no cuBLASLt: {e}")
        lx, lw, ly = (fn.TensorDesc(fn.DType.FLOAT16, d) for d in ([0, 32], [32, 48], [0, 48]))
        self.assertEqual(fl.linear_fwd_workspace_size(h, ld, lx, lw, ly), 0)
        self.assertEqual(fl.linear_bwd_workspace_size(h, ld, lx, lw, ly), 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
