//! Keeps libtorch's CUDA library linked. tch only calls into libtorch_cpu, so the linker's
//! `--as-needed` drops libtorch_cuda and CUDA silently looks unavailable at run time; linking
//! it with `--no-as-needed` makes a `cuda` device work where libtorch has CUDA.
//! `FLEETRL_LINK_CUDA=0` leaves it out: binaries that run without the CUDA libraries (what the
//! CPU container image ships). Called from the build scripts of the packages whose targets may
//! run on a GPU: the learner (its binary and benchmarks) and core (its timing examples).

use std::path::PathBuf;

/// The kinds of target that get the library: `"bins"`, `"examples"` (cargo's
/// `rustc-link-arg-<kind>`).
pub(crate) fn main(kinds: &[&str]) {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    println!("cargo:rerun-if-env-changed=FLEETRL_LINK_CUDA");
    println!("cargo:rerun-if-changed=../build-support/link_cuda.rs");
    if std::env::var("FLEETRL_LINK_CUDA").is_ok_and(|v| v == "0") {
        return;
    }
    let Some(libtorch) = std::env::var_os("LIBTORCH") else {
        return;
    };
    if PathBuf::from(libtorch)
        .join("lib/libtorch_cuda.so")
        .exists()
    {
        for kind in kinds {
            println!("cargo:rustc-link-arg-{kind}=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
        }
    }
}
