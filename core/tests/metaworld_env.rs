//! Meta-World ML1 as a task family (`MetaWorld/` ids, metaworld 3.1.1 from
//! `.venv/metaworld`). Its own test binary: metaworld runs on the mujoco 3.3.0 it pins, which
//! cannot share an interpreter with the mujoco 4.0 that gymnasium's MuJoCo envs in
//! gym_bridge.rs load.
//!
//! Checked: the env keeps the [`Env`] contract; a task id fixes the goal in every process, and
//! different ids give different goals in ML1's goal range; and a twin made by metaworld's own
//! code in a separate Python process, given the same task vector encoded as ML1 encodes its
//! tasks (the goal hidden), gives the same observations and rewards for the same actions; and
//! Meta-World's success flag reaches the episode records: a hand steered to the goal
//! succeeds, one that stays put does not.
#![cfg(feature = "python")]

use std::process::Command;

use fleetrl_core::config::EnvConfig;
use fleetrl_core::envs::python::MetaWorldTask;
use fleetrl_core::envs::{check_env_contract, make, make_vec, Env};
use fleetrl_core::tasks::{TaskSet, TasksConfig};
use fleetrl_proto::space::{Action, Space};

fn actions(t: usize) -> Vec<f32> {
    (0..4).map(|i| ((t * 5 + i) as f32 * 0.61).sin()).collect()
}

#[test]
fn metaworld_env_keeps_the_contract() {
    let mut env = make("MetaWorld/reach-v3").unwrap();
    assert_eq!(env.observation_space().flat_dim(), 39);
    assert!(matches!(env.action_space(), Space::Box { ref shape, .. } if shape == &[4]));
    check_env_contract(env.as_mut());
}

#[test]
fn bad_names_are_refused_by_name() {
    let err = make("MetaWorld/reach-v9")
        .err()
        .expect("an unknown name")
        .to_string();
    assert!(
        err.contains("reach-v9") && err.contains("reach-v3"),
        "{err}"
    );
}

#[test]
fn tasks_fix_goals_in_ml1_range_and_match_metaworld_itself() {
    let set = TaskSet::new(&TasksConfig::default(), 3);
    let mut env = MetaWorldTask::make("reach-v3", 0).unwrap();
    let mut goals = Vec::new();
    for id in [0, 1, 2, 100, 101] {
        env.set_task(&set.get(id).unwrap()).unwrap();
        env.reset(Some(0));
        goals.push(env.goal().unwrap());
    }
    for (i, g) in goals.iter().enumerate() {
        // reach-v3's goal space: x in [-0.1, 0.1], y in [0.8, 0.9], z in [0.05, 0.3].
        assert!(
            (-0.1..=0.1).contains(&g[0])
                && (0.8..=0.9).contains(&g[1])
                && (0.05..=0.3).contains(&g[2]),
            "goal {i} {g:?} outside ML1's range"
        );
        for h in &goals[..i] {
            assert_ne!(g, h, "two tasks share a goal");
        }
    }
    let task = set.get(101).unwrap();
    let mut other = MetaWorldTask::make("reach-v3", 0).unwrap();
    other.set_task(&task).unwrap();
    other.reset(Some(5));
    assert_eq!(
        other.goal().unwrap(),
        goals[4],
        "task 101's goal differs between envs"
    );

    // The same task, seed and actions in metaworld's own env, in its own process.
    let steps = 30;
    let mut ours = vec![other.reset(Some(5))];
    let mut rewards = Vec::new();
    for t in 0..steps {
        let step = other.step(&Action::Continuous(actions(t))).unwrap();
        ours.push(step.obs);
        rewards.push(step.reward);
    }
    assert!(
        ours.iter().all(|o| o[36..] == [0.0, 0.0, 0.0]),
        "ML1 hides the goal: the observation's last three entries stay 0"
    );
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let script = format!(
        r#"
import json, math, pickle, sys
import numpy as np
import metaworld
from metaworld import env_dict
name = "reach-v3"
cls = env_dict.ALL_V3_ENVIRONMENTS[name]
env = cls()
kwargs = dict(env_dict.ML1_ARGS_KWARGS[name]["kwargs"])
del kwargs["task_id"]
kwargs.update(rand_vec=np.array({rand_vec:?}), env_cls=cls)
kwargs.update(metaworld._ML_OVERRIDE)
env.set_task(metaworld._encode_task(name, kwargs))
obs, _ = env.reset()
out = {{"obs": [obs.tolist()], "rewards": []}}
for t in range({steps}):
    a = np.array([math.sin(float(np.float32((t * 5 + i) * np.float32(0.61)))) for i in range(4)], dtype=np.float32)
    obs, r, *_ = env.step(a)
    out["obs"].append(obs.tolist())
    out["rewards"].append(float(r))
print(json.dumps(out))
"#,
        rand_vec = other.task_vector().unwrap(),
    );
    let output = Command::new(root.join(".venv/bin/python"))
        .env("PYTHONPATH", root.join(".venv/metaworld"))
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "metaworld twin: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let twin: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    for t in 0..=steps {
        let theirs: Vec<f32> = serde_json::from_value(twin["obs"][t].clone()).unwrap();
        for (a, b) in ours[t].iter().zip(&theirs) {
            assert!(
                (a - b).abs() < 1e-5,
                "step {t}: obs {:?} vs {theirs:?}",
                ours[t]
            );
        }
    }
    for (t, r) in rewards.iter().enumerate() {
        let theirs = twin["rewards"][t].as_f64().unwrap() as f32;
        assert!(
            (r - theirs).abs() < 1e-4,
            "step {t}: reward {r} vs {theirs}"
        );
    }
}

/// Two reach-v3 episodes of 100 steps side by side in a `VecEnv`: row 0's hand is steered to
/// the goal (the hand is the observation's first three entries; the goal comes from the env),
/// row 1's stays where it starts. Only row 0's episode is a success.
#[test]
fn success_flags_reach_the_episode_records() {
    let config = EnvConfig {
        id: "MetaWorld/reach-v3".into(),
        max_episode_steps: 100,
        ..EnvConfig::default()
    };
    let mut probe = MetaWorldTask::make("reach-v3", 100).unwrap();
    let task = TaskSet::new(&TasksConfig::default(), 3).get(7).unwrap();
    probe.set_task(&task).unwrap();
    probe.reset(Some(0));
    let goal = probe.goal().unwrap();
    assert_eq!(probe.success(), Some(false), "no success before a step");

    let mut venv = make_vec(&config, 2).unwrap();
    venv.set_task(&task, &config.id).unwrap();
    let mut obs = venv.reset(0).to_vec();
    let mut episodes = Vec::new();
    for _ in 0..100 {
        let hand = &obs[..3];
        let mut actions: Vec<f32> = (0..3)
            .map(|k| ((goal[k] - hand[k]) * 10.0).clamp(-1.0, 1.0))
            .collect();
        actions.push(0.0);
        actions.extend([0.0; 4]);
        obs = venv.step_continuous(&actions).unwrap().obs.clone();
        episodes.extend(venv.drain_episodes());
    }
    // Both end at step 100, recorded in row order.
    let success: Vec<Option<bool>> = episodes.iter().map(|e| e.success).collect();
    assert_eq!(success, [Some(true), Some(false)], "{episodes:?}");
}
