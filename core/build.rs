//! Core's timing examples (`offpolicy_timing`, `update_timing`) take a `cuda` device, so they
//! keep libtorch's CUDA library linked (see build-support/link_cuda.rs); its library and tests
//! get only the libpython search path every package that links core gets. Where libtorch has
//! CUDA, the library gets the CUDA graph shim too (build-support/cuda_graph.rs); everywhere, the
//! c10d collectives shim (build-support/c10d.rs) and the tracing shim `fleetrl export` saves
//! policies with (build-support/trace_shim.rs).

#[path = "../build-support/c10d.rs"]
mod c10d;
#[path = "../build-support/cuda_graph.rs"]
mod cuda_graph;
#[path = "../build-support/link_cuda.rs"]
mod link_cuda;
#[path = "../build-support/python_rpath.rs"]
mod python_rpath;
#[path = "../build-support/trace_shim.rs"]
mod trace_shim;

fn main() {
    python_rpath::main();
    link_cuda::main(&["examples"]);
    cuda_graph::main();
    c10d::main();
    trace_shim::main();
}
