#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Code built against the uninstalled library finds fusednorm.h and links
# through meson-uninstalled/fusednorm-uninstalled.pc (what the Rust and Go
# bindings use). Usage: check_pkgconfig.sh BUILD_DIR C_SOURCE
set -euo pipefail
build=$1 src=$2
command -v pkg-config >/dev/null || { echo "SKIP: no pkg-config program"; exit 77; }
export PKG_CONFIG_PATH=$build/meson-uninstalled
flags=$(pkg-config --cflags --libs fusednorm-uninstalled)
echo "pkg-config fusednorm-uninstalled: $flags"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# shellcheck disable=SC2086
${CC:-cc} -std=c99 -o "$tmp/a.out" "$src" $flags
echo "compiled and linked $src against the build tree"
