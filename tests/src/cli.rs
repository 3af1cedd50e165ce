//! The `fleetrl` command as the learning tests run it: from the repository root (so presets
//! resolve by name), failing the test with the command's stderr when it does not exit 0.

use std::path::PathBuf;
use std::process::Command;

use crate::compose::repo_root;

/// The `fleetrl` binary built beside the role binaries.
pub fn fleetrl_bin() -> PathBuf {
    fleetrl_runtime::launch::bin_dir()
        .expect("the binary directory")
        .join("fleetrl")
}

/// `fleetrl ARGS` run from the repository root, ready to take more arguments.
pub fn fleetrl_command(args: &[&str]) -> Command {
    let mut cmd = Command::new(fleetrl_bin());
    cmd.current_dir(repo_root()).args(args);
    cmd
}

/// Runs `fleetrl ARGS` from the repository root and returns its stdout; panics with its
/// stderr when it fails.
pub fn fleetrl_ok(args: &[&str]) -> String {
    let run = fleetrl_command(args).output().expect("fleetrl runs");
    assert!(
        run.status.success(),
        "fleetrl {args:?} failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    String::from_utf8_lossy(&run.stdout).into_owned()
}

/// Asserts that `fleetrl eval` of `checkpoint` (20 episodes, deterministic) gives `expected`,
/// the run's final evaluation: a recurrent policy's state must be carried through each
/// episode as the run's evaluator carries it.
pub fn assert_eval_gives(checkpoint: &str, expected: f64) {
    fleetrl_ok(&["eval", "--checkpoint", checkpoint, "--episodes", "20"]);
    let path = PathBuf::from(checkpoint).join("eval.json");
    let eval: serde_json::Value = serde_json::from_slice(&std::fs::read(path).expect("eval.json"))
        .expect("eval.json is JSON");
    let evaluated = eval["mean_return"].as_f64().expect("mean return");
    assert!(
        (evaluated - expected).abs() < 1e-6,
        "fleetrl eval gave {evaluated}, the run's final evaluation {expected}"
    );
}

/// A directory holding `MODULE.py`, a gymnasium env registered as `ID` that is CartPole with
/// `step` replaced by `step_body` (Python, indented 8 spaces, with `action` in scope and
/// `CartPoleEnv.step` as the original), for `gym:MODULE:ID` with the directory on PYTHONPATH.
pub fn own_gym_env(module: &str, id: &str, step_body: &str) -> PathBuf {
    let dir = crate::scratch(&format!("fleetrl-{module}"));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let source = format!(
        "import gymnasium as gym\n\
         from gymnasium.envs.classic_control import CartPoleEnv\n\
         class Own(CartPoleEnv):\n\
         \x20   steps = 0\n\
         \x20   def step(self, action):\n\
         \x20       Own.steps += 1\n\
         {step_body}\n\
         gym.register('{id}', entry_point=Own, max_episode_steps=500)\n"
    );
    std::fs::write(dir.join(format!("{module}.py")), source).expect("writing the env's module");
    dir
}
