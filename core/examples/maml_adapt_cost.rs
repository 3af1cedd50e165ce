//! What adapting on the actor costs: times one task's adaptation on PointGoal-v0 as an actor
//! does it (two stages of 100 steps x 10 envs, the inner step between them) and the inner step
//! alone, with the point-maml presets' 64x64 policy on one CPU thread.
//!   cargo run --release -p fleetrl-core --example maml_adapt_cost

use std::time::Instant;

use fleetrl_core::acting::meta::adapt_on_task;
use fleetrl_core::acting::Acting;
use fleetrl_core::algos::maml::{adapt, split_stages, Layout};
use fleetrl_core::config::RunConfig;
use fleetrl_core::envs::make_vec;
use fleetrl_core::items::rollout::RolloutBatch;
use fleetrl_core::models::ActorCritic;
use fleetrl_core::tasks::TaskSet;
use fleetrl_proto::{Tensor, TensorMap};

fn main() -> anyhow::Result<()> {
    tch::set_num_threads(1);
    let config = RunConfig::load("configs/point-maml-trpo.toml", &[])?;
    let maml = config.algo.as_maml().expect("a MAML preset").clone();
    let m = config.actors.envs_per_actor as usize;
    let envs = make_vec(&config.env, m)?;
    let model = ActorCritic::new(
        &config.model,
        envs.observation_space(),
        envs.action_space(),
        tch::Device::Cpu,
    )?;
    let tasks = TaskSet::new(&config.tasks, config.seed);
    let mut acting = Acting::new(envs, 0);
    let rounds = 50;
    let mut rng = rand::rng();
    let mut last = None;
    let start = Instant::now();
    for i in 0..rounds {
        let task = tasks.sample_train(&mut rng);
        last = Some(adapt_on_task(
            &mut acting,
            &model,
            &task,
            &config,
            &maml,
            0,
            i,
        )?);
    }
    let per_task = start.elapsed().as_secs_f64() / rounds as f64;
    // The inner step alone, on the last task's first stage.
    let item = last.expect("at least one round").item;
    let stacked = TensorMap::from_pairs(
        item.tensors
            .iter()
            .filter(|(k, _)| k.as_str() != "task")
            .map(|(k, v)| Ok((k.clone(), Tensor::stack(&[v])?)))
            .collect::<anyhow::Result<Vec<_>>>()?,
    );
    let batch = RolloutBatch::from_stacked(&stacked)?;
    let layout = Layout {
        t: config.actors.rollout_length as usize,
        m,
        stages: 2,
    };
    let theta: Vec<tch::Tensor> = model.heads().policy_params();
    let start = Instant::now();
    for _ in 0..rounds {
        let stages = split_stages(
            &batch,
            layout,
            &maml,
            (model.heads(), &theta),
            tch::Device::Cpu,
        );
        let _ = adapt(
            model.heads(),
            &theta,
            &stages[0][..1],
            maml.inner_lr,
            &maml.options,
            false,
        );
    }
    let inner = start.elapsed().as_secs_f64() / rounds as f64;
    let steps = 2 * layout.t * m;
    println!(
        "one task's adaptation ({steps} env steps): {:.1} ms; advantages + inner step: {:.2} ms \
         ({:.1}% of it)",
        per_task * 1e3,
        inner * 1e3,
        100.0 * inner / per_task
    );
    Ok(())
}
