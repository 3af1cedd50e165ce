//! Microbenchmark of one PEARL update at a preset's sizes (default `point-robot-sparse-pearl`),
//! on synthetic rounds: the learner's cost per update, which bounds a PEARL run's wall time
//! at one update per env step. Prints one JSON line.
//!
//! `cargo run --release -p fleetrl-core --example pearl_update -- [preset] [updates]`

use std::time::Instant;

use fleetrl_core::algos::pearl::Pearl;
use fleetrl_core::algos::{Algorithm, Batch};
use fleetrl_core::config::{AlgoConfig, RunConfig};
use fleetrl_core::items::round::{RoundBatch, RoundBuilder, RoundStep};
use fleetrl_core::models::PearlModel;
use fleetrl_proto::space::Space;
use fleetrl_proto::TensorMap;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let preset = args
        .get(1)
        .map_or("point-robot-sparse-pearl", String::as_str);
    let updates: u32 = args.get(2).map_or(Ok(300), |s| s.parse())?;
    let threads: i32 = std::env::var("THREADS").map_or(Ok(1), |s| s.parse())?;
    tch::set_num_threads(threads);
    tch::manual_seed(0);
    let config = RunConfig::load(preset, &[])?;
    let AlgoConfig::Pearl(pearl) = &config.algo else {
        anyhow::bail!("{preset} is not a PEARL preset");
    };
    let boxed = |d: usize| Space::Box {
        shape: vec![d as i64],
        low: vec![-1.0; d],
        high: vec![1.0; d],
    };
    let (obs_dim, act_dim) = (2usize, 2usize);
    let model = PearlModel::new(
        &config.model,
        pearl,
        &boxed(obs_dim),
        &boxed(act_dim),
        tch::Device::Cpu,
    )?;
    let mut learner = Pearl::new(pearl, model, &config.model);
    let steps = (pearl.num_steps_prior + pearl.num_steps_posterior) as usize;
    let rounds: Vec<TensorMap> = (0..pearl.meta_batch_size)
        .map(|task| {
            let mut builder = RoundBuilder::default();
            for i in 0..steps {
                let x = ((i * 7 + task as usize) % 13) as f32 / 13.0 - 0.5;
                builder.push(RoundStep {
                    obs: &[x, -x],
                    action: &[x, x * 0.5],
                    reward: -x.abs(),
                    score: f32::from(x > 0.4),
                    terminated: false,
                    next_obs: &[x * 0.9, -x * 0.9],
                });
            }
            builder.finish(task, 0)
        })
        .collect();
    let stacked = TensorMap::from_pairs(rounds[0].tensors.keys().map(|k| {
        let parts: Vec<_> = rounds.iter().map(|r| &r.tensors[k]).collect();
        (
            k.clone(),
            fleetrl_proto::Tensor::stack(&parts).expect("same shapes"),
        )
    }));
    let batch = Batch::Rounds(RoundBatch::from_stacked(&stacked, tch::Device::Cpu)?);
    for _ in 0..20 {
        learner.update(&batch)?;
    }
    let start = Instant::now();
    for _ in 0..updates {
        learner.update(&batch)?;
    }
    let ms = start.elapsed().as_secs_f64() * 1e3 / f64::from(updates);
    println!("{{\"preset\":\"{preset}\",\"updates\":{updates},\"update_ms\":{ms:.3}}}");
    Ok(())
}
