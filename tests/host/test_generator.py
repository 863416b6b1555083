# SPDX-License-Identifier: Apache-2.0
"""Host tests of the kernel generator (gen/): the instance list, names,
rendering, the configure-time output list and incremental writes."""
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "gen"))

import generate  # noqa: E402
import instances  # noqa: E402


class InstanceListTest(unittest.TestCase):
    def test_names_unique_and_descriptive(self):
        insts = instances.all_instances()
        names = [i.name for i in insts]
        self.assertEqual(len(names), len(set(names)))
        self.assertIn("norm_fwd_f16_p8_warp_n4", names)
        self.assertIn("norm_fwd_f32_p4_smem", names)
        self.assertIn("norm_fwd_bf16_p1_uncached", names)
        self.assertIn("norm_fwd_f16_p8_block_n4", names)
        self.assertIn("norm_bwd_f16_p8_block_n2", names)
        self.assertIn("norm_bwd_bf16_p2_tiled", names)
        self.assertIn("norm_bwd_bf16_p8_rows_n1", names)
        self.assertIn("norm_bwd_bf16_p8_rows_n2", names)
        self.assertIn("norm_bwd_f32_p4_rows_n2", names)

    def test_packs_never_exceed_16_bytes(self):
        for i in instances.all_instances():
            self.assertLessEqual(i.pack * instances.DTYPES[i.dtype][2], 16, i.name)

    def test_register_tier_bounds(self):
        for i in instances.all_instances():
            if i.tier == "rows":  # one or two 16-byte packs per thread (fp32: two)
                self.assertIn(i.npack, instances.bwd_rows_npacks(i.dtype, i.pack))
                self.assertEqual(i.pack * instances.DTYPES[i.dtype][2], instances.MAX_PACK_BYTES)
            elif i.tier in ("warp", "block"):
                self.assertGreaterEqual(i.npack, 1)
                if i.op == "norm_fwd":
                    self.assertLessEqual(i.npack * i.pack, instances.WARP_MAX_ELEMS_PER_THREAD)
                else:
                    self.assertLessEqual(i.npack * i.pack, instances.BWD_MAX_ELEMS_PER_THREAD)
                    if i.tier == "warp":
                        self.assertLessEqual(i.npack * i.pack * instances.DTYPES[i.dtype][2],
                                             instances.BWD_WARP_MAX_BYTES_PER_THREAD)
            else:
                self.assertEqual(i.npack, 0)

    def test_every_dtype_pack_has_all_tiers(self):
        # The runtime relies on this: any (dtype, pack) can fall back to a
        # block tier, and pack 1 (the misaligned path) always exists.
        insts = instances.all_instances()
        for dt in instances.DTYPES:
            self.assertIn(1, instances.packs_for(dt))
            for pack in instances.packs_for(dt):
                fwd = [i for i in insts if i.op == "norm_fwd" and i.dtype == dt and i.pack == pack]
                bwd = [i for i in insts if i.op == "norm_bwd" and i.dtype == dt and i.pack == pack]
                self.assertEqual({i.tier for i in fwd}, set(instances.TIERS), (dt, pack))
                self.assertEqual({i.out for i in fwd}, set(instances.NORM_FWD_OUTS), (dt, pack))
                wide = pack * instances.DTYPES[dt][2] == instances.MAX_PACK_BYTES
                self.assertEqual({i.tier for i in bwd},
                                 set(instances.BWD_TIERS) | (set(instances.BWD_WIDE_TIERS) if wide else set()),
                                 (dt, pack))
                npacks = {i.npack for i in fwd if i.tier == "warp"}
                self.assertIn(1, npacks)
                # the register tier reaches 32 elements per thread
                self.assertEqual(max(npacks) * pack, instances.WARP_MAX_ELEMS_PER_THREAD)
                self.assertIn(1, {i.npack for i in bwd if i.tier == "warp"})

    def test_sorted_and_trimmed(self):
        insts = instances.all_instances(["f16"])
        self.assertEqual(insts, sorted(insts))
        self.assertEqual({i.dtype for i in insts}, {"f16"})
        with self.assertRaises(ValueError):
            instances.all_instances(["f64"])

    def test_adding_a_dtype_is_one_entry(self):
        saved = dict(instances.DTYPES)
        try:
            instances.DTYPES["f8"] = ("__nv_fp8_e4m3", "FNORM_DTYPE_FP8", 1)
            insts = instances.all_instances(["f8"])
            self.assertIn(16, {i.pack for i in insts})
            self.assertIn("norm_fwd_f8.cu", generate.outputs(["f8"]))
            self.assertIn("norm_bwd_f8.cu", generate.outputs(["f8"]))
        finally:
            instances.DTYPES.clear()
            instances.DTYPES.update(saved)


class RenderTest(unittest.TestCase):
    def test_list_matches_rendered_files(self):
        with tempfile.TemporaryDirectory() as d:
            out = subprocess.run([sys.executable, os.path.join(ROOT, "gen", "generate.py"), "--list",
                                  "--dtypes", "f32,bf16"], capture_output=True, text=True, check=True)
            listed = out.stdout.split()
            generate.render_all(["f32", "bf16"], d)
            self.assertEqual(sorted(listed), sorted(os.listdir(d)))

    def test_render_is_deterministic_and_incremental(self):
        with tempfile.TemporaryDirectory() as d:
            first = generate.render_all(["f16"], d)
            self.assertTrue(first)
            stamp = {f: os.stat(os.path.join(d, f)).st_mtime_ns for f in os.listdir(d)}
            self.assertEqual(generate.render_all(["f16"], d), [])  # nothing rewritten
            self.assertEqual(stamp, {f: os.stat(os.path.join(d, f)).st_mtime_ns for f in os.listdir(d)})

    def test_dispatch_table_contents(self):
        with tempfile.TemporaryDirectory() as d:
            generate.render_all(["f16"], d)
            table = open(os.path.join(d, "dispatch_table.cpp")).read()
            self.assertIn(generate.BANNER, table)
            insts = [i for i in instances.all_instances(["f16"]) if i.op == "norm_fwd"]
            # One table per output, each sorted, the codes table the plain
            # one's twin row for row (the runtime pairs them by geometry).
            for out, name in (("same", "kNormFwdInstances"), ("codes", "kNormFwdCodesInstances")):
                rows = [i for i in insts if i.out == out]
                body = table[table.index(f"const NormFwdInstance {name}[]"):]
                body = body[:body.index("};")]
                for idx, i in enumerate(rows):
                    self.assertIn(f"/* {idx} */ {{FNORM_DTYPE_FLOAT16, {i.pack}, {i.tier_enum}, {i.npack}, gen::{i.name}_shape, gen::{i.name}, \"{i.name}\"}}", body)
                self.assertEqual(body.count("gen::"), 2 * len(rows))
            same = [(i.pack, i.tier, i.npack) for i in insts if i.out == "same"]
            self.assertEqual(same, [(i.pack, i.tier, i.npack) for i in insts if i.out == "codes"])
            cu = open(os.path.join(d, "norm_fwd_f16.cu")).read()
            # Every geometry twice: y in x's dtype, and y quantized.
            self.assertEqual(cu.count("launch_norm_fwd<__half,"), len(insts))
            self.assertEqual(cu.count("shape_norm_fwd<__half,"), len(same))
            self.assertEqual(cu.count("shape_norm_fwd_quant<__half,"), len(same))
            self.assertEqual(cu.count(", true>(p, s, stream)"), len(same))
            bwd = [i for i in instances.all_instances(["f16"]) if i.op == "norm_bwd"]
            cu = open(os.path.join(d, "norm_bwd_f16.cu")).read()
            self.assertEqual(cu.count("launch_norm_bwd<__half,"), len(bwd))
            self.assertEqual(cu.count("shape_norm_bwd<__half,"), len(bwd))

    def test_config_header_carries_the_tables_constants(self):
        # The runtime reads the tier enum and the pack / register limits from
        # this header only: every value must be the instance table's.
        with tempfile.TemporaryDirectory() as d:
            generate.render_all(["f32"], d)
            hdr = open(os.path.join(d, generate.CONFIG_HEADER)).read()
            self.assertIn(generate.BANNER, hdr)
            for value, (enum, _doc) in enumerate(instances.TIER_TABLE.values()):
                self.assertIn(f"  {enum} = {value},", hdr)
            for name, (value, _doc) in instances.config_constants().items():
                self.assertIn(f"constexpr int {name} = {value};", hdr)
            self.assertIn("constexpr int kMaxPackBytes = 16;", hdr)
            self.assertIn("constexpr int kTargetNpack = 4;", hdr)
            # every tier an instance names is in the enum
            for i in instances.all_instances():
                if i.tier != "all":
                    self.assertIn(f"  {instances.TIER_TABLE[i.tier][0]} = ", hdr)

    def test_depends_lists_every_template_and_module(self):
        out = subprocess.run([sys.executable, os.path.join(ROOT, "gen", "generate.py"), "--depends"],
                             capture_output=True, text=True, check=True).stdout.split()
        names = {os.path.basename(f) for f in out}
        self.assertTrue({"generate.py", "instances.py"} <= names)
        templates = {t for t in os.listdir(os.path.join(ROOT, "templates")) if t.endswith(".jinja")}
        self.assertTrue(templates <= names, templates - names)
        used = {t for t, _ctx in generate.outputs(list(instances.DTYPES)).values()}
        self.assertTrue(used <= names, used - names)

    def test_bad_dtype_is_a_clear_error(self):
        r = subprocess.run([sys.executable, os.path.join(ROOT, "gen", "generate.py"), "--list",
                            "--dtypes", "f64"], capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("unknown dtype", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
