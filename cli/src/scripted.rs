//! `fleetrl record --scripted ENV`: hand-written controllers for native envs, played to
//! record demos without a trained policy.

use fleetrl_core::demo::{Demo, DemoSource, Recorder};
use fleetrl_core::envs::{self, mountain_car_controller, Action};

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
pub(crate) const SCRIPTED_ENVS: &[&str] =
    &["MountainCar-v0", "SparseMountainCar-v0", "CartPole-v1"];

fn controller(env_id: &str) -> anyhow::Result<Controller> {
    match env_id {
        "MountainCar-v0" | "SparseMountainCar-v0" => Ok(mountain_car),
        "CartPole-v1" => Ok(cart_pole),
        other => anyhow::bail!(
            "no scripted controller for `{other}` (scripted envs: {})",
            SCRIPTED_ENVS.join(", ")
        ),
    }
}

/// One episode of `env_id` from `seed` played by its controller.
pub(crate) fn record_episode(env_id: &str, seed: u64) -> anyhow::Result<Demo> {
    let control = controller(env_id)?;
    let mut env = envs::make(env_id)?;
    let mut obs = env.reset(Some(seed));
    let shape = vec![obs.len()];
    let mut rec = Recorder::new(
        env_id,
        DemoSource::Scripted,
        shape,
        &env.action_space(),
        &obs,
    );
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
