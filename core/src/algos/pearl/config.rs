//! PEARL's `[algo]` keys (Rakelly et al. 2019; garage's `PEARL`).

use crate::algos::config::AlgoSection;
use crate::algos::offpolicy::ReplayOptions;
use serde::{Deserialize, Serialize};

use crate::config::error::{check, ConfigError};

/// PEARL hyperparameters (Rakelly et al. 2019, arXiv:1903.08254; garage's `PEARL`, keys with
/// the seed's names). The training tasks and the held-out test tasks are `[tasks]`.
///
/// An actor collects *rounds*: one training task, drawn per round, played for
/// `num_steps_prior` steps with `z` drawn from the prior, `num_steps_posterior` steps with `z`
/// drawn from the posterior over the context collected so far in the round (refreshed every
/// `update_post_train` episodes), and `num_extra_rl_steps_posterior` more steps the same way
/// that serve the critic but not the encoder. A round is one replay item carrying its task id;
/// its prior and posterior steps are the task's context (garage clears a task's context buffer
/// whenever it collects for the task again: the latest round is what it holds).
///
/// Each update samples `meta_batch_size` rounds and, for each, `embedding_batch_size` context
/// transitions and `batch_size` transitions for the actor-critic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PearlConfig {
    /// Size of the latent task variable `z`.
    pub latent_dim: u32,
    /// Hidden layers of the context encoder.
    pub encoder_hidden_sizes: Vec<i64>,
    /// Learning rate of the policy.
    pub policy_lr: f64,
    /// Learning rate of the two Q functions.
    pub qf_lr: f64,
    /// Learning rate of the value function.
    pub vf_lr: f64,
    /// Learning rate of the context encoder.
    pub context_lr: f64,
    /// Weight of `mean(mu^2)` of the policy's pre-squash mean in its loss.
    pub policy_mean_reg_coeff: f64,
    /// Weight of `mean(log_std^2)` in the policy's loss.
    pub policy_std_reg_coeff: f64,
    /// Weight of `mean(sum(pre_tanh^2))` of the policy's pre-squash sample in its loss.
    pub policy_pre_activation_coeff: f64,
    /// Polyak rate of the target value function.
    pub soft_target_tau: f64,
    /// Weight of the KL divergence of the posteriors from the prior (information bottleneck).
    pub kl_lambda: f64,
    /// Infer a Gaussian posterior (product of per-transition Gaussians) and sample `z` from it;
    /// false: `z` is the mean of the encoder's per-transition outputs.
    pub use_information_bottleneck: bool,
    /// Put the next observation in the context (for tasks that change the dynamics).
    pub use_next_obs_in_context: bool,
    /// Rounds (tasks) per update.
    pub meta_batch_size: u32,
    /// Gradient updates per `num_tasks_sample` rounds collected (garage: per epoch).
    pub num_steps_per_epoch: u32,
    /// Env steps collected per training task before the first update (garage's meaning):
    /// the table waits for `num_initial_steps x tasks.num_train` env steps of rounds. Actors
    /// draw a task per round, so each task gets that many on average.
    pub num_initial_steps: u64,
    /// Rounds collected per `num_steps_per_epoch` updates (garage: tasks sampled per epoch).
    pub num_tasks_sample: u32,
    /// Steps of a round acted with `z` from the prior (context for the encoder).
    pub num_steps_prior: u32,
    /// Steps of a round acted with `z` from the posterior (context for the encoder).
    pub num_steps_posterior: u32,
    /// Steps of a round acted with `z` from the posterior, for the actor-critic only.
    pub num_extra_rl_steps_posterior: u32,
    /// Transitions per task for the actor-critic in one update.
    pub batch_size: u32,
    /// Context transitions per task in one update.
    pub embedding_batch_size: u32,
    /// Context transitions per task per encoder pass: an update takes
    /// `embedding_batch_size / embedding_mini_batch_size` gradient steps.
    pub embedding_mini_batch_size: u32,
    /// Discount factor gamma.
    pub discount: f64,
    /// Transitions the replay table holds, all tasks together (whole rounds are evicted,
    /// oldest first).
    pub replay_buffer_size: u64,
    /// Rewards are multiplied by this in the Bellman target (SAC's temperature, inverted).
    pub reward_scale: f64,
    /// The critics' Bellman target takes the step's score (what the context encoder sees:
    /// the sparse reward of a sparse task) in place of the env's reward (false: the env's
    /// reward, as garage and the PEARL paper's code train, dense on the sparse point robot).
    pub critic_on_score: bool,
    /// Share of the rounds in each update given, in hindsight, a goal one of their steps
    /// reached, with their rewards and scores recomputed for it (hindsight task relabelling,
    /// [`crate::envs::hindsight_goals`]); 0: none, as garage and the PEARL paper. Needs a task
    /// family whose goals the learner knows how to score: PointRobotSparse-v0.
    pub relabel_fraction: f64,
    /// Episodes between posterior updates while collecting with the posterior.
    pub update_post_train: u32,
    /// Meta-test: episodes played on an unseen task before the adapted one, each with its
    /// own `z` from the prior; the adapted one uses the posterior over all of them (garage's
    /// `MetaEvaluator.n_exploration_eps`, oyster's `num_exp_traj_eval`).
    pub n_exploration_eps: u32,
    /// Meta-test: draw each exploration episode's `z` from the posterior of one of the last
    /// this many training contexts the learner encoded (their mixture: the distribution of
    /// task beliefs the policy was trained on, a learned prior), in place of the prior
    /// `N(0, I)`; 0: from the prior, as garage and the PEARL paper. The prior covers the
    /// training tasks only as far as the information bottleneck pulled their posteriors onto
    /// it; on the sparse point robot it often misses a whole arc of goals. The pool is part of
    /// the model: it travels with the weights and into checkpoints.
    pub exploration_pool: u32,
    /// Meta-test: episodes after the exploration ones and before the adapted one, each with
    /// `z` drawn from the posterior over every transition of the task so far, so each searches
    /// where the belief points and adds what it found (0: none, garage's meta-test). Oyster
    /// meta-tests this way after its `num_exp_traj_eval` episodes, up to `num_steps_per_eval`
    /// steps (400 on the sparse point robot: 5 exploration and 15 posterior episodes).
    pub n_posterior_eps: u32,
    /// Updates between weight publications to the actors (1: after every update). Each
    /// publication exports the weights, which on a GPU learner costs more than a graphed
    /// update (2.4 ms against 1.2 ms for `point-robot-sparse-pearl` on an H200).
    pub publish_interval: u64,
}

/// The most training posteriors `algo.exploration_pool` may keep.
const MAX_EXPLORATION_POOL: u32 = 65_536;

impl Default for PearlConfig {
    fn default() -> Self {
        PearlConfig {
            latent_dim: 5,
            encoder_hidden_sizes: vec![200, 200, 200],
            policy_lr: 3e-4,
            qf_lr: 3e-4,
            vf_lr: 3e-4,
            context_lr: 3e-4,
            policy_mean_reg_coeff: 1e-3,
            policy_std_reg_coeff: 1e-3,
            policy_pre_activation_coeff: 0.0,
            soft_target_tau: 0.005,
            kl_lambda: 0.1,
            use_information_bottleneck: true,
            use_next_obs_in_context: false,
            meta_batch_size: 64,
            num_steps_per_epoch: 1000,
            num_initial_steps: 100,
            num_tasks_sample: 100,
            num_steps_prior: 100,
            num_steps_posterior: 0,
            num_extra_rl_steps_posterior: 100,
            batch_size: 1024,
            embedding_batch_size: 1024,
            embedding_mini_batch_size: 1024,
            discount: 0.99,
            replay_buffer_size: 1_000_000,
            reward_scale: 1.0,
            critic_on_score: false,
            relabel_fraction: 0.0,
            update_post_train: 1,
            n_exploration_eps: 2,
            exploration_pool: 0,
            n_posterior_eps: 0,
            publish_interval: 1,
        }
    }
}

impl AlgoSection for PearlConfig {
    fn discount(&self) -> f64 {
        self.discount
    }

    fn validate(&self, _batch: u64) -> Result<(), ConfigError> {
        PearlConfig::validate(self)
    }
}

impl PearlConfig {
    /// Env steps in one round (one replay item).
    pub fn round_steps(&self) -> u64 {
        u64::from(self.num_steps_prior)
            + u64::from(self.num_steps_posterior)
            + u64::from(self.num_extra_rl_steps_posterior)
    }

    /// Steps of a round that are context: the prior and posterior ones, at its start.
    pub fn context_steps(&self) -> u64 {
        u64::from(self.num_steps_prior) + u64::from(self.num_steps_posterior)
    }

    /// Env steps collected before the first update: `num_initial_steps` for each of the
    /// run's training tasks.
    pub fn initial_env_steps(&self, tasks: &crate::tasks::TasksConfig) -> u64 {
        self.num_initial_steps
            .saturating_mul(u64::from(tasks.num_train))
    }

    /// The replay table of rounds for a run with `tasks`: an item is a round, so every count
    /// is in rounds. Updates per round are `num_steps_per_epoch / num_tasks_sample`, each
    /// sampling `meta_batch_size` rounds; sampling starts once the rounds hold
    /// [`Self::initial_env_steps`].
    pub fn replay(&self, tasks: &crate::tasks::TasksConfig) -> ReplayOptions {
        let round = self.round_steps().max(1);
        let updates_per_round =
            f64::from(self.num_steps_per_epoch) / f64::from(self.num_tasks_sample.max(1));
        ReplayOptions {
            capacity: self.replay_buffer_size.div_ceil(round).max(1),
            batch_size: self.meta_batch_size,
            samples_per_insert: updates_per_round * f64::from(self.meta_batch_size),
            min_size: self.initial_env_steps(tasks).div_ceil(round).max(1),
            // Actors may run two rounds' updates ahead of the learner (and it two batches
            // ahead of them): slack enough for their bursts, never a backlog of stale rounds.
            error_buffer: (2.0 * updates_per_round * f64::from(self.meta_batch_size))
                .max(2.0 * f64::from(self.meta_batch_size)),
            ..ReplayOptions::default()
        }
    }

    /// Checks ranges: every count that sizes a batch or a round at least 1, learning rates
    /// positive, the context part of a round non-empty.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let counts = [
            (self.latent_dim, "algo.latent_dim"),
            (self.meta_batch_size, "algo.meta_batch_size"),
            (self.num_steps_per_epoch, "algo.num_steps_per_epoch"),
            (self.num_tasks_sample, "algo.num_tasks_sample"),
            (self.batch_size, "algo.batch_size"),
            (self.embedding_batch_size, "algo.embedding_batch_size"),
            (
                self.embedding_mini_batch_size,
                "algo.embedding_mini_batch_size",
            ),
            (self.update_post_train, "algo.update_post_train"),
            (self.n_exploration_eps, "algo.n_exploration_eps"),
        ];
        for (value, key) in counts {
            check(value >= 1, key, "must be >= 1")?;
        }
        check(
            self.embedding_batch_size
                .is_multiple_of(self.embedding_mini_batch_size),
            "algo.embedding_mini_batch_size",
            "must divide algo.embedding_batch_size",
        )?;
        check(
            self.context_steps() >= 1,
            "algo.num_steps_prior",
            "a round needs context: num_steps_prior + num_steps_posterior must be >= 1",
        )?;
        check(
            self.round_steps() <= 100_000,
            "algo.num_steps_prior",
            "a round (num_steps_prior + num_steps_posterior + num_extra_rl_steps_posterior) is \
             one replay item; keep it within 100000 steps",
        )?;
        check(
            [self.policy_lr, self.qf_lr, self.vf_lr, self.context_lr]
                .iter()
                .all(|&lr| lr > 0.0),
            "algo.policy_lr",
            "learning rates (policy_lr, qf_lr, vf_lr, context_lr) must be > 0",
        )?;
        check(
            self.soft_target_tau > 0.0 && self.soft_target_tau <= 1.0,
            "algo.soft_target_tau",
            "must be in (0, 1]",
        )?;
        check(self.kl_lambda >= 0.0, "algo.kl_lambda", "must be >= 0")?;
        check(
            self.exploration_pool <= MAX_EXPLORATION_POOL,
            "algo.exploration_pool",
            &format!(
                "must be <= {MAX_EXPLORATION_POOL} (posteriors kept with the weights and sent \
                 to every actor with them)"
            ),
        )?;
        check(
            (0.0..=1.0).contains(&self.relabel_fraction),
            "algo.relabel_fraction",
            "must be in [0, 1]",
        )?;
        check(
            self.encoder_hidden_sizes.iter().all(|&w| w >= 1),
            "algo.encoder_hidden_sizes",
            "every layer needs >= 1 unit",
        )?;
        check(
            self.replay_buffer_size >= self.round_steps(),
            "algo.replay_buffer_size",
            "must hold at least one round",
        )
    }
}
