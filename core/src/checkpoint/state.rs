//! Reading an algorithm's named checkpoint state back: the one error type every
//! `load_state` returns, and the lookups they share.

use tch::Tensor;

use crate::models::ModelError;

/// Why a checkpoint's algorithm state could not be restored.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// A tensor the algorithm writes is not in the state.
    #[error("checkpoint state has no `{0}`")]
    Missing(String),
    /// A tensor has another shape than the network it belongs to.
    #[error("checkpoint state `{name}` has shape {found:?}, expected {expected:?}")]
    Shape {
        /// The tensor's name.
        name: String,
        /// Its shape in the checkpoint.
        found: Vec<i64>,
        /// The shape the algorithm needs.
        expected: Vec<i64>,
    },
    /// A stored network (a target network) does not fit the model.
    #[error("checkpoint state: {0}")]
    Model(#[from] ModelError),
}

/// The tensor named `name` in `state`.
pub fn find<'a>(state: &'a [(String, Tensor)], name: &str) -> Result<&'a Tensor, StateError> {
    state
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, t)| t)
        .ok_or_else(|| StateError::Missing(name.to_string()))
}

/// The scalar counter named `name` in `state`.
pub fn counter(state: &[(String, Tensor)], name: &str) -> Result<u64, StateError> {
    Ok(find(state, name)?.int64_value(&[]) as u64)
}
