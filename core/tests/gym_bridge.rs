//! The gymnasium bridge (`gym:` ids, the `python` feature) against gymnasium 1.4 in `.venv`:
//! the hosted envs keep the [`Env`] contract, the batched vector env matches one-env-per-row
//! hosting step for step, auto-resets the same way as native envs, and bad ids, kwargs and
//! spaces fail with errors that say what is wrong.
#![cfg(feature = "python")]

use fleetrl_core::config::{EnvConfig, RunConfig, Vectorization};
use fleetrl_core::envs::python::{GymEnv, GymVecEnv, Host};
use fleetrl_core::envs::{check_env_contract, make, make_configured, make_vec, Env, VecEnv};
use fleetrl_proto::space::{Action, Space};

fn gym(id: &str) -> EnvConfig {
    EnvConfig {
        id: format!("gym:{id}"),
        ..EnvConfig::default()
    }
}

#[test]
fn hosted_envs_keep_the_contract() {
    for id in ["CartPole-v1", "Pendulum-v1", "MountainCarContinuous-v0"] {
        let mut env = make(&format!("gym:{id}")).unwrap_or_else(|e| panic!("{id}: {e}"));
        check_env_contract(env.as_mut());
    }
}

#[test]
fn spaces_come_from_gymnasium() {
    let cartpole = GymEnv::new("CartPole-v1", &toml::Table::new()).unwrap();
    assert_eq!(cartpole.action_space(), Space::Discrete { n: 2 });
    assert_eq!(cartpole.observation_space().flat_dim(), 4);
    let pendulum = GymEnv::new("Pendulum-v1", &toml::Table::new()).unwrap();
    assert_eq!(
        pendulum.action_space(),
        Space::Box {
            shape: vec![1],
            low: vec![-2.0],
            high: vec![2.0]
        }
    );
}

/// The batch path (the envs stepped in one loop in host.py, or an AsyncVectorEnv with a worker
/// process per env, entered per step) and the per-row path (one env each) agree step for step,
/// auto-resets included.
#[test]
fn batched_vector_env_matches_one_env_per_row() {
    for mode in [Vectorization::Sync, Vectorization::Async] {
        batched_matches_per_row(mode);
    }
}

fn batched_matches_per_row(mode: Vectorization) {
    let batch = GymVecEnv::new("CartPole-v1", 3, &toml::Table::new(), mode).unwrap();
    let mut batched = VecEnv::from_batch(Box::new(batch)).unwrap();
    let rows: Vec<Box<dyn Env>> = (0..3).map(|_| make("gym:CartPole-v1").unwrap()).collect();
    let mut per_row = VecEnv::new(rows).unwrap();
    assert_eq!(batched.reset(11), per_row.reset(11));
    let mut ended = 0;
    for t in 0..200i64 {
        let actions = [t % 2, (t / 2) % 2, 1];
        let a = batched.step_discrete(&actions).unwrap().clone();
        let b = per_row.step_discrete(&actions).unwrap();
        assert_eq!(&a, b, "{mode:?} step {t}");
        ended += a.final_obs.iter().filter(|f| f.is_some()).count();
    }
    assert!(ended > 3, "episodes ended and auto-reset: {ended}");
    assert_eq!(batched.drain_episodes(), per_row.drain_episodes());
}

#[test]
fn continuous_batch_and_kwargs() {
    let mut config = gym("Pendulum-v1");
    config.kwargs.insert("g".into(), toml::Value::Float(2.0));
    let mut venv = make_vec(&config, 2).unwrap();
    venv.reset(0);
    for _ in 0..200 {
        let step = venv
            .step(&[
                Action::Continuous(vec![2.0]),
                Action::Continuous(vec![-2.0]),
            ])
            .unwrap();
        assert!(step.reward.iter().all(|r| *r <= 0.0));
    }
    let episodes = venv.drain_episodes();
    assert_eq!(episodes.len(), 2, "gymnasium's 200-step time limit");
    assert!(episodes.iter().all(|e| e.length == 200));
}

#[test]
fn bad_ids_kwargs_and_spaces_are_clear_errors() {
    let err = make_configured(&gym("NoSuchEnv-v0"))
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("not a registered gymnasium env id"), "{err}");
    let mut config = gym("CartPole-v1");
    config
        .kwargs
        .insert("no_such_kwarg".into(), toml::Value::Integer(1));
    let err = make_configured(&config).err().unwrap().to_string();
    assert!(err.contains("no_such_kwarg"), "{err}");
    let err = make("NoSuchEnv-v0").err().unwrap().to_string();
    assert!(
        err.contains("gym:"),
        "unknown native ids point at the gym: prefix: {err}"
    );
}

/// `env.vectorization = "async"` is for gym: ids hosted as one vector env; a native id or a
/// Rust wrapper is refused by name.
#[test]
fn async_vectorization_is_checked() {
    let ok = "[env]\nid = \"gym:CartPole-v1\"\nvectorization = \"async\"\n";
    assert!(RunConfig::from_toml(ok, "t").is_ok());
    for bad in [
        "[env]\nvectorization = \"async\"\n",
        "[env]\nid = \"gym:CartPole-v1\"\nvectorization = \"async\"\nframe_stack = 2\n",
    ] {
        let err = RunConfig::from_toml(bad, "t").unwrap_err().to_string();
        assert!(err.contains("env.vectorization"), "{err}");
    }
}

#[test]
fn mujoco_hopper_is_hosted() {
    let mut env = make("gym:Hopper-v5").unwrap();
    assert_eq!(env.observation_space().flat_dim(), 11);
    check_env_contract(env.as_mut());
}

#[test]
fn atari_pong_is_preprocessed() {
    let config = EnvConfig {
        id: "gym:ALE/Pong-v5".into(),
        atari: true,
        reward_clip: 1.0,
        ..EnvConfig::default()
    };
    let mut env = make_configured(&config).unwrap();
    let Space::Box { shape, .. } = env.observation_space() else {
        panic!("image observations");
    };
    assert_eq!(shape, [4, 84, 84]);
    assert_eq!(env.action_space(), Space::Discrete { n: 6 });
    check_env_contract(env.as_mut());
}

/// HalfCheetahVel-v0 / HalfCheetahDir-v0 replace gymnasium's reward with the task's, computed
/// from the forward velocity a twin HalfCheetah-v5 (forward weight 1, no control cost) reports
/// as its reward for the same seed and actions; tasks draw goals in range, deterministically.
#[test]
fn half_cheetah_task_rewards_follow_the_goal() {
    use fleetrl_core::envs::python::{Goal, HalfCheetahTask};
    use fleetrl_core::tasks::{TaskSet, TasksConfig};
    let set = TaskSet::new(&TasksConfig::default(), 5);
    let mut twin_kwargs = toml::Table::new();
    twin_kwargs.insert("ctrl_cost_weight".into(), toml::Value::Float(0.0));
    for velocity in [true, false] {
        let mut env = HalfCheetahTask::make(velocity, 200).unwrap();
        let mut goals = Vec::new();
        for id in 0..10 {
            env.inner_mut().set_task(&set.get(id).unwrap()).unwrap();
            goals.push(env.inner().goal());
        }
        env.inner_mut().set_task(&set.get(3).unwrap()).unwrap();
        assert_eq!(
            env.inner().goal(),
            goals[3],
            "a task's goal is fixed by its id"
        );
        match goals[3] {
            Goal::Velocity(_) => assert!(goals
                .iter()
                .all(|g| matches!(g, Goal::Velocity(v) if (0.0..2.0).contains(v)))),
            Goal::Direction(_) => {
                assert!(goals.contains(&Goal::Direction(1.0)));
                assert!(goals.contains(&Goal::Direction(-1.0)));
            }
        }
        let mut twin = GymEnv::new("HalfCheetah-v5", &twin_kwargs).unwrap();
        env.reset(Some(11));
        twin.reset(Some(11));
        for t in 0..20 {
            let a: Vec<f32> = (0..6).map(|i| ((t * 7 + i) as f32 * 0.37).sin()).collect();
            let step = env.step(&Action::Continuous(a.clone())).unwrap();
            let v = twin.step(&Action::Continuous(a.clone())).unwrap().reward;
            let ctrl = 0.05 * a.iter().map(|x| x * x).sum::<f32>();
            let want = match goals[3] {
                Goal::Velocity(target) => -(v - target).abs() - ctrl,
                Goal::Direction(dir) => dir * v - ctrl,
            };
            assert!(
                (step.reward - want).abs() < 1e-4,
                "step {t}: {} vs {want}",
                step.reward
            );
        }
    }
}

/// `envpool:` ids: one EnvPool env keeps the contract (the same seed makes a new pool, so the
/// same start), and a whole pool stepped as one batch, with EnvPool's next-step auto-reset
/// turned into same-step auto-reset, agrees step for step with one single-env pool per row
/// (each row reset by the `VecEnv` itself).
#[test]
fn envpool_envs_keep_the_contract_and_auto_reset_like_per_row_hosting() {
    for id in ["envpool:CartPole-v1", "envpool:Pendulum-v1"] {
        let mut env = make(id).unwrap_or_else(|e| panic!("{id}: {e}"));
        check_env_contract(env.as_mut());
    }
    let none = toml::Table::new();
    let batch = GymVecEnv::hosted(Host::EnvPool, "CartPole-v1", 3, &none, Vectorization::Sync);
    let mut batched = VecEnv::from_batch(Box::new(batch.unwrap())).unwrap();
    let rows: Vec<Box<dyn Env>> = (0..3)
        .map(|_| make("envpool:CartPole-v1").unwrap())
        .collect();
    let mut per_row = VecEnv::new(rows).unwrap();
    assert_eq!(batched.reset(11), per_row.reset(11));
    let mut ended = 0;
    for t in 0..300i64 {
        let actions = [t % 2, (t / 3) % 2, 1];
        let a = batched.step_discrete(&actions).unwrap().clone();
        let b = per_row.step_discrete(&actions).unwrap();
        assert_eq!(&a, b, "step {t}");
        for (row, last) in a.final_obs.iter().enumerate() {
            if let Some(last) = last {
                ended += 1;
                // The row's next observation is a fresh start, not the episode's last one.
                assert!(a.obs[row * 4..row * 4 + 4].iter().all(|x| x.abs() <= 0.05));
                assert!(last.iter().zip(&a.obs[row * 4..]).any(|(x, y)| x != y));
            }
        }
    }
    assert!(ended > 5, "episodes ended and auto-reset: {ended}");
    assert_eq!(batched.drain_episodes(), per_row.drain_episodes());
}

#[test]
fn envpool_errors_name_the_problem() {
    let config = |id: &str, kwarg: Option<&str>| {
        let mut config = EnvConfig {
            id: id.into(),
            ..EnvConfig::default()
        };
        if let Some(key) = kwarg {
            config.kwargs.insert(key.into(), toml::Value::Integer(8));
        }
        config
    };
    let err = make_vec(&config("envpool:NoSuchTask-v9", None), 2)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("NoSuchTask-v9") && err.contains("EnvPool task id"),
        "{err}"
    );
    let err = make_vec(&config("envpool:CartPole-v1", Some("num_envs")), 2)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("kwargs.num_envs"), "{err}");
    let async_pool = "[env]\nid = \"envpool:CartPole-v1\"\nvectorization = \"async\"\n";
    let err = RunConfig::from_toml(async_pool, "t")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("env.vectorization") && err.contains("envpool"),
        "{err}"
    );
}
