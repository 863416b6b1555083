#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Run one libFuzzer target for a bounded time: run_fuzzer.sh TARGET CORPUS_DIR
# FNORM_FUZZ_SECONDS (default 30) is the time; FNORM_FUZZ_SEED a fixed seed
# (default: libFuzzer picks one and prints it as "Seed: N"; rerun with
# FNORM_FUZZ_SEED=N to reproduce). A crash, a sanitizer report, a timeout or
# an out-of-memory leaves the input in CORPUS_DIR/../ as crash-*/timeout-*/
# oom-* (replay it: TARGET FILE) and fails the test.
set -uo pipefail
target=${1:?usage: run_fuzzer.sh TARGET CORPUS_DIR}
corpus=${2:?usage: run_fuzzer.sh TARGET CORPUS_DIR}
mkdir -p "$corpus"
seeds=$(cd "$(dirname "$0")" && pwd)/seeds/$(basename "$target")
# libFuzzer's own default exit status for a finding is 77, which meson reads
# as a skip: findings exit 1.
args=(-max_total_time="${FNORM_FUZZ_SECONDS:-30}" -timeout=20 -rss_limit_mb=2048 -max_len=512
      -error_exitcode=1 -timeout_exitcode=1
      -print_final_stats=1 -artifact_prefix="$(dirname "$corpus")/")
[ -n "${FNORM_FUZZ_SEED:-}" ] && args+=(-seed="$FNORM_FUZZ_SEED")
dirs=("$corpus")
[ -d "$seeds" ] && dirs+=("$seeds")
# The CUDA runtime maps memory where ASan's shadow gap would be protected;
# UBSan findings stop the run (they are findings, not warnings).
export ASAN_OPTIONS=${ASAN_OPTIONS:-protect_shadow_gap=0:detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
log=$(dirname "$corpus")/$(basename "$target").log
"$target" "${args[@]}" "${dirs[@]}" > "$log" 2>&1
rc=$?
grep -m1 'Seed:' "$log"
tail -40 "$log"
echo "$(basename "$target"): libFuzzer exit $rc"
exit "$rc"
