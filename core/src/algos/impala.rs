//! IMPALA's V-trace actor-critic (Espeholt et al. 2018, arXiv:1802.01561).
//!
//! Actors act with whatever weights they last received and record the behaviour
//! log-probabilities `log mu(a|s)`. The learner scores the same actions under its current
//! policy `pi`, so `log rho = log pi - log mu` measures the lag, and V-trace
//! ([`super::vtrace`]) corrects the value targets `v_s` and policy-gradient advantages for it.
//! Per batch, `epochs` (1 in the paper) gradient steps on
//! `L = -mean(log pi(a|s) A_pg) + c_v mean((V(s) - v_s)^2) - c_e mean(H)`.
//!
//! V-trace needs the learner's values: of every observation (from the forward pass), of the
//! observation after the unroll (`bootstrap_obs`, re-valued here) and, at time-limit ends, of
//! the final observation, for which the behaviour value the actor recorded stands in.

use crate::algos::config::AlgoSection;
use crate::optim::check_rule;
use crate::optim::rule;
use crate::optim::Rule;
use crate::optim::Stepping;
use serde::{Deserialize, Serialize};
use tch::{Device, Kind};

use super::pg::{explained_variance, floats, linear_schedule, tensor, Samples};
use super::returns::{normalize_advantage, StepData};
use super::vtrace::{learner_scores, vtrace, VtraceParams};
use super::{Algorithm, Metrics, Trained};
use crate::config::error::{check, ConfigError};
use crate::items::rollout::RolloutBatch;
use crate::models::ActorCritic;
use crate::optim::Adam;

/// IMPALA hyperparameters (Espeholt et al. 2018): V-trace targets against the behaviour
/// log-probabilities the actors recorded, one gradient step per batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ImpalaConfig {
    /// Discount factor gamma.
    pub discount: f64,
    /// V-trace lambda (1 in the paper).
    pub vtrace_lambda: f64,
    /// Clip of the TD importance weight, rho-bar.
    pub rho_bar: f64,
    /// Clip of the policy-gradient importance weight.
    pub pg_rho_bar: f64,
    /// Clip of the trace coefficient, c-bar.
    pub c_bar: f64,
    /// Adam learning rate at the start of training.
    pub learning_rate: f64,
    /// Decay the learning rate linearly to 0 over `stop.total_env_steps`.
    pub linear_lr_schedule: bool,
    /// Weight of the value loss (mean squared error against v_s).
    pub value_loss_coeff: f64,
    /// Weight of the entropy bonus.
    pub entropy_loss_coeff: f64,
    /// Global gradient-norm clip; 0 disables clipping.
    pub clip_grad_norm: f64,
    /// Normalise the policy-gradient advantages over the batch.
    pub normalize_advantage: bool,
    /// Gradient steps per batch (1 in the paper).
    pub epochs: u32,
    /// Adam epsilon.
    pub adam_eps: f64,
    /// Bootstrap with the value of the final observation when an episode is truncated.
    pub bootstrap_truncation: bool,
    /// The update rule: "adam" (default), "rmsprop" (the IMPALA paper's) or "sgd"; `adam_eps`
    /// is RMSprop's epsilon too.
    pub optimizer: Rule,
    /// RMSprop's smoothing constant (PyTorch's `alpha`).
    pub rmsprop_alpha: f64,
    /// SGD's momentum.
    pub sgd_momentum: f64,
}

impl ImpalaConfig {
    /// The optimiser's rule and its coefficients.
    pub fn rule(&self) -> Stepping {
        rule(self.optimizer, self.rmsprop_alpha, self.sgd_momentum)
    }
}

impl Default for ImpalaConfig {
    fn default() -> Self {
        ImpalaConfig {
            discount: 0.99,
            vtrace_lambda: 1.0,
            rho_bar: 1.0,
            pg_rho_bar: 1.0,
            c_bar: 1.0,
            learning_rate: 6e-4,
            linear_lr_schedule: false,
            value_loss_coeff: 0.5,
            entropy_loss_coeff: 0.01,
            clip_grad_norm: 40.0,
            normalize_advantage: false,
            epochs: 1,
            adam_eps: 1e-5,
            bootstrap_truncation: true,
            optimizer: Rule::Adam,
            rmsprop_alpha: 0.99,
            sgd_momentum: 0.0,
        }
    }
}

impl AlgoSection for ImpalaConfig {
    fn discount(&self) -> f64 {
        self.discount
    }

    fn validate(&self, _batch: u64) -> Result<(), ConfigError> {
        ImpalaConfig::validate(self)
    }
}

impl ImpalaConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        check(
            (0.0..=1.0).contains(&self.vtrace_lambda),
            "algo.vtrace_lambda",
            "must be in [0, 1]",
        )?;
        for (ok, key) in [
            (self.rho_bar > 0.0, "algo.rho_bar"),
            (self.pg_rho_bar > 0.0, "algo.pg_rho_bar"),
            (self.c_bar > 0.0, "algo.c_bar"),
            (self.learning_rate > 0.0, "algo.learning_rate"),
        ] {
            check(ok, key, "must be > 0")?;
        }
        check_rule(self.rmsprop_alpha, self.sgd_momentum)?;
        check(self.epochs >= 1, "algo.epochs", "must be >= 1")
    }
}

/// IMPALA's learner state.
#[derive(Debug)]
pub struct Impala {
    config: ImpalaConfig,
    trained: Trained<ActorCritic>,
    optim: Adam,
    device: Device,
    total_env_steps: u64,
}

impl Impala {
    /// IMPALA over `model`; the linear schedule spans `total_env_steps` env steps.
    pub fn new(config: &ImpalaConfig, model: ActorCritic, total_env_steps: u64) -> Impala {
        let optim = Adam::new(model.var_store(), config.adam_eps).with_rule(config.rule());
        let device = model.var_store().device();
        Impala {
            config: config.clone(),
            trained: Trained::new(model, "impala.updates"),
            optim,
            device,
            total_env_steps,
        }
    }

    fn params(&self) -> VtraceParams {
        let c = &self.config;
        VtraceParams {
            discount: c.discount as f32,
            lambda: c.vtrace_lambda as f32,
            rho_bar: c.rho_bar as f32,
            pg_rho_bar: c.pg_rho_bar as f32,
            c_bar: c.c_bar as f32,
            bootstrap_truncation: c.bootstrap_truncation,
        }
    }

    /// One gradient step; returns the loss terms and the mean importance ratio.
    fn step(&mut self, batch: &RolloutBatch, samples: &Samples, lr: f64) -> [f64; 6] {
        let c = self.config.clone();
        let (eval, bootstrap) = learner_scores(&self.trained.model, batch, samples);
        let log_rho = floats(&(&eval.log_prob - &samples.behaviour_log_prob));
        let values = floats(&eval.value);
        let data = StepData {
            value: &values,
            bootstrap_value: &bootstrap,
            ..batch.step_data()
        };
        let targets = vtrace(&data, &log_rho, &self.params());
        let advantage = if c.normalize_advantage {
            normalize_advantage(&targets.pg_advantage, None)
        } else {
            targets.pg_advantage
        };
        let pg = -(&eval.log_prob * tensor(&advantage, self.device)).mean(Kind::Float);
        let vf = (&eval.value - tensor(&targets.vs, self.device))
            .square()
            .mean(Kind::Float);
        let entropy = eval.entropy.mean(Kind::Float);
        let loss = &pg + &vf * c.value_loss_coeff - &entropy * c.entropy_loss_coeff;
        self.optim.zero_grad();
        loss.backward();
        let grad_norm = self.optim.clipped_step(lr, c.clip_grad_norm);
        let n = log_rho.len().max(1) as f64;
        let mean_ratio = log_rho.iter().map(|l| (*l as f64).exp()).sum::<f64>() / n;
        let ev = explained_variance(&values, &targets.vs);
        [
            pg.double_value(&[]),
            vf.double_value(&[]),
            entropy.double_value(&[]),
            grad_norm.double_value(&[]),
            mean_ratio,
            ev,
        ]
    }
}

impl Impala {
    /// One update on a batch of rollouts.
    pub fn train(&mut self, batch: &RolloutBatch) -> Metrics {
        let c = &self.config;
        let lr = linear_schedule(
            c.learning_rate,
            c.linear_lr_schedule,
            self.trained.env_steps,
            self.total_env_steps,
        );
        let samples = Samples::new(batch, self.device);
        let mut last = [0.0; 6];
        for _ in 0..self.config.epochs {
            last = self.step(batch, &samples, lr);
        }
        self.trained.updates += 1;
        self.trained.env_steps += batch.env_steps();
        let [pg, vf, entropy, grad_norm, mean_ratio, ev] = last;
        Metrics(vec![
            ("policy_loss", pg),
            ("value_loss", vf),
            ("entropy", entropy),
            ("grad_norm", grad_norm),
            ("learning_rate", lr),
            ("importance_ratio", mean_ratio),
            ("explained_variance", ev),
        ])
    }
}

impl Algorithm for Impala {
    super::algorithm_parts!(trains_on: Rollouts(rollouts), state: [optim]);

    fn join_group(
        &mut self,
        group: &std::sync::Arc<crate::collective::Group>,
    ) -> Result<(), crate::collective::CollectiveError> {
        self.optim.join(group);
        Ok(())
    }

    fn reconfigure(
        &mut self,
        algo: &super::config::AlgoConfig,
    ) -> Result<(), super::ReconfigureError> {
        let super::config::AlgoConfig::Impala(config) = algo else {
            return Err(super::ReconfigureError::OtherAlgorithm {
                trains: "impala",
                asked: algo.name(),
            });
        };
        self.config = config.clone();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algos::testing::{cartpole_model, tiny_batch};

    /// With behaviour log-probs equal to the learner's own, every ratio is 1.
    #[test]
    fn on_policy_batch_has_unit_ratios() {
        let mut batch = tiny_batch();
        let mut impala = Impala::new(&ImpalaConfig::default(), cartpole_model(5), 10);
        let samples = Samples::new(&batch, Device::Cpu);
        let own = {
            let _guard = tch::no_grad_guard();
            impala
                .trained
                .model
                .evaluate(&samples.obs, &samples.action)
                .log_prob
        };
        batch.log_prob = floats(&own);
        let metrics = impala.train(&batch);
        let ratio = metrics.get("importance_ratio").unwrap();
        assert!((ratio - 1.0).abs() < 1e-5, "{metrics:?}");
        assert!(metrics.get("policy_loss").unwrap().is_finite());
    }
}
