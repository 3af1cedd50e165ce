//! The transition: what off-policy actors insert into a replay table, one item per step.
//!
//! | field | dtype | shape | meaning |
//! |---|---|---|---|
//! | `obs` | f32 or u8 | [D] | observation the action was taken from |
//! | `action` | i64 / f32 | [] / [A] | discrete / continuous action (clipped to the box) |
//! | `reward` | f32 | [] | n-step return: sum over k < n of gamma^k r_{t+k}, cut at the episode end |
//! | `discount` | f32 | [] | gamma^n for the bootstrap, 0 if the episode terminated within the n steps |
//! | `next_obs` | f32 or u8 | [D] | observation to bootstrap from (the final one at a time limit) |
//! | `policy_version` | i64 | [] | weights version that acted |
//!
//! A time limit (truncation) is not terminal: the transition bootstraps from the episode's
//! final observation with gamma^k, k the steps actually summed. The n-step sums are computed on
//! the actor (Ape-X), so the learner's target is `reward + discount * max/min Q(next_obs)`.

use std::collections::VecDeque;

use fleetrl_proto::{Dtype, Tensor, TensorError, TensorMap};

use fleetrl_proto::space::{Action, Space};
use fleetrl_proto::table::{FieldSpec, Signature};

/// Field names.
pub mod field {
    /// Observation, [D].
    pub const OBS: &str = "obs";
    /// Action, [] or [A].
    pub const ACTION: &str = "action";
    /// n-step discounted reward sum, [].
    pub const REWARD: &str = "reward";
    /// Bootstrap discount, [].
    pub const DISCOUNT: &str = "discount";
    /// Bootstrap observation, [D].
    pub const NEXT_OBS: &str = "next_obs";
    /// Acting weights version, [].
    pub const POLICY_VERSION: &str = "policy_version";
}

/// The signature of one transition for these spaces.
pub fn signature(obs_space: &Space, action_space: &Space) -> Signature {
    let d = obs_space.flat_dim() as i64;
    let action = match action_space {
        Space::Discrete { .. } => FieldSpec::new(field::ACTION, Dtype::I64, &[]),
        Space::Box { .. } => {
            FieldSpec::new(field::ACTION, Dtype::F32, &[action_space.flat_dim() as i64])
        }
    };
    Signature {
        fields: vec![
            FieldSpec::new(field::OBS, Dtype::F32, &[d]),
            action,
            FieldSpec::new(field::REWARD, Dtype::F32, &[]),
            FieldSpec::new(field::DISCOUNT, Dtype::F32, &[]),
            FieldSpec::new(field::NEXT_OBS, Dtype::F32, &[d]),
            FieldSpec::new(field::POLICY_VERSION, Dtype::I64, &[]),
        ],
    }
}

/// One env step as the actor saw it.
#[derive(Debug, Clone)]
pub struct StepIn {
    /// Observation the action was taken from.
    pub obs: Vec<f32>,
    /// The action.
    pub action: Action,
    /// Reward (already clipped, if the algorithm clips).
    pub reward: f32,
    /// Terminal state reached.
    pub terminated: bool,
    /// Time limit reached (`next_obs` is then the episode's final observation).
    pub truncated: bool,
    /// Observation after the step (the final one if the episode ended).
    pub next_obs: Vec<f32>,
}

/// A finished transition, before it becomes a table item.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    /// Observation.
    pub obs: Vec<f32>,
    /// Action.
    pub action: Action,
    /// n-step discounted reward sum.
    pub reward: f32,
    /// gamma^k, or 0 when the episode terminated within the k summed steps.
    pub discount: f32,
    /// Bootstrap observation.
    pub next_obs: Vec<f32>,
}

impl Transition {
    /// The table item, stamped with the acting weights version.
    pub fn to_item(&self, policy_version: i64) -> TensorMap {
        let d = self.obs.len() as i64;
        let action = match &self.action {
            Action::Discrete(a) => Tensor::scalar(*a),
            Action::Continuous(v) => Tensor::from_slice(&[v.len() as i64], v),
        };
        TensorMap::from_pairs([
            (field::OBS, Tensor::from_slice(&[d], &self.obs)),
            (field::ACTION, action),
            (field::REWARD, Tensor::scalar(self.reward)),
            (field::DISCOUNT, Tensor::scalar(self.discount)),
            (field::NEXT_OBS, Tensor::from_slice(&[d], &self.next_obs)),
            (field::POLICY_VERSION, Tensor::scalar(policy_version)),
        ])
    }
}

/// Turns one env's stream of steps into n-step transitions (one per step, emitted once n later
/// steps are known or the episode ends).
#[derive(Debug)]
pub struct NStep {
    n: usize,
    gamma: f64,
    window: VecDeque<StepIn>,
}

impl NStep {
    /// An accumulator for `n`-step returns with discount `gamma`.
    pub fn new(n: usize, gamma: f64) -> NStep {
        NStep {
            n: n.max(1),
            gamma,
            window: VecDeque::with_capacity(n.max(1)),
        }
    }

    /// Adds a step; returns the transitions it completes (all pending ones at an episode end).
    pub fn push(&mut self, step: StepIn) -> Vec<Transition> {
        let ended = step.terminated || step.truncated;
        self.window.push_back(step);
        let mut out = Vec::new();
        if ended {
            while !self.window.is_empty() {
                out.push(self.emit());
                self.window.pop_front();
            }
        } else if self.window.len() == self.n {
            out.push(self.emit());
            self.window.pop_front();
        }
        out
    }

    /// The transition starting at the front of the window, over every step in it.
    fn emit(&self) -> Transition {
        let first = self.window.front().expect("emit needs a step");
        let last = self.window.back().expect("emit needs a step");
        let mut reward = 0.0f64;
        let mut scale = 1.0f64;
        for step in &self.window {
            reward += scale * step.reward as f64;
            scale *= self.gamma;
        }
        let discount = if last.terminated { 0.0 } else { scale };
        Transition {
            obs: first.obs.clone(),
            action: first.action.clone(),
            reward: reward as f32,
            discount: discount as f32,
            next_obs: last.next_obs.clone(),
        }
    }
}

/// A sampled batch of transitions as tch tensors on one device, with importance weights.
#[derive(Debug)]
pub struct TransitionBatch {
    /// `[B, D]`.
    pub obs: tch::Tensor,
    /// `[B]` i64 or `[B, A]` f32.
    pub action: tch::Tensor,
    /// `[B]`.
    pub reward: tch::Tensor,
    /// `[B]`.
    pub discount: tch::Tensor,
    /// `[B, D]`.
    pub next_obs: tch::Tensor,
    /// Importance-sampling weights `[B]` (ones for uniform replay).
    pub weights: tch::Tensor,
}

/// What a CUDA graph of an update copies its batch into (`crate::optim::UpdateGraph`).
impl crate::optim::GraphBatch for TransitionBatch {
    fn fields(&self) -> Vec<&tch::Tensor> {
        vec![
            &self.obs,
            &self.action,
            &self.reward,
            &self.discount,
            &self.next_obs,
            &self.weights,
        ]
    }

    fn from_fields(fields: &[tch::Tensor]) -> TransitionBatch {
        let [obs, action, reward, discount, next_obs, weights] = fields else {
            panic!("a transition batch has 6 fields, got {}", fields.len());
        };
        TransitionBatch {
            obs: obs.shallow_clone(),
            action: action.shallow_clone(),
            reward: reward.shallow_clone(),
            discount: discount.shallow_clone(),
            next_obs: next_obs.shallow_clone(),
            weights: weights.shallow_clone(),
        }
    }
}

impl TransitionBatch {
    /// Reads a stacked sample (leading dimension B) onto `device`, with unit weights.
    pub fn from_stacked(batch: &TensorMap, device: tch::Device) -> Result<Self, TensorError> {
        let get = |name: &str| -> Result<tch::Tensor, TensorError> {
            Ok(crate::models::weights::from_proto(batch.field(name)?)?.to_device(device))
        };
        // Byte observations cross to the device as bytes and widen there.
        let observations = |name: &str| Ok(get(name)?.to_kind(tch::Kind::Float));
        let reward = get(field::REWARD)?;
        Ok(TransitionBatch {
            obs: observations(field::OBS)?,
            action: get(field::ACTION)?,
            weights: reward.ones_like(),
            reward,
            discount: get(field::DISCOUNT)?,
            next_obs: observations(field::NEXT_OBS)?,
        })
    }

    /// Rows in the batch.
    pub fn len(&self) -> i64 {
        self.reward.size()[0]
    }

    /// Whether the batch has no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Prioritized replay's importance weights, `(N P(i))^-beta` normalised by their maximum.
pub fn importance_weights(probabilities: &[f64], table_size: u64, beta: f64) -> Vec<f32> {
    let n = table_size.max(1) as f64;
    let raw: Vec<f64> = probabilities
        .iter()
        .map(|&p| (n * p.max(1e-12)).powf(-beta))
        .collect();
    let max = raw.iter().cloned().fold(f64::MIN_POSITIVE, f64::max);
    raw.iter().map(|w| (w / max) as f32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table's observation width is the wrapped env's (a frame stack, the previous
    /// action and reward), not the bare id's: actors insert what they observe.
    #[test]
    fn table_signature_follows_the_env_wrappers() {
        use crate::config::RunConfig;
        let text = "[env]\nid = \"Pendulum-v1\"\nframe_stack = 3\nprev_action_reward = true\n\
                    [algo]\nname = \"sac\"\n";
        let config = RunConfig::from_toml(text, "t").unwrap();
        let replay = crate::algos::registry::spec(&config)
            .replay
            .expect("sac replays");
        let table = super::super::tables::transitions(&config, &replay).unwrap();
        let obs = (table.signature.fields.iter())
            .find(|f| f.name == field::OBS)
            .expect("obs field");
        // (3 observations + 1 action + 1 reward) x 3 frames.
        assert_eq!(obs.shape, vec![15]);
    }

    fn step(r: f32, terminated: bool, truncated: bool, next: f32) -> StepIn {
        StepIn {
            obs: vec![next - 1.0],
            action: Action::Discrete(0),
            reward: r,
            terminated,
            truncated,
            next_obs: vec![next],
        }
    }

    #[test]
    fn three_step_returns_bootstrap_with_gamma_cubed() {
        let mut acc = NStep::new(3, 0.5);
        assert!(acc.push(step(1.0, false, false, 1.0)).is_empty());
        assert!(acc.push(step(2.0, false, false, 2.0)).is_empty());
        let out = acc.push(step(4.0, false, false, 3.0));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].reward, 1.0 + 0.5 * 2.0 + 0.25 * 4.0);
        assert_eq!(out[0].discount, 0.125);
        assert_eq!(out[0].obs, vec![0.0]);
        assert_eq!(out[0].next_obs, vec![3.0]);
    }

    #[test]
    fn termination_zeroes_the_discount_and_flushes_every_pending_step() {
        let mut acc = NStep::new(3, 0.5);
        acc.push(step(1.0, false, false, 1.0));
        let out = acc.push(step(2.0, true, false, 2.0));
        assert_eq!(out.len(), 2);
        assert_eq!((out[0].reward, out[0].discount), (2.0, 0.0));
        assert_eq!((out[1].reward, out[1].discount), (2.0, 0.0));
        assert_eq!(out[1].obs, vec![1.0]);
    }

    #[test]
    fn truncation_bootstraps_from_the_final_observation() {
        let mut acc = NStep::new(3, 0.5);
        acc.push(step(1.0, false, false, 1.0));
        let out = acc.push(step(2.0, false, true, 2.0));
        assert_eq!((out[0].reward, out[0].discount), (2.0, 0.25));
        assert_eq!((out[1].reward, out[1].discount), (2.0, 0.5));
        assert!(out.iter().all(|t| t.next_obs == vec![2.0]));
        // The next episode starts clean.
        assert!(acc.push(step(1.0, false, false, 5.0)).is_empty());
    }

    #[test]
    fn importance_weights_favour_rare_items_and_peak_at_one() {
        let w = importance_weights(&[0.5, 0.25, 0.25], 3, 1.0);
        assert_eq!(w, vec![0.5, 1.0, 1.0]);
        assert_eq!(importance_weights(&[0.5, 0.1], 10, 0.0), vec![1.0, 1.0]);
    }
}
