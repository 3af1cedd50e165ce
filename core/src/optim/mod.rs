//! Optimisers whose state is plain tensors, so checkpoints carry it.

mod adam;
mod graph;

pub use adam::{Adam, Flat, Rule};
pub use graph::{GraphBatch, GraphError, UpdateGraph, WARM_UP};
