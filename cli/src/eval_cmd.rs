//! `fleetrl eval`: load a checkpoint and play its policy as the run's `[eval]` says.

use std::path::Path;

use anyhow::{bail, Context};
use fleetrl_core::acting::eval::{eval_seed, evaluate_env, evaluate_tasks, EvalResult};
use fleetrl_core::acting::exploration::evaluated;
use fleetrl_core::acting::meta::meta_evaluate;
use fleetrl_core::acting::pearl::pearl_evaluate;
use fleetrl_core::acting::policy_loader::{load_actor_critic, load_pearl};
use fleetrl_core::algos::registry::{spec, TaskAgnostic};
use fleetrl_core::checkpoint;
use fleetrl_core::config::MamlConfig;
use fleetrl_core::config::{EnvConfig, RunConfig};
use fleetrl_core::envs;
use fleetrl_core::models::Policy;
use fleetrl_core::tasks::{Task, TaskSet};
use fleetrl_proto::space::Space;

use crate::summary::success_text;

/// Plays `episodes` episodes (deterministic unless the run's `eval.deterministic` is false,
/// cut at its `eval.max_episode_length` if set) with the policy in checkpoint `path`, on the run's
/// env or on `env_id` (same wrappers, e.g. `gym:CartPole-v1` to score a native CartPole policy
/// in gymnasium's own implementation). Blocks (tch and env work): call from a blocking thread.
/// `seed` defaults to the seed of the run's own evaluation of this checkpoint ([`eval_seed`]);
/// the seed used is returned with the result.
/// `sets` change the run's config for this evaluation ([`for_evaluation`]).
pub(crate) fn evaluate_checkpoint(
    path: &Path,
    episodes: usize,
    seed: Option<u64>,
    env_id: Option<&str>,
    task: Option<u64>,
    sets: &[String],
) -> anyhow::Result<(EvalResult, u64)> {
    let (model, config) = load_policy(path)?;
    let config = for_evaluation(&config, sets)?;
    let seed = match seed {
        Some(seed) => seed,
        None => eval_seed(&config, checkpoint::load_meta(path)?.policy_version),
    };
    // Sampled actions and PEARL's draws of `z` come from torch's generator: seeded as well, an
    // evaluation plays the same episodes whenever and in whichever process it runs (the run's
    // own evaluations, then `fleetrl eval` of the same checkpoint).
    tch::manual_seed(seed as i64);
    let model = if config.eval.deterministic {
        model
    } else {
        // DQN, TD3 and DDPG play with their exploration noise (the others sample themselves).
        let space = envs::make_configured(&config.env)?.action_space();
        let at_once = episodes.max(config.actors.envs_per_actor as usize);
        evaluated(model, &config, &space, at_once, seed)
    };
    let task_agnostic = spec(&config)
        .task_agnostic
        .filter(|_| config.tasks.multi_task);
    let meta_evaluated = config.algo.as_maml().filter(|m| m.meta_evaluator);
    let pearl = config.algo.as_pearl().is_some();
    let plays_tasks = meta_evaluated.is_some() || pearl || task_agnostic.is_some();
    let tasks_set = sets.iter().find(|s| s.trim_start().starts_with("tasks."));
    if let (false, Some(set)) = (plays_tasks, tasks_set) {
        bail!(
            "--set {set}: this checkpoint ({} on {}) is not evaluated on held-out tasks",
            config.algo.name(),
            config.env.id
        );
    }
    if let (true, Some(id)) = (plays_tasks, env_id) {
        bail!(
            "--env {id}: this checkpoint ({}) is evaluated on its run's held-out tasks of {}, \
             so it cannot be played on another env; use --task ID to pick one task",
            config.algo.name(),
            config.env.id
        );
    }
    if let Some(maml) = meta_evaluated {
        return meta_evaluate_checkpoint(path, &config, maml, seed, task);
    }
    if pearl {
        return pearl_evaluate_checkpoint(path, &config, seed, task);
    }
    if task_agnostic == Some(TaskAgnostic::AsPearl) {
        // `actors.envs_per_actor` episodes of every test task with the evaluation's actions.
        let tasks = evaluated_tasks(&config, task)?;
        let result = evaluate_tasks(
            model.as_ref(),
            &config.env,
            &tasks,
            config.actors.envs_per_actor as usize,
            seed,
            config.eval.deterministic,
        )?;
        return Ok((result, seed));
    }
    if task_agnostic == Some(TaskAgnostic::AsMaml) {
        // The test tasks, played as MAML plays them, unadapted.
        let unadapted = MamlConfig {
            num_grad_updates: 0,
            ..MamlConfig::default()
        };
        return meta_evaluate_checkpoint(path, &config, &unadapted, seed, task);
    }
    if task.is_some() {
        bail!(
            "--task is for meta-RL checkpoints; this one was trained by {}",
            config.algo.name()
        );
    }
    // `[eval.env]` replaces the training env for evaluation (e.g. other wrappers or limit).
    let mut env = config
        .eval
        .env
        .clone()
        .unwrap_or_else(|| config.env.clone());
    if config.eval.env.is_some() {
        same_spaces(&config.env, &env, "[eval.env]")?;
    }
    if let Some(id) = env_id {
        env.id = id.to_string();
        same_spaces(&config.env, &env, "--env")?;
    }
    Ok((
        evaluate_env(
            model.as_ref(),
            &env,
            episodes,
            seed,
            config.eval.deterministic,
            config.eval.max_episode_length,
        )?,
        seed,
    ))
}

/// MAML's meta-evaluation of checkpoint `path`: on every held-out test task (or on `task`
/// alone), before and after each adaptation step, each stage `actors.envs_per_actor` episodes
/// as in training (adaptation is meta-trained for that many).
fn meta_evaluate_checkpoint(
    path: &Path,
    config: &RunConfig,
    maml: &MamlConfig,
    seed: u64,
    task: Option<u64>,
) -> anyhow::Result<(EvalResult, u64)> {
    let (model, _) = load_actor_critic(path)?;
    let tasks = evaluated_tasks(config, task)?;
    let episodes = config.actors.envs_per_actor as usize;
    let result = meta_evaluate(&model, config, maml, &tasks, episodes, seed)?;
    Ok((result, seed))
}

/// PEARL's meta-test of checkpoint `path` on every held-out test task (or on `task` alone):
/// `algo.n_exploration_eps` exploration episodes, `algo.n_posterior_eps` search episodes,
/// then the adapted one.
fn pearl_evaluate_checkpoint(
    path: &Path,
    config: &RunConfig,
    seed: u64,
    task: Option<u64>,
) -> anyhow::Result<(EvalResult, u64)> {
    let (model, _) = load_pearl(path)?;
    let pearl = config
        .algo
        .as_pearl()
        .context("load_pearl returns PEARL checkpoints only")?;
    let tasks = evaluated_tasks(config, task)?;
    Ok((pearl_evaluate(&model, config, pearl, &tasks, seed)?, seed))
}

/// The keys `fleetrl eval --set` may change besides `eval.*`: they say how a policy is
/// played, not what was trained. `algo.exploration_pool` may only go to 0 (explore from the
/// prior): the pool itself was kept by training. `tasks.num_test` meta-tests on more (or
/// fewer) held-out tasks than the run evaluated: ids from `tasks.num_train` on, which
/// training never drew, so every one is unseen and the first `num_test` are the run's own.
const EVAL_KEYS: [&str; 4] = [
    "algo.n_exploration_eps",
    "algo.n_posterior_eps",
    "algo.exploration_pool",
    "tasks.num_test",
];

/// The checkpoint's `config` with `sets` applied for one evaluation; a key that training
/// fixed (the env, the network, the algorithm's training settings) is refused by name.
fn for_evaluation(config: &RunConfig, sets: &[String]) -> anyhow::Result<RunConfig> {
    for set in sets {
        let key = set.split_once('=').map_or(set.as_str(), |(k, _)| k).trim();
        if !(key.starts_with("eval.") || EVAL_KEYS.contains(&key)) {
            bail!(
                "--set {set}: fleetrl eval changes only how the checkpoint is played (eval.*, {}); \
                 `{key}` is fixed by its training",
                EVAL_KEYS.join(", ")
            );
        }
    }
    let changed = config.with_overrides(sets)?;
    if let (Some(trained), Some(played)) = (config.algo.as_pearl(), changed.algo.as_pearl()) {
        let (kept, asked) = (trained.exploration_pool, played.exploration_pool);
        if asked != 0 && asked != kept {
            bail!(
                "--set algo.exploration_pool={asked}: fleetrl eval can set it only to 0 \
                 (exploration from the prior); the checkpoint keeps a pool of {kept} training \
                 posteriors, sized by its training"
            );
        }
    }
    Ok(changed)
}

/// The held-out test tasks of the run, or `task` alone (an id the run's tasks do not hold is
/// refused by name).
fn evaluated_tasks(config: &RunConfig, task: Option<u64>) -> anyhow::Result<Vec<Task>> {
    let set = TaskSet::new(&config.tasks, config.seed);
    Ok(match task {
        Some(id) => vec![set.get(id)?],
        None => set.test_tasks(),
    })
}

/// Refuses an evaluation env whose spaces differ from the ones the policy was trained on.
fn same_spaces(trained: &EnvConfig, other: &EnvConfig, what: &str) -> anyhow::Result<()> {
    let a = envs::make_configured(trained)
        .with_context(|| format!("making the checkpoint's env {}", trained.id))?;
    let b = envs::make_configured(other).with_context(|| format!("making --env {}", other.id))?;
    let (obs_a, obs_b) = (a.observation_space(), b.observation_space());
    let (act_a, act_b) = (a.action_space(), b.action_space());
    // Observation bounds are informational (gymnasium writes f32::MAX where a native env may
    // write infinity); action bounds decide how actions are clipped, so they must agree.
    let same_shape = |x: &Space, y: &Space| match (x, y) {
        (Space::Box { shape: p, .. }, Space::Box { shape: q, .. }) => p == q,
        _ => x == y,
    };
    if !same_shape(&obs_a, &obs_b) || act_a != act_b {
        bail!(
            "{what} {} does not fit this checkpoint: its spaces are observation {obs_b:?}, action \
             {act_b:?}; the policy was trained on {} with observation {obs_a:?}, action {act_a:?}",
            other.id,
            trained.id
        );
    }
    Ok(())
}

/// The policy saved in checkpoint `path` (any algorithm), on the CPU, and the run config it
/// was trained with.
pub(crate) fn load_policy(path: &Path) -> anyhow::Result<(Box<dyn Policy>, RunConfig)> {
    Ok(fleetrl_core::acting::policy_loader::load_policy(path)?)
}

/// The `eval` subcommand: prints the mean return and writes `<checkpoint>/eval.json`.
pub(crate) fn run(
    path: &Path,
    episodes: usize,
    seed: Option<u64>,
    env_id: Option<&str>,
    task: Option<u64>,
    sets: &[String],
) -> anyhow::Result<()> {
    let (result, seed) = evaluate_checkpoint(path, episodes, seed, env_id, task, sets)?;
    // On a run's tasks `--episodes` plays no part: `returns` has one a task.
    let on_tasks = !result.adaptation.is_empty();
    if let Some(rate) = result.success_rate() {
        let controls = [
            result.no_context_success_rate(),
            result.other_task_success_rate(),
        ];
        println!("success rate {}", success_text(rate, controls, 1));
    }
    if !on_tasks {
        println!(
            "mean return {:.2} ± {:.2} over {} episodes",
            result.mean(),
            result.std(),
            episodes
        );
    } else {
        let stages: Vec<String> = result
            .adaptation
            .iter()
            .map(|r| format!("{r:.2}"))
            .collect();
        println!(
            "adapted return {:.2} ± {:.2} over {} test tasks; by adaptation step, or PEARL episode (first = before adapting): {}",
            result.mean(),
            result.std(),
            result.returns.len(),
            stages.join(" -> ")
        );
    }
    let report = serde_json::json!({
        "checkpoint": path.display().to_string(),
        "env": env_id,
        "episodes": (!on_tasks).then_some(episodes),
        "tasks": on_tasks.then_some(result.returns.len()),
        "seed": seed,
        "mean_return": result.mean(),
        "std_return": result.std(),
        "returns": result.returns,
        "adaptation_returns": result.adaptation,
        "success_rate": result.success_rate(),
        "success_rate_no_context": result.no_context_success_rate(),
        "success_rate_other_task": result.other_task_success_rate(),
        "task": task,
        "set": sets,
    });
    // An evaluation on another env does not replace the run env's `eval.json`.
    let out = match env_id {
        None => path.join("eval.json"),
        Some(id) => path.join(format!("eval-{}.json", id.replace(['/', ':'], "_"))),
    };
    std::fs::write(&out, serde_json::to_string_pretty(&report)? + "\n")
        .with_context(|| format!("writing {}", out.display()))?;
    println!("wrote {}", out.display());
    Ok(())
}
