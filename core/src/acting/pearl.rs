//! PEARL acting: a training round on one task as an actor collects it, and the meta-test on
//! held-out tasks. Both infer the posterior over `z` from the context this acting collected
//! itself (garage's `_obtain_samples` infers it from the task's context buffer, which it
//! clears before each collection on the task: the same transitions), so no context crosses
//! the network.

use rand::rngs::SmallRng;
use rand::Rng;
use tch::Tensor;

use super::eval::EvalResult;
use super::{clipped, ActingError};
use crate::config::{PearlConfig, RunConfig};
use crate::envs::{make_vec, VecEnv};
use crate::items::round::{RoundBuilder, RoundStep};
use crate::models::PearlModel;
use crate::tasks::Task;
use fleetrl_proto::TensorMap;

/// Context transitions collected on the current task.
#[derive(Debug, Default)]
struct Context {
    obs: Vec<f32>,
    action: Vec<f32>,
    score: Vec<f32>,
    next_obs: Vec<f32>,
    len: usize,
}

impl Context {
    fn push(&mut self, step: &RoundStep<'_>) {
        self.obs.extend_from_slice(step.obs);
        self.action.extend_from_slice(step.action);
        self.score.push(step.score);
        self.next_obs.extend_from_slice(step.next_obs);
        self.len += 1;
    }

    /// The posterior over `z` given at most `limit` of the transitions (drawn with
    /// replacement when there are more, as training draws its context): mean and variance
    /// `[1, L]`; the prior when there are none.
    fn posterior(&self, model: &PearlModel, limit: usize, rng: &mut SmallRng) -> (Tensor, Tensor) {
        let _guard = tch::no_grad_guard();
        if self.len == 0 {
            return model.prior(1);
        }
        let rows = |flat: &[f32]| {
            Tensor::from_slice(flat).view([self.len as i64, (flat.len() / self.len) as i64])
        };
        let context = model.context(
            &rows(&self.obs),
            &rows(&self.action),
            &Tensor::from_slice(&self.score),
            &rows(&self.next_obs),
        );
        let context = if self.len > limit {
            let picked: Vec<i64> = (0..limit)
                .map(|_| rng.random_range(0..self.len) as i64)
                .collect();
            context.index_select(0, &Tensor::from_slice(&picked))
        } else {
            context
        };
        model.posterior(&context.unsqueeze(0))
    }
}

/// One env stepped by the latent-conditioned policy.
pub struct PearlActing {
    envs: VecEnv,
    obs: Vec<f32>,
}

impl std::fmt::Debug for PearlActing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PearlActing({:?})", self.envs.observation_space())
    }
}

/// What one step did.
struct Stepped {
    action: Vec<f32>,
    reward: f32,
    score: f32,
    terminated: bool,
    ended: bool,
    next_obs: Vec<f32>,
    obs: Vec<f32>,
}

impl Stepped {
    fn as_round_step(&self) -> RoundStep<'_> {
        RoundStep {
            obs: &self.obs,
            action: &self.action,
            reward: self.reward,
            score: self.score,
            terminated: self.terminated,
            next_obs: &self.next_obs,
        }
    }
}

impl PearlActing {
    /// Takes over `envs` (one env), reset with `seed`.
    pub fn new(mut envs: VecEnv, seed: u64) -> PearlActing {
        let obs = envs.reset(seed).to_vec();
        PearlActing { envs, obs }
    }

    /// The envs (for their finished episodes).
    pub fn envs_mut(&mut self) -> &mut VecEnv {
        &mut self.envs
    }

    /// Switches to `task` and starts a fresh episode (seeded).
    fn start(&mut self, task: &Task, env_id: &str, seed: u64) -> Result<(), ActingError> {
        self.envs.set_task(task, env_id)?;
        self.obs = self.envs.reset(seed).to_vec();
        Ok(())
    }

    fn step(
        &mut self,
        model: &PearlModel,
        z: &Tensor,
        deterministic: bool,
    ) -> Result<Stepped, ActingError> {
        let d = self.obs.len() as i64;
        let obs = Tensor::from_slice(&self.obs).view([1, d]);
        let action = Vec::<f32>::try_from(model.act(&obs, z, deterministic).reshape([-1]))?;
        let actions = clipped(self.envs.action_space(), &action, 1);
        let out = self.envs.step(&actions)?;
        let ended = out.terminated[0] || out.truncated[0];
        let next_obs = out.final_obs[0].clone().unwrap_or_else(|| out.obs.clone());
        let stepped = Stepped {
            // PEARL's action spaces are boxes (its model refuses others): the clipped values.
            action: match &actions[0] {
                fleetrl_proto::space::Action::Continuous(v) => v.clone(),
                fleetrl_proto::space::Action::Discrete(_) => action,
            },
            reward: out.reward[0],
            score: out.score[0],
            terminated: out.terminated[0],
            ended,
            next_obs,
            obs: std::mem::replace(&mut self.obs, out.obs.clone()),
        };
        Ok(stepped)
    }

    /// One training round on `task` (see [`PearlConfig`]): prior steps with `z` drawn from the
    /// prior per episode, then posterior and extra steps with `z` drawn from the posterior
    /// over the round's context, refreshed every `update_post_train` episodes. Returns the
    /// round as a replay item labelled with `version`.
    #[allow(clippy::too_many_arguments)]
    pub fn collect_round(
        &mut self,
        model: &PearlModel,
        pearl: &PearlConfig,
        task: &Task,
        env_id: &str,
        version: i64,
        seed: u64,
        rng: &mut SmallRng,
    ) -> Result<TensorMap, ActingError> {
        self.start(task, env_id, seed)?;
        let limit = pearl.embedding_batch_size as usize;
        let prior_end = u64::from(pearl.num_steps_prior);
        let context_end = pearl.context_steps();
        let mut context = Context::default();
        let mut builder = RoundBuilder::default();
        let (mu, var) = model.prior(1);
        let mut z = PearlModel::sample_z(&mu, &var);
        let mut episodes = 0u32;
        for t in 0..pearl.round_steps() {
            if t == prior_end && t > 0 {
                let (mu, var) = context.posterior(model, limit, rng);
                z = PearlModel::sample_z(&mu, &var);
            }
            let s = self.step(model, &z, false)?;
            let step = s.as_round_step();
            builder.push(step);
            if t < context_end {
                context.push(&step);
            }
            if s.ended {
                if t < prior_end {
                    let (mu, var) = model.prior(1);
                    z = PearlModel::sample_z(&mu, &var);
                } else {
                    episodes += 1;
                    if episodes.is_multiple_of(pearl.update_post_train) {
                        let (mu, var) = context.posterior(model, limit, rng);
                        z = PearlModel::sample_z(&mu, &var);
                    }
                }
            }
        }
        Ok(builder.finish(task.id, version))
    }

    /// One episode with `z` (sampled actions unless `deterministic`), its transitions added to
    /// `context`; returns the episode's score. Episodes longer than `max_steps` are cut there.
    fn episode(
        &mut self,
        model: &PearlModel,
        z: &Tensor,
        deterministic: bool,
        context: &mut Context,
        max_steps: u64,
    ) -> Result<f64, ActingError> {
        let mut score = 0.0;
        for _ in 0..max_steps {
            let s = self.step(model, z, deterministic)?;
            context.push(&s.as_round_step());
            score += f64::from(s.score);
            if s.ended {
                break;
            }
        }
        Ok(score)
    }
}

/// What a meta-test episode is for, in the order they are played on a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// `z` drawn from the prior whatever the context holds, actions sampled.
    Explore,
    /// `z` drawn from the posterior over the context so far, the policy's mean action.
    Search,
    /// The posterior's mean and the policy's mean action: the episode that is scored.
    Adapted,
}

impl Phase {
    /// The phase of episode `e` (from 0) in a meta-test of `pearl`'s episodes.
    fn of(e: usize, pearl: &PearlConfig) -> Phase {
        let explore = pearl.n_exploration_eps as usize;
        if e < explore {
            Phase::Explore
        } else if e < explore + pearl.n_posterior_eps as usize {
            Phase::Search
        } else {
            Phase::Adapted
        }
    }
}

/// The meta-test's `z` for one episode of `phase`, given the `context` collected on the task
/// so far; exploration draws from the model's pool of training posteriors when `from_pool`
/// (`algo.exploration_pool` > 0), else from the prior.
fn meta_test_z(
    model: &PearlModel,
    context: &Context,
    phase: Phase,
    limit: usize,
    from_pool: bool,
    rng: &mut SmallRng,
) -> Tensor {
    match phase {
        Phase::Explore if from_pool => model.exploration_z(rng),
        Phase::Explore => {
            let (mu, var) = model.prior(1);
            PearlModel::sample_z(&mu, &var)
        }
        Phase::Search => {
            let (mu, var) = context.posterior(model, limit, rng);
            PearlModel::sample_z(&mu, &var)
        }
        Phase::Adapted => context.posterior(model, limit, rng).0,
    }
}

/// PEARL's meta-test on each of `tasks`: `n_exploration_eps` exploration episodes, each with
/// its own `z` drawn from the prior (or with `exploration_pool`, from the posterior of a
/// training context the model keeps), then `n_posterior_eps` search episodes, each with `z`
/// drawn from the posterior over every transition so far, then one adapted episode with the
/// mean of the posterior over all of them and the policy's mean action. With no search
/// episodes this is garage's meta-test (`adapt_policy` after the exploration episodes) and
/// oyster's first posterior episode: no belief is updated between exploration episodes, so
/// on a sparse task each of them is an independent guess at the goal. Search episodes are
/// oyster's meta-test past its `num_exp_traj_eval` episodes: posterior sampling, each
/// episode going where the belief points and adding what it found there. The result's
/// returns are each task's adapted (last) episode, and its adaptation curve the mean over
/// tasks of every episode in order (exploration first). Returns are scores. Each task is then
/// played twice more, the controls for its success: with no context (the prior's mean `z`,
/// [`EvalResult::no_context_successes`]) and with the next task's adapted `z`
/// ([`EvalResult::other_task_successes`]).
pub fn pearl_evaluate(
    model: &PearlModel,
    config: &RunConfig,
    pearl: &PearlConfig,
    tasks: &[Task],
    seed: u64,
) -> Result<EvalResult, ActingError> {
    use rand::SeedableRng;
    let envs = make_vec(&config.env, 1)?;
    let mut acting = PearlActing::new(envs, seed);
    let mut rng = SmallRng::seed_from_u64(seed);
    let limit = pearl.embedding_batch_size as usize;
    let from_pool = pearl.exploration_pool > 0;
    let max_steps = match config.eval.max_episode_length {
        0 => 100_000,
        n => n,
    };
    let episodes = pearl.n_exploration_eps as usize + pearl.n_posterior_eps as usize + 1;
    let mut sums = vec![0.0; episodes];
    let mut returns = Vec::with_capacity(tasks.len());
    let mut adapted_success = Vec::with_capacity(tasks.len());
    let mut adapted_z = Vec::with_capacity(tasks.len());
    // Task i's env seed, for its meta-test and its controls alike.
    let task_seed = |i: usize| seed.wrapping_add(1000 * i as u64);
    for (i, task) in tasks.iter().enumerate() {
        acting.start(task, &config.env.id, task_seed(i))?;
        let mut context = Context::default();
        for (e, sum) in sums.iter_mut().enumerate() {
            let phase = Phase::of(e, pearl);
            let z = meta_test_z(model, &context, phase, limit, from_pool, &mut rng);
            let deterministic = phase != Phase::Explore;
            let score = acting.episode(model, &z, deterministic, &mut context, max_steps)?;
            *sum += score;
            if phase == Phase::Adapted {
                returns.push(score);
                adapted_z.push(z);
            }
        }
        // The adapted episode is the last, when every episode ended (none was cut short).
        let finished = acting.envs_mut().drain_episodes();
        adapted_success.push(
            (finished.len() == episodes)
                .then(|| finished.last().and_then(|e| e.success))
                .flatten(),
        );
    }
    // The controls: each task once more with no context (the prior's mean: where the policy
    // goes without adapting), and with the next task's adapted z (what its own context told
    // the policy, not where it goes after any context).
    let mut control = |i: usize, z: &Tensor| -> Result<Option<bool>, ActingError> {
        acting.start(&tasks[i], &config.env.id, task_seed(i))?;
        acting.episode(model, z, true, &mut Context::default(), max_steps)?;
        let finished = acting.envs_mut().drain_episodes();
        Ok((finished.len() == 1).then(|| finished[0].success).flatten())
    };
    let prior_mean = model.prior(1).0;
    let no_context_success = (0..tasks.len())
        .map(|i| control(i, &prior_mean))
        .collect::<Result<Vec<_>, _>>()?;
    let other_task_success = (0..tasks.len())
        .filter(|_| tasks.len() > 1)
        .map(|i| control(i, &adapted_z[(i + 1) % tasks.len()]))
        .collect::<Result<Vec<_>, _>>()?;
    let n = tasks.len().max(1) as f64;
    Ok(EvalResult {
        returns,
        adaptation: sums.into_iter().map(|s| s / n).collect(),
        successes: adapted_success,
        no_context_successes: no_context_success,
        other_task_successes: other_task_success,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ModelConfig;
    use rand::SeedableRng;
    use tch::Device;

    /// A fresh PEARL model for the sparse point robot's spaces.
    fn sparse_robot_model(pearl: &PearlConfig) -> PearlModel {
        let env = crate::envs::make("PointRobotSparse-v0").unwrap();
        PearlModel::new(
            &ModelConfig::default(),
            pearl,
            &env.observation_space(),
            &env.action_space(),
            Device::Cpu,
        )
        .unwrap()
    }

    /// Exploration episodes draw `z` from the prior even when the context so far points
    /// elsewhere, search episodes draw it from the posterior, and the adapted episode takes
    /// the posterior's mean. The encoder here maps every transition to `N(40, softplus(0))`,
    /// so over 20 transitions the posterior is `N(40, 0.69 / 20)` in every dimension.
    #[test]
    fn exploration_draws_from_the_prior_search_from_the_posterior_adaptation_its_mean() {
        let pearl = PearlConfig {
            latent_dim: 5,
            encoder_hidden_sizes: vec![8],
            n_exploration_eps: 2,
            n_posterior_eps: 3,
            ..PearlConfig::default()
        };
        let phases: Vec<Phase> = (0..6).map(|e| Phase::of(e, &pearl)).collect();
        use Phase::{Adapted, Explore, Search};
        assert_eq!(
            phases[..],
            [Explore, Explore, Search, Search, Search, Adapted]
        );
        let model = sparse_robot_model(&pearl);
        tch::no_grad(|| {
            for (name, mut p) in model.var_store().variables() {
                if !name.starts_with("encoder.") {
                    continue;
                }
                if p.size() == [10] {
                    // The output layer's bias: means 40, variances softplus(0).
                    let bias = [40.0f32; 5].into_iter().chain([0.0; 5]).collect::<Vec<_>>();
                    p.copy_(&Tensor::from_slice(&bias));
                } else {
                    p.copy_(&p.zeros_like());
                }
            }
        });
        let mut context = Context::default();
        for i in 0..20 {
            context.push(&RoundStep {
                obs: &[0.1 * i as f32, 0.0],
                action: &[1.0, 0.0],
                reward: -1.0,
                score: 0.0,
                terminated: false,
                next_obs: &[0.1 * (i + 1) as f32, 0.0],
            });
        }
        let mut rng = SmallRng::seed_from_u64(0);
        for _ in 0..20 {
            let z = meta_test_z(&model, &context, Explore, 1024, false, &mut rng);
            let largest = z.abs().max().double_value(&[]);
            assert!(largest < 10.0, "an exploration z is not a prior draw: {z}");
        }
        let draws = Tensor::cat(
            &(0..200)
                .map(|_| meta_test_z(&model, &context, Search, 1024, false, &mut rng))
                .collect::<Vec<_>>(),
            0,
        );
        let mean = draws.mean(tch::Kind::Float).double_value(&[]);
        let var = draws.var(true).double_value(&[]);
        assert!(
            (mean - 40.0).abs() < 0.1,
            "search draws centre on {mean}, not 40"
        );
        let want = f64::ln(2.0) / 20.0;
        assert!(
            (var / want - 1.0).abs() < 0.25,
            "search draws have variance {var}, not the posterior's {want}"
        );
        let z = meta_test_z(&model, &context, Adapted, 1024, false, &mut rng);
        let off = (z - 40.0).abs().max().double_value(&[]);
        assert!(
            off < 1e-3,
            "the adapted z is not the posterior's mean 40 (off by {off})"
        );
    }

    /// The meta-test plays every task twice more, with no context and with another task's
    /// belief: one success flag per task for the adapted episode and for each control, and
    /// the scores of the exploration and adapted episodes only in the adaptation curve; a
    /// single task has no other to borrow from.
    #[test]
    fn the_meta_test_also_plays_each_task_with_another_tasks_belief() {
        let mut config = RunConfig::default();
        config.env.id = "PointRobotSparse-v0".into();
        let pearl = PearlConfig {
            latent_dim: 1,
            encoder_hidden_sizes: vec![8],
            n_exploration_eps: 2,
            ..PearlConfig::default()
        };
        let model = sparse_robot_model(&pearl);
        let tasks = crate::tasks::TaskSet::new(&crate::tasks::TasksConfig::default(), 0);
        let tasks: Vec<Task> = (0..3).map(|id| tasks.get(id).unwrap()).collect();
        let result = pearl_evaluate(&model, &config, &pearl, &tasks, 7).unwrap();
        assert_eq!(result.adaptation.len(), 3);
        assert_eq!(result.returns.len(), 3);
        assert_eq!(result.successes.len(), 3);
        assert_eq!(result.no_context_successes.len(), 3);
        assert_eq!(result.other_task_successes.len(), 3);
        assert!(result.other_task_successes.iter().all(Option::is_some));
        assert!(result.other_task_success_rate().is_some());
        let one = pearl_evaluate(&model, &config, &pearl, &tasks[..1], 7).unwrap();
        assert_eq!(
            (one.successes.len(), one.other_task_success_rate()),
            (1, None)
        );
        assert_eq!(one.no_context_successes.len(), 1);
    }
}
