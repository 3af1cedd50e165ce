//! What the off-policy algorithms share: TD losses and priorities (target networks are
//! checkpointed as [`crate::checkpoint::state::TargetNet`]s).

use crate::config::error::check;
use crate::config::error::ConfigError;
use serde::{Deserialize, Serialize};
use tch::Tensor;

/// How the target networks follow the online ones.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TargetUpdate {
    /// Polyak coefficient tau: target <- tau * online + (1 - tau) * target after every
    /// `period` updates (1.0 with a period is a hard copy).
    pub tau: f64,
    /// Updates between target updates.
    pub period: u64,
}

impl Default for TargetUpdate {
    fn default() -> Self {
        TargetUpdate {
            tau: 0.005,
            period: 1,
        }
    }
}

impl TargetUpdate {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        check(
            self.tau > 0.0 && self.tau <= 1.0,
            "algo.target.tau",
            "must be in (0, 1]",
        )?;
        check(self.period >= 1, "algo.target.period", "must be >= 1")
    }
}

/// Named metrics from the 0-dim tensors an update computed, stacked on the device and read
/// back in one transfer (each host read waits for the device: one per update, not one per
/// metric).
pub(crate) fn read_metrics(names: &[&'static str], values: &Tensor) -> super::Metrics {
    let values = Vec::<f64>::try_from(values.to_kind(tch::Kind::Double)).unwrap_or_default();
    let values = values.into_iter().chain(std::iter::repeat(f64::NAN));
    super::Metrics(names.iter().copied().zip(values).collect())
}

/// New priorities for the sampled rows, `|td|` as f64, when the replay is prioritized (the
/// learner sends them back to the table); `None` otherwise, so `td` is not even computed.
pub(crate) fn priorities(
    replay: &super::offpolicy::ReplayOptions,
    td: impl FnOnce() -> Tensor,
) -> Option<Vec<f64>> {
    if !replay.prioritized {
        return None;
    }
    Vec::<f64>::try_from(&td().detach().abs().to_kind(tch::Kind::Double)).ok()
}

/// Per-row loss on the TD error `delta`: Huber (delta 1, as SB3's smooth L1) or squared.
pub fn td_loss(delta: &Tensor, huber: bool) -> Tensor {
    if !huber {
        return delta.square() * 0.5;
    }
    let abs = delta.abs();
    let quadratic = abs.clamp_max(1.0);
    &quadratic * &quadratic * 0.5 + (abs - &quadratic)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huber_is_quadratic_inside_one_and_linear_outside() {
        let delta = Tensor::from_slice(&[0.5f32, -3.0]);
        let loss = Vec::<f32>::try_from(&td_loss(&delta, true)).unwrap();
        assert_eq!(loss, vec![0.125, 2.5]);
        let sq = Vec::<f32>::try_from(&td_loss(&delta, false)).unwrap();
        assert_eq!(sq, vec![0.125, 4.5]);
    }
}
