//! The one acting loop, on its own OS thread: act with the local policy through a
//! [`Collector`], report steps and episodes, hand the items to the inserter, and follow the
//! learner's weights. What is collected (rollouts, n-step transitions, R2D2 sequences, PPO+D
//! demo replay) is the collector's business; weight swaps, policy lag, episode reports and
//! metrics are the loop's, for every kind.

mod meta;
mod model;
mod pearl;
mod rollouts;
mod sequences;
mod transitions;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fleetrl_core::acting::policy_loader::LoadPolicyError;
use fleetrl_core::acting::ActingError;
use fleetrl_core::algos::registry;
use fleetrl_core::broadcast::Received;
use fleetrl_core::config::RunConfig;
use fleetrl_core::envs::{EnvError, Episode};
use fleetrl_core::items::narrow_observations;
use fleetrl_core::models::ModelError;
use fleetrl_core::replay_client::SequenceError;
use fleetrl_proto::{TensorError, TensorMap};
use tokio::runtime::Handle;
use tokio::sync::{mpsc, watch};

use crate::demo_replay::{DemoLink, DemoLinkError};
use crate::metrics::ActorMetrics;

/// Why the acting thread stopped with an error.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ActError {
    /// An env could not be made or rejected an action.
    #[error(transparent)]
    Env(#[from] EnvError),
    /// The acting model could not be built or could not take the published weights.
    #[error("acting model: {0}")]
    Model(#[from] ModelError),
    /// Rollout collection failed.
    #[error(transparent)]
    Acting(#[from] ActingError),
    /// A policy output could not be read back.
    #[error("policy output: {0}")]
    Tch(#[from] tch::TchError),
    /// An item could not be built.
    #[error("building an item: {0}")]
    Item(#[from] TensorError),
    /// Steps could not be cut into sequences.
    #[error(transparent)]
    Sequence(#[from] SequenceError),
    /// The BC expert could not be loaded.
    #[error("loading the BC expert {path}: {cause}")]
    Expert {
        /// The expert checkpoint.
        path: String,
        /// What went wrong (boxed: a checkpoint error is large).
        cause: Box<LoadPolicyError>,
    },
    /// The PPO+D demo buffers could not be synced or offered to.
    #[error(transparent)]
    Demos(#[from] Box<DemoLinkError>),
    /// The run asks for acting this actor cannot do.
    #[error("{0}")]
    Unsupported(&'static str),
    /// The actor was stopped before the learner published any weights.
    #[error("stopped before the first weights arrived")]
    NoWeights,
}

/// What one [`Collector::collect`] call produced.
pub(crate) struct Collected {
    /// Items for the replay server (none while an n-step window or a sequence fills).
    pub(crate) items: Vec<TensorMap>,
    /// Env steps taken.
    pub(crate) env_steps: u64,
}

/// How the loop keeps pace with the learner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pacing {
    /// On-policy: after its share of a batch, wait (up to `actors.sync_timeout_s`) for a
    /// version newer than the one that acted `actors.max_policy_lag + 1` shares ago.
    PerBatch,
    /// Off-policy: never wait for the learner; the replay server's rate limiter paces.
    Free,
}

/// Turns the steps of M envs acting with the local policy into replay items. Owns the envs,
/// the acting model and whatever the item kind needs. Used from the acting thread only.
pub(crate) trait Collector {
    /// Copies published weights into the acting model.
    fn load(&mut self, weights: &[(String, tch::Tensor)]) -> Result<(), ModelError>;
    /// Acts once (a whole rollout, or one step of every env), labelling items with
    /// `version`, the weights loaded last. Blocks on the envs (and on the demo service, for
    /// PPO+D).
    fn collect(&mut self, version: i64) -> Result<Collected, ActError>;
    /// Episodes finished since the last call.
    fn drain_episodes(&mut self) -> Vec<Episode>;
    /// How the loop keeps pace with the learner.
    fn pacing(&self) -> Pacing;
    /// Whether the envs' observations are bytes ([`VecEnv::byte_observations`]): the loop
    /// then sends items' observations as U8.
    ///
    /// [`VecEnv::byte_observations`]: fleetrl_core::envs::VecEnv::byte_observations
    fn byte_observations(&self) -> bool;
}

/// Builds the collector `config` calls for: rollouts (with demo replay when `demos` is
/// given), recurrent off-policy sequences (R2D2, recurrent SAC and TD3), or n-step transitions. The one place that picks by algorithm.
pub(crate) fn collector(
    config: &RunConfig,
    actor_id: u32,
    demos: Option<DemoLink>,
) -> Result<Box<dyn Collector>, ActError> {
    let seed = config.seed + 1000 * actor_id as u64;
    let collector: Box<dyn Collector> = if let Some(maml) = config.algo.as_maml() {
        Box::new(meta::MetaCollector::new(config, maml, seed)?)
    } else if let Some(pearl) = config.algo.as_pearl() {
        Box::new(pearl::PearlCollector::new(config, pearl, seed)?)
    } else if !config.algo.is_off_policy() {
        Box::new(rollouts::RolloutCollector::new(config, seed, demos)?)
    } else if config.sequence_replay().is_some() {
        Box::new(sequences::SequenceCollector::new(config, seed)?)
    } else {
        Box::new(transitions::TransitionCollector::new(config, seed)?)
    };
    Ok(collector)
}

/// Items an off-policy actor stacks into one insert request (`algo.replay.items_per_request`;
/// on-policy: one rollout each).
pub(crate) fn items_per_request(config: &RunConfig) -> usize {
    if !config.algo.is_off_policy() {
        return 1;
    }
    let replay = registry::spec(config).replay;
    replay.map_or(1, |replay| replay.items_per_request as usize)
}

/// Episodes and steps since the last report, filled here and drained by the reporter.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    pub(crate) episodes: Vec<Episode>,
    pub(crate) env_steps: u64,
}

/// What the acting thread needs.
pub(crate) struct ActingLoop {
    pub(crate) actor_id: u32,
    pub(crate) config: RunConfig,
    pub(crate) weights: watch::Receiver<Option<Arc<Received>>>,
    pub(crate) items: mpsc::Sender<TensorMap>,
    pub(crate) progress: Arc<Mutex<Progress>>,
    /// Turns true when the actor should finish what it is collecting and stop.
    pub(crate) stop: watch::Receiver<bool>,
    pub(crate) metrics: Arc<ActorMetrics>,
}

impl ActingLoop {
    /// Acts with `collector` until `stop` is set or the inserter goes away.
    pub(crate) fn run(mut self, mut collector: Box<dyn Collector>) -> Result<(), ActError> {
        let (seed, id) = (self.config.seed, self.actor_id as u64);
        tch::manual_seed((seed + 7919 * id) as i64);
        let pacing = collector.pacing();
        let bytes = collector.byte_observations();
        // Weights received but not yet acted with (`actors.lag_versions`), oldest first.
        let mut held = VecDeque::new();
        let mut version = self.wait_for_weights(collector.as_mut())?;
        // Versions that acted in this actor's recent items (its share of the last
        // `max_policy_lag + 1` batches), oldest first.
        let mut recent = VecDeque::new();
        let mut unreported = 0;
        tracing::info!(actor_id = self.actor_id, version, ?pacing, "acting");
        while !*self.stop.borrow() {
            let span = tracing::debug_span!("collect", actor_id = self.actor_id, version);
            let collected = span.in_scope(|| collector.collect(version))?;
            unreported += collected.env_steps;
            if unreported >= u64::from(self.config.actors.rollout_length.max(1)) {
                self.report(collector.drain_episodes(), unreported, version);
                unreported = 0;
            }
            for mut item in collected.items {
                if bytes {
                    narrow_observations(&mut item)?;
                }
                if self.items.blocking_send(item).is_err() {
                    return Ok(()); // the inserter is gone: the actor is stopping
                }
                if pacing == Pacing::PerBatch {
                    recent.push_back(version);
                }
            }
            if pacing == Pacing::PerBatch {
                let window =
                    self.items_per_version() * (self.config.actors.max_policy_lag as usize + 1);
                while recent.len() > window {
                    recent.pop_front();
                }
                if recent.len() == window {
                    self.wait_for_newer(recent[0]);
                }
            }
            version = self.refresh_weights(collector.as_mut(), &mut held, version)?;
        }
        Ok(())
    }

    fn report(&self, episodes: Vec<Episode>, env_steps: u64, acted: i64) {
        let newest = self.weights.borrow().as_ref().map_or(acted, |w| w.version);
        self.metrics
            .record_rollout(env_steps, &episodes, acted, newest);
        let mut progress = self.progress.lock().expect("progress lock poisoned");
        progress.episodes.extend(episodes);
        progress.env_steps += env_steps;
    }

    /// This actor's share of a batch: the learner needs `batch_rollouts` rollouts per version
    /// and the connected actors split them, so a lone actor fills whole batches by itself.
    fn items_per_version(&self) -> usize {
        let actors = self
            .weights
            .borrow()
            .as_ref()
            .map_or(1, |w| w.subscribers.max(1));
        self.config.learner.batch_rollouts.div_ceil(actors) as usize
    }

    /// Blocks until the first weights arrive and loads them; their version.
    fn wait_for_weights(&mut self, collector: &mut dyn Collector) -> Result<i64, ActError> {
        loop {
            if let Some(w) = self.weights.borrow_and_update().clone() {
                return Ok(self.metrics.apply_weights(&w, |t| collector.load(t))?);
            }
            if *self.stop.borrow() {
                return Err(ActError::NoWeights);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Blocks until weights newer than `version` are published, or the sync timeout passes.
    fn wait_for_newer(&mut self, version: i64) {
        let timeout = Duration::from_secs_f64(self.config.actors.sync_timeout_s.max(0.0));
        let mut stop = self.stop.clone();
        let weights = &mut self.weights;
        let waited = Handle::current().block_on(async move {
            let newer = weights.wait_for(|w| w.as_ref().is_some_and(|w| w.version > version));
            tokio::select! {
                result = tokio::time::timeout(timeout, newer) => result.is_ok(),
                _ = stop.wait_for(|stop| *stop) => true,
            }
        });
        if !waited {
            tracing::debug!(
                actor_id = self.actor_id,
                version,
                "no new weights in time; acting with the old ones"
            );
        }
    }

    /// Loads the weights to act with, if newer than `version`, and returns the version
    /// acting now: the newest received that is at least `actors.lag_versions` versions older
    /// than the newest, or the oldest held while none is that old yet, but never one more
    /// than `actors.max_policy_lag` behind ([`settle_held`]). The watch keeps only the latest
    /// version, so `held` can skip some; once, with versions 0 and 3 held, one of lag asked and
    /// two allowed, the actors acted with version 0 for good, the learner dropped every
    /// rollout and so published nothing newer (a run spent 600 s and dropped a million).
    ///
    /// Cheap when nothing new arrived, so it runs after every collect (every env step,
    /// off-policy). It reads the latest value rather than asking `has_changed`:
    /// [`Self::wait_for_newer`] marks what it waited for as seen.
    fn refresh_weights(
        &mut self,
        collector: &mut dyn Collector,
        held: &mut VecDeque<Arc<Received>>,
        version: i64,
    ) -> Result<i64, ActError> {
        if let Some(w) = self.weights.borrow_and_update().clone() {
            if held
                .back()
                .is_none_or(|h: &Arc<Received>| w.version > h.version)
            {
                held.push_back(w);
            }
        }
        let actors = &self.config.actors;
        settle_held(
            held,
            |w| w.version,
            actors.lag_versions,
            actors.max_policy_lag,
        );
        let Some(w) = held.front().cloned() else {
            return Ok(version);
        };
        if w.version <= version {
            return Ok(version);
        }
        Ok(self.metrics.apply_weights(&w, |t| collector.load(t))?)
    }
}

/// Drops from the front of `held` (versions ascending) the weights an actor asked to lag `lag`
/// versions no longer needs: the front is then the newest at least `lag` behind the newest
/// held, or the oldest while none is that old, but never one more than `max_lag` behind.
fn settle_held<T>(held: &mut VecDeque<T>, version: impl Fn(&T) -> i64, lag: u32, max_lag: u32) {
    let Some(newest) = held.back().map(&version) else {
        return;
    };
    let old_enough = newest - i64::from(lag);
    let too_old = newest - i64::from(max_lag);
    while held.len() > 1 && (version(&held[1]) <= old_enough || version(&held[0]) < too_old) {
        held.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::{items_per_request, settle_held};
    use fleetrl_core::config::RunConfig;
    use std::collections::VecDeque;

    /// An off-policy actor stacks `algo.replay.items_per_request` items a request (1 keeps it
    /// within a step of the replay server); an on-policy one sends each rollout alone.
    #[test]
    fn items_per_request_follows_the_replay_options() {
        let td3 = |sets: &[&str]| {
            let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
            items_per_request(&RunConfig::load("halfcheetah-td3", &sets).unwrap())
        };
        assert_eq!(td3(&[]), 64);
        assert_eq!(td3(&["algo.replay.items_per_request=1"]), 1);
        let ppo = RunConfig::load("cartpole-ppo", &[]).unwrap();
        assert_eq!(items_per_request(&ppo), 1);
    }

    fn settled(versions: &[i64], lag: u32, max_lag: u32) -> Vec<i64> {
        let mut held: VecDeque<i64> = versions.iter().copied().collect();
        settle_held(&mut held, |v| *v, lag, max_lag);
        held.into()
    }

    /// The front is the version `lag` behind the newest, or the oldest while none is; a
    /// version more than `max_lag` behind is dropped even when it is the only old one (the
    /// watch skips versions: 0 and 3 held, lag 1 of 2 allowed, once acted with 0 for ever).
    #[test]
    fn the_front_lags_as_asked_but_never_past_the_limit() {
        assert_eq!(settled(&[0, 1, 2, 3], 1, 2), [2, 3]);
        assert_eq!(settled(&[0, 1], 2, 4), [0, 1], "none is 2 behind yet");
        assert_eq!(settled(&[0, 3], 1, 2), [3], "0 lags 3 > 2");
        assert_eq!(settled(&[0, 2], 1, 2), [0, 2], "0 lags 2 <= 2");
        assert_eq!(settled(&[5], 1, 2), [5]);
        assert_eq!(settled(&[0, 1, 2, 3], 0, 0), [3]);
    }
}
