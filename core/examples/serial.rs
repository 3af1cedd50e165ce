//! Trains a preset in one process (acting and updating alternate, no lag) and prints the
//! deterministic evaluation every few batches: a quick way to tune a preset before running it
//! through the real binaries.
//!
//! `cargo run --release -p fleetrl-core --example serial -- configs/cartpole-a2c.toml [key=value]...`

use fleetrl_core::acting::eval::evaluate;
use fleetrl_core::acting::Acting;
use fleetrl_core::algos;
use fleetrl_core::config::RunConfig;
use fleetrl_core::envs::VecEnv;
use fleetrl_core::items::rollout::{RolloutBatch, RolloutBuilder};
use fleetrl_core::models::ActorCritic;
use fleetrl_proto::{Tensor, TensorMap};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (preset, overrides) = args
        .split_first()
        .expect("usage: serial <preset> [key=value]...");
    let config = RunConfig::load(preset, overrides).expect("the preset loads");
    assert!(
        algos::registry::spec(&config).plain_rollouts,
        "the serial example runs plain on-policy presets; train {} with `fleetrl train`",
        config.algo.name()
    );
    tch::set_num_threads(1);
    tch::manual_seed(config.seed as i64);
    let m = (config.actors.count * config.actors.envs_per_actor) as usize;
    let t = config.actors.rollout_length as usize;
    let envs = VecEnv::make(&config.env.id, m).expect("env");
    let (obs_space, action_space) = (
        envs.observation_space().clone(),
        envs.action_space().clone(),
    );
    // The algorithm trains its own model; the acting copy takes its weights after each update.
    let mut algo =
        algos::build(&config, &obs_space, &action_space, &[tch::Device::Cpu]).expect("model");
    let mut model = ActorCritic::new(&config.model, &obs_space, &action_space, tch::Device::Cpu)
        .expect("model");
    let mut builder = RolloutBuilder::new(t, m, envs.obs_dim());
    let mut acting = Acting::new(envs, config.seed);
    let start = std::time::Instant::now();
    let (mut steps, mut next_eval) = (0u64, 0u64);
    let mut train_return = f64::NAN;
    let target = config.stop.target_return.unwrap_or(f64::INFINITY);
    while steps < config.stop.total_env_steps {
        let bootstrap = acting.collect(&model, &mut builder).expect("acting");
        let item = builder.finish(&bootstrap, 0);
        let stacked = TensorMap::from_pairs(
            item.tensors
                .iter()
                .map(|(k, v)| (k.clone(), Tensor::stack(&[v]).expect("stack"))),
        );
        let batch = RolloutBatch::from_stacked(&stacked).expect("batch");
        let metrics = algos::train_on(algo.as_mut(), &algos::Batch::Rollouts(Box::new(batch)))
            .expect("a rollout batch")
            .metrics;
        model
            .load_named(&algo.trained().model().named_parameters())
            .expect("the same model");
        let episodes = acting.envs_mut().drain_episodes();
        if !episodes.is_empty() {
            let n = episodes.len() as f64;
            train_return = episodes.iter().map(|e| e.return_).sum::<f64>() / n;
        }
        steps += (t * m) as u64;
        if steps >= next_eval {
            next_eval += config.eval.interval_env_steps;
            let score = evaluate(&model, &config.env.id, 10, 1_000_000, true)
                .expect("eval")
                .mean();
            let secs = start.elapsed().as_secs_f64();
            println!("{steps:>7} steps {secs:6.1}s eval {score:7.1} train {train_return:7.1} {metrics:?}");
            if score >= target {
                break;
            }
        }
    }
}
