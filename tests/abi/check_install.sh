#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# An installed prefix works for C users (issue 27 item 6): `meson install`
# into a scratch prefix (DESTDIR), then
#  - pkg-config: `--cflags --libs fusednorm` include -lcudart and CUDA's
#    include directory, and a C program using the CUDA runtime and the ABI
#    compiles and links with them alone;
#  - CMake: a project with find_package(fusednorm 0.1 REQUIRED) and
#    target_link_libraries(... fusednorm::fusednorm) configures and builds,
#    and the program it links names libfusednorm.so.0 and libcudart.
# Usage: check_install.sh BUILD_DIR
set -euo pipefail
build=$1
for tool in pkg-config cmake; do
  command -v $tool >/dev/null || { echo "$tool not found (Debian: apt-get install pkgconf cmake)"; exit 99; }
done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
meson install -C "$build" --no-rebuild --quiet --destdir "$tmp/dest" >/dev/null
prefix=$(meson introspect "$build" --buildoptions | python3 -c \
  "import json,sys; print(next(o['value'] for o in json.load(sys.stdin) if o['name'] == 'prefix'))")
root=$tmp/dest$prefix
pc=$(find "$root" -name fusednorm.pc | head -1)
cfg=$(find "$root" -name fusednormConfig.cmake | head -1)
[ -n "$pc" ] && [ -n "$cfg" ] || { echo "FAIL: no fusednorm.pc or fusednormConfig.cmake under $root"; exit 1; }

# pkg-config, relocated to where the prefix landed.
flags=$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --define-variable=prefix="$root" --cflags --libs fusednorm)
echo "pkg-config --cflags --libs fusednorm: $flags"
case " $flags " in *" -lcudart "*) ;; *) echo "FAIL: no -lcudart in pkg-config's flags"; exit 1;; esac
cat > "$tmp/uses_cudart.c" <<'C'
#include <cuda_runtime_api.h>
#include <stdio.h>
#include "fusednorm.h"
int main(void) {
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, 16);
  printf("libfusednorm %u, cudaMalloc: %d\n", fnorm_get_version(), (int)e);
  if (e == cudaSuccess) cudaFree(p);
  return 0;
}
C
# shellcheck disable=SC2086
${CC:-cc} -std=c99 -o "$tmp/uses_cudart" "$tmp/uses_cudart.c" $flags
echo "pkg-config: compiled and linked a program calling cudaMalloc and fnorm_get_version"

# CMake's find_package from the prefix.
mkdir -p "$tmp/proj"
cp "$tmp/uses_cudart.c" "$tmp/proj/main.c"
cat > "$tmp/proj/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.17)
project(uses_fusednorm C)
find_package(fusednorm 0.1 REQUIRED)
message(STATUS "fusednorm ${fusednorm_VERSION} from ${fusednorm_DIR}")
add_executable(uses_fusednorm main.c)
target_link_libraries(uses_fusednorm PRIVATE fusednorm::fusednorm)
CMAKE
cmake -S "$tmp/proj" -B "$tmp/proj/build" -DCMAKE_PREFIX_PATH="$root" > "$tmp/cmake.log" 2>&1 \
  || { cat "$tmp/cmake.log"; echo "FAIL: cmake configure"; exit 1; }
grep "fusednorm " "$tmp/cmake.log" | sed 's/^-- //'
cmake --build "$tmp/proj/build" > "$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; echo "FAIL: cmake build"; exit 1; }
needed=$(readelf -d "$tmp/proj/build/uses_fusednorm" | grep NEEDED)
echo "$needed"
echo "$needed" | grep -q "libfusednorm.so.0" && echo "$needed" | grep -q "libcudart" \
  || { echo "FAIL: the CMake-built program does not link libfusednorm.so.0 and libcudart"; exit 1; }
echo "CMake: find_package(fusednorm) from the installed prefix, built and linked"
