// SPDX-License-Identifier: Apache-2.0
//! Finds libfusednorm for linking: FUSEDNORM_LIB_DIR, else pkg-config
//! (`fusednorm-uninstalled`, then `fusednorm`); with DOCS_RS set (docs.rs)
//! links nothing. The declarations are never
//! generated here: they are committed (see gen/rust_sys.py).
use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=DOCS_RS");
    // docs.rs builds documentation only, without CUDA or libfusednorm:
    // nothing to link.
    if env::var_os("DOCS_RS").is_some() {
        return;
    }
    println!("cargo:rerun-if-env-changed=FUSEDNORM_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG");
    match find() {
        Ok((dirs, how)) => {
            for d in &dirs {
                println!("cargo:rustc-link-search=native={}", d.display());
            }
            println!("cargo:rustc-link-lib=dylib=fusednorm");
            // This crate's own test binaries find the library where it was
            // found (LD_LIBRARY_PATH still comes first); dependents decide
            // for themselves (DEP_FUSEDNORM_LIBDIR below).
            for d in &dirs {
                println!("cargo:rustc-link-arg=-Wl,-rpath,{}", d.display());
            }
            // Dependents' build scripts read DEP_FUSEDNORM_LIBDIR / _FOUND_BY.
            if let Some(d) = dirs.first() {
                println!("cargo:libdir={}", d.display());
            }
            println!("cargo:found_by={how}");
        }
        Err(why) => {
            eprintln!("\nerror: fusednorm-sys cannot find libfusednorm.\n{why}\n");
            eprintln!(
                "Do one of:\n  \
                 - build the library (meson setup build && ninja -C build) and set\n    \
                 PKG_CONFIG_PATH=<build>/meson-uninstalled (module fusednorm-uninstalled);\n  \
                 - install it (meson install) so that `pkg-config fusednorm` works;\n  \
                 - set FUSEDNORM_LIB_DIR to the directory holding libfusednorm.so.\n"
            );
            std::process::exit(1);
        }
    }
}

fn find() -> Result<(Vec<PathBuf>, String), String> {
    if let Some(dir) = env::var_os("FUSEDNORM_LIB_DIR") {
        let dir = PathBuf::from(dir);
        if !dir.join("libfusednorm.so").exists() {
            return Err(format!("FUSEDNORM_LIB_DIR={} holds no libfusednorm.so", dir.display()));
        }
        return Ok((vec![dir], "FUSEDNORM_LIB_DIR".into()));
    }
    let pkg_config = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".into());
    let mut tried = Vec::new();
    for module in ["fusednorm-uninstalled", "fusednorm"] {
        let out = Command::new(&pkg_config).args(["--libs", module]).output();
        let out = match out {
            Ok(o) => o,
            Err(e) => return Err(format!("FUSEDNORM_LIB_DIR is unset and `{pkg_config}` could not run: {e}")),
        };
        if !out.status.success() {
            tried.push(format!("  {pkg_config} --libs {module}: {}", String::from_utf8_lossy(&out.stderr).trim()));
            continue;
        }
        let libs = String::from_utf8_lossy(&out.stdout).into_owned();
        let dirs: Vec<PathBuf> = libs
            .split_whitespace()
            .filter_map(|t| t.strip_prefix("-L"))
            .map(PathBuf::from)
            .collect();
        if !libs.split_whitespace().any(|t| t == "-lfusednorm") {
            return Err(format!("`{pkg_config} --libs {module}` gave no -lfusednorm: {libs}"));
        }
        return Ok((dirs, format!("pkg-config {module}")));
    }
    Err(format!(
        "FUSEDNORM_LIB_DIR is unset and pkg-config found neither module (PKG_CONFIG_PATH={}):\n{}",
        env::var("PKG_CONFIG_PATH").unwrap_or_default(),
        tried.join("\n")
    ))
}
