//! Microbenchmark of the learner's hot path: one PPO update of the `cartpole-ppo` preset
//! (20 epochs over a 256-step batch) and one actor inference step, on synthetic data.
//!
//! `cargo run --release -p fleetrl-core --example update_timing -- [update_threads] [rollouts] [device]`
//!
//! `rollouts` (default 2, the preset's `learner.batch_rollouts`) sets the batch: rollouts of
//! 32 steps x 4 envs, as the preset's actors send them. `device` (`cpu` by default, `cuda`)
//! is where the update runs; the update reads its metrics back, so its time includes the
//! device's work.

use std::time::Instant;

use fleetrl_core::algos::Ppo;
use fleetrl_core::config::RunConfig;
use fleetrl_core::envs::make;
use fleetrl_core::items::rollout::{Actions, RolloutBatch};
use fleetrl_core::models::{ActorCritic, Policy};
use tch::Tensor;

fn synthetic_batch(t: usize, b: usize) -> RolloutBatch {
    let n = t * b;
    RolloutBatch {
        t,
        b,
        obs_dim: 4,
        obs: (0..n * 4)
            .map(|i| (i % 7) as f32 / 10.0)
            .collect::<Vec<f32>>()
            .into(),
        action: Actions::Discrete((0..n).map(|i| (i % 2) as i64).collect()),
        reward: vec![1.0; n],
        terminated: (0..n).map(|i| i % 50 == 49).collect(),
        truncated: vec![false; n],
        log_prob: vec![-0.69; n],
        value: vec![0.0; n],
        final_value: vec![0.0; n],
        bootstrap_value: vec![0.0; b],
        bootstrap_obs: vec![0.0; b * 4],
        policy_version: vec![0],
        init_state: None,
        valid: None,
    }
}

fn main() {
    tch::set_num_threads(1);
    fleetrl_core::cpu::keep_tensor_memory(); // as the learner does
    fleetrl_core::cpu::flush_denormals();
    let threads = std::env::args()
        .nth(1)
        .map_or(1, |s| s.parse().expect("update_threads is a number"));
    let rollouts: usize = std::env::args()
        .nth(2)
        .map_or(2, |s| s.parse().expect("rollouts is a number"));
    let device = std::env::args().nth(3).map_or(tch::Device::Cpu, |s| {
        fleetrl_core::config::parse_device(&s).expect("device is cpu, cuda or cuda:N")
    });
    fleetrl_core::config::check_available(&[device]).expect("the device is usable");
    // Found in ./configs or beside the binary's workspace, so a copied binary runs from a
    // checkout's root.
    let config = RunConfig::load("cartpole-ppo", &[]).expect("configs/cartpole-ppo.toml loads");
    let env = make("CartPole-v1").expect("CartPole-v1 is registered");
    let model = ActorCritic::new(
        &config.model,
        &env.observation_space(),
        &env.action_space(),
        device,
    )
    .expect("model builds");
    let batch = synthetic_batch(32, 4 * rollouts);
    let steps = (32 * 4 * rollouts) as f64;
    let mut ppo =
        Ppo::new(config.algo.as_ppo().expect("a PPO preset"), model, 256_000).with_threads(threads);
    for _ in 0..5 {
        ppo.train(&batch);
    }
    let updates = 50;
    let start = Instant::now();
    for _ in 0..updates {
        ppo.train(&batch);
    }
    let per = start.elapsed().as_secs_f64() / updates as f64;
    println!(
        "update on {device:?} ({threads} thread(s), {rollouts} rollout(s), {steps} steps): {:.2} ms -> learner \
         bound {:.0} env steps/s",
        per * 1e3,
        steps / per
    );
    let obs = Tensor::randn([4, 4], (tch::Kind::Float, device));
    let start = Instant::now();
    for _ in 0..2000 {
        let _ = ppo.model().act(&obs, false);
    }
    println!(
        "act (4 envs): {:.1} us",
        start.elapsed().as_secs_f64() / 2000.0 * 1e6
    );
}
