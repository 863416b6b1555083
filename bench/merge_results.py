#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Merge the benchmark outputs of one run into DIR/<gpu>.json and <gpu>.md:
the LayerNorm/RMSNorm file bench_layernorm.py wrote there, plus the rows of
every DIR/rows_<family>.json (and its .md section) the other benchmarks wrote
(bench_batchnorm.py, bench_linear.py, bench_syncbn.py, bench_torch.py, and
the C program host_overhead: rows "host_overhead_c").
Parts merged earlier whose rows_*.json is no longer in DIR keep their rows
and their .md section (bench/results/ holds the merged files alone): only the
parts present are rebuilt.
Usage: merge_results.py DIR
"""
import glob
import json
import os
import sys

MARK = "<!-- merged from"


def main() -> int:
    out = sys.argv[1]
    mains = [p for p in glob.glob(os.path.join(out, "*.json")) if not os.path.basename(p).startswith("rows_")]
    if len(mains) != 1:
        print(f"merge_results: expected one <gpu>.json in {out}, found {mains}", file=sys.stderr)
        return 1
    with open(mains[0]) as f:
        result = json.load(f)
    md_path = mains[0][:-5] + ".md"
    with open(md_path) as f:
        md = f.read()
    # Merging again (a later benchmark of the same run added its rows_*.json)
    # rebuilds what an earlier merge took from the parts present now; the
    # rows and sections of parts not present stay as they are.
    parts = sorted(glob.glob(os.path.join(out, "rows_*.json")))
    present = {os.path.basename(p) for p in parts}
    result["rows"] = [r for r in result["rows"] if r.get("source") not in present]
    result["errors"] = [e for e in result.get("errors", []) if e.get("source") not in present]
    result["sources"] = [s for s in result.get("sources", []) if s.get("file") not in present]
    head, *sections = md.split(MARK)
    md = head.rstrip() + "\n"
    for sec in sections:  # " name.json -->\n...": kept unless its part is merged again
        if sec.split("-->", 1)[0].strip() not in present:
            md += f"\n{MARK}{sec.rstrip()}\n"
    for part in parts:
        with open(part) as f:
            extra = json.load(f)
        if extra.get("gpu") not in (None, result["gpu"]):
            print(f"merge_results: {part} is from {extra.get('gpu')}, not {result['gpu']}", file=sys.stderr)
            return 1
        name = os.path.basename(part)
        result["rows"] += [dict(r, source=name) for r in extra.get("rows", [])]
        result.setdefault("sources", []).append(
            {"file": name, "copy_gbps": extra.get("copy_gbps"), "note": extra.get("note")})
        result["errors"] += [dict(e, source=name) for e in extra.get("errors", [])]
        if os.path.exists(part[:-5] + ".md"):
            with open(part[:-5] + ".md") as f:
                md += f"\n{MARK} {name} -->\n" + f.read().rstrip() + "\n"
            if extra.get("note"):
                md += f"\n_{extra['note']}_\n"
    for key in ("errors", "sources"):
        if not result.get(key):
            result.pop(key, None)
    with open(mains[0], "w") as f:
        json.dump(result, f, indent=1)
    with open(md_path, "w") as f:
        f.write(md)
    print(f"merged {len(result['rows'])} rows into {mains[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
