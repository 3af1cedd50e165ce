//! Env steps per second through the actor's env path (`VecEnv`, as `Acting` steps it), for
//! bench/envs.sh: native CartPole-v1 and Pendulum-v1 (one env and a vector of 64), and with the
//! `python` feature gymnasium CartPole-v1 and Hopper-v5 hosted in-process (one env per row, and
//! a batch of 16 entered once per batch) and EnvPool's CartPole-v1, Pendulum-v1 and
//! Hopper-v5 hosted as one pool per batch (`envpool:` ids). Actions are a fixed cycle, as in the
//! Python side (bench/envs_python.py), so both sides step the same work.
//!
//! `cargo run --release -p fleetrl-core --features python --example env_steps -- [SECONDS]`
//! prints one tab-separated line per case: system, env, envs, steps/s.

use std::time::{Duration, Instant};

use fleetrl_core::config::EnvConfig;
use fleetrl_core::envs::{make_vec, VecEnv};
use fleetrl_proto::space::Space;

/// Steps `venv` for about `budget`, returning env steps per second.
fn steps_per_second(mut venv: VecEnv, budget: Duration) -> f64 {
    let m = venv.num_envs();
    venv.reset(0);
    let (discrete, dim) = match venv.action_space() {
        Space::Discrete { n } => (Some(*n), 1),
        space @ Space::Box { .. } => (None, space.flat_dim()),
    };
    let actions: Vec<Vec<i64>> = (0..8)
        .map(|k| {
            (0..m as i64)
                .map(|i| (i + k) % discrete.unwrap_or(1))
                .collect()
        })
        .collect();
    let values: Vec<Vec<f32>> = (0..8)
        .map(|k| {
            (0..m * dim)
                .map(|i| ((i + k) % 5) as f32 * 0.4 - 0.8)
                .collect()
        })
        .collect();
    let start = Instant::now();
    let mut steps = 0u64;
    while start.elapsed() < budget {
        for k in 0..8 {
            if discrete.is_some() {
                venv.step_discrete(&actions[k]).expect("valid action");
            } else {
                venv.step_continuous(&values[k]).expect("valid action");
            }
        }
        steps += 8 * m as u64;
    }
    steps as f64 / start.elapsed().as_secs_f64()
}

fn case(system: &str, id: &str, m: usize, budget: Duration) {
    let config = EnvConfig {
        id: id.to_string(),
        ..EnvConfig::default()
    };
    let venv = if system.ends_with("per-row") {
        // One hosted env per row (the path Rust wrappers take).
        let envs = (0..m)
            .map(|_| fleetrl_core::envs::make_configured(&config))
            .collect::<Result<Vec<_>, _>>()
            .expect("env");
        VecEnv::new(envs).expect("vec env")
    } else {
        make_vec(&config, m).expect("env")
    };
    let rate = steps_per_second(venv, budget);
    println!(
        "{system}\t{}\t{m}\t{rate:.0}",
        id.trim_start_matches("gym:").trim_start_matches("envpool:")
    );
}

fn main() {
    let seconds: f64 = std::env::args()
        .nth(1)
        .map_or(3.0, |s| s.parse().expect("SECONDS is a number"));
    let budget = Duration::from_secs_f64(seconds);
    for id in ["CartPole-v1", "Pendulum-v1"] {
        for m in [1, 64] {
            case("fleetrl native", id, m, budget);
        }
    }
    if cfg!(feature = "python") {
        for id in ["gym:CartPole-v1", "gym:Hopper-v5"] {
            case("fleetrl hosting gymnasium, per-row", id, 1, budget);
            case("fleetrl hosting gymnasium, batch", id, 16, budget);
        }
        // The sizes bench/envs_python.py steps EnvPool with from Python.
        for (id, sizes) in [
            ("envpool:CartPole-v1", &[16, 64][..]),
            ("envpool:Pendulum-v1", &[16, 64][..]),
            ("envpool:Hopper-v5", &[16][..]),
        ] {
            for &m in sizes {
                case("fleetrl hosting EnvPool", id, m, budget);
            }
        }
    }
}
