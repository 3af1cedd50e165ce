//! Advantage Actor-Critic (Mnih et al. 2016, arXiv:1602.01783, synchronous form; rlpyt's
//! `A2C`).
//!
//! Per batch: returns by GAE (lambda = 1 gives n-step returns) from the behaviour values, then
//! one gradient step on `L = -mean(log pi(a|s) A) + c_v mean((V(s) - R)^2) - c_e mean(H)`.
//! With actors at most a version behind, the data is nearly on-policy; `[algo.vtrace]` corrects
//! the lag with V-trace targets in place of GAE ([`super::vtrace::vtrace_returns`]).

use crate::algos::config::AlgoSection;
use crate::algos::intrinsic::IntrinsicConfig;
use crate::algos::pg::check_lambda;
use crate::algos::vtrace::VtraceClips;
use crate::config::error::check;
use crate::config::error::ConfigError;
use crate::optim::check_rule;
use crate::optim::rule;
use crate::optim::Rule;
use crate::optim::Stepping;
use serde::{Deserialize, Serialize};
use tch::{Device, Tensor};

use super::intrinsic::Intrinsic;
use super::pg::{explained_variance, linear_schedule, masked_mean, targets, tensor, Samples};
use super::returns::normalize_advantage;
use super::{Algorithm, Metrics, Trained};

use crate::items::rollout::RolloutBatch;
use crate::models::ActorCritic;
use crate::optim::Adam;

/// A2C hyperparameters (rlpyt's `A2C`; SB3's defaults where rlpyt has none).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct A2cConfig {
    /// Discount factor gamma.
    pub discount: f64,
    /// GAE lambda; 1.0 (the default) gives n-step discounted returns.
    pub gae_lambda: f64,
    /// Adam learning rate at the start of training.
    pub learning_rate: f64,
    /// Decay the learning rate linearly to 0 over `stop.total_env_steps`.
    pub linear_lr_schedule: bool,
    /// Weight of the value loss (mean squared error against the return).
    pub value_loss_coeff: f64,
    /// Weight of the entropy bonus.
    pub entropy_loss_coeff: f64,
    /// Global gradient-norm clip; 0 disables clipping.
    pub clip_grad_norm: f64,
    /// Normalise advantages over the batch (mean 0, std 1).
    pub normalize_advantage: bool,
    /// Adam epsilon.
    pub adam_eps: f64,
    /// Bootstrap with the value of the final observation when an episode is truncated.
    pub bootstrap_truncation: bool,
    /// The update rule: "adam" (default), "rmsprop" (rlpyt's A2C choice) or "sgd"; `adam_eps`
    /// is RMSprop's epsilon too.
    pub optimizer: Rule,
    /// RMSprop's smoothing constant (PyTorch's `alpha`).
    pub rmsprop_alpha: f64,
    /// SGD's momentum.
    pub sgd_momentum: f64,
    /// V-trace targets instead of GAE (`[algo.vtrace]`, present: on), with `gae_lambda` as
    /// the trace's lambda.
    pub vtrace: Option<VtraceClips>,
    /// Intrinsic rewards by random network distillation (`[algo.intrinsic]`, present: on).
    pub intrinsic: Option<IntrinsicConfig>,
}

impl A2cConfig {
    /// The optimiser's rule and its coefficients.
    pub fn rule(&self) -> Stepping {
        rule(self.optimizer, self.rmsprop_alpha, self.sgd_momentum)
    }
}

impl Default for A2cConfig {
    fn default() -> Self {
        A2cConfig {
            discount: 0.99,
            gae_lambda: 1.0,
            learning_rate: 7e-4,
            linear_lr_schedule: false,
            value_loss_coeff: 0.5,
            entropy_loss_coeff: 0.01,
            clip_grad_norm: 0.5,
            normalize_advantage: false,
            adam_eps: 1e-5,
            bootstrap_truncation: true,
            optimizer: Rule::Adam,
            rmsprop_alpha: 0.99,
            sgd_momentum: 0.0,
            vtrace: None,
            intrinsic: None,
        }
    }
}

impl AlgoSection for A2cConfig {
    fn discount(&self) -> f64 {
        self.discount
    }

    fn validate(&self, _batch: u64) -> Result<(), ConfigError> {
        check_lambda(self.gae_lambda)?;
        check_rule(self.rmsprop_alpha, self.sgd_momentum)?;
        self.vtrace.as_ref().map_or(Ok(()), VtraceClips::validate)?;
        self.intrinsic
            .as_ref()
            .map_or(Ok(()), IntrinsicConfig::validate)?;
        check(
            self.learning_rate > 0.0,
            "algo.learning_rate",
            "must be > 0",
        )
    }
}

/// The actor-critic loss terms: policy gradient, value regression, entropy, as means over
/// the `valid` rows (all of them when `None`).
pub fn a2c_loss(
    log_prob: &Tensor,
    advantage: &Tensor,
    value: &Tensor,
    returns: &Tensor,
    entropy: &Tensor,
    valid: Option<&Tensor>,
) -> [Tensor; 3] {
    let pg = -masked_mean(&(log_prob * advantage), valid);
    let vf = masked_mean(&(value - returns).square(), valid);
    [pg, vf, masked_mean(entropy, valid)]
}

/// A2C's learner state.
#[derive(Debug)]
pub struct A2c {
    config: A2cConfig,
    trained: Trained<ActorCritic>,
    optim: Adam,
    device: Device,
    total_env_steps: u64,
    /// RND's networks when `[algo.intrinsic]` is on.
    intrinsic: Option<Intrinsic>,
}

impl A2c {
    /// A2C over `model`; the linear schedule spans `total_env_steps` env steps.
    pub fn new(config: &A2cConfig, model: ActorCritic, total_env_steps: u64) -> A2c {
        let optim = Adam::new(model.var_store(), config.adam_eps).with_rule(config.rule());
        let device = model.var_store().device();
        A2c {
            config: config.clone(),
            trained: Trained::new(model, "a2c.updates"),
            optim,
            device,
            total_env_steps,
            intrinsic: None,
        }
    }

    /// Adds the intrinsic-reward networks `[algo.intrinsic]` asks for, for observations
    /// `obs_dim` wide.
    pub fn with_intrinsic(mut self, obs_dim: i64) -> A2c {
        self.intrinsic =
            (self.config.intrinsic.as_ref()).map(|c| Intrinsic::new(c, obs_dim, self.device));
        self
    }
}

impl A2c {
    /// One update on a batch of rollouts.
    pub fn train(&mut self, batch: &RolloutBatch) -> Metrics {
        let c = &self.config;
        let targets = targets(
            &self.trained.model,
            self.intrinsic.as_ref(),
            batch,
            &batch.step_data(),
            (c.discount, c.gae_lambda, c.bootstrap_truncation),
            c.vtrace.as_ref(),
        );
        let returns = &targets.returns;
        let advantage = if c.normalize_advantage {
            normalize_advantage(&returns.advantage, batch.valid.as_deref())
        } else {
            returns.advantage.clone()
        };
        let valid = batch.valid.as_ref().map(|v| tensor(v, self.device));
        let samples = Samples::new(batch, self.device);
        // A recurrent model unrolls its core over the rollout's columns from their states.
        let heads = self.trained.model.heads();
        let eval = match super::pg::sequence(batch, self.device) {
            None => heads.evaluate(&samples.obs, &samples.action),
            Some(seq) => heads.evaluate_sequence(&samples.obs, &samples.action, &seq),
        };
        let [pg, vf, entropy] = a2c_loss(
            &eval.log_prob,
            &tensor(&advantage, self.device),
            &eval.value,
            &tensor(&returns.returns, self.device),
            &eval.entropy,
            valid.as_ref(),
        );
        let loss = &pg + &vf * c.value_loss_coeff - &entropy * c.entropy_loss_coeff;
        let lr = linear_schedule(
            c.learning_rate,
            c.linear_lr_schedule,
            self.trained.env_steps,
            self.total_env_steps,
        );
        self.optim.zero_grad();
        loss.backward();
        let grad_norm = self.optim.clipped_step(lr, c.clip_grad_norm);
        self.trained.updates += 1;
        self.trained.env_steps += batch.env_steps();
        let mut metrics = Metrics(vec![
            ("policy_loss", pg.double_value(&[])),
            ("value_loss", vf.double_value(&[])),
            ("entropy", entropy.double_value(&[])),
            ("grad_norm", grad_norm.double_value(&[])),
            ("learning_rate", lr),
            (
                "explained_variance",
                explained_variance(&batch.value, &returns.returns),
            ),
        ]);
        targets.finish(self.intrinsic.as_mut(), lr, &mut metrics);
        metrics
    }
}

impl Algorithm for A2c {
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
        let super::config::AlgoConfig::A2c(config) = algo else {
            return Err(super::ReconfigureError::OtherAlgorithm {
                trains: "a2c",
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

    // log-probs -1, -2 with advantages 1, -1: pg = -(-1 + 2) / 2 = -0.5;
    // values 0, 1 against returns 1, 1: vf = (1 + 0) / 2 = 0.5.
    #[test]
    fn a2c_loss_by_hand() {
        let f = |v: &[f32]| Tensor::from_slice(v);
        let terms = |valid: Option<&Tensor>| -> Vec<f64> {
            let losses = a2c_loss(
                &f(&[-1.0, -2.0]),
                &f(&[1.0, -1.0]),
                &f(&[0.0, 1.0]),
                &f(&[1.0, 1.0]),
                &f(&[0.5, 0.7]),
                valid,
            );
            losses.iter().map(|t| t.double_value(&[])).collect()
        };
        let close =
            |got: Vec<f64>, want: [f64; 3]| got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-6);
        assert!(close(terms(None), [-0.5, 0.5, 0.6]));
        // Row 2 as padding (`mid_batch_reset = false`): the means are row 1's terms.
        assert!(close(terms(Some(&f(&[1.0, 0.0]))), [1.0, 1.0, 0.5]));
    }

    /// `mid_batch_reset = false`: what the padding rows hold changes nothing (advantages are
    /// normalised over the counted rows too); without the mask it does.
    #[test]
    fn padding_rows_do_not_reach_the_update() {
        use crate::algos::testing::{cartpole_model, padded_twins, same_parameters};
        let (batch, twin) = padded_twins();
        let start = cartpole_model(5).named_parameters();
        let trained = |batch: &RolloutBatch| {
            let mut model = cartpole_model(0);
            model.load_named(&start).unwrap();
            let mut a2c = A2c::new(&A2cConfig::default(), model, 1_000);
            a2c.train(batch);
            a2c
        };
        assert!(same_parameters(
            &trained(&batch).trained.model,
            &trained(&twin).trained.model
        ));
        let unmasked = |b: &RolloutBatch| RolloutBatch {
            valid: None,
            ..b.clone()
        };
        assert!(!same_parameters(
            &trained(&unmasked(&batch)).trained.model,
            &trained(&unmasked(&twin)).trained.model
        ));
    }

    /// `[algo.intrinsic]` on A2C: the update reports RND's metrics and its networks go into the
    /// checkpoint state, from which a fresh learner restores them.
    #[test]
    fn a2c_with_intrinsic_rewards_trains_and_checkpoints_rnd() {
        let config = A2cConfig {
            intrinsic: Some(crate::config::IntrinsicConfig::default()),
            ..A2cConfig::default()
        };
        let model = || crate::algos::testing::cartpole_model(1);
        let mut a2c = A2c::new(&config, model(), 1_000).with_intrinsic(4);
        let metrics = a2c.train(&crate::algos::testing::tiny_batch());
        assert!(
            metrics.get("intrinsic_reward").unwrap() > 0.0,
            "{metrics:?}"
        );
        assert!(metrics.get("rnd_loss").unwrap().is_finite());
        let state = a2c.state();
        assert!(state
            .iter()
            .any(|(n, _)| n == "intrinsic.train.predictor.out.weight"));
        let mut fresh = A2c::new(&config, model(), 1_000).with_intrinsic(4);
        fresh.load_state(&state).unwrap();
        let without = A2c::new(&A2cConfig::default(), model(), 1_000).state();
        assert!(!without.iter().any(|(n, _)| n.starts_with("intrinsic.")));
    }

    /// A recurrent model trains through its core, unrolled from each rollout's stored state:
    /// the loss depends on that state, and the LSTM's weights move.
    #[test]
    fn recurrent_a2c_unrolls_from_the_stored_state() {
        let recurrent = || {
            tch::manual_seed(3);
            let obs = fleetrl_proto::space::Space::Box {
                shape: vec![4],
                low: vec![-1.0; 4],
                high: vec![1.0; 4],
            };
            let config = crate::config::ModelConfig {
                lstm_size: 8,
                ..crate::config::ModelConfig::default()
            };
            let space = fleetrl_proto::space::Space::Discrete { n: 2 };
            ActorCritic::new(&config, &obs, &space, Device::Cpu).unwrap()
        };
        let core_weights = |a2c: &A2c| -> Vec<f32> {
            let named = a2c.trained.model.named_parameters().into_iter();
            named
                .filter(|(n, _)| n.starts_with("core."))
                .flat_map(|(_, t)| Vec::<f32>::try_from(t.reshape([-1])).unwrap())
                .collect()
        };
        let loss_from = |state: f32| {
            let mut batch = crate::algos::testing::tiny_batch();
            batch.init_state = Some((vec![state; 2 * 8], vec![state; 2 * 8]));
            let mut a2c = A2c::new(&A2cConfig::default(), recurrent(), 1_000);
            let before = core_weights(&a2c);
            let metrics = a2c.train(&batch);
            let after = core_weights(&a2c);
            assert!(
                !before.is_empty() && before != after,
                "the LSTM did not train"
            );
            metrics.get("value_loss").unwrap()
        };
        assert_ne!(
            loss_from(0.0),
            loss_from(0.5),
            "the stored state was ignored"
        );
    }
}
