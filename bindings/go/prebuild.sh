#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Build the Go binding's test binaries and examples here, for the GPU
# machine (which has no Go toolchain), into build-bindings/go/ (ignored by
# git; the device tool's `carry`); bindings/go/gpu-test.sh runs them there.
# Usage: bindings/go/prebuild.sh [BUILD_DIR]   (default: build; only read)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
PATH=$("$root/scripts/setup-go.sh")
export PATH
# libcudart for devmem: beside the toolkit's nvcc (what meson's cuda_root is).
nvcc_bin=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
cudalib=${CUDA_LIBDIR:-$(dirname "$(dirname "$(readlink -f "$nvcc_bin")")")/lib64}
# shellcheck source=goenv.sh
. "$root/bindings/go/goenv.sh" "$build" "$cudalib" "$root/.tools/go-prebuild"
out=$root/build-bindings/go
rm -rf "$out"
mkdir -p "$out"
cd "$root/bindings/go"
go vet ./...
# -s -w: no symbol tables (the carried tree is limited to 64 MiB).
go test -c -ldflags='-s -w' -o "$out/fusednorm.test" .
go test -c -ldflags='-s -w' -o "$out/half.test" ./half
go build -ldflags='-s -w' -o "$out/example-demo" ./examples/demo
go version > "$out/BUILT_WITH"
git -C "$root" rev-parse HEAD >> "$out/BUILT_WITH"
ls -la "$out"
