//! Soft Actor-Critic (Haarnoja et al. 2018, arXiv:1801.01290 and arXiv:1812.05905) with
//! automatic temperature tuning towards a target entropy, or a fixed temperature, and CAPS
//! smoothness regularisation (Mysore et al. 2021, arXiv:2012.06644) as garage offers it.
//!
//! Per batch: `a' ~ pi(s')`, `y = R_n + gamma_n (min_k Q_target_k(s', a') - alpha log pi(a'|s'))`;
//! critic loss `sum_k mean(w (Q_k(s, a) - y)^2)`; policy loss
//! `mean(alpha log pi(a~|s) - min_k Q_k(s, a~))` with `a~ ~ pi(s)` reparameterised, plus
//! `lambda_T ||mu(s) - mu(s')||^2 + lambda_S ||mu(s) - mu(s + N(0, sigma))||^2` (CAPS);
//! temperature loss `-mean(log alpha (log pi(a~|s) + H_target))`; Polyak targets.

use crate::algos::config::AlgoSection;
use crate::algos::offpolicy::check_actor_critic;
use crate::algos::offpolicy::Exploration;
use crate::algos::offpolicy::NoiseKind;
use crate::algos::offpolicy::ReplayOptions;
use crate::algos::target::TargetUpdate;
use serde::{Deserialize, Serialize};
use tch::{nn, Kind, Tensor};

use super::offpolicy::CapsOptions;
use super::target::{priorities, read_metrics};
use super::td3::critic_loss;
use super::{Algorithm, Trained, Update};
use crate::checkpoint::state::TargetNet;
use crate::config::error::{check, ConfigError};
use crate::items::transition::TransitionBatch;
use crate::models::OffPolicyModel;
use crate::optim::{Adam, GraphError, UpdateGraph};

/// SAC (Haarnoja et al. 2018) with automatic temperature (the v2 paper) or a fixed one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SacConfig {
    /// Discount factor gamma.
    pub discount: f64,
    /// Adam learning rate of the policy.
    pub policy_lr: f64,
    /// Adam learning rate of the critics.
    pub qf_lr: f64,
    /// Tune the temperature alpha towards `target_entropy` (else keep `initial_alpha`).
    pub auto_alpha: bool,
    /// Temperature at the start (and forever without `auto_alpha`).
    pub initial_alpha: f64,
    /// Target entropy (none: minus the action dimension).
    pub target_entropy: Option<f64>,
    /// Number of Q networks; the target takes their minimum (2: clipped double Q).
    pub num_critics: u32,
    /// Target network updates.
    pub target: TargetUpdate,
    /// Updates between weight publications to the actors.
    pub publish_interval: u64,
    /// Smoothness regularisation of the policy.
    pub caps: CapsOptions,
    /// The replay table.
    pub replay: ReplayOptions,
    /// Actor-side exploration (SAC samples its policy; `noise` is ignored).
    pub explore: Exploration,
}

impl Default for SacConfig {
    fn default() -> Self {
        SacConfig {
            discount: 0.99,
            policy_lr: 3e-4,
            qf_lr: 3e-4,
            auto_alpha: true,
            initial_alpha: 1.0,
            target_entropy: None,
            num_critics: 2,
            target: TargetUpdate {
                tau: 0.005,
                period: 1,
            },
            publish_interval: 1,
            caps: CapsOptions::default(),
            replay: ReplayOptions {
                batch_size: 256,
                samples_per_insert: 256.0,
                ..ReplayOptions::default()
            },
            explore: Exploration {
                noise: NoiseKind::None,
                ..Exploration::default()
            },
        }
    }
}

impl AlgoSection for SacConfig {
    fn discount(&self) -> f64 {
        self.discount
    }

    fn validate(&self, _batch: u64) -> Result<(), ConfigError> {
        SacConfig::validate(self)
    }
}

impl SacConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        check_actor_critic(self.policy_lr, self.qf_lr, self.num_critics)?;
        check(
            self.initial_alpha > 0.0,
            "algo.initial_alpha",
            "must be > 0",
        )?;
        self.target.validate()?;
        self.replay.validate()?;
        self.explore.validate()
    }
}

/// The soft TD target `reward + discount * (min_q - alpha * log_prob)`, `[B]`.
pub fn soft_target(
    reward: &Tensor,
    discount: &Tensor,
    min_q: &Tensor,
    log_prob: &Tensor,
    alpha: &Tensor,
) -> Tensor {
    reward + discount * (min_q - log_prob * alpha)
}

/// The temperature loss `-mean(log_alpha * (log_prob + target_entropy))` (log-probs detached).
pub fn alpha_loss(log_alpha: &Tensor, log_prob: &Tensor, target_entropy: f64) -> Tensor {
    -(log_alpha * (log_prob.detach() + target_entropy)).mean(Kind::Float)
}

/// CAPS: temporal `||mu(s) - mu(s')||^2` and spatial `||mu(s) - mu(s~)||^2` terms, each
/// averaged over rows and weighted; `mu` is the policy's deterministic action.
pub fn caps_loss(
    model: &OffPolicyModel,
    obs: &Tensor,
    next_obs: &Tensor,
    caps: &CapsOptions,
) -> Tensor {
    let mut loss = Tensor::zeros([], (Kind::Float, obs.device()));
    if caps.temporal_weight <= 0.0 && caps.spatial_weight <= 0.0 {
        return loss;
    }
    let mu = model.mean_action(obs);
    let sq = |a: &Tensor, b: &Tensor| {
        (a - b)
            .square()
            .sum_dim_intlist(-1, false, Kind::Float)
            .mean(Kind::Float)
    };
    if caps.temporal_weight > 0.0 {
        loss += sq(&mu, &model.mean_action(next_obs)) * caps.temporal_weight;
    }
    if caps.spatial_weight > 0.0 {
        let near = obs + obs.randn_like() * caps.spatial_std;
        loss += sq(&mu, &model.mean_action(&near)) * caps.spatial_weight;
    }
    loss
}

/// SAC's learner state.
#[derive(Debug)]
pub struct Sac {
    config: SacConfig,
    trained: Trained<OffPolicyModel>,
    target: TargetNet<OffPolicyModel>,
    pi_optim: Adam,
    qf_optim: Adam,
    /// Holds `log_alpha` (checkpointed under that name).
    alpha_vs: nn::VarStore,
    log_alpha: Tensor,
    alpha_optim: Option<Adam>,
    target_entropy: f64,
    graph: UpdateGraph,
}

impl Sac {
    /// SAC over `model` (a squashed Gaussian policy and its critics), `target` its target copy.
    pub fn new(config: &SacConfig, model: OffPolicyModel, mut target: OffPolicyModel) -> Sac {
        target.copy_from(&model, 1.0);
        let pi_optim = Adam::over(model.var_store(), 1e-8, "pi.");
        let qf_optim = Adam::over(model.var_store(), 1e-8, "qf");
        let alpha_vs = nn::VarStore::new(model.var_store().device());
        let log_alpha =
            alpha_vs
                .root()
                .var("log_alpha", &[], nn::Init::Const(config.initial_alpha.ln()));
        let alpha_optim = config
            .auto_alpha
            .then(|| Adam::over(&alpha_vs, 1e-8, "log_alpha"));
        let dim = model.action_scale().size()[0] as f64;
        Sac {
            target_entropy: config.target_entropy.unwrap_or(-dim),
            config: config.clone(),
            trained: Trained::new(model, "updates"),
            target: TargetNet(target),
            pi_optim,
            qf_optim,
            alpha_vs,
            log_alpha,
            alpha_optim,
            graph: UpdateGraph::default(),
        }
    }

    /// The temperature as a detached 0-dim tensor: reading it to the host before the update
    /// would stall a GPU's stream.
    fn alpha(&self) -> Tensor {
        self.log_alpha.exp().detach()
    }
}

impl Sac {
    /// The update's device work: the critics', the policy's and the temperature's steps, and
    /// the target networks' when `with_target`. Returns the metrics (see [`METRICS`]) and the
    /// first critic's TD errors, unread.
    fn descend(&mut self, batch: &TransitionBatch, with_target: bool) -> Vec<Tensor> {
        let alpha = self.alpha();
        let y = tch::no_grad(|| {
            let (unit, log_prob) = self.trained.model.sample_action(&batch.next_obs);
            let next_action = self.target.to_env_scale(&unit);
            let (min_q, _) = self
                .target
                .qs(&batch.next_obs, &next_action)
                .min_dim(0, false);
            soft_target(&batch.reward, &batch.discount, &min_q, &log_prob, &alpha)
        });
        let qs = self.trained.model.qs(&batch.obs, &batch.action);
        let q_loss = critic_loss(&qs, &y, &batch.weights) * 0.5;
        self.qf_optim.zero_grad();
        q_loss.backward();
        self.qf_optim.step(self.config.qf_lr);

        let (unit, log_prob) = self.trained.model.sample_action(&batch.obs);
        let action = self.trained.model.to_env_scale(&unit);
        let (min_q, _) = (self.trained.model)
            .qs_for_policy(&batch.obs, &action)
            .min_dim(0, false);
        let caps = caps_loss(
            &self.trained.model,
            &batch.obs,
            &batch.next_obs,
            &self.config.caps,
        );
        let policy_loss = (&log_prob * &alpha - min_q).mean(Kind::Float) + &caps;
        self.pi_optim.zero_grad();
        policy_loss.backward();
        self.pi_optim.step(self.config.policy_lr);

        if let Some(optim) = self.alpha_optim.as_mut() {
            let loss = alpha_loss(&self.log_alpha, &log_prob, self.target_entropy);
            optim.zero_grad();
            loss.backward();
            optim.step(self.config.policy_lr);
        }
        if with_target {
            self.target
                .copy_from(&self.trained.model, self.config.target.tau);
        }
        let detached = |t: &Tensor| t.detach().mean(Kind::Float);
        let metrics = Tensor::stack(
            &[
                q_loss.detach(),
                policy_loss.detach(),
                caps.detach().mean(Kind::Float),
                alpha,
                -detached(&log_prob),
                detached(&qs),
            ],
            0,
        );
        vec![metrics, (qs.get(0) - &y).detach()]
    }

    /// One update on a batch of transitions (replayed from a CUDA graph when one is on).
    pub fn train(&mut self, batch: &TransitionBatch) -> Result<Update, GraphError> {
        // The observation statistics read their count back: outside the graph.
        self.trained.model.observe(&batch.obs);
        let with_target = (self.trained.updates + 1).is_multiple_of(self.config.target.period);
        let out = UpdateGraph::train(
            self,
            |sac| &mut sac.graph,
            u32::from(with_target),
            batch,
            |sac, b| sac.descend(b, with_target),
        )?;
        self.trained.updates += 1;
        Ok(Update {
            metrics: read_metrics(&METRICS, &out[0]),
            td_errors: priorities(&self.config.replay, || out[1].shallow_clone()),
        })
    }
}

/// What [`Sac::train`] reports, in the order `descend` stacks them.
const METRICS: [&str; 6] = [
    "q_loss",
    "policy_loss",
    "caps_loss",
    "alpha",
    "entropy",
    "q_mean",
];

impl Algorithm for Sac {
    fn use_cuda_graph(&mut self, enabled: bool) -> Result<(), GraphError> {
        let device = self.trained.model.var_store().device();
        let mut optims = vec![&mut self.pi_optim, &mut self.qf_optim];
        optims.extend(self.alpha_optim.as_mut());
        self.graph = UpdateGraph::over(enabled, device, &mut optims)?;
        Ok(())
    }

    super::algorithm_parts!(trains_on: Transitions(transitions), state: [pi_optim, qf_optim, alpha_optim, target, alpha_vs]);

    fn join_group(
        &mut self,
        group: &std::sync::Arc<crate::collective::Group>,
    ) -> Result<(), crate::collective::CollectiveError> {
        self.pi_optim.join(group);
        self.qf_optim.join(group);
        if let Some(o) = self.alpha_optim.as_mut() {
            o.join(group);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soft_target_subtracts_the_entropy_term() {
        let y = soft_target(
            &Tensor::from_slice(&[1.0f32]),
            &Tensor::from_slice(&[0.5f32]),
            &Tensor::from_slice(&[4.0f32]),
            &Tensor::from_slice(&[-2.0f32]),
            &Tensor::from(0.5f32),
        );
        // 1 + 0.5 * (4 - 0.5 * -2) = 3.5
        assert_eq!(Vec::<f32>::try_from(&y).unwrap(), vec![3.5]);
    }

    #[test]
    fn caps_terms_are_weighted_mean_squared_action_differences() {
        use crate::config::ModelConfig;
        use crate::models::PolicyKind;
        use fleetrl_proto::space::Space;
        let b = |n: usize| Space::Box {
            shape: vec![n as i64],
            low: vec![-1.0; n],
            high: vec![1.0; n],
        };
        let model = OffPolicyModel::new(
            &ModelConfig::default(),
            PolicyKind::SquashedGaussian,
            2,
            &b(3),
            &b(2),
            tch::Device::Cpu,
        )
        .unwrap();
        let obs = Tensor::randn([4, 3], (Kind::Float, tch::Device::Cpu));
        let next = Tensor::randn([4, 3], (Kind::Float, tch::Device::Cpu));
        let off = CapsOptions::default();
        assert_eq!(caps_loss(&model, &obs, &next, &off).double_value(&[]), 0.0);
        let temporal = CapsOptions {
            temporal_weight: 2.0,
            ..CapsOptions::default()
        };
        let got = caps_loss(&model, &obs, &next, &temporal).double_value(&[]);
        let diff = model.mean_action(&obs) - model.mean_action(&next);
        let expected = 2.0
            * diff
                .square()
                .sum_dim_intlist(-1, false, Kind::Float)
                .mean(Kind::Float)
                .double_value(&[]);
        assert!((got - expected).abs() < 1e-6, "{got} vs {expected}");
        assert_eq!(
            caps_loss(&model, &obs, &obs, &temporal).double_value(&[]),
            0.0
        );
    }

    #[test]
    fn alpha_grows_when_entropy_is_below_target() {
        let log_alpha = Tensor::zeros([], (Kind::Float, tch::Device::Cpu)).set_requires_grad(true);
        // log pi = 1 means entropy -1, below a target of 0: the gradient step must raise alpha.
        let loss = alpha_loss(&log_alpha, &Tensor::from_slice(&[1.0f32, 1.0]), 0.0);
        loss.backward();
        assert!(log_alpha.grad().double_value(&[]) < 0.0);
    }
}
