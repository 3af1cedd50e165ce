//! The actor's acting loop alone, plain against alternating (`actors.alternating`, rlpyt's
//! alternating sampler), for bench/alternating.sh: whole rollouts of a freshly initialised
//! actor-critic (sampling actions, as actors do) on the env the case names, env steps per
//! second. No learner, no network: only env stepping and inference, which alternation overlaps.
//!
//! `cargo run --release -p fleetrl-core --features python --example acting_timing -- \
//!     [SECONDS] [ENV_ID] [ENVS] [HIDDEN] [LSTM]`
//! (defaults: 5 s, gym:Hopper-v5, 8 envs, hidden 64,64, no LSTM) prints one tab-separated
//! line per mode: mode, env, envs, hidden sizes, lstm, env steps/s.

use std::time::{Duration, Instant};

use fleetrl_core::acting::alternating::Alternating;
use fleetrl_core::acting::Acting;
use fleetrl_core::config::{EnvConfig, ModelConfig};
use fleetrl_core::envs::make_vec;
use fleetrl_core::items::rollout::{Bootstrap, RolloutBuilder};
use fleetrl_core::models::ActorCritic;

const ROLLOUT: usize = 64;

fn main() -> anyhow::Result<()> {
    tch::set_num_threads(1);
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: &str| args.get(i).cloned().unwrap_or(default.to_string());
    let budget = Duration::from_secs_f64(arg(0, "5").parse()?);
    let id = arg(1, "gym:Hopper-v5");
    let m: usize = arg(2, "8").parse()?;
    let hidden: Vec<i64> = (arg(3, "64,64").split(','))
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let lstm: u32 = arg(4, "0").parse()?;
    let env = EnvConfig {
        id: id.clone(),
        ..EnvConfig::default()
    };
    let model_config = ModelConfig {
        hidden_sizes: hidden.clone(),
        lstm_size: lstm,
        ..ModelConfig::default()
    };
    let probe = make_vec(&env, 1)?;
    let model = ActorCritic::new(
        &model_config,
        probe.observation_space(),
        probe.action_space(),
        tch::Device::Cpu,
    )?;
    let obs_dim = probe.obs_dim();
    drop(probe);
    let hidden = hidden
        .iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let model = &model;
    for mode in ["plain", "alternating"] {
        type Run<'a> = Box<dyn FnMut(&mut RolloutBuilder) -> anyhow::Result<Bootstrap> + 'a>;
        let mut run: Run = match mode {
            "plain" => {
                let mut acting = Acting::new(make_vec(&env, m)?, 0);
                Box::new(move |b| Ok(acting.collect(model, b)?))
            }
            _ => {
                let (a, b) = (make_vec(&env, m / 2)?, make_vec(&env, m / 2)?);
                let mut acting = Alternating::new(a, b, 0)?;
                Box::new(move |b| Ok(acting.collect(model, b)?))
            }
        };
        let mut builder = RolloutBuilder::new(ROLLOUT, m, obs_dim);
        // One rollout to warm up (first calls into libtorch and the envs).
        let bootstrap = run(&mut builder)?;
        builder.finish(&bootstrap, 0);
        let start = Instant::now();
        let mut steps = 0usize;
        while start.elapsed() < budget {
            let bootstrap = run(&mut builder)?;
            builder.finish(&bootstrap, 0);
            steps += ROLLOUT * m;
        }
        let rate = steps as f64 / start.elapsed().as_secs_f64();
        println!("{mode}\t{id}\t{m}\t{hidden}\t{lstm}\t{rate:.0}");
    }
    Ok(())
}
