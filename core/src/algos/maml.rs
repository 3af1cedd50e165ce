//! Model-Agnostic Meta-Learning (Finn et al. 2017, arXiv:1703.03400; garage's `MAML`,
//! `MAMLVPG`, `MAMLPPO`, `MAMLTRPO`).
//!
//! One item is one task's adaptation, collected by one actor: `K + 1` stages of T steps of M
//! envs, stacked on the time axis (`[(K+1)T, M]`). Stage 0 acts with the meta-policy theta;
//! the actor then takes an SGD step on the policy-gradient loss of stage 0,
//! `phi_1 = theta - inner_lr * grad L(theta; stage 0)`, acts stage 1 with phi_1, and so on for
//! `K = num_grad_updates` steps. The learner repeats those inner steps on the same data with
//! gradients through them (second order, as garage does), and takes outer steps on the
//! last stage's loss under `phi_K(theta)`, averaged over the meta-batch's tasks:
//! - `maml_vpg`: Adam on `-mean(log pi_phi(a|s) A)`;
//! - `maml_ppo`: `num_ppo_steps` Adam steps on the clipped surrogate,
//!   `ratio = pi_phi(a|s) / pi_behaviour(a|s)`, each through inner steps redone from the
//!   updated theta (ProMP's PPO-MAML; the first step's ratio is 1, so the clip binds from the
//!   second);
//! - `maml_trpo`: a natural-gradient step on `-mean(ratio A)` within `KL <= max_kl_step`,
//!   the Fisher-vector products differentiating through the inner steps too.
//!
//! Advantages come from garage's linear-feature baseline, fitted by ridge regression to each
//! task-stage's returns (features: the clipped observation, its square, and the time step's
//! first three powers), so there is no value network to adapt.

use tch::{Device, Kind, Tensor};

use super::pg::PgOptions;
use super::pg::{entropy_bonus, max_entropy_rewards, process_advantages, EntropyMethod};
use super::trpo::{conjugate_gradient, flat_grad, flat_params, set_params};
use super::{Algorithm, Metrics, Trained};
use crate::items::rollout::RolloutBatch;
use crate::models::{ActorCritic, Dist, Heads};
use crate::optim::Adam;

mod config;
pub use config::{MamlConfig, MetaOptimizer};

/// One stage of one task as tensors: the rows the inner and outer losses score.
#[derive(Debug)]
pub struct Stage {
    /// Observations `[N, D]` (N = T x M).
    pub obs: Tensor,
    /// Actions `[N]` (i64) or `[N, A]`.
    pub action: Tensor,
    /// Processed advantages `[N]` (no gradient: data).
    pub advantage: Tensor,
    /// The acting policy's log-probabilities `[N]`.
    pub behaviour_log_prob: Tensor,
    /// Mean undiscounted return of the stage's episodes.
    pub mean_return: f64,
}

/// Steps, envs and stages of an adaptation item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Steps per stage T.
    pub t: usize,
    /// Envs (episodes per stage) M.
    pub m: usize,
    /// Stages, `num_grad_updates + 1`.
    pub stages: usize,
}

/// Garage's `LinearFeatureBaseline` features of `[N, D]` observations at episode steps `[N]`.
fn baseline_features(obs: &Tensor, step: &Tensor) -> Tensor {
    let o = obs.to_kind(Kind::Double).clamp(-10.0, 10.0);
    let al = (step.to_kind(Kind::Double) / 100.0).unsqueeze(1);
    let ones = al.ones_like();
    Tensor::cat(
        &[
            o.shallow_clone(),
            o.square(),
            al.shallow_clone(),
            al.square(),
            al.pow_tensor_scalar(3),
            ones,
        ],
        1,
    )
}

/// The ridge fit of `returns` `[N]` on the features, evaluated on the same rows (`[N]`).
pub fn linear_baseline(obs: &Tensor, step: &Tensor, returns: &[f64], reg: f64) -> Vec<f64> {
    let x = baseline_features(obs, step);
    let y = Tensor::from_slice(returns);
    let f = x.size()[1];
    let a = x.tr().mm(&x) + Tensor::eye(f, (Kind::Double, Device::Cpu)) * reg;
    let w = Tensor::linalg_solve(&a, &x.tr().mv(&y), true);
    Vec::<f64>::try_from(x.mv(&w)).expect("the fit is a 1-D f64 tensor")
}

/// A stage's advantages `[T x M]` (time-major) against the linear baseline, with garage's
/// options; also the mean undiscounted episode return of the env's rewards. Episodes end where
/// `done` and at the stage's last step (the stage runs whole episodes from a reset). With
/// `entropy_method = "max"`, the acting policy's `entropy` `[T x M]` adds its bonus to the
/// rewards the returns and advantages are computed from (garage's `_compute_advantage`).
#[allow(clippy::too_many_arguments)]
pub fn stage_advantages(
    obs: &Tensor,
    (env_reward, entropy): (&[f32], Option<&Tensor>),
    done: &[bool],
    (t, m): (usize, usize),
    discount: f64,
    lambda: f64,
    reg: f64,
    options: &PgOptions,
) -> (Vec<f32>, f64) {
    let reward = match entropy {
        Some(h) => max_entropy_rewards(env_reward, h, options),
        None => env_reward.to_vec(),
    };
    let ends = |ti: usize, j: usize| done[ti * m + j] || ti + 1 == t;
    // Episode step of every row, and discounted returns to go.
    let mut step = vec![0i64; t * m];
    for j in 0..m {
        for ti in 1..t {
            step[ti * m + j] = if ends(ti - 1, j) {
                0
            } else {
                step[(ti - 1) * m + j] + 1
            };
        }
    }
    let mut returns = vec![0f64; t * m];
    for j in 0..m {
        let mut g = 0f64;
        for ti in (0..t).rev() {
            let i = ti * m + j;
            if ends(ti, j) {
                g = 0.0;
            }
            g = f64::from(reward[i]) + discount * g;
            returns[i] = g;
        }
    }
    let episodes = step.iter().filter(|&&s| s == 0).count();
    let total: f64 = env_reward.iter().map(|&r| f64::from(r)).sum();
    let baseline = linear_baseline(obs, &Tensor::from_slice(&step), &returns, reg);
    let mut advantage = vec![0f32; t * m];
    for j in 0..m {
        let mut next_adv = 0f64;
        for ti in (0..t).rev() {
            let i = ti * m + j;
            let next_value = if ends(ti, j) {
                next_adv = 0.0;
                0.0
            } else {
                baseline[i + m]
            };
            let delta = f64::from(reward[i]) + discount * next_value - baseline[i];
            next_adv = delta + discount * lambda * next_adv;
            advantage[i] = next_adv as f32;
        }
    }
    (
        process_advantages(&advantage, options),
        total / episodes.max(1) as f64,
    )
}

/// Splits a batch of adaptation items (`[(K+1)T, tasks x M]`) into `tasks x stages` stages on
/// `device`, advantages computed. With `entropy_method = "max"` each stage's rewards carry the
/// entropy of the policy that acted in it: `theta` (the meta-policy, on `device`) adapted on
/// the stages before, as the actor adapted it.
pub fn split_stages(
    batch: &RolloutBatch,
    layout: Layout,
    config: &MamlConfig,
    (heads, theta): (&Heads, &[Tensor]),
    device: Device,
) -> Vec<Vec<Stage>> {
    let Layout { t, m, stages } = layout;
    let (b, d) = (batch.b, batch.obs_dim);
    let tasks = b / m.max(1);
    let options = config.options;
    let obs_all = (batch.obs.to_tensor(Device::Cpu)).view([batch.t as i64, b as i64, d as i64]);
    let action_all = batch.action.to_tensor(Device::Cpu);
    let action_all = match action_all.dim() {
        1 => action_all.view([batch.t as i64, b as i64]),
        _ => action_all.view([batch.t as i64, b as i64, -1]),
    };
    let lp_all = Tensor::from_slice(&batch.log_prob).view([batch.t as i64, b as i64]);
    let mut out = Vec::with_capacity(tasks);
    let max_entropy = options.entropy_method == EntropyMethod::Max;
    for task in 0..tasks {
        let mut task_stages = Vec::with_capacity(stages);
        // The policy that acted in stage s (max entropy only).
        let mut acting: Vec<Tensor> = theta.iter().map(Tensor::shallow_clone).collect();
        for s in 0..stages {
            let rows = |x: &Tensor| {
                x.narrow(0, (s * t) as i64, t as i64)
                    .narrow(1, (task * m) as i64, m as i64)
            };
            let host_obs = rows(&obs_all).reshape([(t * m) as i64, d as i64]);
            let mut reward = Vec::with_capacity(t * m);
            let mut done = Vec::with_capacity(t * m);
            for ti in s * t..(s + 1) * t {
                for j in task * m..(task + 1) * m {
                    let i = ti * b + j;
                    reward.push(batch.reward[i]);
                    done.push(batch.terminated[i] || batch.truncated[i]);
                }
            }
            let obs = host_obs.to_device(device);
            let entropy = max_entropy.then(|| {
                let _guard = tch::no_grad_guard();
                heads.dist_with(&obs, &acting).entropy()
            });
            let (advantage, mean_return) = stage_advantages(
                &host_obs,
                (&reward, entropy.as_ref()),
                &done,
                (t, m),
                config.discount,
                config.gae_lambda,
                config.baseline_reg_coeff,
                &options,
            );
            let action = rows(&action_all);
            let action = match action.dim() {
                2 => action.reshape([(t * m) as i64]),
                _ => action.reshape([(t * m) as i64, -1]),
            };
            let stage = Stage {
                obs,
                action: action.to_device(device),
                advantage: Tensor::from_slice(&advantage).to_device(device),
                behaviour_log_prob: rows(&lp_all).reshape([(t * m) as i64]).to_device(device),
                mean_return,
            };
            if max_entropy && s + 1 < stages {
                let one = std::slice::from_ref(&stage);
                acting = adapt(heads, &acting, one, config.inner_lr, &options, false);
            }
            task_stages.push(stage);
        }
        out.push(task_stages);
    }
    out
}

/// The inner (adaptation) loss: `-mean(log pi_params(a|s) A)` minus the entropy bonus.
pub fn inner_loss(heads: &Heads, params: &[Tensor], stage: &Stage, options: &PgOptions) -> Tensor {
    let dist = heads.dist_with(&stage.obs, params);
    -(dist.log_prob(&stage.action) * &stage.advantage).mean(None::<Kind>)
        - entropy_bonus(&dist.entropy(), options, None)
}

/// The policy after one inner SGD step per stage of `stages`, from `theta`. With
/// `create_graph` the result stays a differentiable function of `theta` (the learner); without
/// it, plain tensors (the actor).
pub fn adapt(
    heads: &Heads,
    theta: &[Tensor],
    stages: &[Stage],
    inner_lr: f64,
    options: &PgOptions,
    create_graph: bool,
) -> Vec<Tensor> {
    let mut params: Vec<Tensor> = theta.iter().map(Tensor::shallow_clone).collect();
    for stage in stages {
        let loss = inner_loss(heads, &params, stage, options);
        let grads = Tensor::run_backward(&[loss], &params, true, create_graph);
        params = params
            .iter()
            .zip(&grads)
            .map(|(p, g)| {
                let next = p - g * inner_lr;
                if create_graph {
                    next
                } else {
                    next.detach().set_requires_grad(true)
                }
            })
            .collect();
    }
    params
}

/// The per-task results of one meta-objective evaluation.
struct MetaLoss {
    /// The mean outer loss over tasks (differentiable in theta).
    loss: Tensor,
    /// The mean KL(old adapted || new adapted) on the last stages (TRPO's constraint).
    kl: Tensor,
    /// The share of the last stages' samples whose likelihood ratio lies outside PPO's clip
    /// range.
    clip_fraction: f64,
}

/// MAML's learner state: the meta-policy and, for VPG/PPO, its outer Adam.
#[derive(Debug)]
pub struct Maml {
    config: MamlConfig,
    outer: MetaOptimizer,
    layout_m: usize,
    trained: Trained<ActorCritic>,
    optim: Adam,
    device: Device,
}

impl Maml {
    /// MAML with `outer` steps over `model`, on items of `envs` episodes per stage.
    pub fn new(config: &MamlConfig, outer: MetaOptimizer, model: ActorCritic, envs: usize) -> Maml {
        let optim = Adam::over(model.var_store(), config.adam_eps, "pi.");
        let device = model.var_store().device();
        Maml {
            config: config.clone(),
            outer,
            layout_m: envs.max(1),
            trained: Trained::new(model, "maml.updates"),
            optim,
            device,
        }
    }

    fn layout(&self, batch: &RolloutBatch) -> Layout {
        let stages = self.config.num_grad_updates as usize + 1;
        Layout {
            t: batch.t / stages,
            m: self.layout_m,
            stages,
        }
    }

    /// The outer loss and KL at the current theta, against the last stages' `old` adapted
    /// policies; without `old`, against the adapted policies at this theta themselves (KL 0,
    /// with the curvature TRPO needs). Also returns those adapted policies, detached.
    fn meta_loss(
        &self,
        tasks: &[Vec<Stage>],
        old: Option<&[Dist]>,
        create_graph: bool,
    ) -> (MetaLoss, Vec<Dist>) {
        let heads = self.trained.model.heads();
        let theta = heads.policy_params();
        let options = self.config.options;
        let mut losses = Vec::with_capacity(tasks.len());
        let mut kls = Vec::with_capacity(tasks.len());
        let mut clipped = Vec::with_capacity(tasks.len());
        let mut adapted = Vec::with_capacity(tasks.len());
        let eps = self.config.clip_range();
        for (i, stages) in tasks.iter().enumerate() {
            let (last, adapting) = stages.split_last().expect("at least one stage");
            let phi = adapt(
                heads,
                &theta,
                adapting,
                self.config.inner_lr,
                &options,
                create_graph,
            );
            let dist = heads.dist_with(&last.obs, &phi);
            let log_prob = dist.log_prob(&last.action);
            let ratio = (&log_prob - &last.behaviour_log_prob).exp();
            let adv = &last.advantage;
            let outside = (&ratio - 1.0).abs().gt(eps).to_kind(Kind::Float);
            clipped.push(outside.detach().mean(Kind::Float));
            let objective = match self.outer {
                MetaOptimizer::Vpg => (&log_prob * adv).mean(Kind::Float),
                MetaOptimizer::Ppo => {
                    let clipped = ratio.clamp(1.0 - eps, 1.0 + eps) * adv;
                    (&ratio * adv).minimum(&clipped).mean(Kind::Float)
                }
                MetaOptimizer::Trpo => (&ratio * adv).mean(Kind::Float),
            };
            losses.push(-objective - entropy_bonus(&dist.entropy(), &options, None));
            let detached = dist.detach();
            let reference = old.map_or(&detached, |old| &old[i]);
            kls.push(reference.kl(&dist).mean(Kind::Float));
            adapted.push(detached);
        }
        let loss = MetaLoss {
            loss: Tensor::stack(&losses, 0).mean(Kind::Float),
            kl: Tensor::stack(&kls, 0).mean(Kind::Float),
            clip_fraction: Tensor::stack(&clipped, 0)
                .mean(Kind::Float)
                .double_value(&[]),
        };
        (loss, adapted)
    }

    /// TRPO's meta step: returns (KL, surrogate improvement, backtracks).
    fn trpo_step(&self, tasks: &[Vec<Stage>]) -> (f64, f64, u32) {
        let c = &self.config;
        let params = self.trained.model.heads().policy_params();
        let (MetaLoss { loss, kl, .. }, old) = self.meta_loss(tasks, None, true);
        let g = -flat_grad(&loss, &params, false);
        let kl_grad = flat_grad(&kl, &params, true);
        let fvp = |v: &Tensor| {
            flat_grad(&(&kl_grad * v).sum(Kind::Float), &params, false) + v * c.cg_damping
        };
        let direction = conjugate_gradient(fvp, &g, c.cg_iters);
        let curvature = direction.dot(&fvp(&direction)).double_value(&[]);
        let scale = (2.0 * c.kl_limit() / (curvature + 1e-8)).sqrt();
        let full_step = direction * scale;
        let start = flat_params(&params);
        let loss_before = loss.double_value(&[]);
        for k in 0..=c.max_backtracks {
            let fraction = c.backtrack_ratio.powi(k as i32);
            set_params(&params, &(&start + &full_step * fraction));
            let (m, _) = self.meta_loss(tasks, Some(&old), false);
            let (loss, kl) = (m.loss.double_value(&[]), m.kl.double_value(&[]));
            if kl.is_finite() && kl <= c.kl_limit() && loss < loss_before {
                return (kl, loss_before - loss, k);
            }
        }
        set_params(&params, &start);
        (0.0, 0.0, c.max_backtracks + 1)
    }

    /// MAML-VPG's one Adam step, or MAML-PPO's `num_ppo_steps`, on the meta-batch `tasks`:
    /// the meta-loss before the first, and for PPO the mean clip fraction over its steps.
    fn adam_steps(&mut self, tasks: &[Vec<Stage>]) -> Vec<(&'static str, f64)> {
        let steps = match self.outer {
            MetaOptimizer::Ppo => self.config.ppo_steps(),
            _ => 1,
        };
        let (mut first_loss, mut clip_fraction) = (0.0, 0.0);
        for step in 0..steps {
            let (meta, _) = self.meta_loss(tasks, None, true);
            let loss = meta.loss;
            self.optim.zero_grad();
            loss.backward();
            self.optim.step(self.config.outer_lr);
            if step == 0 {
                first_loss = loss.double_value(&[]);
            }
            clip_fraction += meta.clip_fraction / f64::from(steps);
        }
        let mut metrics = vec![("meta_loss", first_loss)];
        if self.outer == MetaOptimizer::Ppo {
            metrics.push(("clip_fraction", clip_fraction));
        }
        metrics
    }

    /// One meta-update on a batch of adaptation items.
    pub fn train(&mut self, batch: &RolloutBatch) -> Metrics {
        let layout = self.layout(batch);
        let heads = self.trained.model.heads();
        let theta = heads.policy_params();
        let tasks = split_stages(batch, layout, &self.config, (heads, &theta), self.device);
        let mut metrics = Vec::new();
        match self.outer {
            MetaOptimizer::Vpg | MetaOptimizer::Ppo => metrics.extend(self.adam_steps(&tasks)),
            MetaOptimizer::Trpo => {
                let (kl, improvement, backtracks) = self.trpo_step(&tasks);
                metrics.push(("kl", kl));
                metrics.push(("surrogate_improvement", improvement));
                metrics.push(("backtracks", backtracks as f64));
            }
        }
        let mean_stage = |s: usize| {
            tasks.iter().map(|t| t[s].mean_return).sum::<f64>() / tasks.len().max(1) as f64
        };
        metrics.push(("pre_adaptation_return", mean_stage(0)));
        metrics.push((
            "post_adaptation_return",
            mean_stage(layout.stages.saturating_sub(1)),
        ));
        self.trained.updates += 1;
        self.trained.env_steps += batch.env_steps();
        Metrics(metrics)
    }
}

impl Algorithm for Maml {
    super::algorithm_parts!(trains_on: Rollouts(rollouts), state: [optim]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ModelConfig;
    use fleetrl_proto::space::Space;

    /// A linear Gaussian policy on a 1-D observation and action: mean = w x + b.
    fn linear_policy() -> ActorCritic {
        let config = ModelConfig {
            hidden_sizes: vec![],
            ..ModelConfig::default()
        };
        let obs = Space::Box {
            shape: vec![1],
            low: vec![-10.0],
            high: vec![10.0],
        };
        let action = Space::Box {
            shape: vec![1],
            low: vec![-1.0],
            high: vec![1.0],
        };
        ActorCritic::new(&config, &obs, &action, Device::Cpu).unwrap()
    }

    fn stage(obs: &[f64], action: &[f64], advantage: &[f64]) -> Stage {
        let n = obs.len() as i64;
        Stage {
            obs: Tensor::from_slice(obs).view([n, 1]),
            action: Tensor::from_slice(action).view([n, 1]),
            advantage: Tensor::from_slice(advantage),
            behaviour_log_prob: Tensor::zeros([n], (Kind::Double, Device::Cpu)),
            mean_return: 0.0,
        }
    }

    /// theta = (w, b, log_std) as f64 leaves.
    fn theta(w: f64, b: f64, log_std: f64) -> Vec<Tensor> {
        [
            Tensor::from_slice(&[w]).view([1, 1]),
            Tensor::from_slice(&[b]),
            Tensor::from_slice(&[log_std]),
        ]
        .into_iter()
        .map(|t| t.set_requires_grad(true))
        .collect()
    }

    fn values(params: &[Tensor]) -> Vec<f64> {
        params.iter().map(|p| p.double_value(&[0])).collect()
    }

    /// The inner step against a hand-computed SGD step on `-mean(log pi(a|x) A)`:
    /// d/dmu log pi = (a - mu) / s^2, d/dlog_std log pi = (a - mu)^2 / s^2 - 1.
    #[test]
    fn inner_step_is_the_hand_computed_sgd_step() {
        let model = linear_policy();
        let (w, b, log_std, lr) = (0.5, -0.2, 0.1f64, 0.3);
        let (xs, acts, advs) = ([1.0, -2.0], [0.7, 0.1], [1.5, -0.5]);
        let s2 = (2.0 * log_std).exp();
        let (mut gw, mut gb, mut gs) = (0.0, 0.0, 0.0);
        for i in 0..2 {
            let mu = w * xs[i] + b;
            let z = acts[i] - mu;
            gw -= advs[i] * z / s2 * xs[i] / 2.0;
            gb -= advs[i] * z / s2 / 2.0;
            gs -= advs[i] * (z * z / s2 - 1.0) / 2.0;
        }
        let want = [w - lr * gw, b - lr * gb, log_std - lr * gs];
        let options = PgOptions {
            center_adv: false,
            ..PgOptions::default()
        };
        let stages = [stage(&xs, &acts, &advs)];
        let phi = adapt(
            model.heads(),
            &theta(w, b, log_std),
            &stages,
            lr,
            &options,
            false,
        );
        for (got, want) in values(&phi).iter().zip(want) {
            assert!((got - want).abs() < 1e-12, "{got} vs {want}");
        }
    }

    /// The meta-gradient of the MAML-VPG objective L(phi(theta)) (second order, through the
    /// inner step) against central finite differences.
    #[test]
    fn meta_gradient_matches_finite_differences() {
        let model = linear_policy();
        let heads = model.heads();
        let options = PgOptions {
            center_adv: false,
            ..PgOptions::default()
        };
        let inner = stage(&[1.0, -2.0, 0.5], &[0.7, 0.1, -0.4], &[1.5, -0.5, 0.8]);
        let outer = stage(&[0.3, 1.2], &[-0.2, 0.9], &[-1.0, 2.0]);
        let objective = |params: &[Tensor]| {
            let phi = adapt(
                heads,
                params,
                std::slice::from_ref(&inner),
                0.3,
                &options,
                true,
            );
            inner_loss(heads, &phi, &outer, &options)
        };
        let at = [0.5, -0.2, 0.1];
        let params = theta(at[0], at[1], at[2]);
        let grads = Tensor::run_backward(&[objective(&params)], &params, false, false);
        let eps = 1e-6;
        for k in 0..3 {
            let shifted = |d: f64| {
                let mut p = at;
                p[k] += d;
                objective(&theta(p[0], p[1], p[2])).double_value(&[])
            };
            let numeric = (shifted(eps) - shifted(-eps)) / (2.0 * eps);
            let analytic = grads[k].double_value(&[0]);
            assert!(
                (numeric - analytic).abs() < 1e-6 * (1.0 + numeric.abs()),
                "parameter {k}: finite differences {numeric}, autograd {analytic}"
            );
        }
        // A first-order approximation (no gradient through the inner step) differs: the test
        // would catch a detached inner step.
        let phi = adapt(
            heads,
            &params,
            std::slice::from_ref(&inner),
            0.3,
            &options,
            false,
        );
        let first_order = Tensor::run_backward(
            &[inner_loss(heads, &phi, &outer, &options)],
            &phi,
            false,
            false,
        );
        let differs = (0..3).any(|k| {
            (first_order[k].double_value(&[0]) - grads[k].double_value(&[0])).abs() > 1e-6
        });
        assert!(differs, "second-order terms vanished");
    }

    /// With `entropy_method = "max"` each stage's rewards carry `policy_ent_coeff x H` of the
    /// policy that acted in it (theta in stage 0, the adapted phi_1 in stage 1), before the
    /// advantages; the stage's mean return stays the env's.
    #[test]
    fn max_entropy_adds_the_acting_policys_entropy_to_the_rewards() {
        use crate::algos::pg::EntropyMethod;
        use crate::algos::testing::{cartpole_model, tiny_batch};
        let model = cartpole_model(3);
        let heads = model.heads();
        let theta = heads.policy_params();
        let batch = tiny_batch();
        let layout = Layout {
            t: 2,
            m: 2,
            stages: 2,
        };
        // A strong ridge keeps the baseline near 0: on four rows a weak one interpolates the
        // returns, leaving zero advantages whatever the rewards.
        let with = |entropy_method, policy_ent_coeff| MamlConfig {
            options: PgOptions {
                center_adv: false,
                entropy_method,
                policy_ent_coeff,
                ..PgOptions::default()
            },
            baseline_reg_coeff: 1e6,
            ..MamlConfig::default()
        };
        let config = with(EntropyMethod::Max, 0.5);
        let shaped = split_stages(&batch, layout, &config, (heads, &theta), Device::Cpu);
        let plain = with(EntropyMethod::NoEntropy, 0.0);
        let unshaped = split_stages(&batch, layout, &plain, (heads, &theta), Device::Cpu);
        let mut params: Vec<Tensor> = theta.iter().map(Tensor::shallow_clone).collect();
        for s in 0..2 {
            let stage = &unshaped[0][s];
            let h = Vec::<f32>::try_from(heads.dist_with(&stage.obs, &params).entropy()).unwrap();
            let rows = s * 4..(s + 1) * 4;
            let reward: Vec<f32> = (batch.reward[rows.clone()].iter().zip(&h))
                .map(|(r, h)| r + 0.5 * h)
                .collect();
            let done: Vec<bool> = batch.terminated[rows].to_vec();
            let (want, _) = stage_advantages(
                &stage.obs,
                (&reward, None),
                &done,
                (2, 2),
                config.discount,
                config.gae_lambda,
                config.baseline_reg_coeff,
                &config.options,
            );
            let got = Vec::<f32>::try_from(&shaped[0][s].advantage).unwrap();
            let before = Vec::<f32>::try_from(&stage.advantage).unwrap();
            for ((g, w), b) in got.iter().zip(&want).zip(&before) {
                assert!((g - w).abs() < 1e-5, "stage {s}: {got:?} vs {want:?}");
                assert!((g - b).abs() > 1e-4, "stage {s}: no bonus in {got:?}");
            }
            assert_eq!(shaped[0][s].mean_return, stage.mean_return);
            if s == 1 {
                // Stage 1's entropy is phi_1's, which differs from theta's on its rows.
                let at_theta = heads.dist_with(&stage.obs, &theta).entropy();
                assert!(!at_theta.allclose(&Tensor::from_slice(&h), 1e-6, 1e-6, false));
            }
            params = adapt(
                heads,
                &params,
                std::slice::from_ref(&shaped[0][s]),
                config.inner_lr,
                &config.options,
                false,
            );
        }
    }

    /// Two tasks' stages, one to adapt on and one to score, in `model`'s float type, with
    /// the behaviour log-probabilities of the policy adapted from its theta, as the actor
    /// acts: at this theta the likelihood ratio is 1.
    fn meta_batch(model: &ActorCritic, config: &MamlConfig) -> Vec<Vec<Stage>> {
        let heads = model.heads();
        let float = |s: Stage| Stage {
            obs: s.obs.to_kind(Kind::Float),
            action: s.action.to_kind(Kind::Float),
            advantage: s.advantage.to_kind(Kind::Float),
            ..s
        };
        let tasks = [
            (
                stage(&[1.0, -2.0, 0.5], &[0.7, 0.1, -0.4], &[1.5, -0.5, 0.8]),
                stage(&[0.3, 1.2, -0.7], &[-0.2, 0.9, 0.4], &[-1.0, 2.0, 1.0]),
            ),
            (
                stage(&[-1.0, 0.4, 2.0], &[-0.6, 0.3, 0.8], &[0.9, 1.1, -0.7]),
                stage(&[0.8, -0.3, 1.5], &[0.5, -0.9, 0.2], &[1.2, -0.8, 1.6]),
            ),
        ];
        let theta = heads.policy_params();
        let mut out = Vec::new();
        for (inner, outer) in tasks {
            let (inner, mut outer) = (float(inner), float(outer));
            let adapting = std::slice::from_ref(&inner);
            let phi = adapt(
                heads,
                &theta,
                adapting,
                config.inner_lr,
                &config.options,
                false,
            );
            let log_prob = heads.dist_with(&outer.obs, &phi).log_prob(&outer.action);
            outer.behaviour_log_prob = log_prob.detach();
            out.push(vec![inner, outer]);
        }
        out
    }

    /// MAML-PPO's outer steps on one meta-batch, from one theta: with one step its update is
    /// MAML-VPG's (the ratio is 1, so the clip never binds); with five it differs, the ratio
    /// leaves the clip range on some samples, and the clipped surrogate ends lower.
    #[test]
    fn ppo_steps_differ_from_the_vpg_step_once_the_clip_binds() {
        let start = flat_params(&linear_policy().heads().policy_params());
        let run = |outer: MetaOptimizer, steps: Option<u32>| {
            let config = MamlConfig {
                outer,
                outer_lr: 0.02,
                num_ppo_steps: steps,
                lr_clip_range: (outer == MetaOptimizer::Ppo).then_some(0.05),
                ..MamlConfig::default()
            };
            config.validate().unwrap();
            let model = linear_policy();
            set_params(&model.heads().policy_params(), &start);
            let tasks = meta_batch(&model, &config);
            let mut maml = Maml::new(&config, outer, model, 3);
            let metrics = maml.adam_steps(&tasks);
            let theta = flat_params(&maml.trained.model.heads().policy_params());
            let (after, _) = maml.meta_loss(&tasks, None, false);
            let clip_fraction = metrics.iter().find(|m| m.0 == "clip_fraction").map(|m| m.1);
            let theta = Vec::<f64>::try_from(theta.to_kind(Kind::Double)).unwrap();
            (theta, clip_fraction, after.loss.double_value(&[]))
        };
        let (vpg, none, _) = run(MetaOptimizer::Vpg, None);
        let (one, clipped_once, loss_one) = run(MetaOptimizer::Ppo, Some(1));
        let (five, clipped, loss_five) = run(MetaOptimizer::Ppo, Some(5));
        assert_eq!(none, None);
        let gap = |a: &[f64], b: &[f64]| {
            a.iter()
                .zip(b)
                .map(|(x, y)| (x - y).abs())
                .fold(0.0, f64::max)
        };
        assert!(gap(&vpg, &one) < 1e-6, "{vpg:?} vs {one:?}");
        assert_eq!(clipped_once, Some(0.0));
        assert!(gap(&vpg, &five) > 1e-2, "{vpg:?} vs {five:?}");
        let clipped = clipped.expect("PPO reports its clip fraction");
        assert!(clipped > 0.0, "the clip never bound: {clipped}");
        assert!(loss_five < loss_one, "{loss_five} vs {loss_one}");
    }

    /// Returns, the episode split and the mean return of a stage; the linear baseline explains
    /// a return that is a polynomial of the time step exactly, leaving zero advantages.
    #[test]
    fn stage_advantages_fit_the_baseline_and_average_episodes() {
        // T = 4, M = 2: column 0 one episode of reward -1 per step; column 1 two episodes
        // (done after step 1) of reward -2 per step.
        let reward = [-1.0f32, -2.0, -1.0, -2.0, -1.0, -2.0, -1.0, -2.0];
        let done = [false, false, false, true, false, false, false, false];
        let obs = Tensor::zeros([8, 1], (Kind::Float, Device::Cpu));
        let options = PgOptions {
            center_adv: false,
            ..PgOptions::default()
        };
        // A ridge small beside the cubic time feature's scale (0.03^3), so the fit is exact.
        let (adv, mean) = stage_advantages(
            &obs,
            (&reward, None),
            &done,
            (4, 2),
            1.0,
            1.0,
            1e-16,
            &options,
        );
        // Episodes: -4 (column 0), -4 and -4 (column 1).
        assert!((mean - (-4.0)).abs() < 1e-9, "{mean}");
        // Returns by episode step: step 0 -4 (three times), step 1 -3 (column 0) and -2
        // (column 1, twice), steps 2 and 3 -2 and -1 (column 0). A cubic in the step fits the
        // means (-4, -7/3, -2, -1); the advantages are what is left (rows time-major).
        let want = [0.0, 0.0, -2.0 / 3.0, 1.0 / 3.0, 0.0, 0.0, 0.0, 1.0 / 3.0];
        for (a, w) in adv.iter().zip(want) {
            assert!((a - w).abs() < 1e-3, "{adv:?} vs {want:?}");
        }
    }
}
