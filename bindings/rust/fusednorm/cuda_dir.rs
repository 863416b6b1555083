// SPDX-License-Identifier: Apache-2.0
// (Lives in the fusednorm crate so that its package is self-contained;
// the unpublished testkit includes it from there.)
// Where libcudart.so is, for build scripts (testkit's link line, the
// fusednorm crate's test/example rpath): CUDA_LIB_DIR, else pkg-config's
// cudart-<version> / cudart modules, else $CUDA_HOME or $CUDA_PATH, else
// the directory of the nvcc on PATH, else /usr/local/cuda.
use std::path::{Path, PathBuf};

pub fn cuda_lib_dir() -> Option<PathBuf> {
    println!("cargo:rerun-if-env-changed=CUDA_LIB_DIR");
    println!("cargo:rerun-if-env-changed=CUDA_HOME");
    println!("cargo:rerun-if-env-changed=CUDA_PATH");
    let has = |d: &Path| d.join("libcudart.so").exists();
    if let Some(d) = std::env::var_os("CUDA_LIB_DIR") {
        return Some(PathBuf::from(d));
    }
    for module in ["cudart-13.0", "cudart"] {
        if let Ok(out) = std::process::Command::new("pkg-config").args(["--variable=libdir", module]).output() {
            let d = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            if out.status.success() && has(&d) {
                return Some(d);
            }
        }
    }
    let mut roots: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"].iter().filter_map(std::env::var_os).map(PathBuf::from).collect();
    if let Some(path) = std::env::var_os("PATH") {
        for p in std::env::split_paths(&path) {
            if p.join("nvcc").exists() {
                if let Some(root) = p.parent() {
                    roots.push(root.to_path_buf());
                }
            }
        }
    }
    roots.push(PathBuf::from("/usr/local/cuda"));
    for r in roots {
        for sub in ["lib64", "lib", "targets/x86_64-linux/lib"] {
            if has(&r.join(sub)) {
                return Some(r.join(sub));
            }
        }
    }
    None
}
