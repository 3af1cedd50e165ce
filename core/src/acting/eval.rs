//! Evaluation: run a policy for whole episodes and report the undiscounted returns.

use tch::Tensor;

use crate::acting::clipped;
use crate::config::{EnvConfig, RunConfig};
use crate::envs::{self, Env, EnvError};
use crate::items::rollout::Actions;
use crate::models::{Policy, RnnState};
use crate::tasks::Task;
use fleetrl_proto::space::{Action, Space};
use fleetrl_runtime::demo::{Demo, DemoSource, Recorder};

/// The first env seed of the evaluation of the checkpoint at `policy_version`: a hash of the
/// run's seed and the version, in [2^32, 2^48), so that every evaluation a run makes (each of a
/// newer checkpoint) starts from states none before it played, runs on neighbouring seeds
/// share none, and none replays a training env's start (seeds `seed + 1000 actor + env`).
/// Episode `i` plays from `eval_seed + i`; a confirming evaluation plays the seeds after its
/// evaluation's own, from `eval_seed + eval.episodes`. `fleetrl train` and `fleetrl eval`
/// agree on it.
pub fn eval_seed(config: &RunConfig, policy_version: i64) -> u64 {
    let mixed = splitmix64(splitmix64(config.seed) ^ policy_version as u64);
    (mixed >> 16).max(1 << 32)
}

/// SplitMix64's finaliser (Steele et al. 2014): a bijection of `u64` whose outputs of
/// neighbouring inputs look unrelated.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Returns of the evaluated episodes.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalResult {
    /// One undiscounted return per episode (meta-RL: per test task, after adaptation).
    pub returns: Vec<f64>,
    /// Meta-RL: the mean return over the test tasks before adaptation, then after each
    /// adaptation step; empty otherwise.
    pub adaptation: Vec<f64>,
    /// Whether each evaluated episode (meta-RL: each adapted one) solved its task, for envs
    /// with a success flag ([`Env::success`], Meta-World); `None` entries otherwise.
    pub successes: Vec<Option<bool>>,
    /// PEARL: whether each test task, played once more with no context (`z` at the prior's
    /// mean, the policy's mean action), was solved: where the policy goes without adapting.
    /// Empty otherwise.
    pub no_context_successes: Vec<Option<bool>>,
    /// PEARL: whether each test task, played once more with the next test task's adapted `z`
    /// (the policy's mean action), was solved: a control for `successes`, so that a path that
    /// passes many goals, or one the policy takes after any context, is not taken for
    /// adaptation. Empty otherwise (and for a single task).
    pub other_task_successes: Vec<Option<bool>>,
}

/// The share of `flags` that are set, among those known; `None` when none is.
fn share(flags: &[Option<bool>]) -> Option<f64> {
    let known: Vec<bool> = flags.iter().flatten().copied().collect();
    let solved = known.iter().filter(|&&s| s).count();
    (!known.is_empty()).then(|| solved as f64 / known.len() as f64)
}

impl EvalResult {
    /// The share of the episodes with a success flag that solved their task; `None` when no
    /// episode has one.
    pub fn success_rate(&self) -> Option<f64> {
        share(&self.successes)
    }

    /// PEARL: the share of test tasks solved with no context ([`Self::no_context_successes`]).
    pub fn no_context_success_rate(&self) -> Option<f64> {
        share(&self.no_context_successes)
    }

    /// PEARL: the share of test tasks solved with another task's belief
    /// ([`Self::other_task_successes`]); `None` for other evaluations, a single task, and envs
    /// without a success flag.
    pub fn other_task_success_rate(&self) -> Option<f64> {
        share(&self.other_task_successes)
    }

    /// Mean return.
    pub fn mean(&self) -> f64 {
        self.returns.iter().sum::<f64>() / self.returns.len().max(1) as f64
    }

    /// Standard error of the mean return: the returns' sample standard deviation over the
    /// square root of their count (0 for fewer than two).
    pub fn std_error(&self) -> f64 {
        let n = self.returns.len();
        if n < 2 {
            return 0.0;
        }
        let m = self.mean();
        let squares = self.returns.iter().map(|r| (r - m) * (r - m)).sum::<f64>();
        (squares / (n - 1) as f64 / n as f64).sqrt()
    }

    /// Population standard deviation of the returns.
    pub fn std(&self) -> f64 {
        let m = self.mean();
        let n = self.returns.len().max(1) as f64;
        (self.returns.iter().map(|r| (r - m) * (r - m)).sum::<f64>() / n).sqrt()
    }
}

/// Plays `episodes` episodes of `env_id` at once (one env each, seeds `seed..seed+episodes`),
/// batching the policy over the envs still running. Blocks; call off the async runtime.
pub fn evaluate(
    policy: &dyn Policy,
    env_id: &str,
    episodes: usize,
    seed: u64,
    deterministic: bool,
) -> Result<EvalResult, EnvError> {
    let env = EnvConfig {
        id: env_id.to_string(),
        ..EnvConfig::default()
    };
    evaluate_env(policy, &env, episodes, seed, deterministic, 0)
}

/// [`evaluate`] on envs as `[env]` configures them (wrappers included). Returns are scores:
/// rewards before reward scaling or clipping, over whole games (all lives of an Atari game).
/// `max_steps` ends every episode after that many steps (0: the env's own limit only).
pub fn evaluate_env(
    policy: &dyn Policy,
    env_config: &EnvConfig,
    episodes: usize,
    seed: u64,
    deterministic: bool,
    max_steps: u64,
) -> Result<EvalResult, EnvError> {
    let envs: Vec<Box<dyn Env>> = (0..episodes)
        .map(|_| envs::make_configured(env_config))
        .collect::<Result<_, _>>()?;
    play(policy, envs, seed, deterministic, max_steps)
}

/// The task-agnostic baseline's evaluation (`tasks.multi_task`): [`evaluate_env`] on each of
/// `tasks` in turn, `episodes` episodes each (seeds `seed + 1000 i ..`). The result has one
/// return per task, the mean of its episodes, and one adaptation stage, the mean over tasks
/// (it does not adapt), as a meta-evaluation with no adaptation step has.
pub fn evaluate_tasks(
    policy: &dyn Policy,
    env_config: &EnvConfig,
    tasks: &[Task],
    episodes: usize,
    seed: u64,
    deterministic: bool,
) -> Result<EvalResult, EnvError> {
    let mut returns = Vec::with_capacity(tasks.len());
    let mut successes = Vec::new();
    for (i, task) in tasks.iter().enumerate() {
        let envs: Vec<Box<dyn Env>> = (0..episodes.max(1))
            .map(|_| {
                let mut env = envs::make_configured(env_config)?;
                env.set_task(task).map_err(|e| e.naming(&env_config.id))?;
                Ok(env)
            })
            .collect::<Result<_, EnvError>>()?;
        let seed = seed.wrapping_add(1000 * i as u64);
        let played = play(policy, envs, seed, deterministic, 0)?;
        returns.push(played.mean());
        successes.extend(played.successes);
    }
    let mean = returns.iter().sum::<f64>() / returns.len().max(1) as f64;
    Ok(EvalResult {
        returns,
        adaptation: vec![mean],
        successes,
        no_context_successes: Vec::new(),
        other_task_successes: Vec::new(),
    })
}

/// Plays one episode on each of `envs` at once (env i from seed `seed + i`), batching the
/// policy over the envs still running.
fn play(
    policy: &dyn Policy,
    mut envs: Vec<Box<dyn Env>>,
    seed: u64,
    deterministic: bool,
    max_steps: u64,
) -> Result<EvalResult, EnvError> {
    let episodes = envs.len();
    let obs_dim = envs.first().map_or(0, |e| e.observation_space().flat_dim());
    let mut obs: Vec<Vec<f32>> = Vec::with_capacity(episodes);
    for (i, env) in envs.iter_mut().enumerate() {
        obs.push(env.reset(Some(seed + i as u64)));
    }
    let mut returns = vec![0.0f64; episodes];
    let mut succeeded: Vec<Option<bool>> = vec![None; episodes];
    let mut steps = 0u64;
    let mut running: Vec<usize> = (0..episodes).collect();
    // A recurrent policy's state per episode (episodes never restart here, so no resets).
    let mut state = (policy.state_size() > 0)
        .then(|| RnnState::zeros(episodes as i64, policy.state_size(), tch::Device::Cpu));
    while !running.is_empty() {
        let flat: Vec<f32> = running
            .iter()
            .flat_map(|&i| obs[i].iter().copied())
            .collect();
        let batch = Tensor::from_slice(&flat).view([running.len() as i64, obs_dim as i64]);
        let act = match &state {
            None => policy.act(&batch, deterministic),
            Some(all) => {
                let rows: Vec<i64> = running.iter().map(|&i| i as i64).collect();
                let rows = Tensor::from_slice(&rows);
                let (act, next) = policy.act_recurrent(&batch, &all.select(&rows), deterministic);
                state = Some(RnnState {
                    h: all.h.index_copy(0, &rows, &next.h),
                    c: all.c.index_copy(0, &rows, &next.c),
                });
                act
            }
        };
        let actions = match Actions::from_tensor(&act.action)
            .expect("policy actions are a vector or a matrix")
        {
            Actions::Discrete(a) => a.into_iter().map(Action::Discrete).collect(),
            Actions::Continuous { values, .. } => {
                clipped(&envs[running[0]].action_space(), &values, running.len())
            }
        };
        steps += 1;
        // Every running episode is at its `steps`-th step (they all started together).
        let cut = max_steps > 0 && steps >= max_steps;
        let mut still = Vec::with_capacity(running.len());
        for (&i, a) in running.iter().zip(&actions) {
            let step = envs[i].step(a)?;
            returns[i] += f64::from(envs[i].score_reward().unwrap_or(step.reward));
            envs::note_success(&mut succeeded[i], envs[i].success());
            obs[i] = step.obs;
            if cut {
                continue;
            }
            if !(step.terminated || step.truncated) {
                still.push(i);
            } else if !envs[i].game_over() {
                // A life lost under episodic life: the game goes on.
                obs[i] = envs[i].reset(None);
                still.push(i);
            }
        }
        running = still;
    }
    Ok(EvalResult {
        returns,
        adaptation: Vec::new(),
        successes: succeeded,
        no_context_successes: Vec::new(),
        other_task_successes: Vec::new(),
    })
}

/// Plays one episode of `env_id` from `seed` with `policy` and records it as a demo (with the
/// policy's value predictions). Blocks; call off the async runtime.
pub fn record_episode(
    policy: &dyn Policy,
    env_id: &str,
    seed: u64,
    deterministic: bool,
    source: DemoSource,
) -> Result<Demo, EnvError> {
    let env = EnvConfig {
        id: env_id.to_string(),
        ..EnvConfig::default()
    };
    record_episode_env(policy, &env, seed, deterministic, source)
}

/// [`record_episode`] on the env `env_config` describes (wrappers included).
pub fn record_episode_env(
    policy: &dyn Policy,
    env_config: &EnvConfig,
    seed: u64,
    deterministic: bool,
    source: DemoSource,
) -> Result<Demo, EnvError> {
    let env_id = env_config.id.as_str();
    let mut env = envs::make_configured(env_config)?;
    let obs_space = env.observation_space();
    let action_space = env.action_space();
    let obs_shape = match &obs_space {
        Space::Box { shape, .. } => shape.iter().map(|&d| d as usize).collect(),
        Space::Discrete { .. } => vec![1],
    };
    let mut obs = env.reset(Some(seed));
    let mut recorder = Recorder::new(env_id, source, obs_shape, &action_space, &obs);
    let mut state = (policy.state_size() > 0)
        .then(|| RnnState::zeros(1, policy.state_size(), tch::Device::Cpu));
    loop {
        let batch = Tensor::from_slice(&obs).view([1, obs.len() as i64]);
        let step = match &state {
            None => policy.act(&batch, deterministic),
            Some(s) => {
                let (step, next) = policy.act_recurrent(&batch, s, deterministic);
                state = Some(next);
                step
            }
        };
        let value = f32::try_from(&step.value.view([-1]).get(0)).ok();
        let action = match Actions::from_tensor(&step.action)
            .expect("policy actions are a vector or a matrix")
        {
            Actions::Discrete(a) => Action::Discrete(a[0]),
            Actions::Continuous { values, .. } => clipped(&action_space, &values, 1).remove(0),
        };
        let out = env.step(&action)?;
        recorder.push(&action, out.reward, &out.obs, value);
        obs = out.obs;
        if out.terminated || out.truncated {
            return Ok(recorder.finish(out.terminated));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ModelConfig;
    use crate::models::ActorCritic;

    #[test]
    fn success_rate_counts_only_episodes_with_a_flag() {
        let result = |successes: Vec<Option<bool>>| EvalResult {
            returns: Vec::new(),
            adaptation: Vec::new(),
            successes: successes.clone(),
            no_context_successes: successes.clone(),
            other_task_successes: successes,
        };
        for flags in [
            (vec![None, None], None),
            (vec![Some(true), None, Some(false)], Some(0.5)),
            (vec![Some(true), Some(true)], Some(1.0)),
        ] {
            let r = result(flags.0);
            assert_eq!(r.success_rate(), flags.1);
            assert_eq!(r.no_context_success_rate(), flags.1);
            assert_eq!(r.other_task_success_rate(), flags.1);
        }
    }

    /// The evaluations of runs on neighbouring seeds (each at 50 policy versions, every one
    /// with its 20 episodes and a 100-episode confirmation after them) start from 30,000
    /// distinct seeds, none in the training envs' range.
    #[test]
    fn evaluations_of_neighbouring_runs_share_no_start_state() {
        let mut starts = std::collections::HashSet::new();
        for seed in 401..=405 {
            let config = RunConfig {
                seed,
                ..RunConfig::default()
            };
            for version in 1..=50 {
                let first = eval_seed(&config, version);
                assert!((1u64 << 32..1 << 48).contains(&first), "{first}");
                starts.extend(first..first + 120);
            }
        }
        assert_eq!(starts.len(), 5 * 50 * 120);
    }

    fn untrained_cartpole_policy() -> ActorCritic {
        let env = envs::make("CartPole-v1").unwrap();
        ActorCritic::new(
            &ModelConfig::default(),
            &env.observation_space(),
            &env.action_space(),
            tch::Device::Cpu,
        )
        .unwrap()
    }

    fn cartpole() -> EnvConfig {
        EnvConfig {
            id: "CartPole-v1".into(),
            ..EnvConfig::default()
        }
    }

    /// `eval.max_episode_length` cuts every episode at that many steps (CartPole pays 1 a step).
    #[test]
    fn max_steps_cut_every_episode() {
        let policy = untrained_cartpole_policy();
        let full = evaluate_env(&policy, &cartpole(), 8, 3, true, 0).unwrap();
        let cut = evaluate_env(&policy, &cartpole(), 8, 3, true, 5).unwrap();
        for (f, c) in full.returns.iter().zip(&cut.returns) {
            assert_eq!(
                *c,
                f.min(5.0),
                "full {:?}, cut {:?}",
                full.returns,
                cut.returns
            );
        }
    }

    /// The deterministic policy plays the same episodes from the same seeds; the stochastic one
    /// (`eval.deterministic = false`) samples its actions.
    #[test]
    fn deterministic_repeats_and_stochastic_samples() {
        let policy = untrained_cartpole_policy();
        let a = evaluate_env(&policy, &cartpole(), 20, 11, true, 0).unwrap();
        let b = evaluate_env(&policy, &cartpole(), 20, 11, true, 0).unwrap();
        assert_eq!(a.returns, b.returns);
        let sampled = evaluate_env(&policy, &cartpole(), 20, 11, false, 0).unwrap();
        assert_ne!(a.returns, sampled.returns);
    }
}
