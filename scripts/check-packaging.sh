#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `pip wheel .` and `pip install .` from this tree (meson-python, pyproject.toml),
# then the installed package as a user gets it: `import fusednorm` finds its
# own library with no environment variable, the wheel holds the library, its
# headers and the package, and `import fusednorm.torch` (where PyTorch is
# importable) compiles nothing. Part of scripts/test.sh.
#
# To keep the test command's time down this builds one arch and one dtype
# (-Dgpu_archs=90 -Ddtypes=bf16): what is checked here is the packaging; the
# kernels are the main build's. A release wheel is `pip wheel .` as is.
# Usage: scripts/check-packaging.sh WORK_DIR   (prints 'packaging: N passed, N failed')
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=${1:?usage: check-packaging.sh WORK_DIR}
mkdir -p "$work" && work=$(cd "$work" && pwd)
passed=0 failed=0
ok() { echo "ok: $1"; passed=$((passed + 1)); }
bad() { echo "FAIL: $1"; failed=$((failed + 1)); }
args=(--no-deps -Csetup-args=-Dgpu_archs=90 -Csetup-args=-Ddtypes=bf16 -Cbuild-dir="$work/build")
py=${PYTHON:-python3}
t=$(date +%s)
rm -rf "$work/wheel" "$work/site" "$work/site-src"
if "$py" -m pip wheel -q "${args[@]}" -w "$work/wheel" "$root" > "$work/wheel.log" 2>&1; then
  ok "pip wheel . ($(( $(date +%s) - t )) s): $(cd "$work/wheel" && ls)"
else
  tail -30 "$work/wheel.log"; bad "pip wheel ."
fi
whl=$(ls "$work"/wheel/fusednorm-*.whl 2>/dev/null | head -1)
if [ -n "$whl" ]; then
  contents=$("$py" -m zipfile -l "$whl")
  for f in fusednorm/_lib/libfusednorm.so fusednorm/include/fusednorm.h fusednorm/include/fusednorm_version.h \
           fusednorm/__init__.py fusednorm/torch/_ops.py fusednorm/torch/build.py fusednorm/torch/csrc/ops.cpp \
           "dist-info/LICENSE"; do
    if grep -q "$f" <<<"$contents"; then ok "wheel holds $f"; else bad "wheel lacks $f"; fi
  done
  # Every module of the package's source tree is in the wheel (the install
  # list in bindings/python/fusednorm/meson.build is kept by hand).
  missing=
  for f in $(cd "$root/bindings/python" && find fusednorm -name '*.py' | sort); do
    grep -q "^$f " <<<"$contents" || missing="$missing $f"
  done
  [ -z "$missing" ] && ok "wheel holds every module of bindings/python/fusednorm" \
    || bad "wheel lacks package modules:$missing (bindings/python/fusednorm/meson.build)"
  version=$("$root/scripts/version.py")
  case $(basename "$whl") in fusednorm-"$version"-*) ok "wheel version $version (api/fusednorm_version.h)";;
    *) bad "wheel $(basename "$whl") is not version $version";; esac
  "$py" -m pip install -q --no-index --no-deps --target "$work/site" "$whl" > "$work/install.log" 2>&1 \
    && ok "pip install --no-index of the wheel" || { cat "$work/install.log"; bad "pip install of the wheel"; }
fi
t=$(date +%s)
# The same tree through `pip install .` (the build directory is reused).
if "$py" -m pip install -q "${args[@]}" --target "$work/site-src" "$root" > "$work/install-src.log" 2>&1; then
  ok "pip install . ($(( $(date +%s) - t )) s)"
else
  tail -30 "$work/install-src.log"; bad "pip install ."
fi
# As a user: from another directory, no FNORM_LIB, nothing but the install
# on sys.path.
for site in "$work/site" "$work/site-src"; do
  [ -d "$site/fusednorm" ] || continue
  out=$(cd / && env -u FNORM_LIB -u FNORM_INCLUDE_DIR PYTHONPATH="$site" "$py" - <<'PY' 2>&1
import os, warnings
import fusednorm
lib = fusednorm.lib._name
assert lib.startswith(os.path.dirname(fusednorm.__file__)), lib
print("import fusednorm:", ".".join(map(str, fusednorm.version())), "from", os.path.relpath(lib, os.path.dirname(fusednorm.__file__)))
pkg = os.path.dirname(fusednorm.__file__)
assert os.path.isfile(os.path.join(pkg, "include", "fusednorm.h"))  # what `python -m fusednorm.torch.build` uses
print("headers: include/fusednorm.h")
try:
    import torch  # noqa: F401
except ImportError:
    print("no PyTorch here: fusednorm.torch not imported")
else:
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        import fusednorm.torch as ft
    print("fusednorm.torch ops:", ft.ops_available(), ft.ops_unavailable_reason(), [str(x.message) for x in w])
PY
)
  rc=$?
  echo "$out" | sed 's/^/  /'
  [ $rc -eq 0 ] && ok "import fusednorm from $(basename "$site") with no environment variable" \
    || bad "import fusednorm from $(basename "$site")"
done
echo "packaging: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
