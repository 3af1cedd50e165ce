//! The stored sequence: what recurrent off-policy actors (R2D2, recurrent SAC) insert into a
//! replay table, one item
//! per `sequence_length` consecutive steps of one env, consecutive items sharing
//! `sequence_overlap` steps. Sequences run across episode ends (the flags say where), so no
//! step is padding; the learner resets the recurrent state after an ended step.
//!
//! | field | dtype | shape | meaning |
//! |---|---|---|---|
//! | `obs` | f32 or u8 | [L, D] | observation each action was taken from |
//! | `action` | i64 or f32 | [L] or [L, A] | discrete action, or a point in the action box |
//! | `reward` | f32 | [L] | one-step reward (already clipped, if the algorithm clips) |
//! | `terminated` | f32 | [L] | 1 where the step reached a terminal state |
//! | `truncated` | f32 | [L] | 1 where the step hit a time limit (not terminal) |
//! | `final_obs` | f32 or u8 | [L, D] | the episode's final observation where it ended, else zeros |
//! | `state_h`, `state_c` | f32 | [H] | the actor's recurrent state before the first step (recurrent SAC: the policy's and every critic's side by side) |
//! | `policy_version` | i64 | [L] | weights version that acted |
//!
//! n-step targets are computed by the learner inside the sequence (not on the actor), so a
//! truncated step bootstraps from `final_obs` through the state the sequence reached.

use fleetrl_proto::{Dtype, Tensor, TensorError, TensorMap};

use crate::models::RnnState;
use fleetrl_proto::space::{Action, Space};
use fleetrl_proto::table::{FieldSpec, Signature};

/// Field names.
pub mod field {
    /// Observations, [L, D].
    pub const OBS: &str = "obs";
    /// Actions, [L] (discrete) or [L, A] (continuous).
    pub const ACTION: &str = "action";
    /// Rewards, [L].
    pub const REWARD: &str = "reward";
    /// Terminal flags, [L].
    pub const TERMINATED: &str = "terminated";
    /// Time-limit flags, [L].
    pub const TRUNCATED: &str = "truncated";
    /// Final observations at episode ends, [L, D].
    pub const FINAL_OBS: &str = "final_obs";
    /// Recurrent hidden state before step 0, [H].
    pub const STATE_H: &str = "state_h";
    /// Recurrent cell state before step 0, [H].
    pub const STATE_C: &str = "state_c";
    /// Acting weights version, [L].
    pub const POLICY_VERSION: &str = "policy_version";
}

/// The signature of one sequence of `length` steps with a recurrent state of width
/// `state_size`.
pub fn signature(
    obs_space: &Space,
    action_space: &Space,
    length: u32,
    state_size: i64,
) -> Signature {
    let (l, d) = (length as i64, obs_space.flat_dim() as i64);
    let action = match action_space {
        Space::Discrete { .. } => FieldSpec::new(field::ACTION, Dtype::I64, &[l]),
        Space::Box { .. } => {
            let a = action_space.flat_dim() as i64;
            FieldSpec::new(field::ACTION, Dtype::F32, &[l, a])
        }
    };
    Signature {
        fields: vec![
            FieldSpec::new(field::OBS, Dtype::F32, &[l, d]),
            action,
            FieldSpec::new(field::REWARD, Dtype::F32, &[l]),
            FieldSpec::new(field::TERMINATED, Dtype::F32, &[l]),
            FieldSpec::new(field::TRUNCATED, Dtype::F32, &[l]),
            FieldSpec::new(field::FINAL_OBS, Dtype::F32, &[l, d]),
            FieldSpec::new(field::STATE_H, Dtype::F32, &[state_size]),
            FieldSpec::new(field::STATE_C, Dtype::F32, &[state_size]),
            FieldSpec::new(field::POLICY_VERSION, Dtype::I64, &[l]),
        ],
    }
}

/// One env step as a recurrent actor records it, with the state it acted from.
#[derive(Debug, Clone)]
pub struct SequenceStep<'a> {
    /// Observation the action was taken from.
    pub obs: &'a [f32],
    /// The action taken.
    pub action: &'a Action,
    /// Reward (clipped).
    pub reward: f32,
    /// Terminal state reached.
    pub terminated: bool,
    /// Time limit reached.
    pub truncated: bool,
    /// The episode's final observation, when it ended.
    pub final_obs: Option<&'a [f32]>,
    /// Recurrent hidden state before the step.
    pub h: &'a [f32],
    /// Recurrent cell state before the step.
    pub c: &'a [f32],
    /// Acting weights version.
    pub policy_version: i64,
}

impl SequenceStep<'_> {
    /// The step as per-step fields for a [`crate::replay_client::SequenceBuilder`]; the state
    /// rides along with every step and [`keep_first_state`] trims it once the item is cut.
    pub fn to_map(&self) -> TensorMap {
        let d = self.obs.len() as i64;
        let h = self.h.len() as i64;
        let zeros = vec![0.0f32; self.obs.len()];
        let flag = |b: bool| Tensor::scalar(if b { 1.0f32 } else { 0.0 });
        TensorMap::from_pairs([
            (field::OBS, Tensor::from_slice(&[d], self.obs)),
            (field::ACTION, action_tensor(self.action)),
            (field::REWARD, Tensor::scalar(self.reward)),
            (field::TERMINATED, flag(self.terminated)),
            (field::TRUNCATED, flag(self.truncated)),
            (
                field::FINAL_OBS,
                Tensor::from_slice(&[d], self.final_obs.unwrap_or(&zeros)),
            ),
            (field::STATE_H, Tensor::from_slice(&[h], self.h)),
            (field::STATE_C, Tensor::from_slice(&[h], self.c)),
            (field::POLICY_VERSION, Tensor::scalar(self.policy_version)),
        ])
    }
}

/// One step's action: an i64 scalar, or an f32 vector.
fn action_tensor(action: &Action) -> Tensor {
    match action {
        Action::Discrete(a) => Tensor::scalar(*a),
        Action::Continuous(v) => Tensor::from_slice(&[v.len() as i64], v),
    }
}

/// Replaces the stacked `[L, H]` states of a cut sequence by the state before its first step.
pub fn keep_first_state(item: &mut TensorMap) -> Result<(), TensorError> {
    for name in [field::STATE_H, field::STATE_C] {
        let stacked = item.field(name)?;
        let width = *stacked.shape.last().unwrap_or(&0);
        let first: Vec<f32> = stacked.to_vec::<f32>()?[..width as usize].to_vec();
        item.tensors
            .insert(name.to_string(), Tensor::from_slice(&[width], &first));
    }
    Ok(())
}

/// A sampled batch of sequences as tch tensors on one device, time-major.
#[derive(Debug)]
pub struct SequenceBatch {
    /// `[T, B, D]`.
    pub obs: tch::Tensor,
    /// `[T, B]` i64 (discrete) or `[T, B, A]` f32 (continuous, env scale).
    pub action: tch::Tensor,
    /// `[T, B]`.
    pub reward: tch::Tensor,
    /// `[T, B]`, 1 at terminal steps.
    pub terminated: tch::Tensor,
    /// `[T, B]`, 1 at time-limit steps.
    pub truncated: tch::Tensor,
    /// `[T, B, D]`.
    pub final_obs: tch::Tensor,
    /// The stored state before step 0, `[B, H]` each.
    pub state: RnnState,
    /// Importance-sampling weights `[B]` (ones for uniform replay).
    pub weights: tch::Tensor,
}

impl SequenceBatch {
    /// Reads a stacked sample (leading dimension B) onto `device`, time-major, unit weights.
    pub fn from_stacked(batch: &TensorMap, device: tch::Device) -> Result<Self, TensorError> {
        let get = |name: &str| -> Result<tch::Tensor, TensorError> {
            Ok(crate::models::weights::from_proto(batch.field(name)?)?.to_device(device))
        };
        let time_major = |name: &str| -> Result<tch::Tensor, TensorError> {
            Ok(get(name)?.transpose(0, 1).contiguous())
        };
        // Byte observations cross to the device as bytes and widen there.
        let observations = |name: &str| Ok(time_major(name)?.to_kind(tch::Kind::Float));
        let state = RnnState {
            h: get(field::STATE_H)?,
            c: get(field::STATE_C)?,
        };
        Ok(SequenceBatch {
            weights: state.h.ones_like().select(1, 0),
            obs: observations(field::OBS)?,
            action: time_major(field::ACTION)?,
            reward: time_major(field::REWARD)?,
            terminated: time_major(field::TERMINATED)?,
            truncated: time_major(field::TRUNCATED)?,
            final_obs: observations(field::FINAL_OBS)?,
            state,
        })
    }

    /// Sequences in the batch.
    pub fn len(&self) -> i64 {
        self.weights.size()[0]
    }

    /// Whether the batch has no sequences.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `[T, B]`: 1 before step t where step t - 1 ended an episode (state reset there).
    pub fn resets(&self) -> tch::Tensor {
        let ended = (&self.terminated + &self.truncated).clamp(0.0, 1.0);
        let steps = ended.size()[0];
        let first = ended.get(0).zeros_like().unsqueeze(0);
        tch::Tensor::cat(&[first, ended.narrow(0, 0, steps - 1)], 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay_client::SequenceBuilder;

    /// Steps cut by the builder, trimmed to their first state, pass the table's signature,
    /// stack into a batch and come back as time-major tensors with the stored state of each
    /// sequence's first step, with discrete and with continuous actions.
    #[test]
    fn sequences_and_their_stored_state_round_trip_through_the_signature() {
        round_trip(false);
        round_trip(true);
    }

    fn round_trip(continuous: bool) {
        let action_space = match continuous {
            true => Space::Box {
                shape: vec![2],
                low: vec![-2.0; 2],
                high: vec![2.0; 2],
            },
            false => Space::Discrete { n: 2 },
        };
        let obs_space = Space::Box {
            shape: vec![2],
            low: vec![-1.0; 2],
            high: vec![1.0; 2],
        };
        let signature = signature(&obs_space, &action_space, 4, 3);
        let mut builder = SequenceBuilder::new(4, 2).unwrap();
        let mut items = Vec::new();
        for t in 0..8 {
            let x = t as f32;
            let (obs, h, c) = ([x, -x], [x, x + 0.5, 7.0], [-x, 0.0, 1.0]);
            let final_obs = [9.0, 9.0];
            let action = match continuous {
                true => Action::Continuous(vec![x, -x / 2.0]),
                false => Action::Discrete(t % 2),
            };
            let step = SequenceStep {
                obs: &obs,
                action: &action,
                reward: 1.0,
                terminated: false,
                truncated: t == 4,
                final_obs: (t == 4).then_some(&final_obs[..]),
                h: &h,
                c: &c,
                policy_version: 3,
            };
            if let Some(mut item) = builder.push(step.to_map()).unwrap() {
                keep_first_state(&mut item).unwrap();
                signature.validate(&item).unwrap();
                items.push(item);
            }
        }
        assert_eq!(items.len(), 3); // steps 0-3, 2-5, 4-7
                                    // Stacked field by field, as the replay server's table stacks a sampled batch.
        let mut stacked = TensorMap::default();
        for field in &signature.fields {
            let parts: Vec<&Tensor> = items
                .iter()
                .map(|i| i.field(&field.name).unwrap())
                .collect();
            stacked
                .tensors
                .insert(field.name.clone(), Tensor::stack(&parts).unwrap());
        }
        let batch = SequenceBatch::from_stacked(&stacked, tch::Device::Cpu).unwrap();
        assert_eq!(batch.obs.size(), vec![4, 3, 2]);
        let h = Vec::<f32>::try_from(batch.state.h.view([-1])).unwrap();
        assert_eq!(h, vec![0.0, 0.5, 7.0, 2.0, 2.5, 7.0, 4.0, 4.5, 7.0]);
        // Sequence 1 (steps 2..5) truncates at its step 2; the reset follows at step 3.
        let resets = Vec::<f32>::try_from(batch.resets().select(1, 1)).unwrap();
        assert_eq!(resets, vec![0.0, 0.0, 0.0, 1.0]);
        let final_obs = Vec::<f32>::try_from(batch.final_obs.get(2).get(1)).unwrap();
        assert_eq!(final_obs, vec![9.0, 9.0]);
        let first_obs = Vec::<f32>::try_from(batch.obs.get(0).select(1, 0)).unwrap();
        assert_eq!(first_obs, vec![0.0, 2.0, 4.0]);
        if continuous {
            assert_eq!(batch.action.size(), vec![4, 3, 2]);
            let second = Vec::<f32>::try_from(batch.action.get(0).get(1)).unwrap();
            assert_eq!(second, vec![2.0, -1.0]);
        } else {
            assert_eq!(batch.action.size(), vec![4, 3]);
            assert_eq!(batch.action.kind(), tch::Kind::Int64);
        }
    }
}
