//! The round: what PEARL actors insert, one item per round of acting on one task (see
//! PEARL's `[algo]` keys). N is the round's steps; its first
//! `num_steps_prior + num_steps_posterior` rows are the task's context.
//!
//! | field | dtype | shape | meaning |
//! |---|---|---|---|
//! | `obs` | f32 | [N, D] | observation the action was taken from |
//! | `action` | f32 | [N, A] | action, clipped to the box |
//! | `reward` | f32 | [N] | reward the actor-critic trains on |
//! | `score` | f32 | [N] | the step's score ([`crate::envs::Env::score_reward`]): what the context encoder sees (the sparse reward of a sparse task) |
//! | `terminated` | f32 | [N] | 1 where the episode reached a terminal state (no bootstrap) |
//! | `next_obs` | f32 | [N, D] | observation after the step (the final one at an episode's end) |
//! | `task` | i64 | [] | the training task the round was played on |
//! | `policy_version` | i64 | [] | weights version that acted |

use fleetrl_proto::space::Space;
use fleetrl_proto::table::{FieldSpec, Signature};
use fleetrl_proto::{Dtype, Tensor, TensorError, TensorMap};

/// Field names.
pub mod field {
    /// Observations, [N, D].
    pub const OBS: &str = "obs";
    /// Actions, [N, A].
    pub const ACTION: &str = "action";
    /// Training rewards, [N].
    pub const REWARD: &str = "reward";
    /// Scores (the context's rewards), [N].
    pub const SCORE: &str = "score";
    /// 1 at terminal steps, [N].
    pub const TERMINATED: &str = "terminated";
    /// Observations after each step, [N, D].
    pub const NEXT_OBS: &str = "next_obs";
    /// The round's task, [].
    pub const TASK: &str = crate::items::rollout::field::TASK;
    /// Acting weights version, [].
    pub const POLICY_VERSION: &str = "policy_version";
}

/// The signature of one round of `steps` steps in these spaces.
pub fn signature(obs_space: &Space, action_space: &Space, steps: u64) -> Signature {
    let (n, d, a) = (
        steps as i64,
        obs_space.flat_dim() as i64,
        action_space.flat_dim() as i64,
    );
    Signature {
        fields: vec![
            FieldSpec::new(field::OBS, Dtype::F32, &[n, d]),
            FieldSpec::new(field::ACTION, Dtype::F32, &[n, a]),
            FieldSpec::new(field::REWARD, Dtype::F32, &[n]),
            FieldSpec::new(field::SCORE, Dtype::F32, &[n]),
            FieldSpec::new(field::TERMINATED, Dtype::F32, &[n]),
            FieldSpec::new(field::NEXT_OBS, Dtype::F32, &[n, d]),
            FieldSpec::new(field::TASK, Dtype::I64, &[]),
            FieldSpec::new(field::POLICY_VERSION, Dtype::I64, &[]),
        ],
    }
}

/// A round being collected, row by row.
#[derive(Debug, Default)]
pub struct RoundBuilder {
    obs: Vec<f32>,
    action: Vec<f32>,
    reward: Vec<f32>,
    score: Vec<f32>,
    terminated: Vec<f32>,
    next_obs: Vec<f32>,
}

/// One step of a round.
#[derive(Debug, Clone, Copy)]
pub struct RoundStep<'a> {
    /// Observation acted on.
    pub obs: &'a [f32],
    /// Action taken (env scale, clipped).
    pub action: &'a [f32],
    /// Training reward.
    pub reward: f32,
    /// Score (the context's reward).
    pub score: f32,
    /// The episode reached a terminal state.
    pub terminated: bool,
    /// Observation after the step.
    pub next_obs: &'a [f32],
}

impl RoundBuilder {
    /// Appends a step.
    pub fn push(&mut self, step: RoundStep<'_>) {
        self.obs.extend_from_slice(step.obs);
        self.action.extend_from_slice(step.action);
        self.reward.push(step.reward);
        self.score.push(step.score);
        self.terminated.push(f32::from(u8::from(step.terminated)));
        self.next_obs.extend_from_slice(step.next_obs);
    }

    /// Steps so far.
    pub fn len(&self) -> usize {
        self.reward.len()
    }

    /// Whether no step was pushed.
    pub fn is_empty(&self) -> bool {
        self.reward.is_empty()
    }

    /// The round as an item of `task`, acted by weights `version`.
    pub fn finish(self, task: u32, version: i64) -> TensorMap {
        let n = self.reward.len() as i64;
        let width = |v: &[f32]| v.len() as i64 / n.max(1);
        TensorMap::from_pairs([
            (
                field::OBS,
                Tensor::from_slice(&[n, width(&self.obs)], &self.obs),
            ),
            (
                field::ACTION,
                Tensor::from_slice(&[n, width(&self.action)], &self.action),
            ),
            (field::REWARD, Tensor::from_slice(&[n], &self.reward)),
            (field::SCORE, Tensor::from_slice(&[n], &self.score)),
            (
                field::TERMINATED,
                Tensor::from_slice(&[n], &self.terminated),
            ),
            (
                field::NEXT_OBS,
                Tensor::from_slice(&[n, width(&self.next_obs)], &self.next_obs),
            ),
            (field::TASK, Tensor::scalar(i64::from(task))),
            (field::POLICY_VERSION, Tensor::scalar(version)),
        ])
    }
}

/// A sampled batch of K rounds as tch tensors on one device.
#[derive(Debug)]
pub struct RoundBatch {
    /// `[K, N, D]`.
    pub obs: tch::Tensor,
    /// `[K, N, A]`.
    pub action: tch::Tensor,
    /// `[K, N]`.
    pub reward: tch::Tensor,
    /// `[K, N]`.
    pub score: tch::Tensor,
    /// `[K, N]`, 1 at terminal steps.
    pub terminated: tch::Tensor,
    /// `[K, N, D]`.
    pub next_obs: tch::Tensor,
}

/// What a CUDA graph of PEARL's update copies its batch into (`crate::optim::UpdateGraph`).
impl crate::optim::GraphBatch for RoundBatch {
    fn fields(&self) -> Vec<&tch::Tensor> {
        vec![
            &self.obs,
            &self.action,
            &self.reward,
            &self.score,
            &self.terminated,
            &self.next_obs,
        ]
    }

    fn from_fields(fields: &[tch::Tensor]) -> RoundBatch {
        let [obs, action, reward, score, terminated, next_obs] = fields else {
            panic!("a round batch has 6 fields, got {}", fields.len());
        };
        RoundBatch {
            obs: obs.shallow_clone(),
            action: action.shallow_clone(),
            reward: reward.shallow_clone(),
            score: score.shallow_clone(),
            terminated: terminated.shallow_clone(),
            next_obs: next_obs.shallow_clone(),
        }
    }
}

impl RoundBatch {
    /// Reads a stacked sample (leading dimension K) onto `device`.
    pub fn from_stacked(batch: &TensorMap, device: tch::Device) -> Result<Self, TensorError> {
        let get = |name: &str| -> Result<tch::Tensor, TensorError> {
            Ok(crate::models::weights::from_proto(batch.field(name)?)?.to_device(device))
        };
        let rounds = RoundBatch {
            obs: get(field::OBS)?,
            action: get(field::ACTION)?,
            reward: get(field::REWARD)?,
            score: get(field::SCORE)?,
            terminated: get(field::TERMINATED)?,
            next_obs: get(field::NEXT_OBS)?,
        };
        let (k, n) = (rounds.reward.size(), rounds.obs.size());
        if k.len() != 2
            || n.len() != 3
            || n[..2] != k[..]
            || rounds.next_obs.size() != n
            || k[1] == 0
        {
            return Err(TensorError::Tch(format!(
                "a round batch needs obs [K, N, D] with N >= 1, next_obs alike and reward [K, N]; \
                 got obs {n:?}, reward {k:?}"
            )));
        }
        Ok(rounds)
    }

    /// Rounds (tasks) in the batch, K.
    pub fn len(&self) -> i64 {
        self.reward.size()[0]
    }

    /// Whether the batch has no rounds.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Steps per round, N.
    pub fn steps(&self) -> i64 {
        self.reward.size()[1]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A built round fits the table's signature and reads back as a batch of one.
    #[test]
    fn a_round_fits_its_signature_and_reads_back() {
        let (obs_space, action_space) = (
            Space::Box {
                shape: vec![2],
                low: vec![-2.0; 2],
                high: vec![2.0; 2],
            },
            Space::Box {
                shape: vec![2],
                low: vec![-1.0; 2],
                high: vec![1.0; 2],
            },
        );
        let mut builder = RoundBuilder::default();
        for i in 0..3 {
            let x = i as f32;
            builder.push(RoundStep {
                obs: &[x, x],
                action: &[0.5, -0.5],
                reward: -x,
                score: 0.0,
                terminated: i == 2,
                next_obs: &[x + 1.0, x + 1.0],
            });
        }
        let item = builder.finish(4, 7);
        let spec = signature(&obs_space, &action_space, 3);
        for f in &spec.fields {
            let t = item.field(&f.name).unwrap();
            assert_eq!(t.shape, f.shape, "{}", f.name);
        }
        let stacked = TensorMap::from_pairs(
            item.tensors
                .iter()
                .map(|(k, v)| (k.clone(), Tensor::stack(&[v]).unwrap())),
        );
        let batch = RoundBatch::from_stacked(&stacked, tch::Device::Cpu).unwrap();
        assert_eq!((batch.len(), batch.steps()), (1, 3));
        assert_eq!(
            Vec::<f32>::try_from(batch.terminated.reshape([-1])).unwrap(),
            vec![0.0, 0.0, 1.0]
        );
    }
}
