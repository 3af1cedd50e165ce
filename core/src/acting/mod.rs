//! One rollout of acting: step a [`VecEnv`] with a policy for T steps and record what the
//! learner needs. Shared by the actor binary and the single-process (serial) mode.

pub mod alternating;
pub mod eval;
pub mod exploration;
pub mod meta;
pub mod pearl;
pub mod policy_loader;
pub mod ppod;
pub mod scripted;

use tch::Tensor;

use crate::envs::{EnvError, VecEnv};
use crate::items::rollout::{Actions, Bootstrap, RolloutBuilder, StepRecord};
use crate::models::{Policy, RnnState};
use fleetrl_proto::space::{Action, Space};

/// Why a rollout could not be collected.
#[derive(Debug, thiserror::Error)]
pub enum ActingError {
    /// An env rejected an action.
    #[error(transparent)]
    Env(#[from] EnvError),
    /// A policy output could not be read back.
    #[error("policy output: {0}")]
    Tch(#[from] tch::TchError),
    /// Collected steps could not be assembled into an item.
    #[error("building an item: {0}")]
    Item(#[from] fleetrl_proto::TensorError),
}

/// The envs being stepped and their current observations.
pub struct Acting {
    envs: VecEnv,
    obs: Vec<f32>,
    /// A recurrent policy's state per env, carried across rollouts and zeroed where an
    /// episode ended; `None` until a recurrent policy acts.
    state: Option<RnnState>,
}

impl std::fmt::Debug for Acting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Acting({} envs)", self.envs.num_envs())
    }
}

/// `rows` observations of `obs_dim` values as a `[rows, obs_dim]` tensor.
pub(crate) fn batch(flat: &[f32], rows: usize, obs_dim: usize) -> Tensor {
    Tensor::from_slice(flat).view([rows as i64, obs_dim as i64])
}

/// `[rows, obs_dim]` tensor over `flat`'s memory, so the preallocated observation buffer feeds
/// inference without a copy.
///
/// # Safety
/// The tensor must not be used after `flat` is freed or resized, nor while it is written.
unsafe fn view_batch(flat: &[f32], rows: usize, obs_dim: usize) -> Tensor {
    assert_eq!(flat.len(), rows * obs_dim, "observation buffer shape");
    Tensor::from_blob(
        flat.as_ptr().cast::<u8>(),
        &[rows as i64, obs_dim as i64],
        &[obs_dim as i64, 1],
        tch::Kind::Float,
        tch::Device::Cpu,
    )
}

impl Acting {
    /// Takes over `envs`, resetting env i with seed `seed + i`.
    pub fn new(mut envs: VecEnv, seed: u64) -> Acting {
        let obs = envs.reset(seed).to_vec();
        Acting {
            envs,
            obs,
            state: None,
        }
    }

    /// Resets every env (env i with seed `seed + i`) and any recurrent state: the next
    /// rollout starts fresh episodes.
    pub fn restart(&mut self, seed: u64) {
        self.obs = self.envs.reset(seed).to_vec();
        self.state = None;
    }

    /// The envs.
    pub fn envs(&self) -> &VecEnv {
        &self.envs
    }

    /// The envs (for spaces and finished episodes).
    pub fn envs_mut(&mut self) -> &mut VecEnv {
        &mut self.envs
    }

    /// Steps every env `builder`'s T times with `policy` (sampling actions) and fills
    /// `builder`; returns the observations after the last step and their values.
    pub fn collect(
        &mut self,
        policy: &dyn Policy,
        builder: &mut RolloutBuilder,
    ) -> Result<Bootstrap, ActingError> {
        let (m, obs_dim) = (self.envs.num_envs(), self.envs.obs_dim());
        // `mid_batch_reset = false`: envs that finished during the last rollout start now.
        if let Some(obs) = self.envs.reset_held() {
            self.obs.copy_from_slice(obs);
        }
        if policy.state_size() > 0 {
            let state = self.state.get_or_insert_with(|| {
                RnnState::zeros(m as i64, policy.state_size(), tch::Device::Cpu)
            });
            builder.set_initial_state(
                Vec::<f32>::try_from(&state.h.reshape([-1]))?,
                Vec::<f32>::try_from(&state.c.reshape([-1]))?,
            );
        }
        while !builder.is_full() {
            // SAFETY: `obs` views `self.obs` without copying and is dropped at the end of
            // this iteration's scope; `self.obs` is not resized while it lives, and the
            // policy's outputs are new tensors that do not alias it.
            let obs = unsafe { view_batch(&self.obs, m, obs_dim) };
            let (act, next) = match &self.state {
                Some(state) => {
                    let (act, next) = policy.act_recurrent(&obs, state, false);
                    (act, Some(next))
                }
                None => (policy.act(&obs, false), None),
            };
            let action = Actions::from_tensor(&act.action)?;
            let log_prob = Vec::<f32>::try_from(&act.log_prob)?;
            let value = Vec::<f32>::try_from(&act.value)?;
            // Rows waiting for the next rollout (`mid_batch_reset = false`) before this step.
            let held = (next.is_some() && self.envs.held().contains(&true))
                .then(|| self.envs.held().to_vec());
            let step = match &action {
                Actions::Discrete(a) => self.envs.step_discrete(a)?,
                Actions::Continuous { values, .. } => self.envs.step_continuous(values)?,
            };
            let final_value = truncation_values(
                policy,
                next.as_ref(),
                &step.final_obs,
                &step.truncated,
                obs_dim,
            )?;
            builder.push(StepRecord {
                obs: &self.obs,
                action: &action,
                log_prob: &log_prob,
                value: &value,
                reward: &step.reward,
                terminated: &step.terminated,
                truncated: &step.truncated,
                final_value: &final_value,
            });
            drop(obs);
            self.obs.copy_from_slice(&step.obs);
            if let Some(next) = next {
                // Zero where an episode ended, and while a finished env waits (so it starts
                // its next episode from zero).
                let ended: Vec<f32> = (0..m)
                    .map(|i| {
                        f32::from(
                            !(step.terminated[i]
                                || step.truncated[i]
                                || held.as_ref().is_some_and(|h| h[i])),
                        )
                    })
                    .collect();
                self.state = Some(next.masked(&Tensor::from_slice(&ended)));
            }
        }
        let obs = batch(&self.obs, m, obs_dim);
        let value = match &self.state {
            Some(state) => policy.value_recurrent(&obs, state),
            None => policy.value(&obs),
        };
        let value = Vec::<f32>::try_from(&value)?;
        Ok(Bootstrap {
            value,
            obs: self.obs.clone(),
        })
    }
}

/// `[M, A]` values as M env actions, each clipped to the box's bounds (the policy's Gaussian
/// sample is recorded unclipped, so its log-probability stays exact; SB3 does the same).
pub fn clipped(space: &Space, values: &[f32], m: usize) -> Vec<Action> {
    let dim = values.len() / m.max(1);
    values
        .chunks(dim.max(1))
        .map(|row| match space {
            Space::Box { low, high, .. } => Action::Continuous(
                row.iter()
                    .zip(low.iter().zip(high))
                    .map(|(v, (lo, hi))| v.clamp(*lo, *hi))
                    .collect(),
            ),
            Space::Discrete { .. } => Action::Continuous(row.to_vec()),
        })
        .collect()
}

/// V(final observation) for envs whose episode was truncated on this step, 0 elsewhere.
fn truncation_values(
    policy: &dyn Policy,
    state: Option<&RnnState>,
    final_obs: &[Option<Vec<f32>>],
    truncated: &[bool],
    obs_dim: usize,
) -> Result<Vec<f32>, ActingError> {
    let mut values = vec![0.0f32; truncated.len()];
    let rows: Vec<usize> = (0..truncated.len())
        .filter(|&i| truncated[i] && final_obs[i].is_some())
        .collect();
    if rows.is_empty() {
        return Ok(values);
    }
    let flat: Vec<f32> = rows
        .iter()
        .flat_map(|&i| final_obs[i].iter().flatten().copied())
        .collect();
    let obs = batch(&flat, rows.len(), obs_dim);
    let predicted = match state {
        // The state after the step that ended the episode, before it is reset.
        Some(state) => {
            let index: Vec<i64> = rows.iter().map(|&r| r as i64).collect();
            policy.value_recurrent(&obs, &state.select(&Tensor::from_slice(&index)))
        }
        None => policy.value(&obs),
    };
    let predicted = Vec::<f32>::try_from(&predicted)?;
    for (row, value) in rows.into_iter().zip(predicted) {
        values[row] = value;
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ModelConfig;
    use crate::envs::{CartPole, Env, TimeLimit};
    use crate::models::ActorCritic;

    /// With a 3-step time limit, a 4-step rollout truncates every env once, at step 2: those
    /// steps carry V(final observation), every other step 0.
    #[test]
    fn truncated_steps_carry_the_value_of_the_final_observation() {
        let envs: Vec<Box<dyn Env>> = (0..2)
            .map(|_| Box::new(TimeLimit::new(CartPole::new(), 3)) as Box<dyn Env>)
            .collect();
        let envs = VecEnv::new(envs).unwrap();
        let model = ActorCritic::new(
            &ModelConfig::default(),
            envs.observation_space(),
            envs.action_space(),
            tch::Device::Cpu,
        )
        .unwrap();
        let mut builder = RolloutBuilder::new(4, 2, 4);
        let mut acting = Acting::new(envs, 7);
        let bootstrap = acting.collect(&model, &mut builder).unwrap();
        assert_eq!(bootstrap.value.len(), 2);
        let item = builder.finish(&bootstrap, 0);
        let truncated = item.field("truncated").unwrap().to_vec::<bool>().unwrap();
        let terminated = item.field("terminated").unwrap().to_vec::<bool>().unwrap();
        let final_value = item.field("final_value").unwrap().to_vec::<f32>().unwrap();
        assert!(
            terminated.iter().all(|t| !t),
            "CartPole does not fall in 3 steps from rest"
        );
        assert_eq!(
            truncated,
            vec![false, false, false, false, true, true, false, false]
        );
        for (i, (&trunc, &value)) in truncated.iter().zip(&final_value).enumerate() {
            assert_eq!(
                trunc,
                value != 0.0,
                "step {i}: truncated {trunc}, final value {value}"
            );
        }
    }
}
