//! Off-policy batches: sampled transitions or sequences screened by the learner's checks
//! (refused rows deleted from their table), weighted for prioritized replay, trained on.

use fleetrl_core::algos::registry;
use fleetrl_core::algos::Batch;
use fleetrl_core::items::transition::importance_weights;
use fleetrl_core::replay_client::ShardBatch;

use super::Trainer;
use crate::priorities::{KeyChange, KeyUpdate};
use crate::screen::{self, Refusal};

impl Trainer {
    /// Off-policy: counts the refused rows of a sampled batch (each item once), deletes them
    /// from their table and takes the env steps they stood for off the run's progress.
    fn refuse(&mut self, shard: usize, refusal: &Refusal) {
        let new = self.refused.new_keys(shard, &refusal.keys);
        if new.is_empty() {
            return;
        }
        self.metrics.items_rejected.add(new.len() as f64);
        let steps = new.len() as u64 * crate::collected::steps_per_item(&self.config);
        self.stats().refuse_env_steps(steps);
        tracing::warn!(field = %refusal.error.field, error = %refusal.error, items = new.len(), "deleting sampled items that fail the learner's checks");
        let _ = self.key_updates.send(KeyUpdate {
            shard,
            keys: new,
            change: KeyChange::Delete,
        });
    }

    /// Off-policy: a sampled batch of transitions or sequences, with prioritized replay's
    /// importance weights. True when an update ran.
    pub(super) fn train_sampled(&mut self, sample: ShardBatch) -> bool {
        let spec = registry::spec(&self.config);
        let Some(replay) = spec.replay.map(std::borrow::Cow::into_owned) else {
            tracing::error!("an off-policy algorithm without replay options");
            return false;
        };
        let kept;
        let response = match screen::screen(&sample.response, |items| self.check(items)) {
            Ok(()) => &sample.response,
            Err(refusal) => {
                self.refuse(sample.shard, &refusal);
                match refusal.kept {
                    Some(rest) => {
                        kept = rest;
                        &*kept
                    }
                    None => return false,
                }
            }
        };
        // Off-policy training has no batches of env steps: the run's progress is what the
        // replay server accepted from the actors (counted by `collected`), less what the
        // learner refused.
        let env_steps = self.stats().env_steps_collected();
        let Some(stacked) = response.batch.as_ref() else {
            tracing::error!("a sample response without a batch");
            return false;
        };
        let weights = replay.prioritized.then(|| {
            let frac = (env_steps as f64 / self.config.stop.total_env_steps.max(1) as f64).min(1.0);
            let beta = replay.importance_exponent + frac * (1.0 - replay.importance_exponent);
            importance_weights(&response.probabilities, response.table_size, beta)
        });
        let batch = match Batch::from_stacked(
            self.algo.trains_on(),
            stacked,
            weights.as_deref(),
            self.device,
        ) {
            Ok(batch) => batch,
            Err(error) => {
                tracing::error!(%error, "dropping a batch the algorithm cannot read");
                return false;
            }
        };
        let keys = response.keys.clone();
        let Some(metrics) = self.update(&batch, Some((sample.shard, keys, replay.priority_eps)))
        else {
            return false;
        };
        let version = {
            let mut stats = self.stats();
            stats.env_steps_trained = env_steps;
            stats.policy_version
        };
        self.after_update(version, env_steps, &metrics);
        true
    }
}
