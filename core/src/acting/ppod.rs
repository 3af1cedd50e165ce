//! PPO+D acting: at the start of each episode of each env, replay a reward demo with
//! probability rho, a value demo with probability phi, else act in the env.
//!
//! A replayed step enters the rollout like an acted one, with the demo's observation, action
//! and reward, behaviour log-probability 0 (probability 1, so the PPO ratio is pi(a|s) <= 1)
//! and the current network's value of the demo observation; the demo's last step ends the
//! episode (terminated if the demo did, else truncated with V of its final observation).
//! While an env replays, the env itself waits at the start of its next episode. Acted episodes
//! become candidates for the server's demo buffers, with the highest value predicted along
//! them; replayed value demos report their max value under the current network. Only acted
//! episodes count in the env's episode statistics (returns are never inflated by replays).

use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::acting::{batch, clipped, ActingError};
use crate::envs::VecEnv;
use crate::items::rollout::{Actions, Bootstrap, RolloutBuilder, StepRecord};
use crate::models::Policy;
use fleetrl_proto::space::Action;
use fleetrl_runtime::demo::{value_weights, DemoKind};
use fleetrl_runtime::demo::{Demo, DemoSource, Recorder};

/// A demo an actor may replay.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayDemo {
    /// The server's id.
    pub id: u64,
    /// Its buffer.
    pub kind: DemoKind,
    /// Max value (value demos' sampling priority).
    pub max_value: f32,
    /// The episode.
    pub demo: Demo,
}

/// The actor's copy of the server's demo buffers and probabilities.
#[derive(Debug, Clone, Default)]
pub struct DemoSet {
    /// Reward demos (initial and agent), sampled uniformly.
    pub reward: Vec<Arc<ReplayDemo>>,
    /// Value demos, sampled by [`value_weights`].
    pub value: Vec<Arc<ReplayDemo>>,
    /// Sampling weights of `value`.
    pub value_weights: Vec<f64>,
    /// Probability of replaying a reward demo.
    pub rho: f64,
    /// Probability of replaying a value demo.
    pub phi: f64,
}

impl DemoSet {
    /// Sorts `demos` into the two buffers; value demos weighted with `alpha`.
    pub fn new(demos: Vec<ReplayDemo>, rho: f64, phi: f64, alpha: f64) -> DemoSet {
        let (value, reward): (Vec<_>, Vec<_>) = demos
            .into_iter()
            .map(Arc::new)
            .partition(|d| d.kind == DemoKind::Value);
        let maxes: Vec<f32> = value.iter().map(|d| d.max_value).collect();
        DemoSet {
            reward,
            value_weights: value_weights(&maxes, alpha),
            value,
            rho,
            phi,
        }
    }

    /// The demo to replay for a draw `u` in [0, 1) and a second `pick` in [0, 1), or `None`
    /// to act. An empty buffer falls back to acting, as in PPO+D.
    pub fn choose(&self, u: f64, pick: f64) -> Option<Arc<ReplayDemo>> {
        if u < self.rho {
            let n = self.reward.len();
            return (n > 0).then(|| self.reward[((pick * n as f64) as usize).min(n - 1)].clone());
        }
        if u < self.rho + self.phi && !self.value.is_empty() {
            let mut acc = 0.0;
            for (d, w) in self.value.iter().zip(&self.value_weights) {
                acc += w;
                if pick < acc {
                    return Some(d.clone());
                }
            }
            return self.value.last().cloned();
        }
        None
    }
}

/// An acted episode offered to the server.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// The episode (source `agent`).
    pub demo: Demo,
    /// The highest value predicted along it.
    pub max_value: f32,
}

/// What one env is doing in its current episode.
enum Mode {
    Act {
        recorder: Recorder,
        max_value: f32,
    },
    Replay {
        demo: Arc<ReplayDemo>,
        t: usize,
        max_value: f32,
    },
}

/// Counts of what the envs did since the last [`DemoActing::take_offers`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ReplayCounts {
    /// Steps replayed from demos.
    pub replayed_steps: u64,
    /// Replays started.
    pub replays: u64,
}

/// Steps a [`VecEnv`] with a policy and replays demos at episode starts.
pub struct DemoActing {
    envs: VecEnv,
    env_id: String,
    obs: Vec<f32>,
    modes: Vec<Mode>,
    rng: SmallRng,
    demos: DemoSet,
    candidates: Vec<Candidate>,
    refreshes: Vec<(u64, f32)>,
    counts: ReplayCounts,
}

impl std::fmt::Debug for DemoActing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DemoActing({} envs)", self.envs.num_envs())
    }
}

impl DemoActing {
    /// Takes over `envs` of env `env_id`, resetting env i with seed `seed + i`. Every env acts
    /// until [`DemoActing::set_demos`] provides demos.
    pub fn new(mut envs: VecEnv, env_id: &str, seed: u64) -> DemoActing {
        let obs = envs.reset(seed).to_vec();
        let mut acting = DemoActing {
            env_id: env_id.to_string(),
            modes: Vec::new(),
            rng: SmallRng::seed_from_u64(seed ^ 0x5eed_d3a0),
            demos: DemoSet::default(),
            candidates: Vec::new(),
            refreshes: Vec::new(),
            counts: ReplayCounts::default(),
            obs,
            envs,
        };
        acting.modes = (0..acting.envs.num_envs())
            .map(|i| acting.act_mode(i))
            .collect();
        acting
    }

    /// The envs (for finished episodes).
    pub fn envs_mut(&mut self) -> &mut VecEnv {
        &mut self.envs
    }

    /// Replaces the demos and probabilities used from the next episode start on.
    pub fn set_demos(&mut self, demos: DemoSet) {
        self.demos = demos;
    }

    /// Updates rho and phi, keeping the demos.
    pub fn set_probabilities(&mut self, rho: f64, phi: f64) {
        self.demos.rho = rho;
        self.demos.phi = phi;
    }

    /// The current demos and probabilities.
    pub fn demos(&self) -> &DemoSet {
        &self.demos
    }

    /// Takes the acted episodes finished so far, the `(id, max value)` of value demos replayed
    /// to their end, and the replay counts.
    pub fn take_offers(&mut self) -> (Vec<Candidate>, Vec<(u64, f32)>, ReplayCounts) {
        (
            std::mem::take(&mut self.candidates),
            std::mem::take(&mut self.refreshes),
            std::mem::take(&mut self.counts),
        )
    }

    fn row(&self, i: usize) -> &[f32] {
        let d = self.envs.obs_dim();
        &self.obs[i * d..(i + 1) * d]
    }

    fn act_mode(&self, i: usize) -> Mode {
        Mode::Act {
            recorder: Recorder::new(
                &self.env_id,
                DemoSource::Agent,
                vec![self.envs.obs_dim()],
                self.envs.action_space(),
                self.row(i),
            ),
            max_value: f32::NEG_INFINITY,
        }
    }

    /// The mode of env i's next episode.
    fn draw(&mut self, i: usize) -> Mode {
        let (u, pick) = (self.rng.random::<f64>(), self.rng.random::<f64>());
        match self.demos.choose(u, pick) {
            Some(demo) if !demo.demo.is_empty() => {
                self.counts.replays += 1;
                Mode::Replay {
                    demo,
                    t: 0,
                    max_value: f32::NEG_INFINITY,
                }
            }
            _ => self.act_mode(i),
        }
    }

    /// Steps every env `builder`'s T times (acting or replaying) and fills `builder`; returns
    /// the observations after the last step and their values. Feed-forward policies only.
    pub fn collect(
        &mut self,
        policy: &dyn Policy,
        builder: &mut RolloutBuilder,
    ) -> Result<Bootstrap, ActingError> {
        let (m, d) = (self.envs.num_envs(), self.envs.obs_dim());
        while !builder.is_full() {
            let obs = self.shown_obs();
            let act = policy.act(&batch(&obs, m, d), false);
            let mut action = Actions::from_tensor(&act.action)?;
            let mut log_prob = Vec::<f32>::try_from(&act.log_prob)?;
            let value = Vec::<f32>::try_from(&act.value)?;
            let mut env_actions = match &action {
                Actions::Discrete(a) => a.iter().map(|&a| Action::Discrete(a)).collect(),
                Actions::Continuous { values, .. } => clipped(self.envs.action_space(), values, m),
            };
            let active: Vec<bool> = self
                .modes
                .iter()
                .map(|mode| matches!(mode, Mode::Act { .. }))
                .collect();
            for (i, mode) in self.modes.iter().enumerate() {
                if let Mode::Replay { demo, t, .. } = mode {
                    let a = demo.demo.action(*t);
                    set_row(&mut action, i, &a);
                    env_actions[i] = a;
                    log_prob[i] = 0.0;
                }
            }
            let step = self.envs.step_some(&env_actions, &active)?.clone();
            let mut reward = step.reward.clone();
            let mut terminated = step.terminated.clone();
            let mut truncated = step.truncated.clone();
            // The observation each truncated episode ended in, to bootstrap from.
            let mut final_rows: Vec<(usize, Vec<f32>)> = Vec::new();
            for (i, mode) in self.modes.iter().enumerate() {
                match mode {
                    Mode::Replay { demo, t, .. } => {
                        let demo = &demo.demo;
                        reward[i] = demo.rewards[*t];
                        let end = t + 1 == demo.len();
                        terminated[i] = end && demo.terminated;
                        truncated[i] = end && !demo.terminated;
                        if truncated[i] {
                            final_rows.push((i, demo.obs(demo.len()).to_vec()));
                        }
                    }
                    Mode::Act { .. } => {
                        if let (true, Some(f)) = (truncated[i], &step.final_obs[i]) {
                            final_rows.push((i, f.clone()));
                        }
                    }
                }
            }
            let mut final_value = vec![0.0f32; m];
            if !final_rows.is_empty() {
                let flat: Vec<f32> = final_rows.iter().flat_map(|(_, o)| o.clone()).collect();
                let v = Vec::<f32>::try_from(&policy.value(&batch(&flat, final_rows.len(), d)))?;
                for ((i, _), v) in final_rows.iter().zip(v) {
                    final_value[*i] = v;
                }
            }
            builder.push(StepRecord {
                obs: &obs,
                action: &action,
                log_prob: &log_prob,
                value: &value,
                reward: &reward,
                terminated: &terminated,
                truncated: &truncated,
                final_value: &final_value,
            });
            for i in 0..m {
                let ended = terminated[i] || truncated[i];
                if active[i] {
                    self.obs[i * d..(i + 1) * d].copy_from_slice(&step.obs[i * d..(i + 1) * d]);
                }
                match &mut self.modes[i] {
                    Mode::Replay { demo, t, max_value } => {
                        *max_value = max_value.max(value[i]);
                        *t += 1;
                        self.counts.replayed_steps += 1;
                        if ended && demo.kind == DemoKind::Value {
                            self.refreshes.push((demo.id, *max_value));
                        }
                    }
                    Mode::Act {
                        recorder,
                        max_value,
                    } => {
                        *max_value = max_value.max(value[i]);
                        let next = match &step.final_obs[i] {
                            Some(f) if ended => f.as_slice(),
                            _ => &step.obs[i * d..(i + 1) * d],
                        };
                        recorder.push(&env_actions[i], reward[i], next, Some(value[i]));
                    }
                }
                if ended {
                    let next = self.draw(i);
                    if let Mode::Act {
                        recorder,
                        max_value,
                    } = std::mem::replace(&mut self.modes[i], next)
                    {
                        self.candidates.push(Candidate {
                            demo: recorder.finish(terminated[i]),
                            max_value,
                        });
                    }
                }
            }
        }
        let obs = self.shown_obs();
        let value = Vec::<f32>::try_from(&policy.value(&batch(&obs, m, d)))?;
        Ok(Bootstrap { value, obs })
    }

    /// The observation each env shows the policy: the env's own, or the demo's at its step.
    fn shown_obs(&self) -> Vec<f32> {
        let d = self.envs.obs_dim();
        let mut obs = self.obs.clone();
        for (i, mode) in self.modes.iter().enumerate() {
            if let Mode::Replay { demo, t, .. } = mode {
                obs[i * d..(i + 1) * d].copy_from_slice(demo.demo.obs(*t));
            }
        }
        obs
    }
}

/// Writes `a` into row `i` of `actions`.
fn set_row(actions: &mut Actions, i: usize, a: &Action) {
    match (actions, a) {
        (Actions::Discrete(v), Action::Discrete(x)) => v[i] = *x,
        (Actions::Continuous { dim, values }, Action::Continuous(x)) => {
            values[i * *dim..(i + 1) * *dim].copy_from_slice(x)
        }
        _ => panic!("demo action kind differs from the policy's (checked when loaded)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ModelConfig;
    use crate::models::ActorCritic;

    fn setup(m: usize, rho: f64) -> (DemoActing, ActorCritic, Demo) {
        let envs = VecEnv::make("SparseMountainCar-v0", m).unwrap();
        let model = ActorCritic::new(
            &ModelConfig::default(),
            envs.observation_space(),
            envs.action_space(),
            tch::Device::Cpu,
        )
        .unwrap();
        let mut acting = DemoActing::new(envs, "SparseMountainCar-v0", 3);
        let demo = crate::acting::scripted::play("SparseMountainCar-v0", 11, DemoSource::Scripted)
            .unwrap();
        let stored = ReplayDemo {
            id: 4,
            kind: DemoKind::Initial,
            max_value: f32::NEG_INFINITY,
            demo: demo.clone(),
        };
        acting.set_demos(DemoSet::new(vec![stored], rho, 0.0, 10.0));
        (acting, model, demo)
    }

    /// With rho = 1 every episode after the first acted one replays the demo: its steps carry
    /// the demo's observations, actions and rewards with log-prob 0, and end as it ended.
    #[test]
    fn replayed_steps_carry_the_demo_with_log_prob_zero() {
        let (mut acting, model, demo) = setup(1, 1.0);
        // Env 0 acts its first episode (drawn before demos were known): 200 steps.
        let n = demo.len();
        let t = 200 + 2 * n;
        let mut builder = RolloutBuilder::new(t, 1, 2);
        acting.collect(&model, &mut builder).unwrap();
        let item = builder.finish(
            &Bootstrap {
                value: vec![0.0],
                obs: vec![0.0; 2],
            },
            0,
        );
        let obs = item.field("obs").unwrap().to_vec::<f32>().unwrap();
        let logp = item.field("log_prob").unwrap().to_vec::<f32>().unwrap();
        let reward = item.field("reward").unwrap().to_vec::<f32>().unwrap();
        let action = item.field("action").unwrap().to_vec::<i64>().unwrap();
        let term = item.field("terminated").unwrap().to_vec::<bool>().unwrap();
        let trunc = item.field("truncated").unwrap().to_vec::<bool>().unwrap();
        assert!(trunc[199], "the acted episode hits the time limit");
        assert!(logp[..200].iter().all(|&l| l < 0.0));
        for rep in 0..2 {
            for k in 0..n {
                let row = 200 + rep * n + k;
                assert_eq!(&obs[row * 2..row * 2 + 2], demo.obs(k), "row {row}");
                assert_eq!(Action::Discrete(action[row]), demo.action(k));
                assert_eq!(logp[row], 0.0);
                assert_eq!(reward[row], demo.rewards[k]);
                assert_eq!(term[row], k + 1 == n);
                assert!(!trunc[row]);
            }
        }
        let episodes = acting.envs_mut().drain_episodes();
        assert_eq!(episodes.len(), 1, "replays are not env episodes");
        let (candidates, refreshes, counts) = acting.take_offers();
        assert_eq!(candidates.len(), 1);
        assert_eq!(candidates[0].demo.len(), 200);
        // The episode's maximum, not its last step's value (pytorchrl's key-mismatch quirk).
        let values = candidates[0]
            .demo
            .values
            .as_ref()
            .expect("acted steps carry values");
        let top = values.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        assert_eq!(candidates[0].max_value, top);
        assert!(refreshes.is_empty(), "reward demos are not refreshed");
        assert_eq!(counts.replayed_steps as usize, 2 * n);
    }

    /// With rho = 0 nothing is replayed and every finished episode is offered.
    #[test]
    fn acting_only_offers_every_episode() {
        let (mut acting, model, _) = setup(2, 0.0);
        let mut builder = RolloutBuilder::new(400, 2, 2);
        acting.collect(&model, &mut builder).unwrap();
        let (candidates, _, counts) = acting.take_offers();
        assert_eq!(candidates.len(), 4);
        assert_eq!(counts, ReplayCounts::default());
    }

    #[test]
    fn choose_falls_back_to_acting_on_an_empty_buffer() {
        let set = DemoSet {
            rho: 0.5,
            phi: 0.5,
            ..DemoSet::default()
        };
        assert!(set.choose(0.1, 0.5).is_none());
        assert!(set.choose(0.7, 0.5).is_none());
    }
}
