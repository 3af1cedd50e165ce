use fleetrl_core::algos::{registry::build, Batch};
use fleetrl_core::config::RunConfig;
use fleetrl_core::envs::make_configured;
use fleetrl_core::items::round::{RoundBatch, RoundBuilder, RoundStep};
use fleetrl_proto::{Tensor, TensorMap};
use std::time::Instant;
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let config = RunConfig::load(&args[0], &args[1..]).unwrap();
    tch::set_num_threads(config.learner.torch_threads as i32);
    tch::set_num_interop_threads(1);
    let env = make_configured(&config.env).unwrap();
    let (obs, action) = (env.observation_space(), env.action_space());
    let mut algo = build(&config, &obs, &action, &[tch::Device::Cpu]).unwrap();
    let pearl = config.algo.as_pearl().unwrap();
    let items: Vec<TensorMap> = (0..pearl.meta_batch_size)
        .map(|t| {
            let mut b = RoundBuilder::default();
            for i in 0..pearl.round_steps() {
                let x = (i % 7) as f32 / 7.0;
                b.push(RoundStep {
                    obs: &[x, x],
                    action: &[x, -x],
                    reward: -x,
                    score: 0.0,
                    terminated: false,
                    next_obs: &[x, x],
                });
            }
            b.finish(t, 0)
        })
        .collect();
    let stacked = TensorMap::from_pairs(items[0].tensors.keys().map(|k| {
        let parts: Vec<&Tensor> = items.iter().map(|i| &i.tensors[k]).collect();
        (k.clone(), Tensor::stack(&parts).unwrap())
    }));
    let batch = Batch::Rounds(RoundBatch::from_stacked(&stacked, tch::Device::Cpu).unwrap());
    for _ in 0..5 {
        algo.update(&batch).unwrap();
    }
    let t = Instant::now();
    for _ in 0..50 {
        algo.update(&batch).unwrap();
    }
    println!(
        "update {:.2} ms (threads {})",
        t.elapsed().as_secs_f64() * 1e3 / 50.0,
        config.learner.torch_threads
    );
    let t = Instant::now();
    for _ in 0..50 {
        algo.trained().model().export().unwrap();
    }
    println!("export {:.2} ms", t.elapsed().as_secs_f64() * 1e3 / 50.0);
}
