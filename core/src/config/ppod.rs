//! `[ppod]`: PPO+D (learning from demonstrations through the replay server's demo tables).
//! Off unless `enabled`; the algorithm stays `[algo] name = "ppo"` (or any on-policy one).

use fleetrl_proto::space::Space;
use serde::{Deserialize, Serialize};

use super::ConfigError;

/// PPO+D's demo replay (Libardi et al. 2021; see `core/src/buffers/demos/`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PpodConfig {
    /// Replay demos at episode starts (off: plain on-policy acting).
    pub enabled: bool,
    /// Probability that an episode replays a reward demo (initial value, before annealing).
    pub rho: f64,
    /// Probability that an episode replays a value demo (initial value, before annealing).
    pub phi: f64,
    /// Value-demo prioritisation: p_j proportional to exp(alpha * max_value_j).
    pub alpha: f64,
    /// Demos held in all (reward + value); the initial demos count and are never evicted.
    pub capacity: u32,
    /// Successful episodes over which phi's mass moves to rho (0: capacity minus the initial demos).
    pub anneal_steps: u32,
    /// Directory of initial demos (`*.demo.safetensors`) loaded at start, or a Minari dataset
    /// `minari:<id or path>` that `fleetrl train` converts (empty: none).
    pub demos_dir: String,
    /// Directory of initial *agent* demos loaded at start, or `minari:<id or path>` (empty:
    /// none): reward demos that better episodes evict, where `demos_dir`'s (human) demos are
    /// never evicted (pytorchrl's `initial_agent_demos_dir`).
    pub initial_agent_demos_dir: String,
    /// Directory watched while training; new demos in it join as agent demos (empty: none).
    pub supplementary_dir: String,
    /// Directory the best agent reward demos are saved to (empty: not saved).
    pub target_dir: String,
    /// Save the top demos every this many collections (rollouts offered to the server).
    pub save_every: u32,
    /// How many of the best agent reward demos to save.
    pub save_top_k: u32,
    /// Minimum return of a reward demo (none: the lowest return among the initial demos).
    pub reward_threshold: Option<f64>,
}

impl Default for PpodConfig {
    fn default() -> Self {
        PpodConfig {
            enabled: false,
            rho: 0.1,
            phi: 0.3,
            alpha: 10.0,
            capacity: 51,
            anneal_steps: 0,
            demos_dir: String::new(),
            initial_agent_demos_dir: String::new(),
            supplementary_dir: String::new(),
            target_dir: String::new(),
            save_every: 10,
            save_top_k: 10,
            reward_threshold: None,
        }
    }
}

impl PpodConfig {
    /// The declaration of the demo buffers for an env with these spaces: what an actor sends
    /// the replay server's `DemoService.Configure` (the server builds no env of its own).
    pub fn buffers_spec(
        &self,
        env_id: &str,
        observation: &Space,
        action: &Space,
    ) -> fleetrl_proto::v1::DemoBuffersSpec {
        fleetrl_proto::v1::DemoBuffersSpec {
            env_id: env_id.to_string(),
            observation_space: Some(observation.into()),
            action_space: Some(action.into()),
            rho: self.rho,
            phi: self.phi,
            alpha: self.alpha,
            capacity: self.capacity,
            anneal_steps: self.anneal_steps,
            demos_dir: self.demos_dir.clone(),
            initial_agent_demos_dir: self.initial_agent_demos_dir.clone(),
            supplementary_dir: self.supplementary_dir.clone(),
            target_dir: self.target_dir.clone(),
            save_every: self.save_every,
            save_top_k: self.save_top_k,
            reward_threshold: self.reward_threshold,
        }
    }

    /// Checks the ranges serde cannot.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |key, message: &str| {
            Err(ConfigError::Invalid {
                key,
                message: message.to_string(),
            })
        };
        if !(0.0..=1.0).contains(&self.rho) {
            return bad("ppod.rho", "must be in [0, 1]");
        }
        if !(0.0..=1.0).contains(&self.phi) || self.rho + self.phi > 1.0 {
            return bad("ppod.phi", "must be in [0, 1] with rho + phi <= 1");
        }
        if !self.alpha.is_finite() || self.alpha < 0.0 {
            return bad("ppod.alpha", "must be finite and >= 0");
        }
        if self.capacity < 1 {
            return bad("ppod.capacity", "must be >= 1");
        }
        if self.save_every < 1 {
            return bad("ppod.save_every", "must be >= 1");
        }
        if self.reward_threshold.is_some_and(|t| !t.is_finite()) {
            return bad("ppod.reward_threshold", "must be finite");
        }
        Ok(())
    }
}
