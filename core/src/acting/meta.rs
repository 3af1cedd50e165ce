//! Meta-RL acting (MAML): one task's adaptation, as an actor collects it for training and as
//! meta-evaluation plays it on held-out tasks. The actor adapts on its own: it acts a stage
//! with the current parameters, takes the inner SGD step on that stage
//! ([`crate::algos::maml::adapt`], the learner's own function), and acts the next stage with
//! the result, so adapted weights never cross the network.

use tch::Tensor;

use super::eval::EvalResult;
use super::{Acting, ActingError};
use crate::algos::maml::{adapt, split_stages, Layout};
use crate::config::{MamlConfig, RunConfig};
use crate::envs::make_vec;
use crate::items::rollout::{field, RolloutBatch, RolloutBuilder};
use crate::models::{ActorCritic, Policy, PolicyStep};
use crate::tasks::Task;
use fleetrl_proto::{Tensor as ProtoTensor, TensorMap};

/// The policy with adapted parameters in place of its own.
struct Adapted<'a> {
    model: &'a ActorCritic,
    params: &'a [Tensor],
}

impl Policy for Adapted<'_> {
    fn act(&self, obs: &Tensor, deterministic: bool) -> PolicyStep {
        let _guard = tch::no_grad_guard();
        let dist = self.model.heads().dist_with(obs, self.params);
        let action = dist.pick(deterministic);
        PolicyStep {
            log_prob: dist.log_prob(&action),
            value: self.model.heads().value(obs),
            action,
        }
    }

    fn value(&self, obs: &Tensor) -> Tensor {
        let _guard = tch::no_grad_guard();
        self.model.heads().value(obs)
    }
}

/// One task's adaptation.
#[derive(Debug)]
pub struct Adaptation {
    /// The replay item: every stage on the time axis, and the task id.
    pub item: TensorMap,
    /// Mean episode return of each stage (before adaptation first).
    pub stage_returns: Vec<f64>,
}

/// Per-step fields, stacked on the time axis across stages.
const PER_STEP: [&str; 8] = [
    field::OBS,
    field::ACTION,
    field::REWARD,
    field::TERMINATED,
    field::TRUNCATED,
    field::LOG_PROB,
    field::VALUE,
    field::FINAL_VALUE,
];

/// Stage items `[T, M, ..]` as one item `[S T, M, ..]` (bootstrap fields from the last).
fn join_stages(stages: &[TensorMap]) -> Result<TensorMap, fleetrl_proto::TensorError> {
    let last = stages.last().ok_or(fleetrl_proto::TensorError::Empty)?;
    let mut item = last.clone();
    for name in PER_STEP {
        let parts: Vec<&ProtoTensor> = stages
            .iter()
            .map(|s| s.field(name))
            .collect::<Result<_, _>>()?;
        item.tensors
            .insert(name.to_string(), ProtoTensor::concat(&parts)?);
    }
    Ok(item)
}

/// The stages so far as a one-item batch.
fn as_batch(item: &TensorMap) -> Result<RolloutBatch, fleetrl_proto::TensorError> {
    let stacked = TensorMap::from_pairs(
        item.tensors
            .iter()
            .map(|(k, v)| Ok((k.clone(), ProtoTensor::stack(&[v])?)))
            .collect::<Result<Vec<_>, fleetrl_proto::TensorError>>()?,
    );
    RolloutBatch::from_stacked(&stacked)
}

/// Plays `task` in `acting`'s envs: `num_grad_updates + 1` stages of T steps from a reset,
/// adapting after each but the last. Episodes of every stage but the last are dropped from
/// the envs' finished list, so what the actor reports is the adapted return.
pub fn adapt_on_task(
    acting: &mut Acting,
    model: &ActorCritic,
    task: &Task,
    config: &RunConfig,
    maml: &MamlConfig,
    version: i64,
    seed: u64,
) -> Result<Adaptation, ActingError> {
    acting.envs_mut().set_task(task, &config.env.id)?;
    let (t, m) = (
        config.actors.rollout_length as usize,
        acting.envs_mut().num_envs(),
    );
    let obs_dim = acting.envs_mut().obs_dim();
    let stages = maml.num_grad_updates as usize + 1;
    let theta: Vec<Tensor> = model
        .heads()
        .policy_params()
        .iter()
        .map(|p| p.detach().set_requires_grad(true))
        .collect();
    let mut params: Vec<Tensor> = theta.iter().map(Tensor::shallow_clone).collect();
    let mut maps = Vec::with_capacity(stages);
    for s in 0..stages {
        acting.restart(seed.wrapping_add((s * m) as u64));
        let mut builder = RolloutBuilder::new(t, m, obs_dim);
        let bootstrap = acting.collect(
            &Adapted {
                model,
                params: &params,
            },
            &mut builder,
        )?;
        maps.push(builder.finish(&bootstrap, version));
        if s + 1 < stages {
            acting.envs_mut().drain_episodes();
            let batch = as_batch(&join_stages(&maps)?)?;
            let layout = Layout {
                t,
                m,
                stages: s + 1,
            };
            let policy = (model.heads(), &theta[..]);
            let split = split_stages(&batch, layout, maml, policy, tch::Device::Cpu);
            params = adapt(
                model.heads(),
                &theta,
                &split[0],
                maml.inner_lr,
                &maml.options,
                false,
            );
        }
    }
    let mut item = join_stages(&maps)?;
    let layout = Layout { t, m, stages };
    let policy = (model.heads(), &theta[..]);
    let split = split_stages(&as_batch(&item)?, layout, maml, policy, tch::Device::Cpu);
    item.tensors.insert(
        field::TASK.to_string(),
        ProtoTensor::scalar(i64::from(task.id)),
    );
    Ok(Adaptation {
        item,
        stage_returns: split[0].iter().map(|s| s.mean_return).collect(),
    })
}

/// Meta-evaluation: adapts on each of `tasks` with `episodes` envs per stage. The result's
/// returns are each task's mean return after the last adaptation step, and its adaptation
/// curve the mean over tasks of every stage (before adaptation first). Actions are sampled,
/// as adaptation needs.
pub fn meta_evaluate(
    model: &ActorCritic,
    config: &RunConfig,
    maml: &MamlConfig,
    tasks: &[Task],
    episodes: usize,
    seed: u64,
) -> Result<EvalResult, ActingError> {
    let envs = make_vec(&config.env, episodes.max(1))?;
    let mut acting = Acting::new(envs, seed);
    let mut sums = vec![0.0; maml.num_grad_updates as usize + 1];
    let mut returns = Vec::with_capacity(tasks.len());
    let mut adapted_success = Vec::new();
    for (i, task) in tasks.iter().enumerate() {
        let seed = seed.wrapping_add(1000 * i as u64);
        let adaptation = adapt_on_task(&mut acting, model, task, config, maml, 0, seed)?;
        // The last stage's episodes: the adapted policy's.
        adapted_success.extend(acting.envs_mut().drain_episodes().iter().map(|e| e.success));
        for (sum, r) in sums.iter_mut().zip(&adaptation.stage_returns) {
            *sum += r;
        }
        returns.push(adaptation.stage_returns.last().copied().unwrap_or(0.0));
    }
    let n = tasks.len().max(1) as f64;
    Ok(EvalResult {
        returns,
        adaptation: sums.into_iter().map(|s| s / n).collect(),
        successes: adapted_success,
        no_context_successes: Vec::new(),
        other_task_successes: Vec::new(),
    })
}
