//! PPO learns CartPole-v1 in one process with no policy lag (the serial mode): acting and
//! updating alternate, as in SB3. Checks the algorithm apart from the distributed plumbing.

use fleetrl_core::acting::eval::evaluate;
use fleetrl_core::acting::Acting;
use fleetrl_core::algos::Ppo;
use fleetrl_core::config::RunConfig;
use fleetrl_core::envs::VecEnv;
use fleetrl_core::items::rollout::RolloutBuilder;
use fleetrl_core::models::ActorCritic;

use crate::common::as_batch;

fn preset() -> RunConfig {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/cartpole-ppo.toml");
    RunConfig::load(path, &[]).expect("the cartpole-ppo preset loads")
}

#[test]
fn serial_ppo_solves_cartpole() {
    tch::set_num_threads(1);
    tch::manual_seed(0);
    let config = preset();
    let m = (config.actors.count * config.actors.envs_per_actor) as usize;
    let t = config.actors.rollout_length as usize;
    let envs = VecEnv::make("CartPole-v1", m).unwrap();
    let model = ActorCritic::new(
        &config.model,
        envs.observation_space(),
        envs.action_space(),
        tch::Device::Cpu,
    )
    .unwrap();
    let mut builder = RolloutBuilder::new(t, m, envs.obs_dim());
    let mut acting = Acting::new(envs, 0);
    let mut ppo = Ppo::new(
        config.algo.as_ppo().expect("a PPO preset"),
        model,
        config.stop.total_env_steps,
    );
    let budget = 60_000;
    let (mut steps, mut best) = (0, 0.0f64);
    while steps < budget && best < 475.0 {
        let bootstrap = acting.collect(ppo.model(), &mut builder).unwrap();
        ppo.train(&as_batch(&builder.finish(&bootstrap, 0)));
        steps += t * m;
        if steps % 5_120 == 0 {
            let score = evaluate(ppo.model(), "CartPole-v1", 10, 1_000_000, true)
                .unwrap()
                .mean();
            eprintln!("{steps} steps: eval {score:.1}");
            best = best.max(score);
        }
    }
    assert!(
        best >= 475.0,
        "serial PPO did not solve CartPole in {budget} steps (best eval {best})"
    );
}
