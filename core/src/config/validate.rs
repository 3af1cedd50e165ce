//! The checks serde cannot make: each section's own ranges first, then what one section asks
//! of another (the algorithm's registry entry against the model, the actors and the budget).

use super::{check, AlgoConfig, ConfigError, RunConfig, Vectorization, CONFIG_VERSION};
use super::{ActorsConfig, EnvConfig, LearnerConfig, ModelConfig};
use crate::algos::registry::{self, Recurrence, Scripted, Spec};
use crate::models::config::RecurrentCell;

impl RunConfig {
    /// Checks ranges that serde cannot.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.version != CONFIG_VERSION {
            return Err(ConfigError::Version(self.version));
        }
        check_env(&self.env)?;
        self.actors.validate()?;
        self.learner.validate()?;
        self.learner.check_devices(self.algo.name())?;
        check(
            self.learner.world_size == 1 || !self.model.normalize_obs,
            "model.normalize_obs",
            "the observation statistics follow each learner's own batches, so with \
             learner.world_size > 1 the ranks' models would drift apart; turn it off",
        )?;
        check(self.replay.max_size >= 1, "replay.max_size", "must be >= 1")?;
        self.ppod.validate()?;
        check(
            !self.ppod.enabled || !self.algo.is_off_policy(),
            "ppod.enabled",
            "PPO+D replays demos into on-policy rollouts; use an on-policy algo.name (ppo, a2c, \
             vpg, trpo, impala), or bc for learning from demos off-policy",
        )?;
        check(self.eval.episodes >= 1, "eval.episodes", "must be >= 1")?;
        check(
            self.eval.confirm_episodes >= 1,
            "eval.confirm_episodes",
            "must be >= 1",
        )?;
        self.model.validate(&self.algo)?;
        check(
            self.stop.total_env_steps >= 1,
            "stop.total_env_steps",
            "must be >= 1",
        )?;
        let registered = registry::spec(self);
        self.check_torchscript(registered.scripted)?;
        self.check_padding(&registered)?;
        self.check_alternating(&registered)?;
        self.check_recurrence(registered.recurrence)?;
        self.check_budget(&registered)?;
        self.check_recurrent_ppo()?;
        self.check_on_policy_ranks(&registered)?;
        self.check_tasks(&registered)?;
        self.algo.validate(self.batch_env_steps())
    }

    /// `model.torchscript` and `model.torchscript_critic` with an algorithm that trains them
    /// (`scripted`, its registry entry), and without the keys that shape fleetrl's own layers
    /// (they would be silently ignored).
    fn check_torchscript(&self, scripted: Option<Scripted>) -> Result<(), ConfigError> {
        let (algo, model) = (self.algo.name(), &self.model);
        let keys = [
            ("model.torchscript", model.torchscript.is_some()),
            (
                "model.torchscript_critic",
                model.torchscript_critic.is_some(),
            ),
        ];
        let Some(set) = keys.iter().find(|(_, set)| *set).map(|(key, _)| *key) else {
            return Ok(());
        };
        check(
            scripted.is_some(),
            set,
            &format!(
                "algo.name = {algo:?} trains fleetrl's own networks only (docs/torchscript.md \
                 lists the algorithms that train a module)"
            ),
        )?;
        check(
            model.torchscript_critic.is_none() || scripted == Some(Scripted::ActorAndCritics),
            "model.torchscript_critic",
            &format!(
                "algo.name = {algo:?} has no separate critic (an actor-critic or a Q-network is \
                 the one module in model.torchscript)"
            ),
        )?;
        let own_layers = [
            ("model.lstm_size", model.lstm_size > 0),
            ("model.pre_lstm_sizes", !model.pre_lstm_sizes.is_empty()),
            ("model.shared_trunk", model.shared_trunk),
            ("model.channels", !model.channels.is_empty()),
        ];
        for (key, on) in own_layers {
            check(
                !on,
                key,
                &format!(
                    "shapes fleetrl's own network; with {set} the module is the whole network \
                     (unset it)"
                ),
            )?;
        }
        Ok(())
    }

    /// `actors.mid_batch_reset = false` pads rollouts: only for algorithms that mask padding.
    fn check_padding(&self, registered: &Spec<'_>) -> Result<(), ConfigError> {
        if self.actors.mid_batch_reset {
            return Ok(());
        }
        check(
            registered.masks_padding,
            "actors.mid_batch_reset",
            "= false pads rollouts after an episode ends, which only ppo and a2c mask out of \
             their losses",
        )?;
        check(
            !self.ppod.enabled,
            "actors.mid_batch_reset",
            "= false is not available with PPO+D, whose actors switch envs between demos and \
             the policy mid-rollout",
        )?;
        check(
            self.env.vectorization == Vectorization::Sync,
            "actors.mid_batch_reset",
            "= false holds finished envs one by one; gymnasium's AsyncVectorEnv resets them \
             itself (use env.vectorization = \"sync\")",
        )
    }

    /// `actors.alternating`: two equal groups of envs, plain rollouts only.
    fn check_alternating(&self, registered: &Spec<'_>) -> Result<(), ConfigError> {
        if !self.actors.alternating {
            return Ok(());
        }
        check(
            self.actors.envs_per_actor >= 2 && self.actors.envs_per_actor.is_multiple_of(2),
            "actors.alternating",
            "splits an actor's envs into two equal groups: actors.envs_per_actor must be even",
        )?;
        check(
            registered.plain_rollouts,
            "actors.alternating",
            "alternates the rollouts of plain on-policy algorithms (ppo, a2c, vpg, trpo, \
             impala); off-policy and meta-RL actors step otherwise",
        )?;
        check(
            !self.ppod.enabled && self.actors.mid_batch_reset && !self.tasks.multi_task,
            "actors.alternating",
            "does not combine with PPO+D, actors.mid_batch_reset = false or \
             tasks.multi_task",
        )
    }

    /// A recurrent model needs an algorithm that trains one, in the way its layers ask.
    fn check_recurrence(&self, recurrence: Option<Recurrence>) -> Result<(), ConfigError> {
        check(
            self.model.lstm_size == 0 || recurrence.is_some(),
            "model.lstm_size",
            "recurrent models are trained by algo.name = \"ppo\", \"a2c\" and \"impala\" \
             (on-policy), \"dqn\" (R2D2), \"sac\", \"td3\" and \"ddpg\" (stored sequences \
             with burn-in) only; vpg, trpo and bc are feed-forward",
        )?;
        check(
            self.model.recurrent_cell == RecurrentCell::Lstm || self.model.lstm_size > 0,
            "model.recurrent_cell",
            "is the cell of the recurrent core: set model.lstm_size > 0 (its units) too",
        )?;
        check(
            self.model.pre_lstm_sizes.is_empty()
                || (self.model.lstm_size > 0 && recurrence == Some(Recurrence::Rollouts)),
            "model.pre_lstm_sizes",
            "are the layers before an on-policy model's LSTM core: set model.lstm_size > 0 with \
             algo.name = \"ppo\", \"a2c\" or \"impala\"",
        )?;
        let Some(sequences) = self.sequence_replay() else {
            return Ok(());
        };
        sequences.replay.validate_sequences()?;
        check(
            sequences.replay.initial_demo_dir().is_none(),
            "algo.replay.initial_demos",
            "fills a table of transitions; a recurrent DQN, SAC, TD3 or DDPG \
             (model.lstm_size > 0) stores sequences",
        )?;
        if let AlgoConfig::Sac(sac) = &self.algo {
            let caps = &sac.caps;
            check(
                caps.temporal_weight == 0.0 && caps.spatial_weight == 0.0,
                "algo.caps",
                "smooths a feed-forward policy's actions; recurrent SAC (model.lstm_size > 0) \
                 has no CAPS term: set the caps weights to 0",
            )?;
        }
        Ok(())
    }

    /// A budget the learner's table fills before it ends, and PEARL's relabelling.
    fn check_budget(&self, registered: &Spec<'_>) -> Result<(), ConfigError> {
        if let Some(pearl) = self.algo.as_pearl() {
            check(
                pearl.relabel_fraction == 0.0
                    || (self.env.id == "PointRobotSparse-v0" && !self.env.has_wrappers()),
                "algo.relabel_fraction",
                &format!(
                    "relabels rounds with goals the learner scores itself, which it knows how \
                     to do for PointRobotSparse-v0 without env wrappers only; env.id is {:?}",
                    self.env.id
                ),
            )?;
            // PEARL's table counts rounds; its first update waits for the initial env steps.
            let initial = pearl.initial_env_steps(&self.tasks);
            check(
                self.stop.total_env_steps > initial,
                "stop.total_env_steps",
                &format!(
                    "must exceed algo.num_initial_steps x tasks.num_train ({initial} env \
                     steps): the learner samples nothing until the rounds hold that many"
                ),
            )?;
            return check(
                initial <= pearl.replay_buffer_size,
                "algo.num_initial_steps",
                &format!(
                    "x tasks.num_train ({initial} env steps) must fit in \
                     algo.replay_buffer_size ({}): the table would evict rounds before the \
                     first update could start",
                    pearl.replay_buffer_size
                ),
            );
        }
        if let (Some(replay), None, 0) =
            (&registered.replay, registered.demos, self.model.lstm_size)
        {
            // One transition per env step (a table the learner fills from demos is exempt): a
            // budget the table never fills past `min_size` would run without a single update.
            check(
                self.stop.total_env_steps > replay.min_size,
                "stop.total_env_steps",
                &format!(
                    "must exceed algo.replay.min_size ({}): the learner samples nothing until \
                     the table holds that many transitions",
                    replay.min_size
                ),
            )?;
        }
        Ok(())
    }

    /// On-policy learner ranks each train on their part of a version's rollouts, in the same
    /// number of optimiser steps (one all-reduce each).
    fn check_on_policy_ranks(&self, registered: &Spec<'_>) -> Result<(), ConfigError> {
        let ranks = self.learner.world_size;
        if ranks <= 1 || registered.family != registry::Family::OnPolicy {
            return Ok(());
        }
        check(
            self.learner.batch_rollouts >= ranks,
            "learner.batch_rollouts",
            &format!(
                "must be at least learner.world_size ({ranks}): every learner rank trains on at \
                 least one rollout of each update"
            ),
        )?;
        let per_rows = self.algo.as_ppo().and_then(|ppo| ppo.minibatch_size);
        check(
            per_rows.is_none(),
            "algo.minibatch_size",
            "with learner.world_size > 1 every rank must take the same number of minibatch \
             steps, whatever its share of the rows; set algo.minibatches instead",
        )
    }

    /// A recurrent PPO model splits whole sequences into minibatches.
    fn check_recurrent_ppo(&self) -> Result<(), ConfigError> {
        let (true, Some(ppo)) = (self.model.lstm_size > 0, self.algo.as_ppo()) else {
            return Ok(());
        };
        check(
            ppo.minibatch_size.is_none(),
            "algo.minibatch_size",
            "a recurrent model splits whole sequences; set algo.minibatches instead",
        )?;
        let columns = self.learner.batch_rollouts * self.actors.envs_per_actor;
        check(
            columns.is_multiple_of(ppo.minibatches),
            "algo.minibatches",
            &format!("must divide the {columns} sequences of a batch (recurrent model)"),
        )
    }

    /// Task sets: multi-task runs of one-policy algorithms, and the meta-RL algorithms.
    fn check_tasks(&self, registered: &Spec<'_>) -> Result<(), ConfigError> {
        if self.tasks.multi_task {
            self.tasks.validate()?;
            check(
                registered.task_agnostic.is_some(),
                "tasks.multi_task",
                "is for algorithms that play one policy (ppo, a2c, vpg, trpo, impala, dqn, sac, \
                 td3, ddpg, bc); meta-RL algorithms draw their own tasks",
            )?;
            check(
                !(self.model.lstm_size > 0 || self.model.shared_trunk || self.model.normalize_obs),
                "tasks.multi_task",
                "evaluates on tasks with a plain MLP policy: lstm_size = 0, shared_trunk = false, \
                 normalize_obs = false",
            )?;
        }
        if self.algo.as_maml().is_some() {
            self.check_maml()?;
        }
        if self.algo.as_pearl().is_some() {
            self.check_pearl()?;
        }
        Ok(())
    }
}

impl RunConfig {
    /// MAML adapts a plain MLP policy on tasks, without demos.
    fn check_maml(&self) -> Result<(), ConfigError> {
        self.tasks.validate()?;
        check(
            !(self.model.lstm_size > 0 || self.model.shared_trunk || self.model.normalize_obs),
            "model",
            "MAML adapts a plain MLP policy: lstm_size = 0, shared_trunk = false, \
             normalize_obs = false",
        )?;
        check(
            !self.ppod.enabled,
            "ppod.enabled",
            "PPO+D demos are not tasks; MAML does not replay them",
        )
    }

    /// PEARL conditions plain MLPs on its task belief, one env per actor, without demos.
    fn check_pearl(&self) -> Result<(), ConfigError> {
        self.tasks.validate()?;
        check(
            !(self.model.lstm_size > 0 || self.model.normalize_obs),
            "model",
            "PEARL conditions plain MLPs on the task variable: lstm_size = 0, \
             normalize_obs = false",
        )?;
        check(
            self.actors.envs_per_actor == 1,
            "actors.envs_per_actor",
            "PEARL actors play one env (a round is one stream of episodes its posterior \
             follows); add actors (actors.count) to collect more",
        )?;
        check(
            !self.ppod.enabled,
            "ppod.enabled",
            "PPO+D demos are not tasks; PEARL does not replay them",
        )
    }
}

/// `[env]`: the vectorisation mode fits the env, the reward normaliser's discount is one.
fn check_env(env: &EnvConfig) -> Result<(), ConfigError> {
    check(
        env.vectorization == Vectorization::Sync
            || (env.id.starts_with("gym:") && !env.has_wrappers()),
        "env.vectorization",
        "\"async\" hosts a gym: env in gymnasium's AsyncVectorEnv, which takes no Rust \
         wrappers (atari, frame_stack, reward_scale, reward_clip, normalize_reward, \
         prev_action_reward), no \
         native id and no envpool: id (EnvPool steps on threads of its own)",
    )?;
    check(
        (0.0..1.0).contains(&env.normalize_reward_discount),
        "env.normalize_reward_discount",
        "must be in [0, 1)",
    )
}

impl ActorsConfig {
    /// Sizes at least 1, and a lag the learner accepts.
    fn validate(&self) -> Result<(), ConfigError> {
        check(
            self.envs_per_actor >= 1,
            "actors.envs_per_actor",
            "must be >= 1",
        )?;
        check(
            self.rollout_length >= 1,
            "actors.rollout_length",
            "must be >= 1",
        )?;
        check(
            self.max_in_flight >= 1,
            "actors.max_in_flight",
            "must be >= 1",
        )?;
        check(
            self.lag_versions <= self.max_policy_lag,
            "actors.lag_versions",
            "must not exceed actors.max_policy_lag (the learner would drop every rollout)",
        )
    }
}

impl LearnerConfig {
    /// Batch and thread counts at least 1, a subscriber timeout above 0.
    fn validate(&self) -> Result<(), ConfigError> {
        check(
            self.subscriber_timeout_s.is_finite() && self.subscriber_timeout_s > 0.0,
            "learner.subscriber_timeout_s",
            "must be a finite number of seconds > 0",
        )?;
        check(
            self.batch_rollouts >= 1,
            "learner.batch_rollouts",
            "must be >= 1",
        )?;
        check(
            self.update_threads >= 1,
            "learner.update_threads",
            "must be >= 1",
        )?;
        check(
            self.torch_threads >= 1,
            "learner.torch_threads",
            "must be >= 1",
        )?;
        check(
            self.max_nonfinite_updates >= 1,
            "learner.max_nonfinite_updates",
            "must be >= 1",
        )
    }
}

/// The most units a hidden layer may have (`model.hidden_sizes`, `model.pre_lstm_sizes`).
const MAX_LAYER_UNITS: i64 = 1 << 16;

/// The most weights the hidden layers may hold together (4 GiB of f32): past it libtorch's
/// allocation fails with a panic, not an error.
const MAX_HIDDEN_WEIGHTS: i64 = 1 << 30;

impl ModelConfig {
    /// Layer sizes in range, and the keys that fit only some algorithms.
    fn validate(&self, algo: &AlgoConfig) -> Result<(), ConfigError> {
        check_layers(&self.hidden_sizes, "model.hidden_sizes")?;
        check_layers(&self.pre_lstm_sizes, "model.pre_lstm_sizes")?;
        check(
            self.norm_obs_var_clip > 0.0,
            "model.norm_obs_var_clip",
            "must be > 0",
        )?;
        check(
            self.mu_nonlinearity.is_none() || !algo.is_off_policy(),
            "model.mu_nonlinearity",
            "is for the on-policy Gaussian policy; SAC squashes its actions with tanh itself and \
             TD3/DDPG's deterministic policy ends in tanh",
        )?;
        self.validate_conv()?;
        if !self.shared_trunk {
            return Ok(());
        }
        check(
            !matches!(algo.name(), "vpg" | "trpo"),
            "model.shared_trunk",
            "vpg and trpo fit the policy and the value function separately; use separate networks",
        )?;
        check(
            !self.hidden_sizes.is_empty(),
            "model.shared_trunk",
            "needs at least one hidden layer",
        )?;
        check(
            !algo.is_off_policy(),
            "model.shared_trunk",
            "off-policy models give each network its own layers (no shared trunk yet)",
        )
    }
}

/// Every layer of `sizes` has 1 to [`MAX_LAYER_UNITS`] units, and the weights between
/// consecutive layers stay under [`MAX_HIDDEN_WEIGHTS`].
fn check_layers(sizes: &[i64], key: &'static str) -> Result<(), ConfigError> {
    check(
        sizes.iter().all(|&w| (1..=MAX_LAYER_UNITS).contains(&w)),
        key,
        &format!("every layer needs 1 to {MAX_LAYER_UNITS} units; got {sizes:?}"),
    )?;
    let weights: i64 = sizes.windows(2).map(|w| w[0] * w[1]).sum();
    check(
        weights <= MAX_HIDDEN_WEIGHTS,
        key,
        &format!(
            "{sizes:?} needs {weights} weights between its layers, more than the \
             {MAX_HIDDEN_WEIGHTS} (4 GiB) a model may hold"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_hidden(sizes: &str) -> Result<RunConfig, ConfigError> {
        RunConfig::from_toml(&format!("[model]\nhidden_sizes = {sizes}\n"), "test")
    }

    /// Negative, zero and enormous layers are refused naming the key; ordinary ones load.
    #[test]
    fn hidden_layer_sizes_are_bounded_and_named() {
        for bad in [
            "[-1]",
            "[0]",
            "[100000, 100000]",
            "[70000]",
            "[65536, 65536]",
        ] {
            let error = with_hidden(bad).expect_err(bad).to_string();
            assert!(error.contains("model.hidden_sizes"), "{bad}: {error}");
        }
        for good in ["[]", "[64, 64]", "[1024, 1024, 1024]"] {
            with_hidden(good).unwrap_or_else(|e| panic!("{good}: {e}"));
        }
    }

    /// A GRU cell needs the core's units; with them it loads.
    #[test]
    fn a_gru_cell_needs_a_recurrent_core() {
        let with = |model: &str| {
            RunConfig::from_toml(&format!("[model]\nrecurrent_cell = \"gru\"\n{model}"), "t")
        };
        let error = with("").expect_err("a GRU without units").to_string();
        assert!(error.contains("model.recurrent_cell: "), "{error}");
        let loaded = with("lstm_size = 16\n").unwrap();
        assert_eq!(loaded.model.recurrent_cell, RecurrentCell::Gru);
    }

    /// A subscriber timeout must be a positive, finite number of seconds.
    #[test]
    fn the_subscriber_timeout_is_positive() {
        let with = |value: &str| {
            RunConfig::from_toml(
                &format!("[learner]\nsubscriber_timeout_s = {value}\n"),
                "test",
            )
        };
        for bad in ["0.0", "-1.0", "nan", "inf"] {
            let error = with(bad).expect_err(bad).to_string();
            assert!(
                error.contains("learner.subscriber_timeout_s"),
                "{bad}: {error}"
            );
        }
        assert_eq!(with("0.5").unwrap().learner.subscriber_timeout_s, 0.5);
    }
}
