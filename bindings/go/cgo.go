// SPDX-License-Identifier: Apache-2.0

package fusednorm

// The library is found through pkg-config (module "fusednorm"): an
// installed library's fusednorm.pc, or, in the build tree, the fusednorm.pc
// that bindings/go/meson.build writes (it requires fusednorm-uninstalled);
// see README.md.

/*
#cgo pkg-config: fusednorm
*/
import "C"
