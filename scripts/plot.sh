#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Render the benchmark results JSON into PNG charts beside it.
# Installs the pinned matplotlib into .tools/ (the virtual environment
# scripts/setup.sh makes; created here if absent) when it is missing there.
# Usage: scripts/plot.sh [RESULTS_JSON ...]   (default: bench/results/*.json)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
MATPLOTLIB_PIN=3.10.7
py=$root/.tools/bin/python
[ -x "$py" ] || python3 -m venv "$root/.tools"
if ! "$py" -c "import matplotlib, sys; sys.exit(matplotlib.__version__ != '$MATPLOTLIB_PIN')" 2>/dev/null; then
  echo "plot: installing matplotlib==$MATPLOTLIB_PIN into .tools/" >&2
  "$py" -m pip install -q --disable-pip-version-check "matplotlib==$MATPLOTLIB_PIN" >&2
fi
if [ $# -eq 0 ]; then
  set -- $(ls "$root"/bench/results/*.json | grep -v '/rows_')
fi
exec "$py" "$root/bench/plot.py" "$@"
