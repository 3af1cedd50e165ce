//! Hand-written controllers for native envs, played to record demos without a trained
//! policy (`fleetrl record --scripted ENV`, PPO+D's tests).

use crate::envs::{self, mountain_car_controller, EnvError};
use fleetrl_proto::space::Action;
use fleetrl_runtime::demo::{Demo, DemoSource, Recorder};

/// A controller: observation in, action out.
type Controller = fn(&[f32]) -> Action;

fn mountain_car(obs: &[f32]) -> Action {
    Action::Discrete(mountain_car_controller(obs))
}

/// CartPole: push towards where the pole is falling (angle plus a share of its angular
/// velocity), which balances it for the whole episode from most starts.
fn cart_pole(obs: &[f32]) -> Action {
    Action::Discrete(i64::from(obs[2] + 0.5 * obs[3] > 0.0))
}

/// Env ids with a scripted controller.
pub const SCRIPTED_ENVS: &[&str] = &["MountainCar-v0", "SparseMountainCar-v0", "CartPole-v1"];

/// Why a scripted episode could not be played.
#[derive(Debug, thiserror::Error)]
pub enum ScriptedError {
    /// No controller is written for this env.
    #[error("no scripted controller for `{0}` (scripted envs: {known})", known = SCRIPTED_ENVS.join(", "))]
    NoController(String),
    /// The env failed.
    #[error(transparent)]
    Env(#[from] EnvError),
}

fn controller(env_id: &str) -> Result<Controller, ScriptedError> {
    match env_id {
        "MountainCar-v0" | "SparseMountainCar-v0" => Ok(mountain_car),
        "CartPole-v1" => Ok(cart_pole),
        other => Err(ScriptedError::NoController(other.to_string())),
    }
}

/// One episode of `env_id` from `seed` played by its controller, recorded as from `source`.
pub fn play(env_id: &str, seed: u64, source: DemoSource) -> Result<Demo, ScriptedError> {
    let control = controller(env_id)?;
    let mut env = envs::make(env_id)?;
    let mut obs = env.reset(Some(seed));
    let mut rec = Recorder::new(env_id, source, vec![obs.len()], &env.action_space(), &obs);
    loop {
        let action = control(&obs);
        let step = env.step(&action)?;
        rec.push(&action, step.reward, &step.obs, None);
        obs = step.obs;
        if step.terminated || step.truncated {
            return Ok(rec.finish(step.terminated));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controllers_solve_their_envs_and_others_are_refused() {
        let car = play("SparseMountainCar-v0", 5, DemoSource::Scripted).unwrap();
        assert!(car.terminated && car.total_reward() == 1.0 && car.len() < 200);
        let pole = play("CartPole-v1", 0, DemoSource::Scripted).unwrap();
        assert_eq!(pole.total_reward(), 500.0);
        let err = play("Pendulum-v1", 0, DemoSource::Scripted).unwrap_err();
        assert!(err.to_string().contains("Pendulum-v1"), "{err}");
    }
}
