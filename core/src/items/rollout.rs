//! The rollout: T steps of M envs, as an actor records it and the learner trains on it.
//!
//! Field layout (time-major, as rlpyt's `[T, B]`):
//!
//! | field | dtype | shape | meaning |
//! |---|---|---|---|
//! | `obs` | f32 or u8 | [T, M, D] | observation the action was taken from |
//! | `action` | i64 / f32 | [T, M] / [T, M, A] | discrete / continuous action |
//! | `reward` | f32 | [T, M] | reward of the step |
//! | `terminated` | bool | [T, M] | the step ended the episode in a terminal state |
//! | `truncated` | bool | [T, M] | the step ended the episode by time limit |
//! | `log_prob` | f32 | [T, M] | behaviour policy log-probability of `action` |
//! | `value` | f32 | [T, M] | behaviour value estimate V(obs) |
//! | `final_value` | f32 | [T, M] | V(final obs) where `truncated`, else 0 |
//! | `bootstrap_value` | f32 | [M] | V(obs after the last step) |
//! | `bootstrap_obs` | f32 or u8 | [M, D] | the observation after the last step (V-trace re-values it) |
//! | `policy_version` | i64 | [] | weights version that acted |
//! | `rnn_h`, `rnn_c` | f32 | [M, H] | recurrent state before the first step (LSTM models only) |
//!
//! Observations are u8 for envs with byte observations (see [`super`]).

use fleetrl_proto::{Dtype, Tensor, TensorError, TensorMap};

use super::steps::StepData;
use fleetrl_proto::space::Space;
use fleetrl_proto::table::{FieldSpec, Signature};

/// Field names, so producers and consumers cannot drift apart.
pub mod field {
    /// Observations, [T, M, D].
    pub const OBS: &str = "obs";
    /// Actions, [T, M] or [T, M, A].
    pub const ACTION: &str = "action";
    /// Rewards, [T, M].
    pub const REWARD: &str = "reward";
    /// Terminal flags, [T, M].
    pub const TERMINATED: &str = "terminated";
    /// Time-limit flags, [T, M].
    pub const TRUNCATED: &str = "truncated";
    /// Behaviour log-probabilities, [T, M].
    pub const LOG_PROB: &str = "log_prob";
    /// Behaviour values, [T, M].
    pub const VALUE: &str = "value";
    /// Values of final observations at truncation, [T, M].
    pub const FINAL_VALUE: &str = "final_value";
    /// Values after the last step, [M].
    pub const BOOTSTRAP_VALUE: &str = "bootstrap_value";
    /// Observations after the last step, [M, D].
    pub const BOOTSTRAP_OBS: &str = "bootstrap_obs";
    /// Acting weights version, [].
    pub const POLICY_VERSION: &str = "policy_version";
    /// LSTM hidden state before the first step, [M, H].
    pub const RNN_H: &str = "rnn_h";
    /// LSTM cell state before the first step, [M, H].
    pub const RNN_C: &str = "rnn_c";
    /// The task a meta-RL item was collected on, [] (i64).
    pub const TASK: &str = "task";
}

/// The signature of a rollout of `t` steps of `m` envs with these spaces.
pub fn signature(obs_space: &Space, action_space: &Space, t: i64, m: i64) -> Signature {
    signature_with_state(obs_space, action_space, t, m, 0)
}

/// [`signature`] for a recurrent policy with state width `state_size` (0: feed-forward, no
/// state fields).
pub fn signature_with_state(
    obs_space: &Space,
    action_space: &Space,
    t: i64,
    m: i64,
    state_size: i64,
) -> Signature {
    let mut sig = feed_forward_signature(obs_space, action_space, t, m);
    if state_size > 0 {
        sig.fields
            .push(FieldSpec::new(field::RNN_H, Dtype::F32, &[m, state_size]));
        sig.fields
            .push(FieldSpec::new(field::RNN_C, Dtype::F32, &[m, state_size]));
    }
    sig
}

fn feed_forward_signature(obs_space: &Space, action_space: &Space, t: i64, m: i64) -> Signature {
    let obs_dim = obs_space.flat_dim() as i64;
    let action = match action_space {
        Space::Discrete { .. } => FieldSpec::new(field::ACTION, Dtype::I64, &[t, m]),
        Space::Box { .. } => FieldSpec::new(
            field::ACTION,
            Dtype::F32,
            &[t, m, action_space.flat_dim() as i64],
        ),
    };
    let per_step = |name: &str, dtype: Dtype| FieldSpec::new(name, dtype, &[t, m]);
    Signature {
        fields: vec![
            FieldSpec::new(field::OBS, Dtype::F32, &[t, m, obs_dim]),
            action,
            per_step(field::REWARD, Dtype::F32),
            per_step(field::TERMINATED, Dtype::Bool),
            per_step(field::TRUNCATED, Dtype::Bool),
            per_step(field::LOG_PROB, Dtype::F32),
            per_step(field::VALUE, Dtype::F32),
            per_step(field::FINAL_VALUE, Dtype::F32),
            FieldSpec::new(field::BOOTSTRAP_VALUE, Dtype::F32, &[m]),
            FieldSpec::new(field::BOOTSTRAP_OBS, Dtype::F32, &[m, obs_dim]),
            FieldSpec::new(field::POLICY_VERSION, Dtype::I64, &[]),
        ],
    }
}

/// Actions of a batch of rows: indices for a discrete space, `[N, A]` values for a box.
#[derive(Debug, Clone, PartialEq)]
pub enum Actions {
    /// One index per row.
    Discrete(Vec<i64>),
    /// `dim` values per row, row-major.
    Continuous {
        /// Values per action (A).
        dim: usize,
        /// `[N, A]` values.
        values: Vec<f32>,
    },
}

impl Actions {
    /// Reads a policy's action tensor: i64 `[N]` or float `[N, A]`.
    pub fn from_tensor(action: &tch::Tensor) -> Result<Actions, tch::TchError> {
        let action = action.to_device(tch::Device::Cpu);
        if action.kind() == tch::Kind::Int64 {
            return Ok(Actions::Discrete(Vec::<i64>::try_from(&action)?));
        }
        let dim = action.size().get(1).copied().unwrap_or(1) as usize;
        let values = Vec::<f32>::try_from(&action.to_kind(tch::Kind::Float).reshape([-1]))?;
        Ok(Actions::Continuous { dim, values })
    }

    /// An empty buffer of the same kind.
    fn empty_like(&self) -> Actions {
        match self {
            Actions::Discrete(_) => Actions::Discrete(Vec::new()),
            Actions::Continuous { dim, .. } => Actions::Continuous {
                dim: *dim,
                values: Vec::new(),
            },
        }
    }

    /// Rows held.
    pub fn rows(&self) -> usize {
        match self {
            Actions::Discrete(v) => v.len(),
            Actions::Continuous { dim, values } => values.len() / (*dim).max(1),
        }
    }

    /// Appends `other`'s rows. Panics if the kinds or widths differ (one rollout, one space).
    pub(crate) fn extend(&mut self, other: &Actions) {
        match (self, other) {
            (Actions::Discrete(a), Actions::Discrete(b)) => a.extend_from_slice(b),
            (Actions::Continuous { dim: d, values: a }, Actions::Continuous { dim, values: b })
                if d == dim =>
            {
                a.extend_from_slice(b)
            }
            _ => panic!("a rollout's actions must all come from one action space"),
        }
    }

    /// The actions as a tensor on `device`: i64 `[N]` or f32 `[N, A]`.
    pub fn to_tensor(&self, device: tch::Device) -> tch::Tensor {
        match self {
            Actions::Discrete(v) => tch::Tensor::from_slice(v).to_device(device),
            Actions::Continuous { dim, values } => tch::Tensor::from_slice(values)
                .view([-1, *dim as i64])
                .to_device(device),
        }
    }

    /// The rollout field, `[T, M]` or `[T, M, A]`.
    fn to_proto(&self, t: i64, m: i64) -> Tensor {
        match self {
            Actions::Discrete(v) => Tensor::from_slice(&[t, m], v),
            Actions::Continuous { dim, values } => Tensor::from_slice(&[t, m, *dim as i64], values),
        }
    }
}

/// One time step of M envs, as the actor records it.
#[derive(Debug, Clone, Copy)]
pub struct StepRecord<'a> {
    /// Observations acted on, [M, D].
    pub obs: &'a [f32],
    /// Actions taken, M rows.
    pub action: &'a Actions,
    /// Their behaviour log-probabilities, [M].
    pub log_prob: &'a [f32],
    /// Behaviour values V(obs), [M].
    pub value: &'a [f32],
    /// Rewards, [M].
    pub reward: &'a [f32],
    /// Terminal flags, [M].
    pub terminated: &'a [bool],
    /// Time-limit flags, [M].
    pub truncated: &'a [bool],
    /// V(final obs) where truncated, else 0, [M].
    pub final_value: &'a [f32],
}

/// Where a rollout ends: the observations after its last step and their values, `[M, D]`
/// and `[M]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Bootstrap {
    /// V(obs after the last step), [M].
    pub value: Vec<f32>,
    /// The observations after the last step, [M, D].
    pub obs: Vec<f32>,
}

/// Accumulates T steps of M envs into a rollout item.
#[derive(Debug)]
pub struct RolloutBuilder {
    t: usize,
    m: usize,
    obs_dim: usize,
    obs: Vec<f32>,
    /// `None` until the first step shows which kind of actions this is.
    action: Option<Actions>,
    log_prob: Vec<f32>,
    value: Vec<f32>,
    reward: Vec<f32>,
    terminated: Vec<bool>,
    truncated: Vec<bool>,
    final_value: Vec<f32>,
    /// Recurrent state `(h, c)` before the first step, `[M, H]` each.
    initial_state: Option<(Vec<f32>, Vec<f32>)>,
}

impl RolloutBuilder {
    /// An empty builder for rollouts of `t` steps of `m` envs with `obs_dim` observations.
    pub fn new(t: usize, m: usize, obs_dim: usize) -> RolloutBuilder {
        let n = t * m;
        RolloutBuilder {
            t,
            m,
            obs_dim,
            obs: Vec::with_capacity(n * obs_dim),
            action: None,
            log_prob: Vec::with_capacity(n),
            value: Vec::with_capacity(n),
            reward: Vec::with_capacity(n),
            terminated: Vec::with_capacity(n),
            truncated: Vec::with_capacity(n),
            final_value: Vec::with_capacity(n),
            initial_state: None,
        }
    }

    /// Records the recurrent state `(h, c)`, `[M, H]` each, the rollout starts from.
    pub fn set_initial_state(&mut self, h: Vec<f32>, c: Vec<f32>) {
        self.initial_state = Some((h, c));
    }

    /// Appends one time step. Panics if the slices do not have M (or M x D) entries.
    pub fn push(&mut self, step: StepRecord<'_>) {
        assert_eq!(step.obs.len(), self.m * self.obs_dim, "obs must be [M, D]");
        assert_eq!(step.action.rows(), self.m, "one action per env");
        self.obs.extend_from_slice(step.obs);
        self.action
            .get_or_insert_with(|| step.action.empty_like())
            .extend(step.action);
        self.log_prob.extend_from_slice(step.log_prob);
        self.value.extend_from_slice(step.value);
        self.reward.extend_from_slice(step.reward);
        self.terminated.extend_from_slice(step.terminated);
        self.truncated.extend_from_slice(step.truncated);
        self.final_value.extend_from_slice(step.final_value);
    }

    /// Steps still to push before the rollout is full.
    pub fn steps_left(&self) -> usize {
        let pushed = self.action.as_ref().map_or(0, Actions::rows) / self.m.max(1);
        self.t.saturating_sub(pushed)
    }

    /// Whether T steps were pushed.
    pub fn is_full(&self) -> bool {
        self.action.as_ref().map_or(0, Actions::rows) == self.t * self.m
    }

    /// The rollout item; the builder is empty afterwards. Panics unless [`Self::is_full`].
    pub fn finish(&mut self, bootstrap: &Bootstrap, policy_version: i64) -> TensorMap {
        assert!(self.is_full(), "a rollout needs exactly T steps");
        let (t, m) = (self.t as i64, self.m as i64);
        let tm = [t, m];
        let mut item = TensorMap::from_pairs([
            (
                field::OBS,
                Tensor::from_slice(&[t, m, self.obs_dim as i64], &self.obs),
            ),
            (
                field::ACTION,
                self.action
                    .as_ref()
                    .expect("full, so at least one step")
                    .to_proto(t, m),
            ),
            (field::REWARD, Tensor::from_slice(&tm, &self.reward)),
            (field::TERMINATED, Tensor::from_slice(&tm, &self.terminated)),
            (field::TRUNCATED, Tensor::from_slice(&tm, &self.truncated)),
            (field::LOG_PROB, Tensor::from_slice(&tm, &self.log_prob)),
            (field::VALUE, Tensor::from_slice(&tm, &self.value)),
            (
                field::FINAL_VALUE,
                Tensor::from_slice(&tm, &self.final_value),
            ),
            (
                field::BOOTSTRAP_VALUE,
                Tensor::from_slice(&[m], &bootstrap.value),
            ),
            (
                field::BOOTSTRAP_OBS,
                Tensor::from_slice(&[m, self.obs_dim as i64], &bootstrap.obs),
            ),
            (field::POLICY_VERSION, Tensor::scalar(policy_version)),
        ]);
        if let Some((h, c)) = self.initial_state.take() {
            let width = h.len() as i64 / m.max(1);
            item.tensors
                .insert(field::RNN_H.into(), Tensor::from_slice(&[m, width], &h));
            item.tensors
                .insert(field::RNN_C.into(), Tensor::from_slice(&[m, width], &c));
        }
        self.obs.clear();
        self.action = None;
        self.log_prob.clear();
        self.value.clear();
        self.reward.clear();
        self.terminated.clear();
        self.truncated.clear();
        self.final_value.clear();
        item
    }
}

/// A batch's observations as they arrived: f32, or bytes for envs with byte observations
/// (see [`super`]), which cross to the device the learner trains on as bytes and are widened
/// to f32 there, just before the network.
#[derive(Debug, Clone, PartialEq)]
pub enum Observations {
    /// f32 values.
    F32(Vec<f32>),
    /// Whole numbers in 0..=255.
    U8(Vec<u8>),
}

impl Observations {
    /// The values as a flat f32 tensor on `device` (bytes are moved there, then widened).
    pub fn to_tensor(&self, device: tch::Device) -> tch::Tensor {
        match self {
            Observations::F32(v) => tch::Tensor::from_slice(v).to_device(device),
            Observations::U8(v) => tch::Tensor::from_slice(v)
                .to_device(device)
                .to_kind(tch::Kind::Float),
        }
    }

    /// The values as f32 on the host.
    pub fn to_f32(&self) -> std::borrow::Cow<'_, [f32]> {
        match self {
            Observations::F32(v) => std::borrow::Cow::Borrowed(v),
            Observations::U8(v) => v.iter().map(|&b| f32::from(b)).collect(),
        }
    }
}

impl From<Vec<f32>> for Observations {
    fn from(values: Vec<f32>) -> Observations {
        Observations::F32(values)
    }
}

/// A stacked batch of K rollouts, rearranged time-major: `[T, B]` with B = K x M columns
/// (column `k * M + m` is env m of rollout k), ready for return computation.
#[derive(Debug, Clone, PartialEq)]
pub struct RolloutBatch {
    /// Steps per column.
    pub t: usize,
    /// Columns.
    pub b: usize,
    /// Observation size D.
    pub obs_dim: usize,
    /// [T, B, D].
    pub obs: Observations,
    /// [T, B] indices or [T, B, A] values.
    pub action: Actions,
    /// [T, B].
    pub reward: Vec<f32>,
    /// [T, B].
    pub terminated: Vec<bool>,
    /// [T, B].
    pub truncated: Vec<bool>,
    /// [T, B].
    pub log_prob: Vec<f32>,
    /// [T, B].
    pub value: Vec<f32>,
    /// [T, B].
    pub final_value: Vec<f32>,
    /// [B].
    pub bootstrap_value: Vec<f32>,
    /// [B, D].
    pub bootstrap_obs: Vec<f32>,
    /// [K], the version that acted in each rollout.
    pub policy_version: Vec<i64>,
    /// Recurrent state `(h, c)` each column starts from, `[B, H]` each (LSTM models).
    pub init_state: Option<(Vec<f32>, Vec<f32>)>,
    /// `[T, B]`: 1 for a step the losses count, 0 for padding (`actors.mid_batch_reset =
    /// false`, see [`RolloutBatch::mark_padding`]); `None`: every step counts.
    pub valid: Option<Vec<f32>>,
}

/// `[K, T, M, inner]` -> `[T, K, M, inner]`.
fn time_major<T: Copy>(src: &[T], k: usize, t: usize, m: usize, inner: usize) -> Vec<T> {
    let row = m * inner;
    let mut dst = Vec::with_capacity(src.len());
    for ti in 0..t {
        for ki in 0..k {
            let start = (ki * t + ti) * row;
            dst.extend_from_slice(&src[start..start + row]);
        }
    }
    dst
}

/// The stacked `[K, T, M]` (i64) or `[K, T, M, A]` (f32) actions, time-major.
fn stacked_actions(action: &Tensor, k: usize, t: usize, m: usize) -> Result<Actions, TensorError> {
    if action.checked_dtype()? == Dtype::I64 {
        return Ok(Actions::Discrete(time_major(
            &action.to_vec::<i64>()?,
            k,
            t,
            m,
            1,
        )));
    }
    let dim = action.shape.get(3).copied().unwrap_or(1) as usize;
    Ok(Actions::Continuous {
        dim,
        values: time_major(&action.to_vec::<f32>()?, k, t, m, dim),
    })
}

impl RolloutBatch {
    /// Reads a batch stacked by the replay server (every field with a leading K).
    pub fn from_stacked(batch: &TensorMap) -> Result<RolloutBatch, TensorError> {
        let obs = batch.field(field::OBS)?;
        let [k, t, m, d] = match obs.shape[..] {
            [k, t, m, d] => [k as usize, t as usize, m as usize, d as usize],
            _ => {
                return Err(TensorError::Mismatch(format!(
                    "obs shape {:?} is not [K, T, M, D]",
                    obs.shape
                )))
            }
        };
        let per_step = |name: &str| -> Result<Vec<f32>, TensorError> {
            Ok(time_major(&batch.field(name)?.to_vec::<f32>()?, k, t, m, 1))
        };
        let flags = |name: &str| -> Result<Vec<bool>, TensorError> {
            Ok(time_major(
                &batch.field(name)?.to_vec::<bool>()?,
                k,
                t,
                m,
                1,
            ))
        };
        Ok(RolloutBatch {
            t,
            b: k * m,
            obs_dim: d,
            obs: match obs.checked_dtype()? {
                Dtype::U8 => Observations::U8(time_major(&obs.to_vec::<u8>()?, k, t, m, d)),
                _ => Observations::F32(time_major(&obs.to_vec::<f32>()?, k, t, m, d)),
            },
            action: stacked_actions(batch.field(field::ACTION)?, k, t, m)?,
            reward: per_step(field::REWARD)?,
            terminated: flags(field::TERMINATED)?,
            truncated: flags(field::TRUNCATED)?,
            log_prob: per_step(field::LOG_PROB)?,
            value: per_step(field::VALUE)?,
            final_value: per_step(field::FINAL_VALUE)?,
            bootstrap_value: batch.field(field::BOOTSTRAP_VALUE)?.to_vec::<f32>()?,
            bootstrap_obs: batch.field(field::BOOTSTRAP_OBS)?.to_f32_widened()?,
            policy_version: batch.field(field::POLICY_VERSION)?.to_vec::<i64>()?,
            init_state: match (batch.field(field::RNN_H), batch.field(field::RNN_C)) {
                (Ok(h), Ok(c)) => Some((h.to_vec::<f32>()?, c.to_vec::<f32>()?)),
                _ => None,
            },
            valid: None,
        })
    }

    /// Marks every step after the first episode end of its column as padding (rlpyt's
    /// `valid_from_done`): with `actors.mid_batch_reset = false` a finished env sits the rest
    /// of its rollout out, so those steps are not experience.
    pub fn mark_padding(&mut self) {
        let done: Vec<bool> = (self.terminated.iter().zip(&self.truncated))
            .map(|(a, b)| *a || *b)
            .collect();
        self.valid = Some(super::steps::valid_from_done(&done, self.t, self.b));
    }

    /// Reads several stacked batches (e.g. single rollouts sampled one at a time) as one.
    pub fn from_parts(parts: &[TensorMap]) -> Result<RolloutBatch, TensorError> {
        let first = parts.first().ok_or(TensorError::Empty)?;
        let mut joined = TensorMap::default();
        for name in first.tensors.keys() {
            let fields: Vec<&Tensor> = parts
                .iter()
                .map(|p| p.field(name))
                .collect::<Result<_, _>>()?;
            joined
                .tensors
                .insert(name.clone(), Tensor::concat(&fields)?);
        }
        RolloutBatch::from_stacked(&joined)
    }

    /// The policy version that acted in a stacked single rollout (`[1]` or `[]`), if present.
    pub fn version_of(part: &TensorMap) -> Option<i64> {
        part.field(field::POLICY_VERSION)
            .ok()?
            .to_vec::<i64>()
            .ok()?
            .first()
            .copied()
    }

    /// The view return computations take.
    pub fn step_data(&self) -> StepData<'_> {
        StepData {
            t: self.t,
            b: self.b,
            reward: &self.reward,
            value: &self.value,
            terminated: &self.terminated,
            truncated: &self.truncated,
            final_value: &self.final_value,
            bootstrap_value: &self.bootstrap_value,
        }
    }

    /// Env steps in the batch.
    pub fn env_steps(&self) -> u64 {
        (self.t * self.b) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rollout(t: usize, m: usize, tag: f32, version: i64) -> TensorMap {
        let mut b = RolloutBuilder::new(t, m, 2);
        for step in 0..t {
            let base = tag + step as f32;
            let obs: Vec<f32> = (0..m * 2).map(|i| base + i as f32 / 10.0).collect();
            let action = Actions::Discrete((0..m).map(|i| (step * 10 + i) as i64).collect());
            let reward: Vec<f32> = (0..m).map(|i| base + i as f32 / 10.0).collect();
            b.push(StepRecord {
                obs: &obs,
                action: &action,
                log_prob: &reward,
                value: &reward,
                reward: &reward,
                terminated: &vec![step == 1; m],
                truncated: &vec![false; m],
                final_value: &vec![0.0; m],
            });
        }
        let bootstrap = Bootstrap {
            value: vec![tag; m],
            obs: vec![tag; m * 2],
        };
        b.finish(&bootstrap, version)
    }

    #[test]
    fn built_rollout_matches_the_signature() {
        let env = crate::envs::make("CartPole-v1").unwrap();
        let sig = signature(&env.observation_space(), &env.action_space(), 3, 2);
        let item = rollout(3, 2, 0.0, 7);
        for f in &sig.fields {
            let t = item.field(&f.name).unwrap();
            assert_eq!(t.checked_dtype().unwrap(), f.dtype, "{}", f.name);
            if f.name != field::OBS && f.name != field::BOOTSTRAP_OBS {
                assert_eq!(t.shape, f.shape, "{}", f.name);
            }
        }
        assert_eq!(item.tensors.len(), sig.fields.len());
    }

    #[test]
    fn parts_join_like_one_stacked_batch() {
        let (a, b) = (rollout(3, 2, 100.0, 4), rollout(3, 2, 200.0, 5));
        let one = |r: &TensorMap| {
            TensorMap::from_pairs(
                r.tensors
                    .iter()
                    .map(|(k, v)| (k.clone(), Tensor::stack(&[v]).unwrap())),
            )
        };
        let both = TensorMap::from_pairs(a.tensors.keys().map(|k| {
            (
                k.clone(),
                Tensor::stack(&[&a.tensors[k], &b.tensors[k]]).unwrap(),
            )
        }));
        let joined = RolloutBatch::from_parts(&[one(&a), one(&b)]).unwrap();
        assert_eq!(joined, RolloutBatch::from_stacked(&both).unwrap());
        assert_eq!(RolloutBatch::version_of(&one(&b)), Some(5));
    }

    #[test]
    fn stacked_batch_becomes_time_major_with_k_times_m_columns() {
        let (a, b) = (rollout(3, 2, 100.0, 4), rollout(3, 2, 200.0, 5));
        let stacked = TensorMap::from_pairs(a.tensors.keys().map(|name| {
            (
                name.clone(),
                Tensor::stack(&[&a.tensors[name], &b.tensors[name]]).unwrap(),
            )
        }));
        let batch = RolloutBatch::from_stacked(&stacked).unwrap();
        assert_eq!((batch.t, batch.b, batch.obs_dim), (3, 4, 2));
        // Row t = 1: rollout a's two envs, then rollout b's.
        assert_eq!(&batch.reward[4..8], &[101.0, 101.1, 201.0, 201.1]);
        let Actions::Discrete(action) = &batch.action else {
            panic!("discrete actions")
        };
        assert_eq!(&action[4..8], &[10, 11, 10, 11]);
        assert_eq!(&batch.obs.to_f32()[8..12], &[101.0, 101.1, 101.2, 101.3]);
        assert_eq!(batch.terminated[4..8], [true; 4]);
        assert_eq!(batch.bootstrap_value, vec![100.0, 100.0, 200.0, 200.0]);
        assert_eq!(batch.policy_version, vec![4, 5]);
    }
}
