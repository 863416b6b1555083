#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/gn_time's printouts -> OUT/rows_groupnorm.json and .md (then
bench/merge_results.py OUT merges them into OUT/<gpu>.json and .md).

Each input is SCHEDULE=FILE: one gn_time run with FNORM_GN_SCHEDULE unset
(planner) or set to persistent / stream / fused; several runs of a schedule
are averaged. A row's us, pct_copy and copy_gbps are the planner's; every
other schedule given adds <schedule>_us and vs_<schedule> (its time over the
planner's). fused differs from stream only in the channels-first forward,
so its times are kept there alone.
Usage: gn_rows.py OUT --run LABEL --note NOTE planner=F [planner=F ...]
                  [stream=F ...] [persistent=F ...] [fused=F ...]
"""
import argparse
import json
import os
import re
import statistics
import sys

SCHEDULES = ("planner", "stream", "persistent", "fused")
# issue 38's own PyTorch eager figures (another process) for the forward
# with SiLU, µs: (shape, layout) -> µs
ISSUE_TORCH_US = {
    ("[1,512,128,128]", "nchw"): 270, ("[1,512,128,128]", "nhwc"): 329,
    ("[1,512,256,256]", "nchw"): 1028, ("[1,512,256,256]", "nhwc"): 1286,
    ("[1,256,512,512]", "nchw"): 2010, ("[1,256,512,512]", "nhwc"): 2812,
    ("[4,128,512,512]", "nchw"): 1406, ("[4,128,512,512]", "nhwc"): 2923,
    ("[8,320,64,64]", "nchw"): 108, ("[8,320,64,64]", "nhwc"): 183,
    ("[2,1280,32,32]", "nchw"): 71, ("[2,1280,32,32]", "nhwc"): 87,
}
LINE = re.compile(r"^(\[[0-9,]+\])\s+(nchw|nhwc)\s+(fwd|bwd)\s+(\S+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)%\s+([0-9.]+)")


def parse(path: str):
    device, cells = None, {}
    with open(path) as f:
        for line in f:
            if line.startswith("device "):
                device = line[len("device "):].split(",")[0].strip()
            m = LINE.match(line)
            if m:
                shape, lay, pas, epi, us, _, pct, copy = m.groups()
                cells[(shape, lay, pas, epi)] = (float(us), float(pct), float(copy))
    if not cells:
        raise SystemExit(f"gn_rows: no gn_time lines in {path}")
    return device, cells


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--run", required=True)
    ap.add_argument("--note", required=True)
    ap.add_argument("inputs", nargs="+", help="SCHEDULE=FILE")
    args = ap.parse_args()
    runs = {s: [] for s in SCHEDULES}
    devices = set()
    for item in args.inputs:
        sched, _, path = item.partition("=")
        if sched not in runs or not path:
            print(f"gn_rows: '{item}' is not SCHEDULE=FILE with SCHEDULE in {SCHEDULES}", file=sys.stderr)
            return 2
        device, cells = parse(path)
        devices.add(device)
        runs[sched].append(cells)
    if len(devices) != 1 or not runs["planner"]:
        print(f"gn_rows: need planner runs, all from one GPU (got {sorted(map(str, devices))})", file=sys.stderr)
        return 2

    def mean(sched, key, i):
        vals = [c[key][i] for c in runs[sched] if key in c]
        return statistics.mean(vals) if vals else None

    rows = []
    for key in runs["planner"][0]:
        shape, lay, pas, epi = key
        us = mean("planner", key, 0)
        row = {"op": f"groupnorm_{pas}", "dtype": "bf16", "shape": json.loads(shape), "groups": 32, "layout": lay,
               "epilogue": epi.replace("+", "_"), "us": round(us, 1), "pct_copy": round(mean("planner", key, 1), 1),
               "copy_gbps": round(mean("planner", key, 2))}
        if pas == "bwd":
            row["weight_grads"] = True
        for sched in SCHEDULES[1:]:
            if sched == "fused" and (lay != "nchw" or pas != "fwd"):
                continue
            other = mean(sched, key, 0)
            if other is not None:
                row[f"{sched}_us"] = round(other, 1)
                row[f"vs_{sched}"] = round(other / us, 2)
        if pas == "fwd" and epi == "silu" and (shape, lay) in ISSUE_TORCH_US:
            row["torch_us_issue_run"] = ISSUE_TORCH_US[(shape, lay)]
            row["vs_torch_issue_run"] = round(ISSUE_TORCH_US[(shape, lay)] / us, 1)
        row["run"] = args.run
        rows.append(row)

    def cell(shape, lay, pas, epi):
        r = next((r for r in rows if r["op"] == f"groupnorm_{pas}" and json.dumps(r["shape"]).replace(" ", "") == shape
                  and r["layout"] == lay and r["epilogue"] == epi), None)
        return r

    given = [s for s in SCHEDULES[1:] if runs[s]]
    md = [f"### GroupNorm (bench/gn_time, {devices.pop()}, {args.run}; bf16, 32 groups, bf16 γ/β)", "",
          "Ours only: CUDA-graph replays over buffers rotated past 8× L2, % of a device copy of the same bytes measured "
          "in the same process. Bytes: forward read x + write y; backward read x, dy + write dx (every backward here "
          "also computes dγ/dβ, and with scale/shift dscale/dshift, without counting their bytes). Each cell is the "
          "planner's schedule (src/groupnorm/gn_plan.cpp: the streaming passes, the channels-first forward in one "
          "launch where x is larger than L2, the persistent kernel for the channels-last forward of one sample of "
          "≤ 2^24 values); `vs <schedule>`: that schedule's time (FNORM_GN_SCHEDULE) over the planner's, same "
          "process. `vs PyTorch*`: against issue 38's own PyTorch eager figures (another process); "
          "`bench_groupnorm.py`'s rows time PyTorch in the same process.", ""]
    head = ["shape", "layout", "fwd µs (% copy)", "fwd SiLU", "fwd SiLU+scale/shift", "vs PyTorch* (fwd SiLU)",
            "bwd (dx, dγ/dβ)", "bwd SiLU", "bwd SiLU+ss (all grads)"] + [f"vs {s} (fwd, bwd)" for s in given]
    md += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    cases = []
    for shape, lay, _, _ in runs["planner"][0]:
        if (shape, lay) not in cases:
            cases.append((shape, lay))

    def fmt(r):
        return f"{r['us']} ({r['pct_copy']}%)" if r else ""

    for shape, lay in cases:
        f = [cell(shape, lay, "fwd", e) for e in ("none", "silu", "silu_ss")]
        b = [cell(shape, lay, "bwd", e) for e in ("none", "silu", "silu_ss")]
        vs_t = f[1].get("vs_torch_issue_run") if f[1] else None
        line = [json.dumps(json.loads(shape)), lay] + [fmt(r) for r in f] + [f"{vs_t}×" if vs_t else ""] + \
               [fmt(r) for r in b]
        for s in given:
            vf, vb = (f[0] or {}).get(f"vs_{s}"), (b[0] or {}).get(f"vs_{s}")
            line.append(", ".join("–" if v is None else str(v) for v in (vf, vb)))
        md.append("| " + " | ".join(line) + " |")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "rows_groupnorm.json"), "w") as fh:
        json.dump({"rows": rows, "note": args.note}, fh, indent=1)
    with open(os.path.join(args.out, "rows_groupnorm.md"), "w") as fh:
        fh.write("\n".join(md) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
