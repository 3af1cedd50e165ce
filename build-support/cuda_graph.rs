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
    println!("cargo:rerun-if-changed=csrc/guarded.h");
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
        .cargo_metadata(false)
        .compile("fleetrl_cuda_graph");
    // Weak references to libtorch's CUDA symbols: a learner whose libtorch_cuda link was
    // dropped (deploy/docker/stage.sh's CPU image) must still load. Graphs are only made on a
    // CUDA device, which needs that library loaded, so nothing calls through a null weak
    // symbol. Without objcopy the shim is left out, and updates run as written.
    let archive = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"))
        .join("libfleetrl_cuda_graph.a");
    let weakened = std::process::Command::new("objcopy")
        .arg("--weaken")
        .arg(&archive)
        .status()
        .is_ok_and(|s| s.success());
    if !weakened {
        println!(
            "cargo:warning=objcopy --weaken failed on the CUDA graph shim: this build has no \
             CUDA graphs"
        );
        let _ = std::fs::remove_file(&archive);
        return;
    }
    let out_dir = archive.parent().expect("OUT_DIR is a directory");
    println!("cargo:rustc-link-search=native={}", out_dir.display());
    println!("cargo:rustc-link-lib=static=fleetrl_cuda_graph");
    println!("cargo:rustc-link-lib=dylib=stdc++");
    println!("cargo:rustc-cfg=fleetrl_cuda_graph");
}
