//! An algorithm's named checkpoint state: the parts it is made of ([`StatePart`]), the one
//! error type restoring them returns, and the lookups they share.

use tch::{nn, Tensor};

use crate::models::{weights, ModelError, OffPolicyModel};

/// One part of what an algorithm checkpoints besides its model's weights (an optimiser, a
/// target network, the update counters), under names of its own. An algorithm lists its parts
/// once (`algorithm_parts!` in `algos`), and its whole state is theirs together.
pub trait StatePart {
    /// The part as named tensors.
    fn save(&self) -> Vec<(String, Tensor)>;
    /// Restores what [`StatePart::save`] wrote, finding its tensors by name in `state` (which
    /// holds the other parts' too).
    fn restore(&mut self, state: &[(String, Tensor)]) -> Result<(), StateError>;
}

/// A part that only some configurations have (an intrinsic-reward module, an entropy
/// temperature's optimiser): nothing when absent.
impl<T: StatePart> StatePart for Option<T> {
    fn save(&self) -> Vec<(String, Tensor)> {
        self.iter().flat_map(T::save).collect()
    }

    fn restore(&mut self, state: &[(String, Tensor)]) -> Result<(), StateError> {
        match self {
            Some(part) => part.restore(state),
            None => Ok(()),
        }
    }
}

/// Free variables (SAC's entropy temperature), under their own names.
impl StatePart for nn::VarStore {
    fn save(&self) -> Vec<(String, Tensor)> {
        weights::named(self)
    }

    fn restore(&mut self, state: &[(String, Tensor)]) -> Result<(), StateError> {
        Ok(weights::load_named(self, state)?)
    }
}

/// The variables a network keeps (for [`TargetNet`]).
pub trait HasVarStore {
    /// Its variables.
    fn vars(&self) -> &nn::VarStore;
}

impl HasVarStore for nn::VarStore {
    fn vars(&self) -> &nn::VarStore {
        self
    }
}

impl HasVarStore for OffPolicyModel {
    fn vars(&self) -> &nn::VarStore {
        self.var_store()
    }
}

/// A target network, checkpointed as `target.<path>`; it derefs to the network.
#[derive(Debug)]
pub struct TargetNet<T>(pub T);

impl<T> std::ops::Deref for TargetNet<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> std::ops::DerefMut for TargetNet<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

impl<T: HasVarStore> StatePart for TargetNet<T> {
    fn save(&self) -> Vec<(String, Tensor)> {
        weights::named(self.0.vars())
            .into_iter()
            .map(|(n, t)| (format!("target.{n}"), t))
            .collect()
    }

    fn restore(&mut self, state: &[(String, Tensor)]) -> Result<(), StateError> {
        let own: Vec<(String, Tensor)> = state
            .iter()
            .filter_map(|(n, t)| {
                n.strip_prefix("target.")
                    .map(|p| (p.to_string(), t.shallow_clone()))
            })
            .collect();
        Ok(weights::load_named(self.0.vars(), &own)?)
    }
}

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
