//! Behaviour cloning (garage's `BC`; Pomerleau 1991, Bain & Sammut 1995): fit the policy to
//! an expert's actions, from demo files or from an expert checkpoint the actors play.
//!
//! Losses: `log_prob` is the negative log-likelihood of the expert action (a categorical over
//! the network's logits for discrete actions; for continuous actions the exact one under a
//! squashed Gaussian policy (`policy = "gaussian"`), or, for the deterministic policy, read as
//! a unit-variance Gaussian, whose NLL is half the squared error plus a constant); `mse` is
//! the squared error between the policy's action probabilities and the expert's one-hot action
//! (discrete) or between the policy's action (the Gaussian's squashed mean) and the expert's
//! (continuous).

use crate::algos::config::AlgoSection;
use crate::algos::offpolicy::ReplayOptions;
use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor};

use super::{Algorithm, Metrics, Trained, Update};
use crate::config::error::{check, ConfigError};
use crate::items::transition::TransitionBatch;
use crate::models::{OffPolicyModel, PolicyKind};
use crate::optim::Adam;

/// The behaviour cloning loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BcLoss {
    /// Negative log-likelihood of the expert's action under the policy.
    LogProb,
    /// Squared error between the policy's mode (or its action probabilities' one-hot) and the
    /// expert's action.
    Mse,
}

/// The policy BC fits for continuous actions (garage's `BC` takes a deterministic or a
/// stochastic policy).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BcPolicy {
    /// A `tanh` policy; `log_prob` reads it as a unit-variance Gaussian.
    #[default]
    Deterministic,
    /// A `tanh`-squashed Gaussian with a learned standard deviation (SAC's policy);
    /// `log_prob` is the exact negative log-likelihood of the expert's action.
    Gaussian,
}

/// Behaviour cloning (garage's `BC`): a policy fit to an expert's actions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BcConfig {
    /// Discount (unused by the loss; kept for reports).
    pub discount: f64,
    /// Adam learning rate.
    pub learning_rate: f64,
    /// `log_prob` or `mse`.
    pub loss: BcLoss,
    /// `deterministic` or `gaussian` (continuous actions; discrete actions are always a
    /// categorical over the network's logits).
    pub policy: BcPolicy,
    /// Directory of demo files (`fleetrl record`), or a Minari dataset `minari:<id or path>`
    /// that `fleetrl train` converts, to learn from (empty: none).
    pub demos: Option<String>,
    /// An expert checkpoint the actors play (its actions are the labels) instead of demos
    /// (empty: none).
    pub expert_checkpoint: Option<String>,
    /// Updates between weight publications to the actors.
    pub publish_interval: u64,
    /// The replay table (demo steps or expert-labelled steps).
    pub replay: ReplayOptions,
}

impl Default for BcConfig {
    fn default() -> Self {
        BcConfig {
            discount: 0.99,
            learning_rate: 1e-3,
            loss: BcLoss::LogProb,
            policy: BcPolicy::Deterministic,
            demos: None,
            expert_checkpoint: None,
            publish_interval: 1,
            replay: ReplayOptions {
                samples_per_insert: 8.0,
                min_size: 500,
                ..ReplayOptions::default()
            },
        }
    }
}

impl AlgoSection for BcConfig {
    fn discount(&self) -> f64 {
        self.discount
    }

    fn validate(&self, _batch: u64) -> Result<(), ConfigError> {
        BcConfig::validate(self)
    }
}

impl BcConfig {
    /// The demo directory, if one is set (an empty string is none).
    pub fn demo_dir(&self) -> Option<&str> {
        self.demos.as_deref().filter(|d| !d.is_empty())
    }

    /// The expert checkpoint, if one is set (an empty string is none).
    pub fn expert(&self) -> Option<&str> {
        self.expert_checkpoint.as_deref().filter(|d| !d.is_empty())
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        check(
            self.learning_rate > 0.0,
            "algo.learning_rate",
            "must be > 0",
        )?;
        check(
            self.demo_dir().is_some() != self.expert().is_some(),
            "algo.demos",
            "set exactly one of algo.demos (a directory of demo files) and algo.expert_checkpoint",
        )?;
        check(
            self.replay.initial_demo_dir().is_none(),
            "algo.replay.initial_demos",
            "BC learns from algo.demos; set the demos there",
        )?;
        self.replay.validate()
    }
}

/// The BC loss of `model` on expert `action`s (indices, or env-scale values) at `obs`,
/// averaged over rows.
pub fn bc_loss(model: &OffPolicyModel, obs: &Tensor, action: &Tensor, loss: BcLoss) -> Tensor {
    if loss == BcLoss::LogProb {
        // The policy's own likelihood where it has one (a softmax over Q values, a squashed
        // Gaussian); a deterministic policy falls through to the unit-variance reading.
        let taken = match model.kind() {
            PolicyKind::QValues | PolicyKind::Categorical => Some(action.shallow_clone()),
            PolicyKind::SquashedGaussian => Some(model.to_unit_scale(action)),
            PolicyKind::Deterministic => None,
        };
        if let Some((log_prob, _)) = taken.and_then(|a| model.evaluate_actions(obs, &a)) {
            return -log_prob.mean(Kind::Float);
        }
    }
    if model.kind() == PolicyKind::QValues {
        let probs = model.q_values(obs).softmax(-1, Kind::Float);
        let one_hot = action.one_hot(probs.size()[1]).to_kind(Kind::Float);
        return (probs - one_hot)
            .square()
            .sum_dim_intlist(-1, false, Kind::Float)
            .mean(Kind::Float);
    }
    let predicted = model.to_env_scale(&model.mean_action(obs));
    let sq = (predicted - action)
        .square()
        .sum_dim_intlist(-1, false, Kind::Float)
        .mean(Kind::Float);
    match loss {
        BcLoss::LogProb => sq * 0.5,
        BcLoss::Mse => sq,
    }
}

/// BC's learner state.
#[derive(Debug)]
pub struct Bc {
    config: BcConfig,
    trained: Trained<OffPolicyModel>,
    optim: Adam,
}

impl Bc {
    /// BC over `model`.
    pub fn new(config: &BcConfig, model: OffPolicyModel) -> Bc {
        let optim = Adam::new(model.var_store(), 1e-8);
        Bc {
            config: config.clone(),
            trained: Trained::new(model, "updates"),
            optim,
        }
    }
}

impl Bc {
    /// One update on a batch of transitions.
    pub fn train(&mut self, batch: &TransitionBatch) -> Update {
        self.trained.model.observe(&batch.obs);
        let loss = bc_loss(
            &self.trained.model,
            &batch.obs,
            &batch.action,
            self.config.loss,
        );
        self.optim.zero_grad();
        loss.backward();
        self.optim.step(self.config.learning_rate);
        self.trained.updates += 1;
        Update {
            metrics: Metrics(vec![("bc_loss", loss.double_value(&[]))]),
            td_errors: None,
        }
    }
}

impl Algorithm for Bc {
    super::algorithm_parts!(trains_on: Transitions(transitions), state: [optim]);

    fn join_group(
        &mut self,
        group: &std::sync::Arc<crate::collective::Group>,
    ) -> Result<(), crate::collective::CollectiveError> {
        self.optim.join(group);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ModelConfig;
    use fleetrl_proto::space::Space;

    /// The expert's `action`s at `obs` as a training batch (BC reads only these two).
    fn expert_batch(obs: &Tensor, action: &Tensor) -> TransitionBatch {
        let rows = obs.size()[0];
        TransitionBatch {
            obs: obs.shallow_clone(),
            action: action.shallow_clone(),
            reward: Tensor::zeros([rows], (Kind::Float, tch::Device::Cpu)),
            discount: Tensor::zeros([rows], (Kind::Float, tch::Device::Cpu)),
            next_obs: obs.shallow_clone(),
            weights: Tensor::ones([rows], (Kind::Float, tch::Device::Cpu)),
        }
    }

    #[test]
    fn log_prob_loss_is_the_cross_entropy_and_training_fits_the_expert() {
        let obs_space = Space::Box {
            shape: vec![2],
            low: vec![-1.0; 2],
            high: vec![1.0; 2],
        };
        let model = OffPolicyModel::new(
            &ModelConfig::default(),
            PolicyKind::QValues,
            1,
            &obs_space,
            &Space::Discrete { n: 2 },
            tch::Device::Cpu,
        )
        .unwrap();
        let obs = Tensor::from_slice(&[1.0f32, 0.0, -1.0, 0.0]).view([2, 2]);
        let action = Tensor::from_slice(&[1i64, 0]);
        let logits = model.q_values(&obs);
        let expected = logits.cross_entropy_for_logits(&action).double_value(&[]);
        let got = bc_loss(&model, &obs, &action, BcLoss::LogProb).double_value(&[]);
        assert!((got - expected).abs() < 1e-6);
        let mut bc = Bc::new(&BcConfig::default(), model);
        let batch = expert_batch(&obs, &action);
        for _ in 0..200 {
            bc.train(&batch);
        }
        let greedy = bc.trained.model.q_values(&obs).argmax(1, false);
        assert_eq!(Vec::<i64>::try_from(&greedy).unwrap(), vec![1, 0]);
    }

    /// `policy = "gaussian"`: the loss is the exact negative log-likelihood of the expert's
    /// (env-scale) action, and training moves the squashed mean onto it and narrows the
    /// Gaussian.
    #[test]
    fn gaussian_bc_fits_the_expert_by_its_likelihood() {
        tch::manual_seed(3);
        let obs_space = Space::Box {
            shape: vec![2],
            low: vec![-1.0; 2],
            high: vec![1.0; 2],
        };
        let action_space = Space::Box {
            shape: vec![1],
            low: vec![-2.0],
            high: vec![2.0],
        };
        let model = OffPolicyModel::new(
            &ModelConfig::default(),
            PolicyKind::SquashedGaussian,
            1,
            &obs_space,
            &action_space,
            tch::Device::Cpu,
        )
        .unwrap();
        let obs = Tensor::from_slice(&[1.0f32, 0.0, -1.0, 0.0]).view([2, 2]);
        let expert = Tensor::from_slice(&[1.0f32, -0.5]).view([2, 1]);
        let unit = &expert / 2.0;
        let (log_prob, _) = model.evaluate_actions(&obs, &unit).unwrap();
        let got = bc_loss(&model, &obs, &expert, BcLoss::LogProb).double_value(&[]);
        assert!((got + log_prob.mean(Kind::Float).double_value(&[])).abs() < 1e-6);
        let before = got;
        let config = BcConfig {
            policy: crate::config::BcPolicy::Gaussian,
            ..BcConfig::default()
        };
        let mut bc = Bc::new(&config, model);
        let batch = expert_batch(&obs, &expert);
        // Most initialisations land within 1e-3 by 2,000 steps; a few (the seed is global,
        // so tests running beside this one change it) are still narrowing the Gaussian there.
        // 4,000 steps and a bound of 2.5% of the action range held on 61 seeds (worst 0.06).
        for _ in 0..4_000 {
            bc.train(&batch);
        }
        let model = &bc.trained.model;
        let after = bc_loss(model, &obs, &expert, BcLoss::LogProb).double_value(&[]);
        assert!(after < before - 1.0, "NLL {before} -> {after}");
        let mean = model.to_env_scale(&model.mean_action(&obs));
        let error = (mean - &expert).abs().max().double_value(&[]);
        assert!(error < 0.1, "squashed mean is {error} from the expert");
    }
}
