//! Proximal Policy Optimization (Schulman et al. 2017, arXiv:1707.06347), clipped surrogate.
//!
//! Asynchronous like IMPALA's actors: the log-probabilities and values in a batch come from
//! the (possibly a version or two older) policy that acted, so the ratio is taken against
//! the behaviour policy, and GAE uses the behaviour values, as SB3 does with its rollout values.
//!
//! Per batch: GAE -> `epochs` x `minibatches` steps of
//! `L = -min(r A, clip(r, 1-e, 1+e) A) + c_v (V - R)^2 - c_e H`, with gradient-norm clipping,
//! and optionally linear decay of the learning rate and clip range over the step budget.
//!
//! The minibatch tensors are in [`minibatch`]; splitting a minibatch over threads or devices
//! is in [`sharded`].

use tch::{Device, Kind, Tensor};

use super::data_parallel::ShardPool;
use super::intrinsic::Intrinsic;
use super::pg::{explained_variance, masked_mean, max_entropy_rewards, sequence, targets, Samples};
use super::replicas::Replicas;
use super::returns::Returns;
use super::returns::StepData;
use super::{Algorithm, Metrics, Trained};
pub use config::PpoConfig;

use super::pg::EntropyMethod;
use crate::items::rollout::RolloutBatch;
use crate::models::ActorCritic;
use crate::optim::Adam;

mod config;
mod minibatch;
mod sharded;
#[cfg(test)]
mod tests;

use minibatch::{normalized, sequences, shifted_positive, Minibatch};
use sharded::{combine, LossSpec, ShardOut};

/// The clipped surrogate objective over the `valid` rows (all when `None`), negated to a
/// loss, and the probability ratio.
pub fn clipped_surrogate(
    log_prob: &Tensor,
    old_log_prob: &Tensor,
    advantage: &Tensor,
    clip: f64,
    valid: Option<&Tensor>,
) -> (Tensor, Tensor) {
    let ratio = (log_prob - old_log_prob).exp();
    let unclipped = &ratio * advantage;
    let clipped = ratio.clamp(1.0 - clip, 1.0 + clip) * advantage;
    let loss = -masked_mean(&unclipped.minimum(&clipped), valid);
    (loss, ratio)
}

/// Fraction of ratios outside the clip range, and the (k3) estimate of KL(old || new).
fn ratio_stats(ratio: &Tensor, clip: f64) -> (f64, f64) {
    let _guard = tch::no_grad_guard();
    let clip_fraction = (ratio - 1.0)
        .abs()
        .gt(clip)
        .to_kind(Kind::Float)
        .mean(Kind::Float);
    let approx_kl = ((ratio - 1.0) - ratio.log()).mean(Kind::Float);
    (clip_fraction.double_value(&[]), approx_kl.double_value(&[]))
}

/// PPO's learner state: the network, its optimiser and the schedule position.
#[derive(Debug)]
pub struct Ppo {
    config: PpoConfig,
    trained: Trained<ActorCritic>,
    optim: Adam,
    device: Device,
    total_env_steps: u64,
    shards: ShardPool<ShardOut>,
    /// Copies on further devices (none on one device); shard k runs on device k.
    replicas: Replicas<ActorCritic>,
    /// RND's networks when `[algo.intrinsic]` is on.
    intrinsic: Option<Intrinsic>,
}

/// The value regression loss: mean squared error against the returns (SB3's `F.mse_loss`).
/// With `clip`, the pessimistic (larger) of the unclipped error and that of the old value
/// moved at most `clip` towards the new one (pytorchrl, CleanRL's `clip_vloss`).
/// Means are over the `valid` rows (all when `None`).
pub fn value_loss(
    value: &Tensor,
    old_value: &Tensor,
    returns: &Tensor,
    clip: Option<f64>,
    valid: Option<&Tensor>,
) -> Tensor {
    let unclipped = (value - returns).square();
    let Some(clip) = clip else {
        return masked_mean(&unclipped, valid);
    };
    let clipped = old_value + (value - old_value).clamp(-clip, clip);
    masked_mean(&unclipped.maximum(&(clipped - returns).square()), valid)
}

impl Ppo {
    /// PPO over `model`, whose linear schedules span `total_env_steps` env steps (the run's
    /// budget).
    pub fn new(config: &PpoConfig, model: ActorCritic, total_env_steps: u64) -> Ppo {
        let mut optim = Adam::new(model.var_store(), config.adam_eps).with_rule(config.rule());
        if let Some(vf_lr) = config.vf_learning_rate {
            optim = optim.with_lr_factor("vf.", vf_lr / config.learning_rate);
        }
        let device = model.var_store().device();
        let total_env_steps = total_env_steps.max(1);
        let shards = ShardPool::new(model.heads(), 0);
        Ppo {
            config: config.clone(),
            trained: Trained::new(model, "ppo.updates"),
            optim,
            device,
            total_env_steps,
            shards,
            replicas: Replicas::none(device),
            intrinsic: None,
        }
    }

    /// Adds the intrinsic-reward networks `[algo.intrinsic]` asks for, for observations
    /// `obs_dim` wide.
    pub fn with_intrinsic(mut self, obs_dim: i64) -> Ppo {
        self.intrinsic =
            (self.config.intrinsic.as_ref()).map(|c| Intrinsic::new(c, obs_dim, self.device));
        self
    }

    /// The actor-critic being trained.
    pub fn model(&self) -> &ActorCritic {
        &self.trained.model
    }

    /// Learning rate and clip range for the next update.
    pub fn schedule(&self) -> (f64, f64) {
        let done = self.trained.env_steps as f64 / self.total_env_steps as f64;
        let remaining = 1.0 - done.min(1.0);
        let c = &self.config;
        let lr = if c.linear_lr_schedule {
            c.learning_rate * remaining
        } else {
            c.learning_rate
        };
        let clip = if c.linear_clip_schedule {
            c.ratio_clip * remaining
        } else {
            c.ratio_clip
        };
        // A clip of exactly 0 would freeze the policy on the very last update; keep it tiny.
        (lr, clip.max(1e-8))
    }

    fn to_device(&self, batch: &RolloutBatch, returns: &Returns) -> Minibatch {
        let n = (batch.t * batch.b) as i64;
        let f = |v: &[f32]| Tensor::from_slice(v).to_device(self.device);
        Minibatch {
            obs: batch
                .obs
                .to_tensor(self.device)
                .view([n, batch.obs_dim as i64]),
            action: batch.action.to_tensor(self.device),
            old_log_prob: f(&batch.log_prob),
            old_value: f(&batch.value),
            advantage: f(&returns.advantage),
            returns: f(&returns.returns),
            valid: batch.valid.as_deref().map(f),
            seq: sequences(batch, self.device),
        }
    }
}

impl Ppo {
    /// One update on a batch of rollouts.
    pub fn train(&mut self, batch: &RolloutBatch) -> Metrics {
        let c = self.config.clone();
        let options = c.options();
        // garage's "max" entropy: the policy's entropy at each step joins its reward.
        let reward = (options.entropy_method == EntropyMethod::Max).then(|| {
            let _guard = tch::no_grad_guard();
            let samples = Samples::new(batch, self.device);
            let heads = self.trained.model.heads();
            let entropy = match sequence(batch, self.device) {
                None => heads.evaluate(&samples.obs, &samples.action).entropy,
                Some(seq) => {
                    heads
                        .evaluate_sequence(&samples.obs, &samples.action, &seq)
                        .entropy
                }
            };
            max_entropy_rewards(&batch.reward, &entropy, &options)
        });
        let data = StepData {
            reward: reward.as_deref().unwrap_or(&batch.reward),
            ..batch.step_data()
        };
        let targets = targets(
            &self.trained.model,
            self.intrinsic.as_ref(),
            batch,
            &data,
            (c.discount, c.gae_lambda, c.bootstrap_truncation),
            c.vtrace.as_ref(),
        );
        let returns = &targets.returns;
        let (lr, clip) = self.schedule();
        let spec = LossSpec {
            clip,
            clip_value: c.clip_value_loss,
            value_coeff: c.value_loss_coeff,
            entropy: options,
        };
        let mut full = self.to_device(batch, returns);
        let n = (batch.t * batch.b) as i64;
        let minibatches = c.minibatch_count(n as u64);
        let size = n / minibatches as i64;
        let per_minibatch_norm = c.normalize_advantage && minibatches > 1;
        if c.normalize_advantage && !per_minibatch_norm {
            full.advantage = normalized(&full.advantage, full.valid.as_ref());
        }
        if c.positive_adv && !per_minibatch_norm {
            full.advantage = shifted_positive(&full.advantage, full.valid.as_ref());
        }
        // A recurrent model trains on whole columns (rlpyt shuffles only B); rows otherwise.
        let (units, cols) = if full.seq.is_some() {
            (batch.b as i64, batch.b as i64 / minibatches as i64)
        } else {
            (n, size)
        };
        let mut last = None;
        for _epoch in 0..c.epochs {
            let order = (minibatches > 1).then(|| {
                let options = (Kind::Int64, self.device);
                if c.shuffle {
                    Tensor::randperm(units, options)
                } else {
                    Tensor::arange(units, options)
                }
            });
            for i in 0..minibatches as i64 {
                let mut mb = match (&order, full.seq.is_some()) {
                    (Some(perm), false) => full.select(&perm.narrow(0, i * size, size)),
                    (Some(perm), true) => {
                        full.select_columns(&perm.narrow(0, i * cols, cols), batch.b as i64)
                    }
                    (None, _) => full.select_all(),
                };
                if per_minibatch_norm {
                    mb.advantage = normalized(&mb.advantage, mb.valid.as_ref());
                    if c.positive_adv {
                        mb.advantage = shifted_positive(&mb.advantage, mb.valid.as_ref());
                    }
                }
                self.optim.zero_grad();
                self.replicas.broadcast(self.optim.flat_params());
                let outs = self.backward(&mb, spec);
                self.replicas.reduce(self.optim.flat_grads());
                let grad_norm = self.optim.clipped_step(lr, c.clip_grad_norm);
                last = Some((outs, grad_norm));
            }
        }
        self.trained.updates += 1;
        self.trained.env_steps += batch.env_steps();
        let (outs, grad_norm) = last.expect("epochs and minibatches are at least 1");
        let ([pg, vf, ent], ratio) = combine(&outs);
        let (clip_fraction, approx_kl) = ratio_stats(&ratio, clip);
        let mut metrics = Metrics(vec![
            ("policy_loss", pg),
            ("value_loss", vf),
            ("entropy", ent),
            ("approx_kl", approx_kl),
            ("clip_fraction", clip_fraction),
            ("grad_norm", grad_norm.double_value(&[])),
            ("learning_rate", lr),
            ("clip_range", clip),
            (
                "explained_variance",
                explained_variance(&batch.value, &returns.returns),
            ),
        ]);
        targets.finish(self.intrinsic.as_mut(), lr, &mut metrics);
        metrics
    }
}

impl Algorithm for Ppo {
    super::algorithm_parts!(trains_on: Rollouts(rollouts), state: [optim, intrinsic]);

    fn join_group(
        &mut self,
        group: &std::sync::Arc<crate::collective::Group>,
    ) -> Result<(), crate::collective::CollectiveError> {
        if self.intrinsic.is_some() {
            // Its observation statistics follow each rank's own batches.
            return Err(crate::collective::CollectiveError::Unavailable(
                "algo.intrinsic trains in one learner process only (its observation \
                 statistics would differ between ranks)"
                    .into(),
            ));
        }
        self.optim.join(group);
        Ok(())
    }

    fn reconfigure(
        &mut self,
        algo: &super::config::AlgoConfig,
    ) -> Result<(), super::ReconfigureError> {
        let super::config::AlgoConfig::Ppo(config) = algo else {
            return Err(super::ReconfigureError::OtherAlgorithm {
                trains: "ppo",
                asked: algo.name(),
            });
        };
        if self.config.vf_learning_rate.is_some()
            && config.learning_rate != self.config.learning_rate
        {
            return Err(super::ReconfigureError::FixedKey {
                key: "algo.learning_rate",
                why: "with algo.vf_learning_rate set, the value function's rate is fixed \
                      relative to it when the run starts",
            });
        }
        self.config = config.clone();
        Ok(())
    }
}
