//! Vanilla Policy Gradient / REINFORCE with a learned baseline (Williams 1992; garage's `VPG`
//! and its options).
//!
//! Per batch:
//! 1. with `entropy_method = "max"`, add `policy_ent_coeff x H(pi(.|s_t))` to every reward;
//! 2. advantages by GAE(lambda) against the baseline (lambda = 1: the discounted return minus
//!    V), then garage's `center_adv` / `positive_adv`;
//! 3. `policy_epochs` Adam steps on the policy alone (with the image encoder, if any), minimising
//!    `-mean(log pi(a|s) A) - [regularized] policy_ent_coeff x mean(H)` (softplus and
//!    stop-gradient on H as configured);
//! 4. `vf_epochs` Adam steps on the baseline alone, minimising `mean((V(s) - R)^2)`.

use crate::algos::config::AlgoSection;
use crate::algos::pg::check_lambda;
use crate::config::error::check;
use crate::config::error::ConfigError;
use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};

use super::pg::{
    entropy_bonus, explained_variance, max_entropy_rewards, process_advantages, tensor, Samples,
};
use super::pg::{PgOptions, POLICY_PARTS};
use super::returns::{gae, StepData};
use super::{Algorithm, Metrics, Trained};

use crate::items::rollout::RolloutBatch;
use crate::models::ActorCritic;
use crate::optim::Adam;

/// VPG / REINFORCE hyperparameters (garage's `VPG`): the policy takes one Adam step per
/// batch on `-mean(log pi(a|s) A)`; the value baseline is fitted by its own Adam.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VpgConfig {
    /// Discount factor gamma.
    pub discount: f64,
    /// GAE lambda for the advantages (1.0: discounted return minus the baseline).
    pub gae_lambda: f64,
    /// Policy Adam learning rate.
    pub learning_rate: f64,
    /// Policy gradient steps per batch (garage's policy optimizer epochs).
    pub policy_epochs: u32,
    /// Value-function Adam learning rate.
    pub vf_learning_rate: f64,
    /// Value-function gradient steps per batch.
    pub vf_epochs: u32,
    /// Global gradient-norm clip for each optimizer; 0 disables clipping.
    pub clip_grad_norm: f64,
    /// Adam epsilon.
    pub adam_eps: f64,
    /// Bootstrap with the value of the final observation when an episode is truncated.
    pub bootstrap_truncation: bool,
    /// The advantage and entropy keys (`center_adv`, `positive_adv`, `entropy_method`,
    /// `policy_ent_coeff`, `use_softplus_entropy`, `stop_entropy_gradient`), written beside
    /// the section's own keys and read by the algorithm table's parser.
    #[serde(skip)]
    pub options: PgOptions,
}

impl Default for VpgConfig {
    fn default() -> Self {
        VpgConfig {
            discount: 0.99,
            gae_lambda: 1.0,
            learning_rate: 1e-2,
            policy_epochs: 1,
            vf_learning_rate: 1e-2,
            vf_epochs: 5,
            clip_grad_norm: 0.0,
            adam_eps: 1e-8,
            bootstrap_truncation: true,
            options: PgOptions::default(),
        }
    }
}

impl AlgoSection for VpgConfig {
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
        check_lambda(self.gae_lambda)?;
        check(
            self.learning_rate > 0.0,
            "algo.learning_rate",
            "must be > 0",
        )?;
        self.options.validate()
    }
}

/// The REINFORCE surrogate: its gradient is the policy gradient `-E[grad log pi(a|s) A]`.
pub fn reinforce_loss(log_prob: &Tensor, advantage: &Tensor) -> Tensor {
    -(log_prob * advantage).mean(Kind::Float)
}

/// Fits the baseline: `epochs` full-batch Adam steps on `mean((V(s) - R)^2)`; the last loss.
pub fn fit_baseline(
    model: &ActorCritic,
    optim: &mut Adam,
    obs: &Tensor,
    returns: &Tensor,
    (epochs, lr, clip_grad_norm): (u32, f64, f64),
) -> f64 {
    let mut last = 0.0;
    for _ in 0..epochs {
        let loss = (model.heads().value(obs) - returns)
            .square()
            .mean(Kind::Float);
        optim.zero_grad();
        loss.backward();
        let _ = optim.clipped_step(lr, clip_grad_norm);
        last = loss.double_value(&[]);
    }
    last
}

/// Advantages and returns for garage's policy-gradient algorithms (VPG, TRPO): the
/// max-entropy reward bonus, GAE, then centring / shifting.
pub fn pg_returns(
    model: &ActorCritic,
    batch: &RolloutBatch,
    obs: &Tensor,
    (discount, lambda, bootstrap_truncation): (f64, f64, bool),
    options: &PgOptions,
) -> (Vec<f32>, Vec<f32>) {
    let entropy = {
        let _guard = tch::no_grad_guard();
        model.heads().dist(obs).entropy()
    };
    let reward = max_entropy_rewards(&batch.reward, &entropy, options);
    let data = StepData {
        reward: &reward,
        ..batch.step_data()
    };
    let r = gae(&data, discount as f32, lambda as f32, bootstrap_truncation);
    (process_advantages(&r.advantage, options), r.returns)
}

/// VPG's learner state: separate Adams for the policy (`pi.*`, and `encoder.*` on images) and
/// the baseline (`vf.*`).
#[derive(Debug)]
pub struct Vpg {
    config: VpgConfig,
    trained: Trained<ActorCritic>,
    policy_optim: Adam,
    vf_optim: Adam,
    device: Device,
}

impl Vpg {
    /// VPG over `model`.
    pub fn new(config: &VpgConfig, model: ActorCritic) -> Vpg {
        let policy_optim = Adam::over_parts(model.var_store(), config.adam_eps, &POLICY_PARTS);
        let vf_optim = Adam::over(model.var_store(), config.adam_eps, "vf.");
        let device = model.var_store().device();
        Vpg {
            config: config.clone(),
            trained: Trained::new(model, "vpg.updates"),
            policy_optim,
            vf_optim,
            device,
        }
    }
}

impl Vpg {
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
        let advantage_t = tensor(&advantage, self.device);
        let mut policy_loss = 0.0;
        let mut entropy = 0.0;
        for _ in 0..c.policy_epochs {
            let dist = self.trained.model.heads().dist(&samples.obs);
            let h = dist.entropy();
            let loss = reinforce_loss(&dist.log_prob(&samples.action), &advantage_t)
                - entropy_bonus(&h, &options, None);
            self.policy_optim.zero_grad();
            loss.backward();
            let _ = self
                .policy_optim
                .clipped_step(c.learning_rate, c.clip_grad_norm);
            policy_loss = loss.double_value(&[]);
            entropy = h.mean(Kind::Float).double_value(&[]);
        }
        let value_loss = fit_baseline(
            &self.trained.model,
            &mut self.vf_optim,
            &samples.obs,
            &tensor(&returns, self.device),
            (c.vf_epochs, c.vf_learning_rate, c.clip_grad_norm),
        );
        self.trained.updates += 1;
        Metrics(vec![
            ("policy_loss", policy_loss),
            ("value_loss", value_loss),
            ("entropy", entropy),
            (
                "explained_variance",
                explained_variance(&batch.value, &returns),
            ),
        ])
    }
}

impl Algorithm for Vpg {
    super::algorithm_parts!(trains_on: Rollouts(rollouts), state: [policy_optim, vf_optim]);

    fn join_group(
        &mut self,
        group: &std::sync::Arc<crate::collective::Group>,
    ) -> Result<(), crate::collective::CollectiveError> {
        self.policy_optim.join(group);
        self.vf_optim.join(group);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algos::testing::{image_batch, image_model, moved, snapshot};

    /// On image observations the policy's steps train the convolutional encoder in front of
    /// both heads, as well as the heads.
    #[test]
    fn the_encoder_trains_on_images() {
        let model = image_model(5);
        let before = snapshot(&model);
        let mut vpg = Vpg::new(&VpgConfig::default(), model);
        vpg.train(&image_batch());
        for part in ["encoder.", "pi.", "vf."] {
            assert!(
                !moved(&before, &vpg.trained.model, part).is_empty(),
                "nothing under {part} moved"
            );
        }
    }

    /// The surrogate's gradient with respect to log pi is -A / N.
    #[test]
    fn reinforce_gradient_is_minus_advantage() {
        let lp = Tensor::from_slice(&[-0.5f32, -1.0]).set_requires_grad(true);
        reinforce_loss(&lp, &Tensor::from_slice(&[2.0f32, -4.0])).backward();
        let g = Vec::<f32>::try_from(&lp.grad()).unwrap();
        assert_eq!(g, vec![-1.0, 2.0]);
    }
}
