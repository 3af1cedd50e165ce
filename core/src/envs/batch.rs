//! [`BatchEnv`]: a vector of envs that is stepped as one unit (e.g. a gymnasium vector env, so
//! Python is entered once per batch), which [`VecEnv`](super::VecEnv) can host instead of one
//! [`Env`](super::Env) per row.

use super::{EnvError, VecStep};
use fleetrl_proto::space::Space;

/// The actions of every env in a batch, row-major.
#[derive(Debug, Clone, Copy)]
pub enum BatchActions<'a> {
    /// One index per env.
    Discrete(&'a [i64]),
    /// `[M * A]` values, each row already clipped to the action box.
    Continuous(&'a [f32]),
}

/// M envs with identical spaces, stepped together with same-step auto-reset (the semantics of
/// [`VecEnv`](super::VecEnv): an env whose episode ends is reset within the same step).
pub trait BatchEnv: Send {
    /// Number of envs, M.
    fn num_envs(&self) -> usize;
    /// The space of one env's observation.
    fn observation_space(&self) -> Space;
    /// The space of one env's action.
    fn action_space(&self) -> Space;
    /// Resets env i with seed `seed + i` and writes the flat `[M * D]` observations to `obs`.
    fn reset(&mut self, seed: u64, obs: &mut [f32]) -> Result<(), EnvError>;
    /// Steps every env once (actions already checked against the action space) and writes
    /// `out`'s obs, reward, terminated, truncated and final_obs rows.
    fn step(&mut self, actions: BatchActions<'_>, out: &mut VecStep) -> Result<(), EnvError>;
}
