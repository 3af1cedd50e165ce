//! The parameters and algorithm state (optimiser moments, target networks, counters) of the
//! newest weights that came out finite, kept so that an update that makes them NaN or infinite
//! (one huge reward is enough) is undone instead of ending the run.
//!
//! The copy is taken each time weights are published and lives on the learner's device: one
//! more set of parameters and optimiser state. After the first copy, later ones are written
//! into the same buffers.

use fleetrl_core::algos::Algorithm;
use tch::Tensor;

/// Why a non-finite update could not be undone.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Unrecoverable {
    /// No weights have been published yet, so none are known to be finite.
    #[error("no finite weights were kept yet")]
    NothingKept,
    /// `limit` updates in a row made the weights non-finite.
    #[error("{0} updates in a row made the weights non-finite (learner.max_nonfinite_updates)")]
    InARow(u32),
    /// The kept copy could not be put back.
    #[error("the last finite weights could not be restored: {0}")]
    Restore(String),
}

/// The last finite parameters and state, and the non-finite updates since.
#[derive(Debug, Default)]
pub(crate) struct Fallback {
    model: Vec<(String, Tensor)>,
    state: Vec<(String, Tensor)>,
    kept: bool,
    in_row: u32,
}

/// Makes `kept` a copy of `live`, in its own buffers when names, shapes and types match.
fn copy_into(kept: &mut Vec<(String, Tensor)>, live: Vec<(String, Tensor)>) {
    let _guard = tch::no_grad_guard();
    let same = kept.len() == live.len()
        && kept.iter().zip(&live).all(|((a, x), (b, y))| {
            a == b && x.size() == y.size() && x.kind() == y.kind() && x.device() == y.device()
        });
    if same {
        for ((_, k), (_, l)) in kept.iter_mut().zip(&live) {
            k.copy_(l);
        }
    } else {
        *kept = live.into_iter().map(|(n, t)| (n, t.copy())).collect();
    }
}

impl Fallback {
    /// Keeps a copy of `algo`'s parameters and state: its weights were just published finite.
    pub(crate) fn keep(&mut self, algo: &dyn Algorithm) {
        copy_into(&mut self.model, algo.trained().model().named_parameters());
        copy_into(&mut self.state, algo.state());
        self.kept = true;
        self.in_row = 0;
    }

    /// Undoes the updates since the last [`Fallback::keep`]: puts the copy back into `algo` and
    /// returns how many non-finite updates came in a row, or why it cannot go on.
    pub(crate) fn restore(
        &mut self,
        algo: &mut dyn Algorithm,
        limit: u32,
    ) -> Result<u32, Unrecoverable> {
        self.in_row += 1;
        if !self.kept {
            return Err(Unrecoverable::NothingKept);
        }
        if self.in_row >= limit {
            return Err(Unrecoverable::InARow(self.in_row));
        }
        algo.trained_mut()
            .model_mut()
            .load_named(&self.model)
            .map_err(|e| Unrecoverable::Restore(e.to_string()))?;
        algo.load_state(&self.state)
            .map_err(|e| Unrecoverable::Restore(e.to_string()))?;
        Ok(self.in_row)
    }
}
