//! PPO learns CartPole-v1 in one process with no policy lag (the serial mode): acting and
//! updating alternate, as in SB3. Checks the algorithm apart from the distributed plumbing.

use fleetrl_core::algos::{Algorithm, Ppo};
use fleetrl_core::config::RunConfig;
use fleetrl_core::envs::VecEnv;
use fleetrl_core::eval::evaluate;
use fleetrl_core::models::{ActorCritic, Policy};
use fleetrl_core::rollout::{RolloutBatch, RolloutBuilder, StepRecord};
use fleetrl_proto::{Tensor as ProtoTensor, TensorMap};
use tch::Tensor;

fn preset() -> RunConfig {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/cartpole-ppo.toml");
    RunConfig::load(path, &[]).expect("the cartpole-ppo preset loads")
}

/// One rollout of `t` steps from `envs` with `model`; returns the stacked single-item batch.
fn collect(envs: &mut VecEnv, obs: &mut Vec<f32>, model: &ActorCritic, t: usize) -> TensorMap {
    let (m, d) = (envs.num_envs(), envs.obs_dim());
    let mut builder = RolloutBuilder::new(t, m, d);
    for _ in 0..t {
        let act = model.act(&Tensor::from_slice(obs).view([m as i64, d as i64]), false);
        let action = Vec::<i64>::try_from(&act.action).unwrap();
        let log_prob = Vec::<f32>::try_from(&act.log_prob).unwrap();
        let value = Vec::<f32>::try_from(&act.value).unwrap();
        let step = envs.step_discrete(&action).unwrap();
        let final_value: Vec<f32> = (0..m)
            .map(|i| match (&step.final_obs[i], step.truncated[i]) {
                (Some(o), true) => model
                    .value(&Tensor::from_slice(o).view([1, d as i64]))
                    .double_value(&[0]) as f32,
                _ => 0.0,
            })
            .collect();
        builder.push(StepRecord {
            obs,
            action: &action,
            log_prob: &log_prob,
            value: &value,
            reward: &step.reward,
            terminated: &step.terminated,
            truncated: &step.truncated,
            final_value: &final_value,
        });
        obs.copy_from_slice(&step.obs);
    }
    let boot =
        Vec::<f32>::try_from(&model.value(&Tensor::from_slice(obs).view([m as i64, d as i64])))
            .unwrap();
    let item = builder.finish(&boot, 0);
    TensorMap::from_pairs(
        item.tensors
            .iter()
            .map(|(k, v)| (k.clone(), ProtoTensor::stack(&[v]).unwrap())),
    )
}

#[test]
fn serial_ppo_solves_cartpole() {
    tch::set_num_threads(1);
    tch::manual_seed(0);
    let config = preset();
    let m = (config.actors.count * config.actors.envs_per_actor) as usize;
    let t = config.actors.rollout_length as usize;
    let mut envs = VecEnv::make("CartPole-v1", m).unwrap();
    let model = ActorCritic::new(
        &config.model,
        &envs.observation_space(),
        &envs.action_space(),
        tch::Device::Cpu,
    )
    .unwrap();
    let budget = 60_000;
    let mut ppo = Ppo::new(
        &config.algo,
        model,
        (config.stop.total_env_steps / (t * m) as u64).max(1),
    );
    let mut obs = envs.reset(0).to_vec();
    let mut best = 0.0f64;
    let mut steps = 0;
    while steps < budget {
        let batch = collect(&mut envs, &mut obs, ppo.model(), t);
        ppo.update(&RolloutBatch::from_stacked(&batch).unwrap());
        steps += t * m;
        if steps % 5_120 == 0 {
            let score = evaluate(ppo.model(), "CartPole-v1", 10, 1_000_000, true)
                .unwrap()
                .mean();
            eprintln!("{steps} steps: eval {score:.1}");
            best = best.max(score);
            if score >= 475.0 {
                break;
            }
        }
    }
    assert!(
        best >= 475.0,
        "serial PPO did not solve CartPole in {budget} steps (best eval {best})"
    );
}
