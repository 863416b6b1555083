# SPDX-License-Identifier: Apache-2.0
# Sourced by run-tests.sh and prebuild.sh: the Go environment for building
# the binding against the libfusednorm build tree BUILD.
#   . goenv.sh BUILD CUDA_LIBDIR STATE
# CUDA_LIBDIR: where libcudart is (devmem links it). STATE: where Go's build
# cache and module directory go (nothing is written outside it). Nothing is
# fetched: module proxy off, no toolchain download, no checksum database.
go_build=$1
go_cudalib=$2
go_state=$3
mkdir -p "$go_state"
export GOPROXY=off GOSUMDB=off GOTOOLCHAIN=local GOFLAGS=-mod=mod GOTELEMETRY=off GOENV=off
export GOCACHE=$go_state/gocache GOPATH=$go_state/gopath GOTMPDIR=
export CGO_ENABLED=1
# `#cgo pkg-config: fusednorm`: in the build tree, a fusednorm.pc that only
# requires fusednorm-uninstalled (meson writes it into BUILD/bindings/go;
# for a build configured before that existed, it is written into STATE).
go_pcdir=$go_build/bindings/go
if [ ! -f "$go_pcdir/fusednorm.pc" ]; then
  go_pcdir=$go_state/pkgconfig
  mkdir -p "$go_pcdir"
  printf 'Name: fusednorm\nDescription: libfusednorm build tree\nVersion: 0\nRequires: fusednorm-uninstalled\n' \
    > "$go_pcdir/fusednorm.pc"
fi
export PKG_CONFIG_PATH=$go_pcdir:$go_build/meson-uninstalled${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export CGO_LDFLAGS="-L$go_cudalib${CGO_LDFLAGS:+ $CGO_LDFLAGS}"
export LD_LIBRARY_PATH=$go_build/src${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
