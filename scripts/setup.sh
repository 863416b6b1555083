#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Make sure the build tools are there; print the directory to put first on PATH.
# Uses meson/ninja/Jinja2 already installed when recent enough (the GPU machine
# has them and no network); otherwise installs the pinned versions from PyPI
# into .tools/ (a virtual environment inside the checkout, ignored by git).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
MESON_PIN=1.12.1
NINJA_PIN=1.13.0
JINJA_PIN=3.1.6

# CUDA's compiler: the usual toolkit location if nvcc is not on PATH yet.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
command -v nvcc >/dev/null 2>&1 || { echo "setup: nvcc (CUDA toolkit) not found; install CUDA 12+ and put its bin/ on PATH" >&2; exit 1; }

have_tools() {
  command -v meson >/dev/null 2>&1 && command -v ninja >/dev/null 2>&1 || return 1
  python3 - <<'PY' >/dev/null 2>&1 || return 1
import jinja2, subprocess
v = subprocess.run(["meson", "--version"], capture_output=True, text=True).stdout.strip()
assert tuple(int(x) for x in v.split(".")[:2]) >= (1, 1)
PY
}

if [ -x "$root/.tools/bin/meson" ]; then
  export PATH="$root/.tools/bin:$PATH"
fi
if ! have_tools; then
  echo "setup: installing meson==$MESON_PIN ninja==$NINJA_PIN Jinja2==$JINJA_PIN into .tools/" >&2
  python3 -m venv "$root/.tools"
  "$root/.tools/bin/python" -m pip install -q --disable-pip-version-check \
    "meson==$MESON_PIN" "ninja==$NINJA_PIN" "Jinja2==$JINJA_PIN" >&2
  export PATH="$root/.tools/bin:$PATH"
fi
have_tools || { echo "setup: meson/ninja/jinja2 still unusable" >&2; exit 1; }
echo "$PATH"
