//! The recurrent DQN (R2D2) acting loop: the off-policy runner's thread, but the policy
//! carries an LSTM state per env (zeroed at episode ends), and each env's steps are cut into
//! overlapping sequences by a [`SequenceBuilder`], each stored with the state the actor had
//! before its first step (Kapturowski et al. 2019, section 3). Sequences run across episode
//! ends; their flags tell the learner where to reset. Epsilon-greedy as the feed-forward DQN
//! actor; n-step targets are the learner's job here, so steps go in raw.

use anyhow::Context;
use fleetrl_core::acting::exploration::Explorer;
use fleetrl_core::algos::registry::build_model;
use fleetrl_core::config::{AlgoConfig, DqnConfig};
use fleetrl_core::items::sequence::{keep_first_state, SequenceStep};
use fleetrl_core::models::{Policy, RnnState};
use fleetrl_core::replay_client::SequenceBuilder;
use fleetrl_proto::TensorMap;
use tch::{Device, Tensor};

use super::{clip, OffPolicyRunner};

impl OffPolicyRunner {
    /// Acts with a recurrent DQN until `stop` is set or the inserter goes away.
    pub(super) fn run_recurrent(mut self) -> anyhow::Result<()> {
        let AlgoConfig::Dqn(dqn) = self.config.algo.clone() else {
            anyhow::bail!("recurrent off-policy acting is R2D2 (algo.name = \"dqn\") only");
        };
        let m = self.config.actors.envs_per_actor as usize;
        let mut envs = fleetrl_core::envs::make_vec(&self.config.env, m)?;
        let space = envs.action_space().clone();
        let obs_dim = envs.obs_dim();
        let mut model = build_model(&self.config, envs.observation_space(), &space, Device::Cpu)?;
        let width = model.state_size();
        let seed = self.config.seed + 1000 * self.actor_id as u64;
        tch::manual_seed((self.config.seed + 7919 * self.actor_id as u64) as i64);
        let mut explorer = Explorer::new(&dqn.explore, &space, m, seed ^ 0x9e37_79b9)
            .shared_by(self.config.actors.count);
        let mut builders = sequence_builders(&dqn, m)?;
        let mut state = RnnState::zeros(m as i64, width, Device::Cpu);
        let mut version = self.wait_for_weights(&mut model)?;
        let mut obs = envs.reset(seed).to_vec();
        let mut unreported = 0u64;
        tracing::info!(actor_id = self.actor_id, version, envs = m, "acting (R2D2)");
        while !*self.stop.borrow() {
            let batch = Tensor::from_slice(&obs).view([m as i64, obs_dim as i64]);
            // The state advances even during the random warm-up, so it matches what the
            // learner's unroll of the stored sequence will compute.
            let (greedy, next) = model.act_recurrent(&batch, &state, true);
            let greedy = Vec::<i64>::try_from(&greedy.action).context("greedy actions")?;
            let actions = explorer.actions(&greedy, &[], m);
            let out = envs.step(&actions)?;
            let h = Vec::<f32>::try_from(&state.h.view([-1])).context("LSTM state")?;
            let c = Vec::<f32>::try_from(&state.c.view([-1])).context("LSTM state")?;
            let w = width as usize;
            let mut items: Vec<TensorMap> = Vec::new();
            let mut keep = vec![1.0f32; m];
            for i in 0..m {
                let ended = out.terminated[i] || out.truncated[i];
                let step = SequenceStep {
                    obs: &obs[i * obs_dim..(i + 1) * obs_dim],
                    action: greedy_or_taken(&actions[i]),
                    reward: clip(out.reward[i], dqn.reward_clip),
                    terminated: out.terminated[i],
                    truncated: out.truncated[i],
                    final_obs: out.final_obs[i].as_deref().filter(|_| ended),
                    h: &h[i * w..(i + 1) * w],
                    c: &c[i * w..(i + 1) * w],
                    policy_version: version,
                };
                if let Some(mut item) = builders[i].push(step.to_map())? {
                    keep_first_state(&mut item)?;
                    items.push(item);
                }
                if ended {
                    keep[i] = 0.0;
                    explorer.reset(i);
                }
            }
            state = next.masked(&Tensor::from_slice(&keep));
            obs.copy_from_slice(&out.obs);
            let next = self.finish_step(items, &mut envs, &mut unreported, &mut model, version)?;
            let Some(next) = next else {
                return Ok(());
            };
            version = next;
        }
        Ok(())
    }
}

/// One sequence builder per env, cutting `sequence_length` steps that overlap by
/// `sequence_overlap`.
fn sequence_builders(dqn: &DqnConfig, m: usize) -> anyhow::Result<Vec<SequenceBuilder>> {
    let (length, overlap) = (dqn.replay.sequence_length, dqn.replay.sequence_overlap);
    (0..m)
        .map(|_| SequenceBuilder::new(length as usize, overlap as usize))
        .collect()
}

/// The discrete action taken (DQN's action space is discrete; the config check guarantees it
/// for the model to build).
fn greedy_or_taken(action: &fleetrl_core::envs::Action) -> i64 {
    match action {
        fleetrl_core::envs::Action::Discrete(a) => *a,
        fleetrl_core::envs::Action::Continuous(_) => {
            unreachable!("a Q-value model only builds for discrete actions")
        }
    }
}
