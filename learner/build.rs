//! The learner's binary and benchmarks run on GPUs: they keep libtorch's CUDA library linked
//! (see build-support/link_cuda.rs), and get the libpython search path every fleetrl binary
//! gets.

#[path = "../build-support/link_cuda.rs"]
mod link_cuda;
#[path = "../build-support/python_rpath.rs"]
mod python_rpath;

fn main() {
    python_rpath::main();
    // The benchmarks (bench/learner_update.sh with DEVICE=cuda) need it as much as the binary.
    link_cuda::main(&["bins", "examples"]);
}
