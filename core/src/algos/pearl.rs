//! PEARL (Rakelly et al. 2019, arXiv:1903.08254), as garage's `PEARL`: probabilistic context
//! variables for off-policy meta-RL.
//!
//! Per update, for each of the K sampled rounds (one task each): `embedding_batch_size`
//! context transitions drawn from the round's context steps, and `batch_size` transitions
//! drawn from all its steps. For each of `embedding_batch_size / embedding_mini_batch_size`
//! slices of the context:
//! - posterior `q(z | c) = prod_n N(mu_n, var_n)` from the encoder, `z ~ q` reparameterised;
//! - critics and encoder: `sum_k mean((Q_k(s, a, z) - y)^2) + kl_lambda KL(q || N(0, I))` with
//!   `y = reward_scale r + gamma (1 - done) V_target(s', z)` (the encoder learns from the
//!   Bellman error only);
//! - value: `mean((V(s, z') - (min_k Q_k(s, a~, z') - log pi(a~ | s, z')))^2)`, `z'` = `z`
//!   without gradient, `a~ ~ pi(s, z')`;
//! - policy: `mean(log pi(a~ | s, z') - min_k Q_k(s, a~, z'))` plus the mean, log-std and
//!   pre-activation regularisers; Polyak target for V.
//!
//! With `relabel_fraction` above 0, that share of the rounds first gets, in hindsight, a goal
//! one of its steps reached ([`hindsight_goals`]), for the context and the critics alike.
//!
//! On a CUDA device the update is replayed from a CUDA graph (`learner.cuda_graph`, see
//! [`UpdateGraph`]): its shapes are fixed by the config, its sampling is `randint`/`randn` on
//! the device, and it reads nothing back but its metrics, after the replay.

use tch::nn::{self, Module};
use tch::{Kind, Tensor};

use super::target::read_metrics;
use super::{Algorithm, Model, Trained, Update};
use crate::checkpoint::state::TargetNet;
use crate::envs::hindsight_goals;
use crate::items::round::RoundBatch;
use crate::models::{kl_from_prior, Mlp, ModelError, PearlModel};
use crate::optim::{Adam, GraphError, UpdateGraph};
use fleetrl_proto::TensorMap;

mod config;
pub use config::PearlConfig;

impl Model for PearlModel {
    fn export(&self) -> Result<TensorMap, ModelError> {
        PearlModel::export(self)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        PearlModel::named_parameters(self)
    }

    fn load_named(&mut self, weights: &[(String, Tensor)]) -> Result<(), ModelError> {
        PearlModel::load_named(self, weights)
    }
}

/// Rows `idx` `[K, M]` of each round's `[K, N, ..]` tensor: `[K, M, ..]`.
fn rows(t: &Tensor, idx: &Tensor) -> Tensor {
    match t.dim() {
        2 => t.gather(1, idx, false),
        _ => {
            let size = t.size();
            let idx = idx
                .unsqueeze(-1)
                .expand([size[0], idx.size()[1], size[2]], false);
            t.gather(1, &idx, false)
        }
    }
}

/// Moves every variable of `target` `tau` of the way to the one of the same name in `online`.
fn polyak(target: &nn::VarStore, online: &nn::VarStore, tau: f64) {
    let _guard = tch::no_grad_guard();
    let online = online.variables();
    for (name, mut var) in target.variables() {
        if let Some(src) = online.get(&name) {
            let _ = var.lerp_(src, tau);
        }
    }
}

/// PEARL's learner state.
#[derive(Debug)]
pub struct Pearl {
    config: PearlConfig,
    trained: Trained<PearlModel>,
    /// The target value function, in its own var store (named as the online `vf.*`).
    target_vs: TargetNet<nn::VarStore>,
    target_vf: Mlp,
    pi_optim: Adam,
    qf_optim: Adam,
    vf_optim: Adam,
    context_optim: Adam,
    graph: UpdateGraph,
}

impl Pearl {
    /// PEARL over `model`; `target_vf` is built alike and starts as a copy of its value
    /// function.
    pub fn new(
        config: &PearlConfig,
        model: PearlModel,
        model_config: &crate::models::config::ModelConfig,
    ) -> Pearl {
        let target_vs = nn::VarStore::new(model.var_store().device());
        let target_vf = Mlp::new(
            &(target_vs.root() / "vf"),
            model.obs_dim() + model.latent_dim(),
            &model_config.hidden_sizes,
            1,
            model_config.activation,
            None,
        );
        let pi_optim = Adam::over(model.sac().var_store(), 1e-8, "pi.");
        let qf_optim = Adam::over(model.sac().var_store(), 1e-8, "qf");
        let vf_optim = Adam::over(model.var_store(), 1e-8, "vf.");
        let context_optim = Adam::over(model.var_store(), 1e-8, "encoder.");
        let pearl = Pearl {
            config: config.clone(),
            trained: Trained::new(model, "updates"),
            target_vs: TargetNet(target_vs),
            target_vf,
            pi_optim,
            qf_optim,
            vf_optim,
            context_optim,
            graph: UpdateGraph::default(),
        };
        polyak(&pearl.target_vs, pearl.trained.model.var_store(), 1.0);
        pearl
    }

    /// One update on K rounds (replayed from a CUDA graph when one is on).
    pub fn train(&mut self, b: &RoundBatch) -> Result<Update, GraphError> {
        let out = UpdateGraph::train(self, |pearl| &mut pearl.graph, 0, b, Pearl::descend)?;
        self.trained.updates += 1;
        Ok(Update::from(read_metrics(&METRICS, &out[0])))
    }

    /// The update's device work on K rounds: the critics' and encoder's, the value
    /// function's and the policy's steps and the target's, for each slice of the context.
    /// Returns the metrics (see [`METRICS`]) averaged over the slices, unread.
    fn descend(&mut self, b: &RoundBatch) -> Vec<Tensor> {
        let c = &self.config;
        let (k, n) = (b.len(), b.steps());
        let context_rows = (c.context_steps() as i64).clamp(1, n);
        let device = b.obs.device();
        let (e, mb) = (
            i64::from(c.embedding_batch_size),
            i64::from(c.embedding_mini_batch_size),
        );
        let (reward, score) = if c.relabel_fraction > 0.0 {
            hindsight_goals(&b.next_obs, &b.reward, &b.score, c.relabel_fraction)
        } else {
            (b.reward.shallow_clone(), b.score.shallow_clone())
        };
        let idx = Tensor::randint(context_rows, [k, e], (Kind::Int64, device));
        let model = &self.trained.model;
        let context = model.context(
            &rows(&b.obs, &idx),
            &rows(&b.action, &idx),
            &rows(&score, &idx),
            &rows(&b.next_obs, &idx),
        );
        let (d, l) = (model.obs_dim(), model.latent_dim());
        let batch = i64::from(c.batch_size);
        let slices = e / mb;
        let mut totals = Tensor::zeros([METRICS.len() as i64], (Kind::Float, device));
        for i in 0..slices {
            let model = &self.trained.model;
            let (mu, var) = model.posterior(&context.narrow(1, i * mb, mb));
            model.remember_posteriors(&mu, &var);
            let z = if c.use_information_bottleneck {
                PearlModel::sample_z(&mu, &var)
            } else {
                mu.shallow_clone()
            };
            let idx = Tensor::randint(n, [k, batch], (Kind::Int64, device));
            let obs = rows(&b.obs, &idx).reshape([-1, d]);
            let action = rows(&b.action, &idx).reshape([k * batch, -1]);
            let reward = if c.critic_on_score { &score } else { &reward };
            let reward = rows(reward, &idx).reshape([-1]);
            let terminated = rows(&b.terminated, &idx).reshape([-1]);
            let next_obs = rows(&b.next_obs, &idx).reshape([-1, d]);
            let z_rows = z.unsqueeze(1).expand([k, batch, l], false).reshape([-1, l]);
            let obs_z = PearlModel::with_z(&obs, &z_rows);
            let qs = model.sac().qs(&obs_z, &action);
            let y: Tensor = tch::no_grad(|| {
                let next_v = self
                    .target_vf
                    .forward(&PearlModel::with_z(&next_obs, &z_rows))
                    .squeeze_dim(1);
                reward * c.reward_scale + (1.0 - terminated) * c.discount * next_v
            });
            let qf_loss = (&qs - y.unsqueeze(0))
                .square()
                .mean_dim(1, false, Kind::Float)
                .sum(Kind::Float);
            let kl = if c.use_information_bottleneck {
                kl_from_prior(&mu, &var)
            } else {
                Tensor::zeros([], (Kind::Float, device))
            };
            self.qf_optim.zero_grad();
            self.context_optim.zero_grad();
            (&qf_loss + &kl * c.kl_lambda).backward();
            self.qf_optim.step(c.qf_lr);
            self.context_optim.step(c.context_lr);

            let model = &self.trained.model;
            let obs_z = PearlModel::with_z(&obs, &z_rows.detach());
            let [unit, log_pi, pi_mean, log_std, pre_tanh] =
                model.sac().sample_action_parts(&obs_z);
            let new_action = model.sac().to_env_scale(&unit);
            let (min_q, _) = model
                .sac()
                .qs_for_policy(&obs_z, &new_action)
                .min_dim(0, false);
            let v = model.value(&obs_z);
            let v_target = (&min_q - &log_pi).detach();
            let vf_loss = (&v - v_target).square().mean(Kind::Float);
            self.vf_optim.zero_grad();
            vf_loss.backward();
            self.vf_optim.step(c.vf_lr);

            let regulariser = pi_mean.square().mean(Kind::Float) * c.policy_mean_reg_coeff
                + log_std.square().mean(Kind::Float) * c.policy_std_reg_coeff
                + pre_tanh
                    .square()
                    .sum_dim_intlist(1, false, Kind::Float)
                    .mean(Kind::Float)
                    * c.policy_pre_activation_coeff;
            let policy_loss = (&log_pi - &min_q).mean(Kind::Float) + regulariser;
            self.pi_optim.zero_grad();
            policy_loss.backward();
            self.pi_optim.step(c.policy_lr);
            polyak(&self.target_vs, model.var_store(), c.soft_target_tau);

            let values = Tensor::stack(
                &[
                    qf_loss.detach() / 2.0,
                    vf_loss.detach(),
                    policy_loss.detach(),
                    kl.detach() / k as f64,
                    var.detach().mean(Kind::Float),
                    qs.detach().mean(Kind::Float),
                ],
                0,
            );
            totals += values / slices as f64;
        }
        vec![totals]
    }
}

/// What [`Pearl::train`] reports, in the order `descend` stacks them.
const METRICS: [&str; 6] = ["q_loss", "v_loss", "policy_loss", "kl", "z_var", "q_mean"];

impl Algorithm for Pearl {
    fn use_cuda_graph(&mut self, enabled: bool) -> Result<(), GraphError> {
        let device = self.trained.model.var_store().device();
        let optims = &mut [
            &mut self.pi_optim,
            &mut self.qf_optim,
            &mut self.vf_optim,
            &mut self.context_optim,
        ];
        self.graph = UpdateGraph::over(enabled, device, optims)?;
        Ok(())
    }

    super::algorithm_parts!(trains_on: Rounds(rounds), state: [pi_optim, qf_optim, vf_optim, context_optim, target_vs]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ModelConfig;
    use crate::items::round::{RoundBuilder, RoundStep};
    use fleetrl_proto::space::Space;

    fn space(d: usize, bound: f32) -> Space {
        Space::Box {
            shape: vec![d as i64],
            low: vec![-bound; d],
            high: vec![bound; d],
        }
    }

    /// A fresh learner with small networks; `critic_on_score` as given.
    fn learner(critic_on_score: bool) -> Pearl {
        learner_with(critic_on_score, 0)
    }

    /// [`learner`] with an exploration pool of `pool` posteriors.
    fn learner_with(critic_on_score: bool, pool: u32) -> Pearl {
        let config = PearlConfig {
            exploration_pool: pool,
            latent_dim: 2,
            encoder_hidden_sizes: vec![16],
            meta_batch_size: 2,
            batch_size: 32,
            embedding_batch_size: 8,
            embedding_mini_batch_size: 4,
            num_steps_prior: 8,
            num_extra_rl_steps_posterior: 8,
            policy_lr: 1e-3,
            qf_lr: 1e-3,
            vf_lr: 1e-3,
            context_lr: 1e-3,
            discount: 0.0,
            critic_on_score,
            ..PearlConfig::default()
        };
        let model_config = ModelConfig {
            hidden_sizes: vec![32, 32],
            ..ModelConfig::default()
        };
        let model = PearlModel::new(
            &model_config,
            &config,
            &space(2, 2.0),
            &space(1, 1.0),
            tch::Device::Cpu,
        )
        .unwrap();
        Pearl::new(&config, model, &model_config)
    }

    /// 300 updates of `pearl` on two rounds whose env reward is the action and whose score
    /// is its negation; the last update and Q(0.9), Q(-0.9) at `z = 0`.
    fn train_on_rounds(pearl: &mut Pearl) -> (Update, [f32; 2]) {
        let batch = rounds_batch();
        let mut last = Update::default();
        for _ in 0..300 {
            last = pearl.update(&batch).unwrap();
        }
        let model = &pearl.trained.model;
        let obs = Tensor::zeros([2, 2], (Kind::Float, tch::Device::Cpu));
        let z = Tensor::zeros([2, 2], (Kind::Float, tch::Device::Cpu));
        let actions = Tensor::from_slice(&[0.9f32, -0.9]).view([2, 1]);
        let q = model.sac().q(0, &PearlModel::with_z(&obs, &z), &actions);
        let q = Vec::<f32>::try_from(q).unwrap();
        (last, [q[0], q[1]])
    }

    /// Two rounds (tasks 0 and 1) of 16 steps whose env reward is the action and whose score
    /// is its negation.
    fn rounds_batch() -> crate::algos::Batch {
        let item = |task: u32| {
            let mut builder = RoundBuilder::default();
            for i in 0..16 {
                let a = (i as f32 / 7.5) - 1.0;
                builder.push(RoundStep {
                    obs: &[0.0, 0.0],
                    action: &[a],
                    reward: a,
                    score: -a,
                    terminated: false,
                    next_obs: &[0.0, 0.0],
                });
            }
            builder.finish(task, 0)
        };
        let (a, b) = (item(0), item(1));
        let stacked = TensorMap::from_pairs(a.tensors.keys().map(|k| {
            let parts = [&a.tensors[k], &b.tensors[k]];
            (k.clone(), fleetrl_proto::Tensor::stack(&parts).unwrap())
        }));
        crate::algos::Batch::Rounds(RoundBatch::from_stacked(&stacked, tch::Device::Cpu).unwrap())
    }

    /// On rounds whose env reward is the action's first component, updates fit the critic
    /// (it ranks a high first component above a low one), the encoder's posteriors move off
    /// the prior, every loss is finite, and the state round-trips into a fresh learner.
    #[test]
    fn updates_on_rounds_fit_the_critic_and_move_the_posterior() {
        tch::manual_seed(0);
        let mut pearl = learner(false);
        let (last, q) = train_on_rounds(&mut pearl);
        for (name, value) in &last.metrics.0 {
            assert!(value.is_finite(), "{name} = {value}");
        }
        assert!(
            last.metrics.get("q_loss").unwrap() < 0.05,
            "{:?}",
            last.metrics
        );
        assert!(q[0] > q[1] + 1.0, "Q(0.9) = {}, Q(-0.9) = {}", q[0], q[1]);
        // Checkpoint state round-trips into a fresh learner.
        let mut restored = learner(false);
        restored.load_state(&pearl.state()).unwrap();
        assert_eq!(restored.trained.updates, 300);
    }

    /// `critic_on_score`: the critic learns the score's ranking (the negated action), not the
    /// env reward's.
    #[test]
    fn the_critic_can_train_on_the_score() {
        tch::manual_seed(0);
        let (_, q) = train_on_rounds(&mut learner(true));
        assert!(q[1] > q[0] + 1.0, "Q(0.9) = {}, Q(-0.9) = {}", q[0], q[1]);
    }

    /// Each update keeps the posteriors it trained on in the exploration pool: one update of
    /// two tasks in two context slices adds four rows (the newest), and the older rows still
    /// hold the prior.
    #[test]
    fn updates_fill_the_exploration_pool_with_their_posteriors() {
        tch::manual_seed(0);
        let mut pearl = learner_with(false, 6);
        let pool = |p: &Pearl| -> Vec<f32> {
            let named = p.trained.model.named_parameters();
            let var = &named.iter().find(|(n, _)| n == "explore.var").unwrap().1;
            Vec::<f32>::try_from(var.reshape([-1])).unwrap()
        };
        assert_eq!(pool(&pearl), vec![1.0; 12]);
        train_on_rounds(&mut pearl);
        let after = pool(&pearl);
        assert!(after.iter().all(|&v| v > 0.0 && v != 1.0), "{after:?}");
        // One update from a fresh pool: four new rows, two still the prior's.
        let mut fresh = learner_with(false, 6);
        fresh.update(&rounds_batch()).unwrap();
        let one = pool(&fresh);
        assert_eq!(one[..4], [1.0; 4]);
        assert!(one[4..].iter().all(|&v| v != 1.0), "{one:?}");
    }
}
