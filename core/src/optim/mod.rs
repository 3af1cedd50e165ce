//! Optimisers whose state is plain tensors, so checkpoints carry it.

mod adam;

pub use adam::{Adam, Flat, Rule};
