#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The shared library exports exactly the symbols in api/symbols.txt, and
every function the public header declares is among them."""
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "gen"))
import c_header  # noqa: E402  (gen/c_header.py: the one reader of the header)


def main(lib, expected_file, header):
    out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True, check=True).stdout
    exported = sorted({l.split()[-1] for l in out.splitlines() if l.split() and l.split()[-2] in ("T", "W")})
    expected = sorted(l.strip() for l in open(expected_file) if l.strip() and not l.startswith("#"))
    declared = sorted({f.name for f in c_header.functions(open(header).read())})
    ok = True
    for name in sorted(set(exported) - set(expected)):
        print(f"FAIL exported but not in {expected_file}: {name}")
        ok = False
    for name in sorted(set(expected) - set(exported)):
        print(f"FAIL listed but not exported: {name}")
        ok = False
    for name in sorted(set(declared) - set(exported)):
        print(f"FAIL declared in the header but not exported: {name}")
        ok = False
    other = [l for l in out.splitlines() if l.split() and l.split()[-2] in ("T", "W", "D", "B") and not l.split()[-1].startswith("fnorm_")]
    for l in other:
        print(f"FAIL non-fnorm symbol exported: {l}")
        ok = False
    print(f"abi: {len(exported)} exported, {len(declared)} declared, {len(expected)} listed")
    print("abi: 1 passed, 0 failed" if ok else "abi: 0 passed, 1 failed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
