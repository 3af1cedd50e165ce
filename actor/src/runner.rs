//! The acting loop, on its own OS thread: step M envs with the local policy, record rollouts,
//! hand them to the inserter, and take new weights at rollout boundaries.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use fleetrl_core::config::RunConfig;
use fleetrl_core::envs::{Episode, VecEnv};
use fleetrl_core::models::{ActorCritic, Policy};
use fleetrl_core::rollout::{RolloutBuilder, StepRecord};
use fleetrl_proto::v1::Weights;
use fleetrl_proto::TensorMap;
use tch::Tensor;
use tokio::runtime::Handle;
use tokio::sync::{mpsc, watch};

/// Episodes and steps since the last report, filled here and drained by the reporter.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    pub(crate) episodes: Vec<Episode>,
    pub(crate) env_steps: u64,
}

/// What the acting thread needs.
pub(crate) struct Runner {
    pub(crate) actor_id: u32,
    pub(crate) config: RunConfig,
    pub(crate) weights: watch::Receiver<Option<Arc<Weights>>>,
    pub(crate) rollouts: mpsc::Sender<TensorMap>,
    pub(crate) progress: Arc<Mutex<Progress>>,
    pub(crate) stop: Arc<AtomicBool>,
}

fn floats(t: &Tensor) -> anyhow::Result<Vec<f32>> {
    Vec::<f32>::try_from(t).context("policy output is not an f32 vector")
}

impl Runner {
    /// Acts until `stop` is set or the inserter goes away.
    pub(crate) fn run(mut self) -> anyhow::Result<()> {
        let actors = &self.config.actors;
        let (t, m) = (
            actors.rollout_length as usize,
            actors.envs_per_actor as usize,
        );
        let mut envs = VecEnv::make(&self.config.env.id, m)?;
        let obs_dim = envs.obs_dim();
        let mut model = ActorCritic::new(
            &self.config.model,
            &envs.observation_space(),
            &envs.action_space(),
            tch::Device::Cpu,
        )?;
        tch::manual_seed((self.config.seed + 7919 * self.actor_id as u64) as i64);
        let mut obs = envs
            .reset(self.config.seed + 1000 * self.actor_id as u64)
            .to_vec();
        let mut builder = RolloutBuilder::new(t, m, obs_dim);
        let mut version = self.wait_for_weights(&mut model)?;
        tracing::info!(actor_id = self.actor_id, version, envs = m, "acting");
        while !self.stop.load(Ordering::Relaxed) {
            let span = tracing::debug_span!(
                "rollout",
                actor_id = self.actor_id,
                policy_version = version
            );
            let _entered = span.enter();
            for _ in 0..t {
                let input = Tensor::from_slice(&obs).view([m as i64, obs_dim as i64]);
                let act = model.act(&input, false);
                let action = Vec::<i64>::try_from(&act.action).context("actions are not i64")?;
                let (log_prob, value) = (floats(&act.log_prob)?, floats(&act.value)?);
                let step = envs.step_discrete(&action)?;
                let final_value =
                    truncation_values(&model, &step.final_obs, &step.truncated, obs_dim)?;
                builder.push(StepRecord {
                    obs: &obs,
                    action: &action,
                    log_prob: &log_prob,
                    value: &value,
                    reward: &step.reward,
                    terminated: &step.terminated,
                    truncated: &step.truncated,
                    final_value: &final_value,
                });
                obs.copy_from_slice(&step.obs);
            }
            let bootstrap =
                floats(&model.value(&Tensor::from_slice(&obs).view([m as i64, obs_dim as i64])))?;
            let item = builder.finish(&bootstrap, version);
            self.report(envs.drain_episodes(), (t * m) as u64);
            if self.rollouts.blocking_send(item).is_err() {
                break;
            }
            if self.config.actors.sync_weights {
                self.wait_for_newer(version);
            }
            version = self.refresh_weights(&mut model, version)?;
        }
        Ok(())
    }

    fn report(&self, episodes: Vec<Episode>, env_steps: u64) {
        let mut progress = self.progress.lock().expect("progress lock poisoned");
        progress.episodes.extend(episodes);
        progress.env_steps += env_steps;
    }

    /// Blocks until the first weights arrive.
    fn wait_for_weights(&mut self, model: &mut ActorCritic) -> anyhow::Result<i64> {
        loop {
            if let Some(w) = self.weights.borrow_and_update().clone() {
                model.import(w.params.as_ref().context("weights without params")?)?;
                return Ok(w.version);
            }
            if self.stop.load(Ordering::Relaxed) {
                anyhow::bail!("stopped before the first weights arrived");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Blocks until weights newer than `version` are published, or the sync timeout passes.
    fn wait_for_newer(&mut self, version: i64) {
        let timeout = Duration::from_secs_f64(self.config.actors.sync_timeout_s.max(0.0));
        let newer = self
            .weights
            .wait_for(|w| w.as_ref().is_some_and(|w| w.version > version));
        let waited = Handle::current().block_on(tokio::time::timeout(timeout, newer));
        if waited.is_err() {
            tracing::debug!(
                actor_id = self.actor_id,
                version,
                "no new weights in time; acting with the old ones"
            );
        }
    }

    /// Loads the newest published weights, if newer than `version`.
    fn refresh_weights(&mut self, model: &mut ActorCritic, version: i64) -> anyhow::Result<i64> {
        let Some(w) = self.weights.borrow_and_update().clone() else {
            return Ok(version);
        };
        if w.version <= version {
            return Ok(version);
        }
        model.import(w.params.as_ref().context("weights without params")?)?;
        Ok(w.version)
    }
}

/// V(final observation) for envs whose episode was truncated on this step, 0 elsewhere.
fn truncation_values(
    model: &ActorCritic,
    final_obs: &[Option<Vec<f32>>],
    truncated: &[bool],
    obs_dim: usize,
) -> anyhow::Result<Vec<f32>> {
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
    let v =
        floats(&model.value(&Tensor::from_slice(&flat).view([rows.len() as i64, obs_dim as i64])))?;
    for (row, value) in rows.into_iter().zip(v) {
        values[row] = value;
    }
    Ok(values)
}
