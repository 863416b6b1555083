// SPDX-License-Identifier: Apache-2.0
//! Run paths for this crate's own tests and examples (never for dependents):
//! the libfusednorm that fusednorm-sys linked (DEP_FUSEDNORM_LIBDIR) and the
//! CUDA runtime the test helper links. LD_LIBRARY_PATH still comes first.
#[path = "cuda_dir.rs"]
mod cuda_dir;

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_FUSEDNORM_LIBDIR");
    let mut dirs = Vec::new();
    if let Ok(d) = std::env::var("DEP_FUSEDNORM_LIBDIR") {
        dirs.push(d);
    }
    if let Some(d) = cuda_dir::cuda_lib_dir() {
        dirs.push(d.display().to_string());
    }
    for d in dirs {
        // Plain rustc-link-arg: the rlib ignores it; unit tests, integration
        // tests and examples get it.
        println!("cargo:rustc-link-arg=-Wl,-rpath,{d}");
    }
}
