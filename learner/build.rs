//! Keeps libtorch's CUDA library linked. tch only calls into libtorch_cpu, so the linker's
//! `--as-needed` drops libtorch_cuda and CUDA silently looks unavailable at run time; linking
//! it with `--no-as-needed` makes `learner.device = "cuda"` work where libtorch has CUDA.
//! `FLEETRL_LINK_CUDA=0` leaves it out: a CPU-only learner that runs without the CUDA
//! libraries (what the CPU container image ships).

use std::path::PathBuf;

#[path = "../build-support/python_rpath.rs"]
mod python_rpath;

fn main() {
    // The run-time search path to libpython every fleetrl binary gets.
    python_rpath::main();
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    println!("cargo:rerun-if-env-changed=FLEETRL_LINK_CUDA");
    if std::env::var("FLEETRL_LINK_CUDA").is_ok_and(|v| v == "0") {
        return;
    }
    let Some(libtorch) = std::env::var_os("LIBTORCH") else {
        return;
    };
    let lib = PathBuf::from(libtorch).join("lib");
    if lib.join("libtorch_cuda.so").exists() {
        println!("cargo:rustc-link-arg-bins=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
        // The benchmarks (bench/learner_update.sh --device cuda) need it as much.
        println!("cargo:rustc-link-arg-examples=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
    }
}
