//! `[env]`: which environment a run plays, and the wrappers the learner's view of it gets.

use serde::{Deserialize, Serialize};

/// Which environment to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EnvConfig {
    /// Registered env id, e.g. "CartPole-v1"; `gym:ID` makes gymnasium's ID (e.g. "gym:Hopper-v5").
    pub id: String,
    /// Keyword arguments for `gymnasium.make` (gym: ids only), e.g. `{ frameskip = 1 }`.
    pub kwargs: toml::Table,
    /// Multiplies every reward the learner sees (1 = unchanged); scores stay unscaled.
    pub reward_scale: f32,
    /// Clips rewards the learner sees to [-c, c] after scaling (0 = off); scores stay unclipped.
    pub reward_clip: f32,
    /// Divides rewards the learner sees (after scaling, before clipping) by the running
    /// standard deviation of each env's discounted return, as SB3's `VecNormalize`
    /// (`norm_reward`); scores stay raw. Statistics live in each actor's envs.
    pub normalize_reward: bool,
    /// The discount of that return (SB3's `VecNormalize(gamma)`; RL-Zoo passes the algorithm's).
    pub normalize_reward_discount: f64,
    /// Standard Atari preprocessing (gym:ALE/ ids made with frameskip = 1): no-op reset, frame skip
    /// 4 with max-pool, 84x84 grayscale, episodic life, fire reset; implies frame_stack = 4.
    pub atari: bool,
    /// Stacks the last k observations (0 or 1 = off; 4 when atari is on).
    pub frame_stack: u32,
    /// Episode length (time limit) in place of the env's own; 0 keeps the env's (native ids,
    /// the task families, and gym: ids through gymnasium's `max_episode_steps`).
    pub max_episode_steps: u32,
    /// Appends the previous action (one-hot when discrete) and reward to every observation,
    /// zero at an episode's start: rlpyt's `prev_action` / `prev_reward` recurrent inputs.
    pub prev_action_reward: bool,
    /// How a `gym:` env without wrappers is vectorised in each actor: "sync" (one process, the
    /// default) or "async" (gymnasium's AsyncVectorEnv, one worker process per env; pays for
    /// itself only when an env step costs more than the inter-process round trip).
    pub vectorization: Vectorization,
}

/// Gymnasium's vectorisation modes (`[env] vectorization`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Vectorization {
    /// Every env in the actor's process, stepped in one loop (as a SyncVectorEnv would).
    #[default]
    Sync,
    /// AsyncVectorEnv: a worker process per env.
    Async,
}

impl Vectorization {
    /// The name gymnasium's `make_vec` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Vectorization::Sync => "sync",
            Vectorization::Async => "async",
        }
    }
}

impl EnvConfig {
    /// Whether any Rust wrapper applies: then a `gym:` env is hosted one env per row.
    pub fn has_wrappers(&self) -> bool {
        self.atari
            || self.prev_action_reward
            || self.frame_stack > 1
            || self.reward_scale != 1.0
            || self.reward_clip > 0.0
            || self.normalize_reward
    }
}

impl Default for EnvConfig {
    fn default() -> Self {
        EnvConfig {
            id: "CartPole-v1".into(),
            kwargs: toml::Table::new(),
            reward_scale: 1.0,
            reward_clip: 0.0,
            normalize_reward: false,
            normalize_reward_discount: 0.99,
            atari: false,
            frame_stack: 0,
            max_episode_steps: 0,
            prev_action_reward: false,
            vectorization: Vectorization::Sync,
        }
    }
}
