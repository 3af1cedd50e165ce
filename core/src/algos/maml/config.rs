//! MAML's `[algo]` section, shared by `maml_vpg`, `maml_ppo` and `maml_trpo` (garage's
//! `MAMLVPG`, `MAMLPPO`, `MAMLTRPO`): the names decide the outer optimiser, the keys are the
//! seed's.

use crate::algos::config::AlgoSection;
use serde::{Deserialize, Serialize};

use crate::algos::pg::PgOptions;
use crate::config::error::{check, ConfigError};

/// Which optimiser takes MAML's outer (meta) step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MetaOptimizer {
    /// One Adam step on `-mean(log pi_phi(a|s) A)` (MAML-VPG).
    #[default]
    Vpg,
    /// `num_ppo_steps` Adam steps on the clipped likelihood-ratio surrogate (MAML-PPO).
    Ppo,
    /// A KL-constrained natural-gradient step (MAML-TRPO).
    Trpo,
}

/// MAML hyperparameters (Finn et al. 2017; garage's `MAML` and its three subclasses).
///
/// A meta-batch is `meta_batch_size` tasks (`learner.batch_rollouts` follows it). For each,
/// an actor collects `actors.envs_per_actor` episodes of `actors.rollout_length` steps with
/// the meta-policy, adapts by `num_grad_updates` SGD steps of size `inner_lr` on the
/// policy-gradient loss, and collects as many episodes after each step; the learner repeats
/// the adaptation differentiably and takes outer steps on the post-adaptation episodes (one
/// for maml_vpg and maml_trpo, `num_ppo_steps` for maml_ppo).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MamlConfig {
    /// The outer step, from the name the section was read under (`maml_vpg`, `maml_ppo`,
    /// `maml_trpo`); not a key.
    #[serde(skip)]
    pub outer: MetaOptimizer,
    /// Discount factor gamma.
    pub discount: f64,
    /// GAE lambda for the advantages against the linear-feature baseline.
    pub gae_lambda: f64,
    /// Tasks per meta-batch (one rollout item each).
    pub meta_batch_size: u32,
    /// Step size of the inner (adaptation) SGD steps.
    pub inner_lr: f64,
    /// Learning rate of the outer Adam step (maml_vpg, maml_ppo).
    pub outer_lr: f64,
    /// Adaptation steps per task.
    pub num_grad_updates: u32,
    /// Meta-evaluate on the held-out test tasks (`fleetrl train`'s evaluations adapt on
    /// each test task and report the return before and after every adaptation step).
    pub meta_evaluator: bool,
    /// Meta-iterations between `fleetrl train`'s evaluations (0: `eval.interval_env_steps`).
    pub evaluate_every_n_epochs: u32,
    /// maml_ppo: the likelihood ratio's clip range (default 0.5).
    pub lr_clip_range: Option<f64>,
    /// maml_ppo: Adam steps on each meta-batch (default 5, ProMP's `num_ppo_steps`), each
    /// redoing the inner steps from the updated meta-policy; the clip binds from the second
    /// (at the first the ratio is 1, and the step is MAML-VPG's).
    pub num_ppo_steps: Option<u32>,
    /// maml_trpo: the KL limit of a meta step (default 0.01).
    pub max_kl_step: Option<f64>,
    /// maml_trpo: conjugate-gradient iterations.
    pub cg_iters: u32,
    /// maml_trpo: damping added to the Fisher-vector product.
    pub cg_damping: f64,
    /// maml_trpo: step shrink factor of the line search.
    pub backtrack_ratio: f64,
    /// maml_trpo: line-search steps before the meta step is rejected.
    pub max_backtracks: u32,
    /// Ridge coefficient of the linear-feature baseline fit (garage's `reg_coeff`).
    pub baseline_reg_coeff: f64,
    /// Adam epsilon.
    pub adam_eps: f64,
    /// The advantage and entropy keys (`center_adv`, `positive_adv`, `entropy_method`,
    /// `policy_ent_coeff`, `use_softplus_entropy`, `stop_entropy_gradient`), written beside
    /// the section's own keys and read by the algorithm table's parser.
    #[serde(skip)]
    pub options: PgOptions,
}

impl Default for MamlConfig {
    fn default() -> Self {
        MamlConfig {
            outer: MetaOptimizer::Vpg,
            discount: 0.99,
            gae_lambda: 1.0,
            meta_batch_size: 20,
            inner_lr: 0.1,
            outer_lr: 1e-3,
            num_grad_updates: 1,
            meta_evaluator: true,
            evaluate_every_n_epochs: 0,
            lr_clip_range: None,
            num_ppo_steps: None,
            max_kl_step: None,
            cg_iters: 10,
            cg_damping: 1e-5,
            backtrack_ratio: 0.8,
            max_backtracks: 15,
            baseline_reg_coeff: 1e-5,
            adam_eps: 1e-8,
            options: PgOptions::default(),
        }
    }
}

impl AlgoSection for MamlConfig {
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
        MamlConfig::validate(self)
    }

    fn parsed_as(&mut self, name: &'static str) {
        self.outer = match name {
            "maml_ppo" => MetaOptimizer::Ppo,
            "maml_trpo" => MetaOptimizer::Trpo,
            _ => MetaOptimizer::Vpg,
        };
    }
}

impl MamlConfig {
    /// PPO's clip range (0.5 unless set).
    pub fn clip_range(&self) -> f64 {
        self.lr_clip_range.unwrap_or(0.5)
    }

    /// PPO's Adam steps per meta-batch (5 unless set).
    pub fn ppo_steps(&self) -> u32 {
        self.num_ppo_steps.unwrap_or(5)
    }

    /// TRPO's KL limit (0.01 unless set).
    pub fn kl_limit(&self) -> f64 {
        self.max_kl_step.unwrap_or(0.01)
    }

    /// Checks ranges, and refuses the other variants' keys by name.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let outer = self.outer;
        check(
            (0.0..=1.0).contains(&self.gae_lambda),
            "algo.gae_lambda",
            "must be in [0, 1]",
        )?;
        check(
            self.meta_batch_size >= 1,
            "algo.meta_batch_size",
            "must be >= 1",
        )?;
        check(self.inner_lr > 0.0, "algo.inner_lr", "must be > 0")?;
        check(self.outer_lr > 0.0, "algo.outer_lr", "must be > 0")?;
        check(
            (1..=10).contains(&self.num_grad_updates),
            "algo.num_grad_updates",
            "must be in 1..=10",
        )?;
        check(
            self.lr_clip_range.is_none() || outer == MetaOptimizer::Ppo,
            "algo.lr_clip_range",
            "is maml_ppo's key",
        )?;
        check(
            self.num_ppo_steps.is_none() || outer == MetaOptimizer::Ppo,
            "algo.num_ppo_steps",
            "is maml_ppo's key",
        )?;
        check(self.ppo_steps() >= 1, "algo.num_ppo_steps", "must be >= 1")?;
        check(
            self.max_kl_step.is_none() || outer == MetaOptimizer::Trpo,
            "algo.max_kl_step",
            "is maml_trpo's key",
        )?;
        check(self.clip_range() > 0.0, "algo.lr_clip_range", "must be > 0")?;
        check(self.kl_limit() > 0.0, "algo.max_kl_step", "must be > 0")?;
        check(
            self.baseline_reg_coeff > 0.0,
            "algo.baseline_reg_coeff",
            "must be > 0",
        )?;
        self.options.validate()
    }
}
