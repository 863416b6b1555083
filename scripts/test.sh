#!/usr/bin/env bash
# Build libfusednorm and run its whole test suite (README's test command).
# Installs the pinned build tools if they are missing (scripts/setup.sh).
# Without a GPU the GPU tests report SKIP (exit 77) with the reason; the host
# tests (headers, ABI, API validation, generator, reference math) really run.
# Usage: scripts/test.sh [BUILD_DIR] [extra meson test args...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
PATH=$("$root/scripts/setup.sh")
export PATH
build=${1:-$root/build}
shift || true
start=$(date +%s)
if [ -f "$build/build.ninja" ]; then
  meson setup --reconfigure "$build" "$root" >/dev/null
else
  meson setup "$build" "$root"
fi
ninja -C "$build"
echo "build: $(( $(date +%s) - start )) s"
set +e
meson test -C "$build" --print-errorlogs "$@"
rc=$?
set -e
# One closing line in the plain 'N passed, N failed, N skipped' form.
python3 - "$build/meson-logs/testlog.json" <<'PY'
import json, sys
counts = {"OK": 0, "FAIL": 0, "SKIP": 0}
for line in open(sys.argv[1]):
    t = json.loads(line)
    r = t.get("result", "")
    if r in ("OK", "EXPECTEDFAIL"):
        counts["OK"] += 1
    elif r == "SKIP":
        counts["SKIP"] += 1
        why = [l for l in (t.get("stdout") or "").splitlines() if l.strip()]
        print(f"SKIP {t.get('name')}: {why[-1] if why else 'no reason printed'}")
    else:
        counts["FAIL"] += 1
print(f"tests: {counts['OK']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped")
PY
exit $rc
