#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Build libfusednorm and run its whole test suite (README's test command).
# Installs the pinned build tools if they are missing (scripts/setup.sh).
# Without a GPU the GPU tests report SKIP (exit 77) with the reason; the host
# tests (headers, ABI, API validation, generator, reference math) really run.
#
# Then a second build, BUILD_DIR-sanitize, with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer and the libFuzzer targets (-Dfuzz=true): the
# host suite runs again there, and each fuzz target for FNORM_FUZZ_SECONDS
# (default 30). clang and libFuzzer are installed from Debian's packages when
# missing. FNORM_SANITIZE=0 leaves that build out.
#
# Then packaging (scripts/check-packaging.sh): `pip wheel .` and
# `pip install .` through meson-python, the wheel's contents, and importing
# the installed package with no environment variable. FNORM_PACKAGING=0
# leaves it out. Doxygen (the api-reference test) is installed from Debian's
# packages when missing, as clang is for the sanitizer build.
#
# The closing lines give 'N passed, N failed, N skipped' per build, and the
# last line the overall count.
# Usage: scripts/test.sh [BUILD_DIR] [extra meson test args for the main build...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
PATH=$("$root/scripts/setup.sh")
export PATH
build=${1:-$root/build}
shift || true
start=$(date +%s)
if ! command -v doxygen >/dev/null 2>&1; then
  echo "test: doxygen missing (the API reference test); installing it from Debian" >&2
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        doxygen; } >&2 || true
  fi
fi
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

# One 'N passed, N failed, N skipped' line per build (SKIP reasons first);
# counts accumulate in $counts_file for the overall line.
counts_file=$(mktemp)
trap 'rm -f "$counts_file"' EXIT
summarize() {  # summarize LABEL TESTLOG.json
  python3 - "$1" "$2" "$counts_file" <<'PY'
import json, sys
label, log, acc = sys.argv[1:4]
counts = {"OK": 0, "FAIL": 0, "SKIP": 0}
for line in open(log):
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
print(f"{label}: {counts['OK']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped")
with open(acc, "a") as f:
    f.write(f"{counts['OK']} {counts['FAIL']} {counts['SKIP']}\n")
PY
}
summarize "tests ($(basename "$build"))" "$build/meson-logs/testlog.json"

# ---- packaging: the wheel and pip install ----------------------------------
pkg_rc=0
if [ "${FNORM_PACKAGING:-1}" != 0 ]; then
  pstart=$(date +%s)
  set +e
  mkdir -p "$build-packaging"
  "$root/scripts/check-packaging.sh" "$build-packaging" | tee "$build-packaging/check.log"
  pkg_rc=${PIPESTATUS[0]}
  set -e
  echo "packaging: $(( $(date +%s) - pstart )) s"
  sed -n 's/^packaging: \([0-9]*\) passed, \([0-9]*\) failed$/\1 \2 0/p' "$build-packaging/check.log" >> "$counts_file"
fi

# ---- the sanitizer + fuzzing build ------------------------------------------
san_rc=0
if [ "${FNORM_SANITIZE:-1}" != 0 ]; then
  san=$build-sanitize
  sstart=$(date +%s)
  probe_fuzzer() {
    command -v clang++ >/dev/null 2>&1 || return 1
    local d
    d=$(mktemp -d)
    printf '#include <cstddef>\n#include <cstdint>\nextern "C" int LLVMFuzzerTestOneInput(const uint8_t *, size_t) { return 0; }\n' > "$d/p.cpp"
    clang++ -fsanitize=fuzzer,address,undefined "$d/p.cpp" -o "$d/p" >/dev/null 2>&1
    local r=$?
    rm -rf "$d"
    return $r
  }
  if ! probe_fuzzer; then
    echo "sanitize: clang with libFuzzer/ASan/UBSan missing; installing clang and libclang-rt-dev (Debian)" >&2
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
          clang libclang-rt-dev; } >&2 || true
    else
      echo "sanitize: not root or no apt-get: install clang and libclang-rt-dev (or libclang-rt-N-dev) yourself" >&2
    fi
  fi
  if ! probe_fuzzer; then
    echo "sanitize: FAIL: clang cannot build a libFuzzer + ASan + UBSan program; the sanitizer build did not run"
    echo "0 1 0" >> "$counts_file"
    san_rc=1
  else
    # -fsanitize=fuzzer-no-link: coverage counters in the library's own C++
    # (the fuzzers are guided by them). -fno-sanitize=enum: the C ABI admits
    # any int for an enum argument (the library refuses unknown values with
    # BAD_PARAM), which C++ formally limits to the enumerators' bit range;
    # clang does not exploit that without -fstrict-enums. nvcc links the
    # tests whose objects include CUDA code: -ccbin=clang++ makes that link
    # use clang's sanitizer runtimes (the .cu files compile as usual).
    # One arch: the sanitizers check host code; the kernels are the main
    # build's (default archs), and each arch would add its compile time.
    san_opts=(-Db_sanitize=address,undefined -Db_lundef=false -Dfuzz=true -Dgpu_archs=90
              "-Dcpp_args=-fsanitize=fuzzer-no-link -fno-sanitize=enum" "-Dc_args=-fno-sanitize=enum"
              "-Dcuda_link_args=-ccbin=clang++")
    if [ -f "$san/build.ninja" ]; then
      meson setup --reconfigure "$san" "$root" "${san_opts[@]}" >/dev/null
    else
      CC=clang CXX=clang++ meson setup "$san" "$root" "${san_opts[@]}" >/dev/null
    fi
    # Build only what the host and fuzz suites run (the shared library itself
    # is not linked here: its -Wl,--no-undefined and clang's ASan runtime,
    # which lives in the executable, do not mix).
    targets=$(cd "$san" && python3 - <<'PY'
import json, os, subprocess
tests = json.loads(subprocess.run(["meson", "introspect", "--tests"], capture_output=True, text=True, check=True).stdout)
tgts = json.loads(subprocess.run(["meson", "introspect", "--targets"], capture_output=True, text=True, check=True).stdout)
by_id = {t["id"]: t for t in tgts}
want = set()
for t in tests:
    if {s.split(":")[-1] for s in t["suite"]} & {"host", "fuzz"}:
        for i in t["depends"]:
            for f in by_id[i]["filename"]:
                want.add(os.path.relpath(f, os.getcwd()))
        for c in t["cmd"]:
            for tg in tgts:
                if c in tg["filename"]:
                    want.update(os.path.relpath(f, os.getcwd()) for f in tg["filename"])
print(" ".join(sorted(want)))
PY
)
    set +e
    # shellcheck disable=SC2086
    ninja -C "$san" $targets
    brc=$?
    echo "sanitize build: $(( $(date +%s) - sstart )) s"
    if [ $brc -ne 0 ]; then
      echo "sanitize: FAIL: the sanitizer build failed"
      echo "0 1 0" >> "$counts_file"
      san_rc=1
    else
      ASAN_OPTIONS=${ASAN_OPTIONS:-protect_shadow_gap=0:detect_leaks=1:abort_on_error=1} \
      UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
        meson test -C "$san" --no-rebuild --print-errorlogs --suite host --suite fuzz
      san_rc=$?
      summarize "tests ($(basename "$san"): host under ASan+UBSan, fuzz)" "$san/meson-logs/testlog.json"
    fi
    set -e
  fi
fi

# The overall line, last.
awk '{p += $1; f += $2; s += $3} END {printf "tests: %d passed, %d failed, %d skipped\n", p, f, s}' "$counts_file"
[ $rc -ne 0 ] && exit $rc
[ $pkg_rc -ne 0 ] && exit $pkg_rc
exit $san_rc
