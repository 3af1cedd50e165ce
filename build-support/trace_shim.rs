//! Builds core's tracing shim (core/csrc/trace.cpp: a trace with several outputs saved as
//! one TorchScript method, for `fleetrl export`) against the libtorch tch links.

use std::path::PathBuf;

pub(crate) fn main() {
    println!("cargo:rerun-if-changed=csrc/trace.cpp");
    println!("cargo:rerun-if-changed=csrc/guarded.h");
    println!("cargo:rerun-if-changed=../build-support/trace_shim.rs");
    let libtorch = std::env::var_os("LIBTORCH")
        .expect("LIBTORCH is set by .cargo/config.toml (scripts/setup.sh links .venv/libtorch)");
    let libtorch = std::fs::canonicalize(PathBuf::from(&libtorch))
        .unwrap_or_else(|e| panic!("LIBTORCH={}: {e}", PathBuf::from(&libtorch).display()));
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .file("csrc/trace.cpp")
        .include(libtorch.join("include"))
        .include(libtorch.join("include/torch/csrc/api/include"))
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        .warnings(false)
        .compile("fleetrl_trace");
}
