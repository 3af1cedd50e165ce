//! Update-for-update parity with Stable-Baselines3 (2.9.2, in `.venv` from scripts/setup.sh):
//! from the same initial weights and the same batch, one update of fleetrl's algorithm and one
//! of SB3's own code (run by `scripts/sb3_parity.py`) leave the same parameters (within 1e-5)
//! and compute the same losses. Each test writes fleetrl's initial parameters, the batch and
//! its config to a directory, runs SB3 there, updates on the fleetrl side and compares.
//!
//! Where SB3 differs on purpose, the test sets SB3's option to match or says so: see each
//! test's doc and the conventions table in docs/algorithms.md.
//!
//! A test binary of its own, its tests one at a time ([`serial`]): the SAC test hands SB3 the
//! Gaussian noise fleetrl will draw from torch's global generator after a seed, which holds
//! only while no other thread draws from it.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard, PoisonError};

use fleetrl_core::acting::Acting;
use fleetrl_core::algos::config::AlgoConfig;
use fleetrl_core::algos::dqn::Dqn;
use fleetrl_core::algos::returns::gae;
use fleetrl_core::algos::sac::Sac;
use fleetrl_core::algos::td3::Td3;
use fleetrl_core::algos::{Algorithm, Ppo};
use fleetrl_core::config::RunConfig;
use fleetrl_core::envs::VecEnv;
use fleetrl_core::items::rollout::RolloutBuilder;
use fleetrl_core::items::transition::TransitionBatch;
use fleetrl_core::models::{ActorCritic, OffPolicyModel, PolicyKind};
use tch::{Device, Kind, Tensor};

use common::as_batch;

/// Held for a whole test: no two tests draw from torch's global generator at once.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Parameters after the update agree to this (float32, summed in different orders).
const PARAM_TOL: f64 = 1e-5;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn preset(name: &str) -> RunConfig {
    let path = root().join(format!("configs/{name}.toml"));
    RunConfig::load(path.to_str().expect("a UTF-8 path"), &[]).expect("the preset loads")
}

fn write(dir: &Path, file: &str, tensors: &[(String, Tensor)]) {
    let named: Vec<(&str, &Tensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    Tensor::write_safetensors(&named, dir.join(file)).expect("safetensors written");
}

/// Runs SB3's side of `algo` on fleetrl's initial parameters `init`, its `batch` and its
/// `config` (written to a scratch directory, removed afterwards unless SB3 fails) and reads
/// back what it wrote, by name.
fn sb3(
    algo: &str,
    init: &[(String, Tensor)],
    batch: &[(String, Tensor)],
    config: serde_json::Value,
) -> HashMap<String, Tensor> {
    let dir =
        std::env::temp_dir().join(format!("fleetrl-sb3-parity-{algo}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    write(&dir, "init.safetensors", init);
    write(&dir, "batch.safetensors", batch);
    std::fs::write(dir.join("config.json"), config.to_string()).expect("config written");
    let output = Command::new(root().join(".venv/bin/python"))
        .arg(root().join("scripts/sb3_parity.py"))
        .arg(algo)
        .arg(&dir)
        .output()
        .expect("python runs (run scripts/setup.sh for .venv)");
    assert!(
        output.status.success(),
        "sb3_parity.py {algo} (files in {}): {}",
        dir.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let out = Tensor::read_safetensors(dir.join("out.safetensors")).expect("SB3's results");
    let _ = std::fs::remove_dir_all(&dir);
    out.into_iter().collect()
}

/// The largest absolute difference between two tensors of one shape.
fn max_diff(ours: &Tensor, theirs: &Tensor) -> f64 {
    assert_eq!(ours.size(), theirs.size());
    (ours.to_kind(Kind::Float) - theirs.to_kind(Kind::Float))
        .abs()
        .max()
        .double_value(&[])
}

/// Every parameter in `ours` against SB3's `after.NAME`, within [`PARAM_TOL`]; returns the
/// largest difference. Also checks the update moved some parameter from `init` by more than
/// `moved_at_least` (a test that compares parameters no update touched proves nothing).
fn compare_params(
    ours: &[(String, Tensor)],
    init: &[(String, Tensor)],
    theirs: &HashMap<String, Tensor>,
    moved_at_least: f64,
) -> f64 {
    assert_eq!(
        ours.len(),
        init.len(),
        "the same parameters before and after"
    );
    let mut worst = 0.0f64;
    let mut moved = 0.0f64;
    for ((name, value), (init_name, before)) in ours.iter().zip(init) {
        assert_eq!(name, init_name);
        let other = theirs
            .get(&format!("after.{name}"))
            .unwrap_or_else(|| panic!("SB3 returned no {name}"));
        let diff = max_diff(value, other);
        assert!(
            diff <= PARAM_TOL,
            "{name}: fleetrl and SB3 differ by {diff:e} after the update"
        );
        worst = worst.max(diff);
        moved = moved.max(max_diff(value, before));
    }
    assert!(
        moved > moved_at_least,
        "the update barely moved the parameters ({moved:e})"
    );
    worst
}

fn copy_params(params: Vec<(String, Tensor)>) -> Vec<(String, Tensor)> {
    params
        .into_iter()
        .map(|(k, v)| (k, v.detach().copy()))
        .collect()
}

fn floats(v: &[f32], shape: &[i64]) -> Tensor {
    Tensor::from_slice(v).view(shape)
}

fn flags(v: &[bool], shape: &[i64]) -> Tensor {
    let v: Vec<f32> = v.iter().map(|&x| f32::from(u8::from(x))).collect();
    floats(&v, shape)
}

/// PPO on CartPole against SB3's `PPO.train` with the `cartpole-ppo` preset's
/// hyperparameters (RL-Zoo's), but 4 minibatches of 64 steps over 2 epochs to exercise
/// per-minibatch advantage normalisation, and an entropy bonus of 0.01. GAE is computed on each
/// side (SB3's `RolloutBuffer.compute_returns_and_advantage`) from the behaviour values in the
/// rollout. Differences set to match: fleetrl takes its minibatches in order
/// (`algo.shuffle = false`) and SB3 is handed the permutation that gives the same rows (SB3
/// always shuffles); SB3 starts from the weights fleetrl drew (`ortho_init = False` so it keeps
/// them); the learning rate and clip range are the values of the linear schedules at step 0.
/// The rollout has no truncated episode (SB3 bootstraps those in its rollout collection, not
/// in the buffer).
#[test]
fn ppo_update_matches_sb3() {
    let _serial = serial();
    tch::set_num_threads(1);
    tch::manual_seed(0);
    let config = preset("cartpole-ppo");
    let mut algo = config.algo.as_ppo().expect("a PPO preset").clone();
    algo.epochs = 2;
    algo.minibatches = 4;
    algo.shuffle = false;
    algo.entropy_loss_coeff = 0.01;
    let (t, m) = (32, 8);
    let envs = VecEnv::make("CartPole-v1", m).unwrap();
    let model = ActorCritic::new(
        &config.model,
        envs.observation_space(),
        envs.action_space(),
        Device::Cpu,
    )
    .unwrap();
    let obs_dim = envs.obs_dim();
    let mut builder = RolloutBuilder::new(t, m, obs_dim);
    let mut acting = Acting::new(envs, 7);
    let bootstrap = acting.collect(&model, &mut builder).unwrap();
    let batch = as_batch(&builder.finish(&bootstrap, 0));
    assert!(
        batch.terminated.iter().any(|&d| d),
        "the rollout ends an episode"
    );
    assert!(
        !batch.truncated.iter().any(|&d| d),
        "the rollout truncates no episode"
    );

    let init = copy_params(model.named_parameters());
    let (ti, bi, di) = (t as i64, m as i64, obs_dim as i64);
    let tensors = [
        (
            "obs".into(),
            batch.obs.to_tensor(Device::Cpu).view([ti, bi, di]),
        ),
        (
            "action".into(),
            batch.action.to_tensor(Device::Cpu).view([ti, bi]),
        ),
        ("reward".into(), floats(&batch.reward, &[ti, bi])),
        ("terminated".into(), flags(&batch.terminated, &[ti, bi])),
        ("truncated".into(), flags(&batch.truncated, &[ti, bi])),
        ("value".into(), floats(&batch.value, &[ti, bi])),
        ("log_prob".into(), floats(&batch.log_prob, &[ti, bi])),
        (
            "bootstrap_value".into(),
            floats(&batch.bootstrap_value, &[bi]),
        ),
    ];
    let mut ppo = Ppo::new(&algo, model, config.stop.total_env_steps);
    let (lr, clip) = ppo.schedule();
    let json = serde_json::json!({
        "algo": &algo,
        "model": &config.model,
        "learning_rate": lr,
        "clip_range": clip,
    });
    let theirs = sb3("ppo", &init, &tensors, json);
    // The mapping is right: SB3's policy with fleetrl's weights scores the rollout as the
    // acting policy did, and the two GAEs agree.
    assert!(max_diff(&floats(&batch.value, &[ti * bi]), &theirs["before.value"]) < 1e-5);
    assert!(
        max_diff(
            &floats(&batch.log_prob, &[ti * bi]),
            &theirs["before.log_prob"]
        ) < 1e-5
    );
    let returns = gae(
        &batch.step_data(),
        algo.discount as f32,
        algo.gae_lambda as f32,
        true,
    );
    assert!(
        max_diff(
            &floats(&returns.advantage, &[ti * bi]),
            &theirs["before.advantage"]
        ) < 1e-5
    );

    let metrics = ppo.train(&batch);
    let after = ppo.model().named_parameters();
    let worst = compare_params(&after, &init, &theirs, 1e-3);
    let ours_total = metrics.get("policy_loss").unwrap()
        + algo.value_loss_coeff * metrics.get("value_loss").unwrap()
        - algo.entropy_loss_coeff * metrics.get("entropy").unwrap();
    let losses = [
        ("total", ours_total, theirs["loss.total"].double_value(&[])),
        (
            "value",
            metrics.get("value_loss").unwrap(),
            theirs["loss.value"].double_value(&[]),
        ),
        (
            "grad_norm",
            metrics.get("grad_norm").unwrap(),
            theirs["loss.grad_norm"].double_value(&[]),
        ),
    ];
    for (name, ours, sb3) in losses {
        assert_close(&format!("PPO's last {name} loss"), ours, sb3, 1e-5);
    }
    eprintln!("PPO parity: parameters within {worst:e}; losses {losses:?}");
}

/// DQN against SB3's `DQN.train`: two gradient steps on one batch of 64 transitions (SB3's
/// replay sampling is replaced by the batch) with the `cartpole-dqn` preset's hyperparameters.
/// Differences set to match: fleetrl's `algo.double_q = false` (SB3's DQN has no double Q);
/// the n-step discounts go to SB3 as its `discounts` (0 where the episode ended). The target
/// network starts from weights of its own (with the online ones, double Q would pick the same
/// actions and the test could not tell) and is not updated in the two steps (SB3 updates it
/// outside `train`, every `target_update_interval` env steps; fleetrl every `target.period`
/// updates).
#[test]
fn dqn_update_matches_sb3() {
    let _serial = serial();
    tch::set_num_threads(1);
    tch::manual_seed(0);
    let config = preset("cartpole-dqn");
    let AlgoConfig::Dqn(algo) = &config.algo else {
        panic!("a DQN preset");
    };
    let mut algo = algo.clone();
    algo.double_q = false;
    let updates = 2;
    assert!(
        algo.target.period > updates,
        "no target update in the test's steps"
    );
    let envs = VecEnv::make("CartPole-v1", 1).unwrap();
    let make = || {
        OffPolicyModel::new(
            &config.model,
            PolicyKind::QValues,
            0,
            envs.observation_space(),
            envs.action_space(),
            Device::Cpu,
        )
        .unwrap()
    };
    let (model, target, other) = (make(), make(), make());
    let mut dqn = Dqn::new(&algo, model, target);
    let file = distinct_target(&mut dqn, &other);
    let rows = algo.replay.batch_size as i64;
    let gamma_n = algo.discount.powi(algo.replay.n_step as i32);
    let ended = Tensor::rand([rows], (Kind::Float, Device::Cpu)).lt(0.2);
    let batch = TransitionBatch {
        obs: Tensor::randn([rows, 4], (Kind::Float, Device::Cpu)),
        action: Tensor::randint(2, [rows], (Kind::Int64, Device::Cpu)),
        reward: Tensor::rand([rows], (Kind::Float, Device::Cpu)) * 3.0,
        discount: Tensor::full([rows], gamma_n, (Kind::Float, Device::Cpu))
            .masked_fill(&ended, 0.0),
        next_obs: Tensor::randn([rows, 4], (Kind::Float, Device::Cpu)),
        weights: Tensor::ones([rows], (Kind::Float, Device::Cpu)),
    };
    let json = serde_json::json!({"algo": &algo, "model": &config.model, "updates": updates});
    let theirs = sb3("dqn", &file, &transitions(&batch, Vec::new()), json);

    let mut losses = Vec::new();
    for step in 0..updates as i64 {
        let metrics = dqn.train(&batch).unwrap().metrics;
        for (name, key) in [("q_loss", "loss.q"), ("grad_norm", "loss.grad_norm")] {
            let (ours, sb3) = (
                metrics.get(name).unwrap(),
                theirs[key].double_value(&[step]),
            );
            assert_close(&format!("DQN step {step}'s {name}"), ours, sb3, 1e-5);
            losses.push((name, ours, sb3));
        }
    }
    let worst = compare_with_targets(&dqn, &file, &theirs, false);
    eprintln!("DQN parity: parameters within {worst:e}; losses {losses:?}");
}

/// A batch of `rows` random transitions on MountainCarContinuous (2-d observations, actions
/// in [-1, 1], where SB3's rescaled actions are the env's), a fifth of them ending episodes.
fn continuous_batch(rows: i64, gamma_n: f64) -> TransitionBatch {
    let f = (Kind::Float, Device::Cpu);
    let ended = Tensor::rand([rows], f).lt(0.2);
    TransitionBatch {
        obs: Tensor::randn([rows, 2], f),
        action: Tensor::rand([rows, 1], f) * 2.0 - 1.0,
        reward: Tensor::randn([rows], f),
        discount: Tensor::full([rows], gamma_n, f).masked_fill(&ended, 0.0),
        next_obs: Tensor::randn([rows, 2], f),
        weights: Tensor::ones([rows], f),
    }
}

/// `batch`'s tensors by name, and `extra` ones.
fn transitions(batch: &TransitionBatch, extra: Vec<(String, Tensor)>) -> Vec<(String, Tensor)> {
    let mut tensors = vec![
        ("obs".to_string(), batch.obs.shallow_clone()),
        ("action".to_string(), batch.action.shallow_clone()),
        ("reward".to_string(), batch.reward.shallow_clone()),
        ("discount".to_string(), batch.discount.shallow_clone()),
        ("next_obs".to_string(), batch.next_obs.shallow_clone()),
    ];
    tensors.extend(extra);
    tensors
}

/// An actor-critic model of `kind` for MountainCarContinuous with `critics` Q networks.
fn continuous_model(config: &RunConfig, kind: PolicyKind, critics: u32) -> OffPolicyModel {
    let envs = VecEnv::make("MountainCarContinuous-v0", 1).unwrap();
    OffPolicyModel::new(
        &config.model,
        kind,
        critics,
        envs.observation_space(),
        envs.action_space(),
        Device::Cpu,
    )
    .unwrap()
}

/// The online parameters and the target network's (`target.NAME`) of an off-policy
/// algorithm, against SB3's; `file` holds both initial sets (see [`distinct_target`]). SB3's
/// SAC has no policy target (fleetrl's SAC keeps one that its losses never read): the targets
/// compared are those SB3 has, every critic's at least. With `target_moves`, the update must
/// have moved the targets (Polyak averaging with tau 0.005 moves them little).
fn compare_with_targets(
    algo: &dyn Algorithm,
    file: &[(String, Tensor)],
    theirs: &HashMap<String, Tensor>,
    target_moves: bool,
) -> f64 {
    let (target_init, init): (Vec<_>, Vec<_>) = (file.iter())
        .map(|(n, t)| (n.clone(), t.shallow_clone()))
        .partition(|(name, _)| name.starts_with("target."));
    let online = compare_params(
        &algo.trained().model().named_parameters(),
        &init,
        theirs,
        1e-3,
    );
    let target: Vec<(String, Tensor)> = algo
        .state()
        .into_iter()
        .filter(|(name, _)| name.starts_with("target."))
        .collect();
    let (target, target_init): (Vec<_>, Vec<_>) = target
        .into_iter()
        .zip(target_init)
        .filter(|((name, _), _)| {
            let critic = !name.starts_with("target.pi.");
            assert!(
                !critic || theirs.contains_key(name),
                "SB3 returned no {name}"
            );
            theirs.contains_key(name)
        })
        .unzip();
    let renamed: HashMap<String, Tensor> = theirs
        .iter()
        .map(|(n, t)| (format!("after.{n}"), t.shallow_clone()))
        .collect();
    let moved = if target_moves { 1e-7 } else { -1.0 };
    online.max(compare_params(&target, &target_init, &renamed, moved))
}

/// Gives `algo`'s target network the weights of `other` (a model of the same shape drawn
/// apart): both sides start from targets unlike the online networks, so a loss that read
/// the wrong one would differ. Returns the online parameters and the targets' as
/// `target.NAME`, what `init.safetensors` holds.
fn distinct_target(algo: &mut dyn Algorithm, other: &OffPolicyModel) -> Vec<(String, Tensor)> {
    let weights: HashMap<String, Tensor> = other.named_parameters().into_iter().collect();
    let state: Vec<(String, Tensor)> = (algo.state().into_iter())
        .map(|(name, t)| match name.strip_prefix("target.") {
            Some(plain) => (name.clone(), weights[plain].detach().copy()),
            None => (name, t),
        })
        .collect();
    algo.load_state(&state).expect("the state loads");
    let mut file = copy_params(algo.trained().model().named_parameters());
    file.extend(
        state
            .into_iter()
            .filter(|(name, _)| name.starts_with("target.")),
    );
    file
}

/// Asserts `ours` and SB3's `theirs` agree within `tol`, relative to `1 + |theirs|`.
fn assert_close(what: &str, ours: f64, theirs: f64, tol: f64) {
    assert!(
        (ours - theirs).abs() <= tol * (1.0 + theirs.abs()),
        "{what}: fleetrl {ours}, SB3 {theirs}"
    );
}

/// TD3 against SB3's `TD3.train`: two gradient steps on one batch of 256 transitions (the
/// `pendulum-td3` preset's hyperparameters), so the second step also updates the actor and
/// the Polyak targets (policy delay 2). Differences set to match: target policy smoothing is
/// off on both sides (`algo.target_noise = 0`, SB3's `target_policy_noise = 0`): its noise is
/// random. The env's actions are in [-1, 1]: SB3's critics read actions rescaled to [-1, 1],
/// fleetrl's read them at the env's scale, the same here and on MuJoCo's tasks but not on
/// Pendulum's [-2, 2].
#[test]
fn td3_update_matches_sb3() {
    let _serial = serial();
    tch::set_num_threads(1);
    tch::manual_seed(0);
    let config = preset("pendulum-td3");
    let AlgoConfig::Td3(algo) = &config.algo else {
        panic!("a TD3 preset");
    };
    let mut algo = algo.clone();
    algo.target_noise = 0.0;
    let updates = 2;
    assert_eq!(algo.policy_delay, 2, "the second step updates the actor");
    let make = || continuous_model(&config, PolicyKind::Deterministic, algo.num_critics);
    let mut td3 = Td3::new(&algo, make(), make());
    let file = distinct_target(&mut td3, &make());
    let batch = continuous_batch(algo.replay.batch_size as i64, algo.discount);
    let json = serde_json::json!({"algo": &algo, "model": &config.model, "updates": updates});
    let theirs = sb3("td3", &file, &transitions(&batch, Vec::new()), json);

    let mut metrics = Vec::new();
    for step in 0..updates {
        let m = td3.train(&batch).unwrap().metrics;
        let q = m.get("q_loss").unwrap();
        assert_close(
            &format!("TD3 step {step}'s critic loss"),
            q,
            theirs["loss.q"].double_value(&[step]),
            1e-5,
        );
        metrics.push(m);
    }
    let policy = metrics[1].get("policy_loss").unwrap();
    assert_close(
        "TD3's policy loss",
        policy,
        theirs["loss.policy"].double_value(&[]),
        1e-5,
    );
    let worst = compare_with_targets(&td3, &file, &theirs, true);
    eprintln!("TD3 parity: parameters and targets within {worst:e}; {metrics:?}");
}

/// SAC against SB3's `SAC.train`: two gradient steps on one batch of 256 transitions with the
/// `pendulum-sac` preset's hyperparameters (automatic temperature from 1, target entropy -1,
/// Polyak targets every step), on the same Gaussian noise: fleetrl draws each step's two
/// samples (`a' ~ pi(s')` for the target, then `a~ ~ pi(s)` for the policy) from torch's
/// generator; the test draws the same numbers from the same seed and hands them to SB3, which
/// samples in the other order. The temperature: SB3 steps it before the critics, fleetrl after
/// the policy; both use the value from before the step in that step's losses, so one step is
/// the same either way. SB3 has one learning rate (the preset's two are equal).
#[test]
fn sac_update_matches_sb3() {
    let _serial = serial();
    tch::set_num_threads(1);
    tch::manual_seed(0);
    let config = preset("pendulum-sac");
    let AlgoConfig::Sac(algo) = &config.algo else {
        panic!("a SAC preset");
    };
    let updates = 2;
    let make = || continuous_model(&config, PolicyKind::SquashedGaussian, algo.num_critics);
    let mut sac = Sac::new(algo, make(), make());
    let file = distinct_target(&mut sac, &make());
    let rows = algo.replay.batch_size as i64;
    let batch = continuous_batch(rows, algo.discount);
    // fleetrl's noise in its order (next observations, then observations) for each step,
    // handed to SB3 in its order (observations first).
    let seed = 11;
    tch::manual_seed(seed);
    let mut noise = Vec::new();
    for step in 0..updates {
        let next = Tensor::randn([rows, 1], (Kind::Float, Device::Cpu));
        let now = Tensor::randn([rows, 1], (Kind::Float, Device::Cpu));
        noise.push((format!("noise.{}", 2 * step), now));
        noise.push((format!("noise.{}", 2 * step + 1), next));
    }
    let json = serde_json::json!({"algo": algo, "model": &config.model, "updates": updates});
    let theirs = sb3("sac", &file, &transitions(&batch, noise), json);

    tch::manual_seed(seed);
    let mut metrics = Vec::new();
    for step in 0..updates {
        let m = sac.train(&batch).unwrap().metrics;
        let q = m.get("q_loss").unwrap();
        assert_close(
            &format!("SAC step {step}'s critic loss"),
            q,
            theirs["loss.q"].double_value(&[step]),
            1e-5,
        );
        metrics.push(m);
    }
    let mean = |name: &str| metrics.iter().map(|m| m.get(name).unwrap()).sum::<f64>() / 2.0;
    assert_close(
        "SAC's mean policy loss",
        mean("policy_loss"),
        theirs["loss.policy"].double_value(&[]),
        1e-5,
    );
    let log_alpha = sac
        .state()
        .into_iter()
        .find(|(name, _)| name.ends_with("log_alpha"))
        .expect("the temperature in the state")
        .1;
    let alpha_diff = max_diff(&log_alpha, &theirs["after.log_alpha"]);
    assert!(
        alpha_diff <= PARAM_TOL,
        "log alpha: fleetrl and SB3 differ by {alpha_diff:e}"
    );
    let worst = compare_with_targets(&sac, &file, &theirs, true);
    eprintln!("SAC parity: parameters and targets within {worst:e}, log alpha {alpha_diff:e}; {metrics:?}");
}
