// SPDX-License-Identifier: Apache-2.0
//! Links the CUDA runtime (the tests' device-memory helper calls it).
#[path = "../fusednorm/cuda_dir.rs"]
mod cuda_dir;

fn main() {
    match cuda_dir::cuda_lib_dir() {
        Some(d) => println!("cargo:rustc-link-search=native={}", d.display()),
        None => println!(
            "cargo:warning=libcudart.so not found (set CUDA_LIB_DIR); linking -lcudart from the default paths"
        ),
    }
    println!("cargo:rustc-link-lib=dylib=cudart");
}
