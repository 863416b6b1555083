// SPDX-License-Identifier: Apache-2.0

//go:build !cgo

package fusednorm

// The binding calls libfusednorm's C ABI through cgo. Without cgo
// (CGO_ENABLED=0, or no C compiler found) the build stops here, on the
// undefined name below, which says what to do.

var _ = fusednorm_needs_cgo__build_with_CGO_ENABLED_1_and_a_C_compiler__and_libfusednorm_installed_where_pkg_config_finds_fusednorm_pc
