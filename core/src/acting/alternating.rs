//! Alternating acting (rlpyt's `AlternatingSampler` with its alternating agents): the envs
//! form two groups, and while one group steps on a second thread the policy computes the
//! other group's actions, so env time and inference time overlap instead of adding up.
//!
//! Per rollout step t: act on group 0, hand it to the stepping thread; act on group 1 while
//! group 0 steps; collect group 0 and hand over group 1; act on group 0 for step t + 1 while
//! group 1 steps; collect group 1 and record step t for all M envs (group 0's rows first).
//! The recorded rollout has the layout of [`Acting`](super::Acting)'s: only the timing
//! differs. A group travels to the stepping thread by value and comes back with its step.

use std::sync::mpsc;

use tch::Tensor;

use super::{batch, truncation_values, ActingError};
use crate::envs::{EnvError, Episode, VecEnv, VecStep};
use crate::items::rollout::{Actions, Bootstrap, RolloutBuilder, StepRecord};
use crate::models::{Policy, RnnState};

/// One group's envs, its current observations and a recurrent policy's state.
struct Group {
    envs: Option<VecEnv>,
    obs: Vec<f32>,
    state: Option<RnnState>,
}

/// What acting on one group produced, before its step.
struct Acted {
    action: Actions,
    log_prob: Vec<f32>,
    value: Vec<f32>,
    /// The recurrent state after acting (before the step's episode ends zero it).
    next: Option<RnnState>,
}

/// A group's step as it is recorded.
struct Stepped {
    acted: Acted,
    /// The observations the actions were taken from.
    obs: Vec<f32>,
    step: VecStep,
    final_value: Vec<f32>,
}

/// Two groups of envs stepped in turn (see the module docs).
pub struct Alternating {
    groups: [Group; 2],
    obs_dim: usize,
}

impl std::fmt::Debug for Alternating {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Alternating({} envs per group)", self.group_size())
    }
}

/// A job for the stepping thread: the group, its envs and the actions to apply.
type Job = (usize, VecEnv, Actions);
/// The stepping thread's answer: the group, its envs back, and the step.
type Done = (usize, VecEnv, Result<VecStep, EnvError>);

impl Alternating {
    /// Takes over two equal groups of envs; env i of the M (group 0's first) is reset with
    /// seed `seed + i`.
    pub fn new(mut first: VecEnv, mut second: VecEnv, seed: u64) -> Result<Alternating, EnvError> {
        if first.num_envs() != second.num_envs()
            || first.observation_space() != second.observation_space()
            || first.action_space() != second.action_space()
        {
            return Err(EnvError::VecMismatch(
                "alternating acting needs two groups of the same envs and size".into(),
            ));
        }
        let obs_dim = first.obs_dim();
        let offset = first.num_envs() as u64;
        let obs0 = first.reset(seed).to_vec();
        let obs1 = second.reset(seed.wrapping_add(offset)).to_vec();
        let group = |envs, obs| Group {
            envs: Some(envs),
            obs,
            state: None,
        };
        Ok(Alternating {
            groups: [group(first, obs0), group(second, obs1)],
            obs_dim,
        })
    }

    fn group_size(&self) -> usize {
        self.groups[0].obs.len() / self.obs_dim.max(1)
    }

    /// The finished episodes of both groups.
    pub fn drain_episodes(&mut self) -> Vec<Episode> {
        (self.groups.iter_mut())
            .filter_map(|g| g.envs.as_mut())
            .flat_map(VecEnv::drain_episodes)
            .collect()
    }

    /// Both groups' envs (for task switches); fails if a failed step lost them.
    pub fn envs_mut(&mut self) -> Result<[&mut VecEnv; 2], EnvError> {
        let [a, b] = &mut self.groups;
        match (a.envs.as_mut(), b.envs.as_mut()) {
            (Some(a), Some(b)) => Ok([a, b]),
            _ => Err(lost()),
        }
    }

    /// Acts with `policy` on group `g`'s current observations.
    fn act(&mut self, g: usize, policy: &dyn Policy) -> Result<Acted, ActingError> {
        let group = &mut self.groups[g];
        let rows = group.obs.len() / self.obs_dim;
        let obs = batch(&group.obs, rows, self.obs_dim);
        if policy.state_size() > 0 && group.state.is_none() {
            group.state = Some(RnnState::zeros(
                rows as i64,
                policy.state_size(),
                tch::Device::Cpu,
            ));
        }
        let (step, next) = match &group.state {
            Some(state) => {
                let (step, next) = policy.act_recurrent(&obs, state, false);
                (step, Some(next))
            }
            None => (policy.act(&obs, false), None),
        };
        Ok(Acted {
            action: Actions::from_tensor(&step.action)?,
            log_prob: Vec::<f32>::try_from(&step.log_prob)?,
            value: Vec::<f32>::try_from(&step.value)?,
            next,
        })
    }

    /// Takes group `g`'s step back from the stepping thread, values its truncations and
    /// moves it on to the observations (and state) after the step.
    fn land(
        &mut self,
        g: usize,
        done: &mpsc::Receiver<Done>,
        acted: Acted,
        policy: &dyn Policy,
    ) -> Result<Stepped, ActingError> {
        let (got, envs, step) = done.recv().map_err(|_| lost())?;
        debug_assert_eq!(got, g, "groups step in turn");
        let group = &mut self.groups[g];
        group.envs = Some(envs);
        let mut step = step?;
        let final_value = truncation_values(
            policy,
            acted.next.as_ref(),
            &step.final_obs,
            &step.truncated,
            self.obs_dim,
        )?;
        if let Some(next) = &acted.next {
            let keep: Vec<f32> = (step.terminated.iter().zip(&step.truncated))
                .map(|(t, u)| f32::from(!(*t || *u)))
                .collect();
            group.state = Some(next.masked(&Tensor::from_slice(&keep)));
        }
        // The step's observations become the group's; the record keeps what acted.
        let before = std::mem::replace(&mut group.obs, std::mem::take(&mut step.obs));
        Ok(Stepped {
            acted,
            obs: before,
            step,
            final_value,
        })
    }

    /// Hands group `g` and its actions to the stepping thread.
    fn send(
        &mut self,
        g: usize,
        jobs: &mpsc::Sender<Job>,
        action: &Actions,
    ) -> Result<(), EnvError> {
        let envs = self.groups[g].envs.take().ok_or_else(lost)?;
        jobs.send((g, envs, action.clone())).map_err(|_| lost())
    }

    /// Steps both groups `builder`'s T times with `policy` and fills `builder`; returns the
    /// observations after the last step and their values (group 0's rows first).
    pub fn collect(
        &mut self,
        policy: &dyn Policy,
        builder: &mut RolloutBuilder,
    ) -> Result<Bootstrap, ActingError> {
        std::thread::scope(|scope| {
            let (jobs, inbox) = mpsc::channel::<Job>();
            let (outbox, done) = mpsc::channel::<Done>();
            scope.spawn(move || {
                for (g, mut envs, action) in inbox {
                    let step = match &action {
                        Actions::Discrete(a) => envs.step_discrete(a).cloned(),
                        Actions::Continuous { values, .. } => envs.step_continuous(values).cloned(),
                    };
                    if outbox.send((g, envs, step)).is_err() {
                        return;
                    }
                }
            });
            let result = self.rollout(policy, builder, &jobs, &done);
            drop(jobs); // the stepping thread ends once its inbox is closed
                        // A group still out (an error midway) comes back before the thread ends.
            while let Ok((g, envs, _)) = done.recv() {
                self.groups[g].envs = Some(envs);
            }
            result
        })
    }

    fn rollout(
        &mut self,
        policy: &dyn Policy,
        builder: &mut RolloutBuilder,
        jobs: &mpsc::Sender<Job>,
        done: &mpsc::Receiver<Done>,
    ) -> Result<Bootstrap, ActingError> {
        if policy.state_size() > 0 {
            let [a, b] = [self.act_state(0, policy), self.act_state(1, policy)];
            let h = Tensor::cat(&[&a.h, &b.h], 0);
            let c = Tensor::cat(&[&a.c, &b.c], 0);
            builder.set_initial_state(
                Vec::<f32>::try_from(&h.reshape([-1]))?,
                Vec::<f32>::try_from(&c.reshape([-1]))?,
            );
        }
        let mut acted0 = self.act(0, policy)?;
        self.send(0, jobs, &acted0.action)?;
        while !builder.is_full() {
            let acted1 = self.act(1, policy)?; // while group 0 steps
            let first = self.land(0, done, acted0, policy)?;
            self.send(1, jobs, &acted1.action)?;
            let last_step = builder.steps_left() <= 1;
            let next0 = match last_step {
                true => None,
                false => Some(self.act(0, policy)?), // while group 1 steps
            };
            let second = self.land(1, done, acted1, policy)?;
            record(builder, &first, &second);
            match next0 {
                Some(next) => {
                    self.send(0, jobs, &next.action)?;
                    acted0 = next;
                }
                None => break,
            }
        }
        let mut value = Vec::new();
        let mut obs = Vec::new();
        for group in &self.groups {
            let rows = group.obs.len() / self.obs_dim;
            let batch = batch(&group.obs, rows, self.obs_dim);
            let v = match &group.state {
                Some(state) => policy.value_recurrent(&batch, state),
                None => policy.value(&batch),
            };
            value.extend(Vec::<f32>::try_from(&v)?);
            obs.extend_from_slice(&group.obs);
        }
        Ok(Bootstrap { value, obs })
    }

    /// Group `g`'s recurrent state (zeros before it first acts).
    fn act_state(&mut self, g: usize, policy: &dyn Policy) -> RnnState {
        let rows = self.group_size() as i64;
        self.groups[g]
            .state
            .get_or_insert_with(|| RnnState::zeros(rows, policy.state_size(), tch::Device::Cpu))
            .shallow_clone()
    }
}

/// Records one step of both groups, group 0's rows first.
fn record(builder: &mut RolloutBuilder, first: &Stepped, second: &Stepped) {
    let join_f = |a: &[f32], b: &[f32]| [a, b].concat();
    let join_b = |a: &[bool], b: &[bool]| [a, b].concat();
    let mut action = Actions::Discrete(Vec::new());
    if let Actions::Continuous { dim, .. } = &first.acted.action {
        action = Actions::Continuous {
            dim: *dim,
            values: Vec::new(),
        };
    }
    action.extend(&first.acted.action);
    action.extend(&second.acted.action);
    builder.push(StepRecord {
        obs: &join_f(&first.obs, &second.obs),
        action: &action,
        log_prob: &join_f(&first.acted.log_prob, &second.acted.log_prob),
        value: &join_f(&first.acted.value, &second.acted.value),
        reward: &join_f(&first.step.reward, &second.step.reward),
        terminated: &join_b(&first.step.terminated, &second.step.terminated),
        truncated: &join_b(&first.step.truncated, &second.step.truncated),
        final_value: &join_f(&first.final_value, &second.final_value),
    });
}

fn lost() -> EnvError {
    EnvError::VecMismatch("the stepping thread lost a group of envs after an error".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acting::Acting;
    use crate::config::ModelConfig;
    use crate::envs::{CartPole, Env, TimeLimit};
    use crate::models::{ActorCritic, PolicyStep};
    use fleetrl_proto::TensorMap;

    /// The model's mode, so both ways of acting take the same actions.
    struct Greedy(ActorCritic);

    impl Policy for Greedy {
        fn act(&self, obs: &Tensor, _: bool) -> PolicyStep {
            self.0.act(obs, true)
        }
        fn value(&self, obs: &Tensor) -> Tensor {
            self.0.value(obs)
        }
        fn state_size(&self) -> i64 {
            self.0.state_size()
        }
        fn act_recurrent(&self, obs: &Tensor, state: &RnnState, _: bool) -> (PolicyStep, RnnState) {
            self.0.act_recurrent(obs, state, true)
        }
        fn value_recurrent(&self, obs: &Tensor, state: &RnnState) -> Tensor {
            self.0.value_recurrent(obs, state)
        }
    }

    /// `n` CartPoles cut at 7 steps, so rollouts hold truncations (and falls).
    fn cartpoles(n: usize) -> VecEnv {
        let envs: Vec<Box<dyn Env>> = (0..n)
            .map(|_| Box::new(TimeLimit::new(CartPole::new(), 7)) as Box<dyn Env>)
            .collect();
        VecEnv::new(envs).unwrap()
    }

    fn floats(item: &TensorMap, name: &str) -> Vec<f32> {
        item.field(name).unwrap().to_vec::<f32>().unwrap()
    }

    /// Alternating acting records, rollout after rollout, what acting on all envs at once
    /// records with the same policy and seeds: the same observations, actions, rewards and
    /// episode ends, and (up to float rounding) values, final values and recurrent states.
    #[test]
    fn alternating_rollouts_match_the_plain_loop() {
        for lstm_size in [0, 8] {
            let config = ModelConfig {
                lstm_size,
                ..ModelConfig::default()
            };
            let envs = cartpoles(4);
            let model = ActorCritic::new(
                &config,
                envs.observation_space(),
                envs.action_space(),
                tch::Device::Cpu,
            )
            .unwrap();
            let policy = Greedy(model);
            let mut plain = Acting::new(envs, 11);
            let mut alternating = Alternating::new(cartpoles(2), cartpoles(2), 11).unwrap();
            for rollout in 0..3 {
                let (mut a, mut b) = (RolloutBuilder::new(5, 4, 4), RolloutBuilder::new(5, 4, 4));
                let boot_a = plain.collect(&policy, &mut a).unwrap();
                let boot_b = alternating.collect(&policy, &mut b).unwrap();
                let (a, b) = (a.finish(&boot_a, 0), b.finish(&boot_b, 0));
                let context = format!("lstm {lstm_size}, rollout {rollout}");
                for name in ["obs", "reward", "bootstrap_obs"] {
                    assert_eq!(floats(&a, name), floats(&b, name), "{name}: {context}");
                }
                for name in ["action", "terminated", "truncated"] {
                    assert_eq!(a.field(name), b.field(name), "{name}: {context}");
                }
                let mut compared = vec!["log_prob", "value", "final_value", "bootstrap_value"];
                if lstm_size > 0 {
                    compared.extend(["rnn_h", "rnn_c"]);
                }
                for name in compared {
                    let (x, y) = (floats(&a, name), floats(&b, name));
                    let close = x.iter().zip(&y).all(|(p, q)| (p - q).abs() < 1e-5);
                    assert!(close, "{name}: {context}: {x:?} vs {y:?}");
                }
                let truncated = b.field("truncated").unwrap().to_vec::<bool>().unwrap();
                assert!(rollout == 0 || truncated.contains(&true), "{context}");
            }
            let episodes = alternating.drain_episodes().len();
            assert_eq!(episodes, plain.envs_mut().drain_episodes().len());
            assert!(episodes >= 4);
        }
    }
}
