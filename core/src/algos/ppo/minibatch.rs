//! PPO's minibatches: the batch's tensors on the learner's device, split into rows or (for a
//! recurrent model) whole time-major columns, and the advantage transforms.

use tch::{Device, Kind, Tensor};

use super::super::pg::sequence;
use crate::items::rollout::RolloutBatch;
use crate::models::RnnState;

/// The tensors of one (mini)batch on the learner's device.
#[derive(Debug)]
pub(super) struct Minibatch {
    pub(super) obs: Tensor,
    pub(super) action: Tensor,
    pub(super) old_log_prob: Tensor,
    pub(super) old_value: Tensor,
    pub(super) advantage: Tensor,
    pub(super) returns: Tensor,
    /// 1 for rows the losses count, 0 for padding (`actors.mid_batch_reset = false`).
    pub(super) valid: Option<Tensor>,
    /// For a recurrent model: rows are whole sequences, time-major.
    pub(super) seq: Option<SeqRows>,
}

/// How the rows of a recurrent minibatch form sequences.
#[derive(Debug)]
pub(super) struct SeqRows {
    /// Steps T per sequence.
    pub(super) t: i64,
    /// 1 where the previous step of the column ended an episode, `[T x B]` rows.
    pub(super) reset: Tensor,
    /// The state each column starts from, `[B, H]`.
    pub(super) init: RnnState,
}

impl SeqRows {
    pub(super) fn shallow_clone(&self) -> SeqRows {
        SeqRows {
            t: self.t,
            reset: self.reset.shallow_clone(),
            init: self.init.shallow_clone(),
        }
    }
}

impl Minibatch {
    /// Whole columns `cols` of a recurrent batch with `b` columns, rows kept time-major.
    pub(super) fn select_columns(&self, cols: &Tensor, b: i64) -> Minibatch {
        let seq = self.seq.as_ref().expect("a recurrent minibatch");
        let steps = Tensor::arange(seq.t, (Kind::Int64, cols.device())) * b;
        let index = (steps.unsqueeze(1) + cols.unsqueeze(0)).reshape([-1]);
        let mut mb = self.select(&index);
        mb.seq = Some(SeqRows {
            t: seq.t,
            reset: seq.reset.index_select(0, &index),
            init: seq.init.select(cols),
        });
        mb
    }

    /// Rows `start..start + len` (views, no copy).
    pub(super) fn rows(&self, start: i64, len: i64) -> Minibatch {
        Minibatch {
            obs: self.obs.narrow(0, start, len),
            action: self.action.narrow(0, start, len),
            old_log_prob: self.old_log_prob.narrow(0, start, len),
            old_value: self.old_value.narrow(0, start, len),
            advantage: self.advantage.narrow(0, start, len),
            returns: self.returns.narrow(0, start, len),
            valid: self.valid.as_ref().map(|v| v.narrow(0, start, len)),
            seq: None,
        }
    }

    /// The same rows on `device` (no copy when they are there already).
    pub(super) fn on(self, device: Device) -> Minibatch {
        if self.obs.device() == device {
            return self;
        }
        Minibatch {
            obs: self.obs.to_device(device),
            action: self.action.to_device(device),
            old_log_prob: self.old_log_prob.to_device(device),
            old_value: self.old_value.to_device(device),
            advantage: self.advantage.to_device(device),
            returns: self.returns.to_device(device),
            valid: self.valid.as_ref().map(|v| v.to_device(device)),
            seq: None,
        }
    }

    pub(super) fn select(&self, index: &Tensor) -> Minibatch {
        Minibatch {
            obs: self.obs.index_select(0, index),
            action: self.action.index_select(0, index),
            old_log_prob: self.old_log_prob.index_select(0, index),
            old_value: self.old_value.index_select(0, index),
            advantage: self.advantage.index_select(0, index),
            returns: self.returns.index_select(0, index),
            valid: self.valid.as_ref().map(|v| v.index_select(0, index)),
            seq: None,
        }
    }
}

/// Advantages standardised over the `valid` rows (sample std, as SB3).
pub(super) fn normalized(advantage: &Tensor, valid: Option<&Tensor>) -> Tensor {
    let Some(valid) = valid else {
        return (advantage - advantage.mean(Kind::Float)) / (advantage.std(true) + 1e-8);
    };
    let counted = advantage.masked_select(&valid.gt(0.5));
    if counted.numel() < 2 {
        return advantage.zeros_like();
    }
    (advantage - counted.mean(Kind::Float)) / (counted.std(true) + 1e-8)
}

/// garage's `positive_adv`: advantages shifted so the smallest valid one is just above 0.
pub(super) fn shifted_positive(advantage: &Tensor, valid: Option<&Tensor>) -> Tensor {
    let least = match valid {
        Some(v) if v.sum(Kind::Float).double_value(&[]) > 0.0 => {
            advantage.masked_select(&v.gt(0.5)).min()
        }
        _ => advantage.min(),
    };
    advantage - least + 1e-8
}

/// A recurrent batch's sequence layout as PPO's minibatches carry it (resets flattened to
/// rows); `None` for a feed-forward batch.
pub(super) fn sequences(batch: &RolloutBatch, device: Device) -> Option<SeqRows> {
    let seq = sequence(batch, device)?;
    Some(SeqRows {
        t: seq.t,
        reset: seq.reset.reshape([-1]),
        init: seq.init,
    })
}

impl Minibatch {
    pub(super) fn select_all(&self) -> Minibatch {
        Minibatch {
            obs: self.obs.shallow_clone(),
            action: self.action.shallow_clone(),
            old_log_prob: self.old_log_prob.shallow_clone(),
            old_value: self.old_value.shallow_clone(),
            advantage: self.advantage.shallow_clone(),
            returns: self.returns.shallow_clone(),
            valid: self.valid.as_ref().map(Tensor::shallow_clone),
            seq: self.seq.as_ref().map(SeqRows::shallow_clone),
        }
    }
}
