#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/gn_rows.py on made-up gn_time printouts (no GPU): the planner's
runs are averaged into us / pct_copy, each forced schedule adds
<schedule>_us and vs_<schedule>, fused only on channels-first forward cells,
the issue's PyTorch figure joins the forward SiLU cells, and inputs that are
not SCHEDULE=FILE, or from two GPUs, are refused."""
import json
import os
import subprocess
import sys
import tempfile

from checks import ROOT, check, finish  # tests/host/checks.py

ROWS = os.path.join(ROOT, "bench", "gn_rows.py")


def printout(device, cells):
    lines = [f"device {device}, L2 50 MB",
             "shape                lay   pass epilogue         us      GB/s   %copy  copyGB/s"]
    for shape, lay, pas, epi, us, pct in cells:
        lines.append(f"{shape:<20} {lay:<5} {pas:<4} {epi:<9} {us:9.1f} {1000:9.0f} {pct:6.1f}% {2600:9.0f}")
    return "\n".join(lines) + "\n"


def cells(scale):
    return [("[1,512,128,128]", "nchw", "fwd", "none", 20.0 * scale, 60.0 / scale),
            ("[1,512,128,128]", "nchw", "fwd", "silu", 22.0 * scale, 55.0 / scale),
            ("[1,512,128,128]", "nchw", "bwd", "none", 40.0 * scale, 50.0 / scale),
            ("[1,512,128,128]", "nhwc", "fwd", "silu+ss", 30.0 * scale, 40.0 / scale)]


def run(d, *inputs):
    return subprocess.run([sys.executable, ROWS, os.path.join(d, "out"), "--run", "t", "--note", "n", *inputs],
                          capture_output=True, text=True)


with tempfile.TemporaryDirectory() as d:
    files = {}
    for name, dev, scale in (("p1", "GPU A", 1.0), ("p2", "GPU A", 1.2), ("s", "GPU A", 1.5), ("f", "GPU A", 2.0),
                             ("other", "GPU B", 1.0)):
        files[name] = os.path.join(d, name + ".txt")
        with open(files[name], "w") as f:
            f.write(printout(dev, cells(scale)))
    r = run(d, f"planner={files['p1']}", f"planner={files['p2']}", f"stream={files['s']}", f"fused={files['f']}")
    check(r.returncode == 0, f"rows made (rc {r.returncode}: {r.stderr.strip()})")
    rows = json.load(open(os.path.join(d, "out", "rows_groupnorm.json")))["rows"]
    check(len(rows) == 4, "one row per cell")
    fwd = next(x for x in rows if x["op"] == "groupnorm_fwd" and x["epilogue"] == "none")
    check(fwd["us"] == 22.0 and fwd["shape"] == [1, 512, 128, 128], "us is the planner runs' mean (20, 24 -> 22)")
    check(fwd["stream_us"] == 30.0 and fwd["vs_stream"] == round(30 / 22, 2), "stream_us, vs_stream over the planner")
    check(fwd["fused_us"] == 40.0, "fused on a channels-first forward cell")
    bwd = next(x for x in rows if x["op"] == "groupnorm_bwd")
    check("fused_us" not in bwd and bwd.get("weight_grads") is True, "no fused on a backward cell")
    ss = next(x for x in rows if x["epilogue"] == "silu_ss")
    check("fused_us" not in ss and ss["layout"] == "nhwc", "no fused on a channels-last cell; silu+ss -> silu_ss")
    silu = next(x for x in rows if x["epilogue"] == "silu")
    check(silu.get("torch_us_issue_run") == 270, "the issue's PyTorch figure on the forward SiLU cell")
    md = open(os.path.join(d, "out", "rows_groupnorm.md")).read()
    check("vs stream (fwd, bwd)" in md and "| [1, 512, 128, 128] | nchw |" in md, "the markdown table")
    r = run(d, f"planner={files['p1']}", f"stream={files['other']}")
    check(r.returncode != 0 and "one GPU" in r.stderr, "printouts from two GPUs refused")
    r = run(d, files["p1"])
    check(r.returncode != 0 and "SCHEDULE=FILE" in r.stderr, "an input without SCHEDULE= refused")

finish("gn_rows")
