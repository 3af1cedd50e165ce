//! Builds core's CUDA graph shim (core/csrc/cuda_graph.cpp) against the libtorch tch links,
//! when that libtorch has CUDA and its CUDA runtime headers are at hand (the PyPI wheel's
//! `nvidia` packages ship them beside torch; else `CUDA_HOME`). Sets the cfg
//! `fleetrl_cuda_graph` when it did; without it `learner.cuda_graph` is refused with an
//! error saying this build has no CUDA graphs. `FLEETRL_LINK_CUDA=0` leaves it out, as it
//! leaves libtorch's CUDA library out (see link_cuda.rs).

use std::path::{Path, PathBuf};

/// The directory holding `cuda_runtime_api.h` for `libtorch`, if any.
fn cuda_include(libtorch: &Path) -> Option<PathBuf> {
    let mut candidates = Vec::new();
    if let Some(site) = libtorch.parent() {
        let nvidia = site.join("nvidia");
        // CUDA 13 wheels put every header under nvidia/cu13; CUDA 12 ones per library.
        if let Ok(dirs) = std::fs::read_dir(&nvidia) {
            let mut dirs: Vec<PathBuf> = dirs.flatten().map(|d| d.path()).collect();
            dirs.sort();
            candidates.extend(dirs.into_iter().map(|d| d.join("include")));
        }
    }
    if let Some(home) = std::env::var_os("CUDA_HOME") {
        candidates.push(PathBuf::from(home).join("include"));
    }
    candidates.push(PathBuf::from("/usr/local/cuda/include"));
    candidates
        .into_iter()
        .find(|dir| dir.join("cuda_runtime_api.h").exists())
}

pub(crate) fn main() {
    println!("cargo:rustc-check-cfg=cfg(fleetrl_cuda_graph)");
    println!("cargo:rerun-if-changed=csrc/cuda_graph.cpp");
    println!("cargo:rerun-if-changed=../build-support/cuda_graph.rs");
    println!("cargo:rerun-if-env-changed=CUDA_HOME");
    if std::env::var("FLEETRL_LINK_CUDA").is_ok_and(|v| v == "0") {
        return;
    }
    let Some(libtorch) = std::env::var_os("LIBTORCH") else {
        return;
    };
    let Ok(libtorch) = std::fs::canonicalize(libtorch) else {
        return;
    };
    if !libtorch.join("lib/libtorch_cuda.so").exists() {
        return;
    }
    let Some(cuda) = cuda_include(&libtorch) else {
        println!(
            "cargo:warning=libtorch has CUDA but no cuda_runtime_api.h was found (set \
             CUDA_HOME): this build has no CUDA graphs"
        );
        return;
    };
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .file("csrc/cuda_graph.cpp")
        .include(libtorch.join("include"))
        .include(libtorch.join("include/torch/csrc/api/include"))
        .include(cuda)
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        .warnings(false)
        .compile("fleetrl_cuda_graph");
    println!(
        "cargo:rustc-link-search=native={}",
        libtorch.join("lib").display()
    );
    for lib in ["torch_cuda", "c10_cuda", "torch_cpu", "c10"] {
        println!("cargo:rustc-link-lib=dylib={lib}");
    }
    println!("cargo:rustc-cfg=fleetrl_cuda_graph");
}
