//! One PPO gradient step sharded over threads or devices: each shard's loss is weighted by its
//! share of the counted rows, so the shards' gradients sum to the minibatch's.

use tch::{Device, Kind, Tensor};

use super::super::data_parallel::{Job, ShardPool};
use super::super::pg::PgOptions;
use super::super::pg::{entropy_bonus, masked_mean};
use super::super::replicas::Replicas;
use super::minibatch::Minibatch;
use super::{clipped_surrogate, value_loss, Ppo};
use crate::models::{ActorCritic, Heads, Sequence};

impl Ppo {
    /// Splits every minibatch over `threads` threads (data parallel over one set of
    /// parameters; see [`crate::algos::data_parallel`]). The update is the same; only its wall
    /// time changes.
    pub fn with_threads(mut self, threads: usize) -> Ppo {
        self.shards = ShardPool::new(self.trained.model.heads(), threads.max(1) - 1);
        self
    }

    /// Splits every minibatch over the devices of `replicas` (one thread each; the master's
    /// device is the first), reducing the gradients onto the master for one optimiser step:
    /// the update equals one device's up to float rounding. Replaces [`Ppo::with_threads`].
    pub fn with_replicas(mut self, replicas: Replicas<ActorCritic>) -> Ppo {
        let handles = replicas.models().map(|m| m.heads().shallow_clone());
        self.shards = ShardPool::with_handles(handles.collect());
        self.replicas = replicas;
        self
    }

    /// [`Ppo::with_replicas`] with one replica, made by `make`, on each of `devices[1..]`
    /// (`devices[0]` is the model's own).
    pub fn on_devices(self, devices: &[Device], make: impl FnMut(Device) -> ActorCritic) -> Ppo {
        let replicas = Replicas::new(
            self.trained.model.var_store(),
            devices,
            make,
            ActorCritic::var_store,
        );
        self.with_replicas(replicas)
    }

    /// Computes L on the minibatch and accumulates its gradients, sharded over the pool.
    pub(super) fn backward(&self, mb: &Minibatch, spec: LossSpec) -> Vec<ShardOut> {
        let n = mb.obs.size()[0];
        // Sequences are not split across threads.
        let threads = if mb.seq.is_some() {
            1
        } else {
            self.shards.threads()
        };
        let k = (threads as i64).min(n);
        let devices = self.replicas.devices();
        let mut jobs: Vec<Job<ShardOut>> = Vec::with_capacity(k as usize);
        let mut start = 0;
        for i in 0..k {
            let len = (n - start) / (k - i);
            let shard = if mb.seq.is_some() {
                mb.select_all()
            } else {
                mb.rows(start, len).on(devices[i as usize % devices.len()])
            };
            // Each shard's loss is a mean over its counted rows; weighted by their share,
            // the shards sum to the minibatch's mean.
            let weight = match &mb.valid {
                Some(valid) if mb.seq.is_none() => {
                    let total = valid.sum(Kind::Float).double_value(&[]).max(1.0);
                    valid
                        .narrow(0, start, len)
                        .sum(Kind::Float)
                        .double_value(&[])
                        / total
                }
                _ => len as f64 / n as f64,
            };
            jobs.push(Box::new(move |heads: &Heads| {
                shard_backward(heads, &shard, spec, weight)
            }));
            start += len;
        }
        self.shards.run(self.trained.model.heads(), jobs)
    }
}

/// What a gradient step needs besides the data.
#[derive(Debug, Clone, Copy)]
pub(super) struct LossSpec {
    pub(super) clip: f64,
    pub(super) clip_value: bool,
    pub(super) value_coeff: f64,
    /// The entropy's place in the loss (garage's options; the bonus only when "regularized").
    pub(super) entropy: PgOptions,
}

/// One shard's loss terms (policy, value, entropy; detached) and ratios, with its weight.
pub(super) struct ShardOut {
    weight: f64,
    terms: [Tensor; 3],
    ratio: Tensor,
}

/// `weight` x L on one shard, backpropagated.
pub(super) fn shard_backward(
    heads: &Heads,
    mb: &Minibatch,
    spec: LossSpec,
    weight: f64,
) -> ShardOut {
    let eval = match &mb.seq {
        None => heads.evaluate(&mb.obs, &mb.action),
        Some(seq) => {
            let b = mb.obs.size()[0] / seq.t;
            let sequence = Sequence {
                t: seq.t,
                b,
                reset: seq.reset.view([seq.t, b]),
                init: seq.init.shallow_clone(),
            };
            heads.evaluate_sequence(&mb.obs, &mb.action, &sequence)
        }
    };
    let valid = mb.valid.as_ref();
    let (pg_loss, ratio) = clipped_surrogate(
        &eval.log_prob,
        &mb.old_log_prob,
        &mb.advantage,
        spec.clip,
        valid,
    );
    let value_clip = spec.clip_value.then_some(spec.clip);
    let value_loss = value_loss(&eval.value, &mb.old_value, &mb.returns, value_clip, valid);
    let entropy = masked_mean(&eval.entropy, valid);
    let bonus = entropy_bonus(&eval.entropy, &spec.entropy, valid);
    let loss = &pg_loss + &value_loss * spec.value_coeff - bonus;
    (loss * weight).backward();
    ShardOut {
        weight,
        terms: [pg_loss.detach(), value_loss.detach(), entropy.detach()],
        ratio: ratio.detach(),
    }
}

/// Weighted means of the shards' loss terms, and all their ratios.
pub(super) fn combine(outs: &[ShardOut]) -> ([f64; 3], Tensor) {
    let mut terms = [0.0; 3];
    for out in outs {
        for (sum, t) in terms.iter_mut().zip(&out.terms) {
            *sum += out.weight * t.double_value(&[]);
        }
    }
    let device = outs[0].ratio.device();
    let ratios: Vec<Tensor> = outs.iter().map(|o| o.ratio.to_device(device)).collect();
    (terms, Tensor::cat(&ratios, 0))
}
