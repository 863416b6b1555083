# Sourced by run-tests.sh and prebuild.sh: the Go environment for building
# the binding against the build tree BUILD (first argument), CUDA's library
# directory second (for devmem's -lcudart). Nothing is fetched (module proxy
# off, no toolchain download) and nothing is written outside BUILD.
go_build=$1
go_cudalib=$2
export GOPROXY=off GOSUMDB=off GOTOOLCHAIN=local GOFLAGS=-mod=mod GOTELEMETRY=off GOENV=off
export GOCACHE=$go_build/bindings/go/gocache GOPATH=$go_build/bindings/go/gopath
export CGO_ENABLED=1
export PKG_CONFIG_PATH=$go_build/bindings/go:$go_build/meson-uninstalled${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export CGO_LDFLAGS="-L$go_cudalib${CGO_LDFLAGS:+ $CGO_LDFLAGS}"
export LD_LIBRARY_PATH=$go_build/src${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
