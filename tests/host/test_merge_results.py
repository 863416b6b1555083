#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/merge_results.py on a made-up run directory (no GPU): the parts'
rows join the main file once, a second merge (a later benchmark of the same
run added its part) neither doubles them nor drops the main file's own rows,
a part merged earlier whose file is gone keeps its rows and section while a
part present again replaces its own, and a part from another GPU is
refused."""
import json
import os
import subprocess
import sys
import tempfile

from checks import ROOT, check, finish  # tests/host/checks.py

MERGE = os.path.join(ROOT, "bench", "merge_results.py")


def write(d, name, obj, md):
    with open(os.path.join(d, name + ".json"), "w") as f:
        json.dump(obj, f)
    with open(os.path.join(d, name + ".md"), "w") as f:
        f.write(md)


def merge(d):
    return subprocess.run([sys.executable, MERGE, d], capture_output=True, text=True)


with tempfile.TemporaryDirectory() as d:
    write(d, "h100", {"gpu": "h100", "rows": [{"op": "layernorm_fwd", "us": 1.0}]}, "# main\n")
    write(d, "rows_batchnorm", {"gpu": "h100", "rows": [{"op": "batchnorm_bwd", "us": 2.0}]}, "## BatchNorm\n")
    r = merge(d)
    check(r.returncode == 0, f"first merge succeeds ({r.stderr.strip()})")
    write(d, "rows_quant", {"gpu": "h100", "rows": [{"op": "rmsnorm_fwd_quant", "us": 3.0}], "note": "n"},
          "## Quant\n")
    r = merge(d)
    check(r.returncode == 0, "second merge succeeds")
    r = merge(d)
    check(r.returncode == 0, "third merge succeeds")
    with open(os.path.join(d, "h100.json")) as f:
        res = json.load(f)
    ops = sorted(x["op"] for x in res["rows"])
    check(ops == ["batchnorm_bwd", "layernorm_fwd", "rmsnorm_fwd_quant"], f"each row once: {ops}")
    check([s["file"] for s in res["sources"]] == ["rows_batchnorm.json", "rows_quant.json"],
          "each part listed once in sources")
    with open(os.path.join(d, "h100.md")) as f:
        md = f.read()
    check(md.count("## BatchNorm") == 1 and md.count("## Quant") == 1 and md.startswith("# main"),
          "each part's markdown once, after the main file's")
    # bench/results/ holds the merged files alone: a later run's part merges in.
    for ext in (".json", ".md"):
        os.remove(os.path.join(d, "rows_batchnorm" + ext))
    write(d, "rows_quant", {"gpu": "h100", "rows": [{"op": "rmsnorm_fwd_quant", "us": 4.0}]}, "## Quant 2\n")
    r = merge(d)
    check(r.returncode == 0, "merge with an earlier part's file gone succeeds")
    with open(os.path.join(d, "h100.json")) as f:
        res = json.load(f)
    got = sorted((x["op"], x["us"]) for x in res["rows"])
    check(got == [("batchnorm_bwd", 2.0), ("layernorm_fwd", 1.0), ("rmsnorm_fwd_quant", 4.0)],
          f"the gone part's rows kept, the present part's replaced: {got}")
    check(sorted(s["file"] for s in res["sources"]) == ["rows_batchnorm.json", "rows_quant.json"],
          "sources: the gone part kept, the present one once")
    with open(os.path.join(d, "h100.md")) as f:
        md = f.read()
    check(md.count("## BatchNorm") == 1 and "## Quant\n" not in md and md.count("## Quant 2") == 1,
          "the gone part's section kept, the present part's replaced")
    write(d, "rows_other", {"gpu": "h200", "rows": []}, "")
    r = merge(d)
    check(r.returncode != 0 and "h200" in r.stderr, "a part from another GPU is refused")

finish("merge_results")
