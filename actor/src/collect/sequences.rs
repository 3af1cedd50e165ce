//! Sequences with burn-in for recurrent off-policy algorithms (R2D2, recurrent SAC and TD3):
//! the policy carries a recurrent state per env (zeroed at episode ends), and each env's steps
//! are cut into overlapping sequences by a [`SequenceBuilder`], each stored with the state
//! the actor had before its first step (Kapturowski et al. 2019, section 3). Sequences run
//! across episode ends; their flags tell the learner where to reset. Exploration as the
//! feed-forward actors' (R2D2: epsilon-greedy; SAC: its own samples; TD3 and DDPG: Gaussian or
//! Ornstein-Uhlenbeck noise on the deterministic action); n-step targets are the
//! learner's job here, so steps go in raw.

use fleetrl_core::config::RunConfig;
use fleetrl_core::envs::Episode;
use fleetrl_core::items::rollout::Actions;
use fleetrl_core::items::sequence::{keep_first_state, SequenceStep};
use fleetrl_core::models::{ModelError, Policy, RnnState};
use fleetrl_core::replay_client::SequenceBuilder;
use tch::{Device, Tensor};

use super::transitions::{actor_side, clip, Stepping};
use super::{ActError, Collected, Collector, Pacing};

/// Collects one step of every env per call; items when sequences fill.
pub(super) struct SequenceCollector {
    on: Stepping,
    deterministic: bool,
    reward_clip: f64,
    builders: Vec<SequenceBuilder>,
    state: RnnState,
}

impl SequenceCollector {
    /// Envs and recurrent model for `config`, env i reset with seed `seed + i`.
    pub(super) fn new(config: &RunConfig, seed: u64) -> Result<SequenceCollector, ActError> {
        let Some(sequences) = config.sequence_replay() else {
            return Err(ActError::Unsupported(
                "sequences are collected for recurrent DQN (R2D2), SAC, TD3 and DDPG only",
            ));
        };
        let side = actor_side(config)?;
        let on = Stepping::new(config, &side.explore, seed)?;
        let m = on.envs.num_envs();
        let replay = sequences.replay;
        let (length, overlap) = (replay.sequence_length, replay.sequence_overlap);
        let builders = (0..m)
            .map(|_| SequenceBuilder::new(length as usize, overlap as usize))
            .collect::<Result<_, _>>()?;
        let state = RnnState::zeros(m as i64, on.model.state_size(), Device::Cpu);
        Ok(SequenceCollector {
            on,
            deterministic: side.explore.deterministic,
            reward_clip: side.reward_clip,
            builders,
            state,
        })
    }
}

impl Collector for SequenceCollector {
    fn load(&mut self, weights: &[(String, tch::Tensor)]) -> Result<(), ModelError> {
        self.on.model.load_named(weights)
    }

    fn collect(&mut self, version: i64) -> Result<Collected, ActError> {
        let on = &mut self.on;
        let (m, obs_dim) = (on.envs.num_envs(), on.envs.obs_dim());
        let batch = on.batch();
        // The state advances even during the random warm-up, so it matches what the
        // learner's unroll of the stored sequence will compute.
        let (step, next) = on
            .model
            .act_recurrent(&batch, &self.state, self.deterministic);
        let actions = match Actions::from_tensor(&step.action)? {
            Actions::Discrete(a) => on.explorer.actions(&a, &[], m),
            Actions::Continuous { values, .. } => on.explorer.actions(&[], &values, m),
        };
        let out = on.envs.step(&actions)?;
        let h = Vec::<f32>::try_from(&self.state.h.view([-1]))?;
        let c = Vec::<f32>::try_from(&self.state.c.view([-1]))?;
        let w = on.model.state_size() as usize;
        let mut items = Vec::new();
        let mut keep = vec![1.0f32; m];
        for i in 0..m {
            let ended = out.terminated[i] || out.truncated[i];
            let step = SequenceStep {
                obs: &on.obs[i * obs_dim..(i + 1) * obs_dim],
                action: &actions[i],
                reward: clip(out.reward[i], self.reward_clip),
                terminated: out.terminated[i],
                truncated: out.truncated[i],
                final_obs: out.final_obs[i].as_deref().filter(|_| ended),
                h: &h[i * w..(i + 1) * w],
                c: &c[i * w..(i + 1) * w],
                policy_version: version,
            };
            if let Some(mut item) = self.builders[i].push(step.to_map())? {
                keep_first_state(&mut item)?;
                items.push(item);
            }
            if ended {
                keep[i] = 0.0;
                on.explorer.reset(i);
            }
        }
        self.state = next.masked(&Tensor::from_slice(&keep));
        on.obs.copy_from_slice(&out.obs);
        Ok(Collected {
            items,
            env_steps: m as u64,
        })
    }

    fn drain_episodes(&mut self) -> Vec<Episode> {
        self.on.envs.drain_episodes()
    }

    fn pacing(&self) -> Pacing {
        Pacing::Free
    }

    fn byte_observations(&self) -> bool {
        self.on.envs.byte_observations()
    }
}
