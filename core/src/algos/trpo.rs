//! Trust Region Policy Optimization (Schulman et al. 2015, arXiv:1502.05477; garage's `TRPO`
//! with its `ConjugateGradientOptimizer`).
//!
//! Per batch:
//! 1. advantages and returns as VPG (GAE against the baseline, garage's options);
//! 2. the surrogate `L(theta) = mean(pi_theta(a|s) / pi_old(a|s) A)` (+ the regularised
//!    entropy bonus) and its gradient `g` at theta_old;
//! 3. the natural-gradient direction `x = F^-1 g` by conjugate gradient, where `F v` is the
//!    Hessian-vector product of the mean KL(pi_old || pi_theta) (the Fisher matrix at
//!    theta_old) plus `cg_damping v`;
//! 4. the largest step along `x` that the quadratic model keeps within the KL limit,
//!    `sqrt(2 max_kl / x^T F x) x`, shrunk by `backtrack_ratio` until the real KL is within
//!    `max_kl` and the surrogate improved; with no such step within `max_backtracks`, the
//!    policy stays as it was (theta: the policy head and, on images, the encoder in front of
//!    both heads);
//! 5. `vf_epochs` Adam steps on the baseline.

use crate::algos::config::AlgoSection;
use crate::algos::pg::check_lambda;
use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};

use super::pg::{entropy_bonus, explained_variance, tensor, Samples};
use super::pg::{PgOptions, POLICY_PARTS};
use super::vpg::{fit_baseline, pg_returns};
use super::{Algorithm, Metrics, Trained};
use crate::config::error::{check, ConfigError};
use crate::items::rollout::RolloutBatch;
use crate::models::{ActorCritic, Dist};
use crate::optim::Adam;

/// TRPO hyperparameters (Schulman et al. 2015; garage's `TRPO` and its
/// `ConjugateGradientOptimizer`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrpoConfig {
    /// Discount factor gamma.
    pub discount: f64,
    /// GAE lambda.
    pub gae_lambda: f64,
    /// KL(old || new) limit per update (garage's `max_constraint_value`).
    pub max_kl: f64,
    /// Conjugate-gradient iterations for the natural gradient.
    pub cg_iters: u32,
    /// Damping added to the Fisher-vector product (garage's `hvp_reg_coeff`).
    pub cg_damping: f64,
    /// Step shrink factor of the backtracking line search.
    pub backtrack_ratio: f64,
    /// Most line-search shrinks before the update is rejected.
    pub max_backtracks: u32,
    /// Value-function Adam learning rate.
    pub vf_learning_rate: f64,
    /// Value-function gradient steps per batch.
    pub vf_epochs: u32,
    /// Adam epsilon (value function).
    pub adam_eps: f64,
    /// Bootstrap with the value of the final observation when an episode is truncated.
    pub bootstrap_truncation: bool,
    /// The advantage and entropy keys (`center_adv`, `positive_adv`, `entropy_method`,
    /// `policy_ent_coeff`, `use_softplus_entropy`, `stop_entropy_gradient`), written beside
    /// the section's own keys and read by the algorithm table's parser.
    #[serde(skip)]
    pub options: PgOptions,
}

impl Default for TrpoConfig {
    fn default() -> Self {
        TrpoConfig {
            discount: 0.99,
            gae_lambda: 0.98,
            max_kl: 0.01,
            cg_iters: 10,
            cg_damping: 1e-5,
            backtrack_ratio: 0.8,
            max_backtracks: 15,
            vf_learning_rate: 3e-3,
            vf_epochs: 5,
            adam_eps: 1e-8,
            bootstrap_truncation: true,
            options: PgOptions::default(),
        }
    }
}

impl AlgoSection for TrpoConfig {
    fn options(&self) -> Option<&PgOptions> {
        Some(&self.options)
    }

    fn options_mut(&mut self) -> Option<&mut PgOptions> {
        Some(&mut self.options)
    }

    fn discount(&self) -> f64 {
        self.discount
    }

    fn validate(&self, _batch: u64) -> Result<(), ConfigError> {
        TrpoConfig::validate(self)
    }
}

impl TrpoConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        check_lambda(self.gae_lambda)?;
        check(self.max_kl > 0.0, "algo.max_kl", "must be > 0")?;
        check(self.cg_iters >= 1, "algo.cg_iters", "must be >= 1")?;
        check(
            self.backtrack_ratio > 0.0 && self.backtrack_ratio < 1.0,
            "algo.backtrack_ratio",
            "must be in (0, 1)",
        )?;
        self.options.validate()
    }
}

/// Solves `A x = b` for symmetric positive-definite `A`, given as its product `avp(v) = A v`,
/// in at most `iters` conjugate-gradient iterations.
pub fn conjugate_gradient(avp: impl Fn(&Tensor) -> Tensor, b: &Tensor, iters: u32) -> Tensor {
    let mut x = b.zeros_like();
    let mut r = b.copy();
    let mut p = b.copy();
    let mut rr = r.dot(&r).double_value(&[]);
    for _ in 0..iters {
        if rr < 1e-10 {
            break;
        }
        let ap = avp(&p);
        let alpha = rr / p.dot(&ap).double_value(&[]);
        x += &p * alpha;
        r -= &ap * alpha;
        let next = r.dot(&r).double_value(&[]);
        p = &r + &p * (next / rr);
        rr = next;
    }
    x
}

/// The policy's parameters ([`POLICY_PARTS`]: `pi.*` and the image encoder's), sorted by name.
fn policy_params(model: &ActorCritic) -> Vec<Tensor> {
    let mut named: Vec<(String, Tensor)> = model
        .var_store()
        .variables()
        .into_iter()
        .filter(|(n, _)| POLICY_PARTS.iter().any(|p| n.starts_with(p)))
        .collect();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    named.into_iter().map(|(_, t)| t).collect()
}

/// d y / d params, flattened.
pub(crate) fn flat_grad(y: &Tensor, params: &[Tensor], create_graph: bool) -> Tensor {
    let grads = Tensor::run_backward(&[y], params, true, create_graph);
    let flat: Vec<Tensor> = grads.iter().map(|g| g.reshape([-1])).collect();
    Tensor::cat(&flat, 0)
}

pub(crate) fn flat_params(params: &[Tensor]) -> Tensor {
    let flat: Vec<Tensor> = params.iter().map(|p| p.detach().reshape([-1])).collect();
    Tensor::cat(&flat, 0)
}

pub(crate) fn set_params(params: &[Tensor], flat: &Tensor) {
    let _guard = tch::no_grad_guard();
    let mut offset = 0;
    for p in params {
        let n = p.numel() as i64;
        p.shallow_clone()
            .copy_(&flat.narrow(0, offset, n).view(p.size().as_slice()));
        offset += n;
    }
}

/// The batch and the frozen old policy the surrogate and KL are measured against.
struct TrustRegion<'a> {
    model: &'a ActorCritic,
    samples: &'a Samples,
    advantage: Tensor,
    old: Dist,
    old_log_prob: Tensor,
    options: &'a PgOptions,
}

impl TrustRegion<'_> {
    /// `-L(theta)` and the mean KL(pi_old || pi_theta) at the current parameters.
    fn loss_and_kl(&self) -> (Tensor, Tensor) {
        let dist = self.model.heads().dist(&self.samples.obs);
        let ratio = (dist.log_prob(&self.samples.action) - &self.old_log_prob).exp();
        let surrogate = (ratio * &self.advantage).mean(Kind::Float)
            + entropy_bonus(&dist.entropy(), self.options, None);
        (-surrogate, self.old.kl(&dist).mean(Kind::Float))
    }
}

/// TRPO's learner state: the policy moves by natural-gradient steps; the baseline has an Adam.
#[derive(Debug)]
pub struct Trpo {
    config: TrpoConfig,
    trained: Trained<ActorCritic>,
    vf_optim: Adam,
    device: Device,
}

impl Trpo {
    /// TRPO over `model`.
    pub fn new(config: &TrpoConfig, model: ActorCritic) -> Trpo {
        let vf_optim = Adam::over(model.var_store(), config.adam_eps, "vf.");
        let device = model.var_store().device();
        Trpo {
            config: config.clone(),
            trained: Trained::new(model, "trpo.updates"),
            vf_optim,
            device,
        }
    }

    /// Steps 2-4: returns the accepted KL, the surrogate improvement and the backtracks used
    /// (`max_backtracks + 1` when the step was rejected).
    fn policy_step(&self, region: &TrustRegion<'_>) -> (f64, f64, u32) {
        let c = &self.config;
        let params = policy_params(&self.trained.model);
        let (loss, kl) = region.loss_and_kl();
        let g = -flat_grad(&loss, &params, false);
        let kl_grad = flat_grad(&kl, &params, true);
        let fvp = |v: &Tensor| {
            flat_grad(&(&kl_grad * v).sum(Kind::Float), &params, false) + v * c.cg_damping
        };
        let direction = conjugate_gradient(fvp, &g, c.cg_iters);
        let curvature = direction.dot(&fvp(&direction)).double_value(&[]);
        let scale = (2.0 * c.max_kl / (curvature + 1e-8)).sqrt();
        let full_step = direction * scale;
        let start = flat_params(&params);
        let loss_before = loss.double_value(&[]);
        let _guard = tch::no_grad_guard();
        for k in 0..=c.max_backtracks {
            let fraction = c.backtrack_ratio.powi(k as i32);
            set_params(&params, &(&start + &full_step * fraction));
            let (loss, kl) = region.loss_and_kl();
            let (loss, kl) = (loss.double_value(&[]), kl.double_value(&[]));
            if kl.is_finite() && kl <= c.max_kl && loss < loss_before {
                return (kl, loss_before - loss, k);
            }
        }
        set_params(&params, &start);
        (0.0, 0.0, c.max_backtracks + 1)
    }
}

impl Trpo {
    /// One update on a batch of rollouts.
    pub fn train(&mut self, batch: &RolloutBatch) -> Metrics {
        let c = self.config.clone();
        let options = c.options;
        let samples = Samples::new(batch, self.device);
        let (advantage, returns) = pg_returns(
            &self.trained.model,
            batch,
            &samples.obs,
            (c.discount, c.gae_lambda, c.bootstrap_truncation),
            &options,
        );
        let old = {
            let _guard = tch::no_grad_guard();
            self.trained.model.heads().dist(&samples.obs)
        };
        let region = TrustRegion {
            model: &self.trained.model,
            samples: &samples,
            advantage: tensor(&advantage, self.device),
            old_log_prob: old.log_prob(&samples.action),
            old,
            options: &options,
        };
        let entropy = region.old.entropy().mean(Kind::Float).double_value(&[]);
        let (kl, improvement, backtracks) = self.policy_step(&region);
        let value_loss = fit_baseline(
            &self.trained.model,
            &mut self.vf_optim,
            &samples.obs,
            &tensor(&returns, self.device),
            (c.vf_epochs, c.vf_learning_rate, 0.0),
        );
        self.trained.updates += 1;
        Metrics(vec![
            ("kl", kl),
            ("surrogate_improvement", improvement),
            ("backtracks", backtracks as f64),
            ("value_loss", value_loss),
            ("entropy", entropy),
            (
                "explained_variance",
                explained_variance(&batch.value, &returns),
            ),
        ])
    }
}

impl Algorithm for Trpo {
    super::algorithm_parts!(trains_on: Rollouts(rollouts), state: [vf_optim]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algos::testing::tiny_batch;
    use crate::algos::testing::{cartpole_model, image_batch, image_model, moved, snapshot};

    /// On image observations the natural-gradient step moves the convolutional encoder in
    /// front of both heads with the policy, and still within the trust region.
    #[test]
    fn the_encoder_trains_on_images() {
        let model = image_model(5);
        let before = snapshot(&model);
        let mut trpo = Trpo::new(&TrpoConfig::default(), model);
        let metrics = trpo.train(&image_batch());
        assert!(metrics.get("backtracks").unwrap() <= 15.0, "{metrics:?}");
        for part in ["encoder.", "pi.", "vf."] {
            assert!(
                !moved(&before, &trpo.trained.model, part).is_empty(),
                "nothing under {part} moved; {metrics:?}"
            );
        }
    }

    #[test]
    fn conjugate_gradient_solves_a_small_spd_system() {
        let a = Tensor::from_slice(&[4.0f64, 1.0, 0.0, 1.0, 3.0, 0.5, 0.0, 0.5, 2.0]).view([3, 3]);
        let b = Tensor::from_slice(&[1.0f64, 2.0, 3.0]);
        let x = conjugate_gradient(|v| a.mv(v), &b, 10);
        assert!(a.mv(&x).allclose(&b, 1e-8, 1e-8, false));
    }

    /// Whatever the batch, an accepted step stays inside the trust region.
    #[test]
    fn update_respects_the_kl_limit() {
        let batch = tiny_batch();
        let config = TrpoConfig {
            max_kl: 0.005,
            ..TrpoConfig::default()
        };
        let mut trpo = Trpo::new(&config, cartpole_model(3));
        let obs = Samples::new(&batch, Device::Cpu).obs;
        let before = {
            let _guard = tch::no_grad_guard();
            trpo.trained.model.heads().dist(&obs)
        };
        let metrics = trpo.train(&batch);
        let after = trpo.trained.model.heads().dist(&obs);
        let kl = before.kl(&after).mean(Kind::Float).double_value(&[]);
        assert!(kl <= 0.005 + 1e-6, "KL {kl} over the limit; {metrics:?}");
        assert!(metrics.get("backtracks").unwrap() <= 15.0, "{metrics:?}");
        assert!(kl > 0.0, "the policy should move on this batch");
    }
}
