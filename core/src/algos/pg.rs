//! What the policy-gradient algorithms share: a batch as tensors on the learner's device,
//! garage's advantage and entropy options, schedules and diagnostics.

use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};

use super::intrinsic::{Intrinsic, IntrinsicBatch};
use super::returns::{Returns, StepData};
use super::Metrics;
use crate::config::error::{check, ConfigError};
use crate::items::rollout::RolloutBatch;
use crate::models::{RnnState, Sequence};

/// How the policy entropy enters the objective (garage's `entropy_method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntropyMethod {
    /// No entropy term (`policy_ent_coeff` must be 0).
    NoEntropy,
    /// Maximum-entropy RL: `policy_ent_coeff x H` is added to every reward (needs
    /// `center_adv = false` and `stop_entropy_gradient = true`, as garage checks).
    Max,
    /// An entropy bonus `policy_ent_coeff x mean H` in the objective.
    Regularized,
}

/// Garage's advantage and entropy options: one group of keys that VPG, TRPO and MAML write
/// in their `[algo]` section beside their own (the algorithm table's parser reads them into
/// the section's `options`); PPO maps its own names onto it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PgOptions {
    /// Normalise advantages to mean 0, std 1 (MAML: per task and stage).
    pub center_adv: bool,
    /// Shift advantages to be positive (after centring).
    pub positive_adv: bool,
    /// How entropy enters the objective: "no_entropy", "max" or "regularized".
    pub entropy_method: EntropyMethod,
    /// Entropy coefficient.
    pub policy_ent_coeff: f64,
    /// Pass the entropy through softplus (keeps the term positive for Gaussians).
    pub use_softplus_entropy: bool,
    /// Take no gradient through the entropy term.
    pub stop_entropy_gradient: bool,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            center_adv: true,
            positive_adv: false,
            entropy_method: EntropyMethod::NoEntropy,
            policy_ent_coeff: 0.0,
            use_softplus_entropy: false,
            stop_entropy_gradient: false,
        }
    }
}

impl PgOptions {
    /// The keys of the group, as they are written in `[algo]`.
    pub const KEYS: &[&str] = &[
        "center_adv",
        "positive_adv",
        "entropy_method",
        "policy_ent_coeff",
        "use_softplus_entropy",
        "stop_entropy_gradient",
    ];

    /// Garage's consistency checks.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self.entropy_method {
            EntropyMethod::Max => {
                check(
                    !self.center_adv,
                    "algo.center_adv",
                    "must be false with entropy_method = \"max\"",
                )?;
                check(
                    self.stop_entropy_gradient,
                    "algo.stop_entropy_gradient",
                    "must be true with entropy_method = \"max\"",
                )
            }
            EntropyMethod::NoEntropy => check(
                self.policy_ent_coeff == 0.0,
                "algo.policy_ent_coeff",
                "must be 0 with entropy_method = \"no_entropy\"",
            ),
            EntropyMethod::Regularized => Ok(()),
        }
    }
}

/// What VPG's and TRPO's policy steps train: the policy head (`pi.*`) and the convolutional
/// encoder (`encoder.*`) that image observations go through before both heads. The baseline's
/// steps fit its own head (`vf.*`) on the encoder's features, so the trust region TRPO keeps
/// holds for the whole policy.
pub const POLICY_PARTS: [&str; 2] = ["pi.", "encoder."];

pub(crate) fn check_lambda(lambda: f64) -> Result<(), ConfigError> {
    check(
        (0.0..=1.0).contains(&lambda),
        "algo.gae_lambda",
        "must be in [0, 1]",
    )
}

/// A batch flattened to `N = T x B` rows on one device.
#[derive(Debug)]
pub struct Samples {
    /// Observations `[N, D]`.
    pub obs: Tensor,
    /// Actions: i64 `[N]` or f32 `[N, A]`.
    pub action: Tensor,
    /// Behaviour log-probabilities `[N]`.
    pub behaviour_log_prob: Tensor,
    /// Behaviour values `[N]`.
    pub behaviour_value: Tensor,
}

/// The sequence layout of a recurrent batch: resets where the previous step of a column ended
/// an episode, and the rollouts' initial states. `None` for a feed-forward batch.
pub fn sequence(batch: &RolloutBatch, device: Device) -> Option<Sequence> {
    let (h, c) = batch.init_state.as_ref()?;
    let b = batch.b;
    // Row t * B + b resets when row (t - 1) * B + b ended an episode.
    let mut reset = vec![0.0f32; b];
    let ended = batch.terminated.iter().zip(&batch.truncated);
    reset.extend(
        ended
            .take((batch.t - 1) * b)
            .map(|(a, c)| f32::from(*a || *c)),
    );
    let width = (h.len() / b.max(1)) as i64;
    let state = |v: &[f32]| {
        Tensor::from_slice(v)
            .view([b as i64, width])
            .to_device(device)
    };
    Some(Sequence {
        t: batch.t as i64,
        b: b as i64,
        reset: Tensor::from_slice(&reset)
            .view([batch.t as i64, b as i64])
            .to_device(device),
        init: RnnState {
            h: state(h),
            c: state(c),
        },
    })
}

/// What PPO and A2C train on: advantages and value targets, GAE(`discount`, `lambda`) from the
/// behaviour values or, with `[algo.vtrace]`, V-trace from the learner's current policy and
/// values; with `[algo.intrinsic]`, the intrinsic stream's advantages mixed in.
#[derive(Debug)]
pub struct Targets {
    /// The policy's advantages and the (extrinsic) value targets.
    pub returns: Returns,
    /// V-trace's mean importance ratio (a metric).
    importance: Option<f64>,
    /// The batch's intrinsic stream.
    intrinsic: Option<IntrinsicBatch>,
}

/// The [`Targets`] of `batch`, whose rewards and episode ends `data` gives.
pub fn targets(
    model: &crate::models::ActorCritic,
    rnd: Option<&Intrinsic>,
    batch: &RolloutBatch,
    data: &StepData<'_>,
    (discount, lambda, bootstrap_truncation): (f64, f64, bool),
    vtrace: Option<&super::vtrace::VtraceClips>,
) -> Targets {
    let (mut returns, importance) = match vtrace {
        None => {
            let returns =
                super::returns::gae(data, discount as f32, lambda as f32, bootstrap_truncation);
            (returns, None)
        }
        Some(clips) => {
            let params = super::vtrace::VtraceParams::from_clips(
                clips,
                discount,
                lambda,
                bootstrap_truncation,
            );
            let (returns, ratio) = super::vtrace::vtrace_returns(model, batch, data, &params);
            (returns, Some(ratio))
        }
    };
    let intrinsic = rnd.map(|rnd| {
        let stream = rnd.process(batch, lambda as f32);
        returns.advantage = rnd.combine(&returns.advantage, &stream);
        stream
    });
    Targets {
        returns,
        importance,
        intrinsic,
    }
}

impl Targets {
    /// After the policy's update at learning rate `lr`: one step of the intrinsic networks,
    /// then the targets' own metrics appended to `metrics`.
    pub fn finish(&self, rnd: Option<&mut Intrinsic>, lr: f64, metrics: &mut Metrics) {
        if let Some(ratio) = self.importance {
            metrics.0.push(("importance_ratio", ratio));
        }
        if let (Some(rnd), Some(stream)) = (rnd, &self.intrinsic) {
            let [distill, value] = rnd.train(stream, lr);
            metrics.0.push(("intrinsic_reward", stream.mean_reward()));
            metrics.0.push(("rnd_loss", distill));
            metrics.0.push(("intrinsic_value_loss", value));
        }
    }
}

/// A float tensor's values, on the CPU.
pub fn floats(t: &Tensor) -> Vec<f32> {
    Vec::<f32>::try_from(&t.detach().to_device(Device::Cpu)).expect("a float vector")
}

/// `v` as a float tensor on `device`.
pub fn tensor(v: &[f32], device: Device) -> Tensor {
    Tensor::from_slice(v).to_device(device)
}

impl Samples {
    /// The batch's rows on `device`.
    pub fn new(batch: &RolloutBatch, device: Device) -> Samples {
        let n = (batch.t * batch.b) as i64;
        Samples {
            obs: batch.obs.to_tensor(device).view([n, batch.obs_dim as i64]),
            action: batch.action.to_tensor(device),
            behaviour_log_prob: tensor(&batch.log_prob, device),
            behaviour_value: tensor(&batch.value, device),
        }
    }
}

/// `base`, decayed linearly to 0 over `total` env steps when `linear` (rlpyt's and SB3's
/// `linear_lr_schedule`; SB3's progress is timesteps over total timesteps), after `done`.
pub fn linear_schedule(base: f64, linear: bool, done: u64, total: u64) -> f64 {
    if !linear {
        return base;
    }
    let remaining = 1.0 - (done as f64 / total.max(1) as f64).min(1.0);
    base * remaining
}

/// Garage's advantage post-processing: centre (mean 0, std 1), then optionally shift so every
/// advantage is positive.
pub fn process_advantages(advantage: &[f32], options: &PgOptions) -> Vec<f32> {
    let mut out = if options.center_adv {
        super::returns::normalize_advantage(advantage, None)
    } else {
        advantage.to_vec()
    };
    if options.positive_adv {
        let min = out.iter().copied().fold(f32::INFINITY, f32::min);
        for a in &mut out {
            *a = *a - min + 1e-8;
        }
    }
    out
}

/// The entropy as garage's options shape it: softplus and stop-gradient.
pub fn entropy_term(entropy: &Tensor, options: &PgOptions) -> Tensor {
    let h = if options.use_softplus_entropy {
        entropy.softplus()
    } else {
        entropy.shallow_clone()
    };
    if options.stop_entropy_gradient {
        h.detach()
    } else {
        h
    }
}

/// Rewards with garage's maximum-entropy bonus `coeff x H(pi(.|s_t))` added when
/// `entropy_method = "max"`; the rewards unchanged otherwise.
pub fn max_entropy_rewards(reward: &[f32], entropy: &Tensor, options: &PgOptions) -> Vec<f32> {
    if options.entropy_method != EntropyMethod::Max {
        return reward.to_vec();
    }
    let h = Vec::<f32>::try_from(
        &entropy_term(entropy, options)
            .detach()
            .to_device(Device::Cpu),
    )
    .expect("entropy is a float vector");
    let coeff = options.policy_ent_coeff as f32;
    reward.iter().zip(h).map(|(r, h)| r + coeff * h).collect()
}

/// Mean of `x` over the rows where `valid` is 1, every row when `valid` is `None` (a batch
/// padded by `actors.mid_batch_reset = false`); 0 when no row is valid.
pub fn masked_mean(x: &Tensor, valid: Option<&Tensor>) -> Tensor {
    match valid {
        None => x.mean(Kind::Float),
        Some(v) => (x * v).sum(Kind::Float) / v.sum(Kind::Float).clamp_min(1.0),
    }
}

/// The regularised-entropy objective term `coeff x mean H` over the `valid` rows (0 for the
/// other methods).
pub fn entropy_bonus(entropy: &Tensor, options: &PgOptions, valid: Option<&Tensor>) -> Tensor {
    match options.entropy_method {
        EntropyMethod::Regularized => {
            masked_mean(&entropy_term(entropy, options), valid) * options.policy_ent_coeff
        }
        _ => Tensor::zeros([], (Kind::Float, entropy.device())),
    }
}

/// 1 - Var(R - V) / Var(R): how much of the return variance the values explain.
pub fn explained_variance(values: &[f32], returns: &[f32]) -> f64 {
    let n = returns.len() as f64;
    let mean = |xs: &mut dyn Iterator<Item = f64>| xs.sum::<f64>() / n;
    let var = |xs: Vec<f64>| {
        let m = mean(&mut xs.iter().copied());
        mean(&mut xs.iter().map(|x| (x - m) * (x - m)))
    };
    let var_returns = var(returns.iter().map(|&r| r as f64).collect());
    let var_residual = var(returns
        .iter()
        .zip(values)
        .map(|(&r, &v)| (r - v) as f64)
        .collect());
    if var_returns == 0.0 {
        f64::NAN
    } else {
        1.0 - var_residual / var_returns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> PgOptions {
        PgOptions {
            center_adv: true,
            positive_adv: false,
            entropy_method: EntropyMethod::NoEntropy,
            policy_ent_coeff: 0.0,
            use_softplus_entropy: false,
            stop_entropy_gradient: false,
        }
    }

    #[test]
    fn centred_then_positive_advantages() {
        let mut o = options();
        let centred = process_advantages(&[1.0, 2.0, 3.0], &o);
        assert!((centred.iter().sum::<f32>()).abs() < 1e-6);
        o.positive_adv = true;
        let positive = process_advantages(&[1.0, 2.0, 3.0], &o);
        assert!(positive.iter().all(|&a| a > 0.0));
        assert!((positive[2] - positive[0] - (centred[2] - centred[0])).abs() < 1e-6);
    }

    #[test]
    fn max_entropy_adds_the_bonus_to_rewards() {
        let mut o = options();
        let h = Tensor::from_slice(&[0.5f32, 1.0]);
        assert_eq!(max_entropy_rewards(&[1.0, 1.0], &h, &o), vec![1.0, 1.0]);
        o.entropy_method = EntropyMethod::Max;
        o.policy_ent_coeff = 0.1;
        let r = max_entropy_rewards(&[1.0, 1.0], &h, &o);
        assert!(
            (r[0] - 1.05).abs() < 1e-6 && (r[1] - 1.1).abs() < 1e-6,
            "{r:?}"
        );
    }

    #[test]
    fn stop_entropy_gradient_detaches() {
        let mut o = options();
        o.entropy_method = EntropyMethod::Regularized;
        o.policy_ent_coeff = 1.0;
        o.stop_entropy_gradient = true;
        let h = Tensor::from_slice(&[0.5f32]).set_requires_grad(true);
        assert!(!entropy_bonus(&h, &o, None).requires_grad());
        o.stop_entropy_gradient = false;
        o.use_softplus_entropy = true;
        let bonus = entropy_bonus(&h, &o, None);
        assert!(bonus.requires_grad());
        assert!((bonus.double_value(&[]) - (1.0 + 0.5f64.exp()).ln()).abs() < 1e-6);
    }

    #[test]
    fn linear_schedule_reaches_zero() {
        assert_eq!(linear_schedule(1.0, false, 5, 10), 1.0);
        assert!((linear_schedule(1.0, true, 5, 10) - 0.5).abs() < 1e-12);
        assert_eq!(linear_schedule(1.0, true, 20, 10), 0.0);
    }
}
