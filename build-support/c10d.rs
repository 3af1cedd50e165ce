//! Builds core's c10d shim (core/csrc/c10d.cpp) against the libtorch tch links: `TCPStore`
//! and `ProcessGroupGloo` from libtorch_cpu always (cfg `fleetrl_c10d`), and
//! `ProcessGroupNCCL` too (cfg `fleetrl_c10d_nccl`) when that libtorch has CUDA and the CUDA
//! runtime, CCCL and NCCL headers are at hand (the PyPI wheel's `nvidia` packages ship the
//! runtime's and NCCL's beside torch, scripts/setup.sh adds CCCL's from `nvidia-cuda-cccl`;
//! else `CUDA_HOME`). The wheel ships c10d's headers but not gloo's, which they include:
//! core/csrc/gloo_decls declares the few names they take from it. Without `fleetrl_c10d` a
//! `learner.world_size > 1` is refused with an error saying this build has no collectives.

use std::path::{Path, PathBuf};

/// The first of `dirs` holding `file`.
fn holding(dirs: Vec<PathBuf>, file: &str) -> Option<PathBuf> {
    dirs.into_iter().find(|dir| dir.join(file).exists())
}

/// Include directories under the wheel's `nvidia` packages (CUDA 13 puts every header under
/// nvidia/cu13, CUDA 12 one per library), then `CUDA_HOME`'s and /usr/local/cuda's.
fn cuda_dirs(libtorch: &Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(Ok(entries)) = libtorch
        .parent()
        .map(|site| std::fs::read_dir(site.join("nvidia")))
    {
        let mut found: Vec<PathBuf> = entries
            .flatten()
            .map(|d| d.path().join("include"))
            .collect();
        found.sort();
        dirs.extend(found);
    }
    if let Some(home) = std::env::var_os("CUDA_HOME") {
        dirs.push(PathBuf::from(home).join("include"));
    }
    dirs.push(PathBuf::from("/usr/local/cuda/include"));
    dirs
}

/// The CUDA runtime and NCCL include directories, when libtorch has CUDA and both are found.
fn nccl_includes(libtorch: &Path) -> Option<(PathBuf, PathBuf)> {
    if std::env::var("FLEETRL_LINK_CUDA").is_ok_and(|v| v == "0")
        || !libtorch.join("lib/libtorch_cuda.so").exists()
    {
        return None;
    }
    // ProcessGroupNCCL.hpp reaches cuda_fp16.h, which needs CCCL's `nv/target`.
    let cuda = holding(cuda_dirs(libtorch), "cuda_runtime_api.h")?;
    if !cuda.join("nv/target").exists() {
        println!(
            "cargo:warning=libtorch has CUDA but {} lacks CCCL's nv/target (run scripts/setup.sh, \
             which installs nvidia-cuda-cccl, or set CUDA_HOME to a CUDA toolkit): this \
             build's collectives are gloo only",
            cuda.display()
        );
        return None;
    }
    let nccl = holding(cuda_dirs(libtorch), "nccl.h")?;
    Some((cuda, nccl))
}

pub(crate) fn main() {
    println!("cargo:rustc-check-cfg=cfg(fleetrl_c10d)");
    println!("cargo:rustc-check-cfg=cfg(fleetrl_c10d_nccl)");
    println!("cargo:rerun-if-changed=csrc/c10d.cpp");
    println!("cargo:rerun-if-changed=csrc/gloo_decls");
    println!("cargo:rerun-if-changed=../build-support/c10d.rs");
    let Some(libtorch) = std::env::var_os("LIBTORCH") else {
        return;
    };
    let Ok(libtorch) = std::fs::canonicalize(libtorch) else {
        return;
    };
    let include = libtorch.join("include");
    if !include
        .join("torch/csrc/distributed/c10d/ProcessGroupGloo.hpp")
        .exists()
    {
        println!(
            "cargo:warning=libtorch has no c10d headers: this build has no collectives \
             (learner.world_size = 1 only)"
        );
        return;
    }
    let nccl = nccl_includes(&libtorch);
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .std("c++17")
        .file("csrc/c10d.cpp")
        .include("csrc/gloo_decls")
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        .warnings(false)
        .cargo_metadata(false);
    if let Some((cuda, nccl)) = &nccl {
        build
            .include(cuda)
            .include(nccl)
            .define("FLEETRL_C10D_NCCL", None);
    }
    build.compile("fleetrl_c10d");
    let archive = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"))
        .join("libfleetrl_c10d.a");
    // As for the CUDA graph shim: weak references to libtorch_cuda's symbols keep a learner
    // whose libtorch_cuda link was dropped loadable. NCCL groups are only made for CUDA
    // devices, which need that library loaded.
    let weakened = nccl.is_none()
        || std::process::Command::new("objcopy")
            .arg("--weaken")
            .arg(&archive)
            .status()
            .is_ok_and(|s| s.success());
    if !weakened {
        println!(
            "cargo:warning=objcopy --weaken failed on the c10d shim: this build has no collectives"
        );
        return;
    }
    let out_dir = archive.parent().expect("OUT_DIR is a directory");
    println!("cargo:rustc-link-search=native={}", out_dir.display());
    println!("cargo:rustc-link-lib=static=fleetrl_c10d");
    println!("cargo:rustc-link-lib=dylib=stdc++");
    println!("cargo:rustc-cfg=fleetrl_c10d");
    if nccl.is_some() {
        println!("cargo:rustc-cfg=fleetrl_c10d_nccl");
    }
}
