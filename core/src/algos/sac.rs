//! Soft Actor-Critic (Haarnoja et al. 2018, arXiv:1801.01290 and arXiv:1812.05905) with
//! automatic temperature tuning towards a target entropy, or a fixed temperature, and CAPS
//! smoothness regularisation (Mysore et al. 2021, arXiv:2012.06644) as garage offers it.
//!
//! Per batch: `a' ~ pi(s')`, `y = R_n + gamma_n (min_k Q_target_k(s', a') - alpha log pi(a'|s'))`;
//! critic loss `sum_k mean(w (Q_k(s, a) - y)^2)`; policy loss
//! `mean(alpha log pi(a~|s) - min_k Q_k(s, a~))` with `a~ ~ pi(s)` reparameterised, plus
//! `lambda_T ||mu(s) - mu(s')||^2 + lambda_S ||mu(s) - mu(s + N(0, sigma))||^2` (CAPS);
//! temperature loss `-mean(log alpha (log pi(a~|s) + H_target))`; Polyak targets.
//!
//! Discrete actions (Christodoulou 2019, "Soft Actor-Critic for Discrete Action Settings",
//! arXiv:1910.07207): the policy is categorical and each critic outputs one Q value per
//! action, so the expectations over actions are exact sums instead of samples:
//! `y = R_n + gamma_n sum_a pi(a|s') (min_k Q_target_k(s', a) - alpha log pi(a|s'))`, policy
//! loss `mean_s sum_a pi(a|s) (alpha log pi(a|s) - min_k Q_k(s, a))`, temperature loss with
//! `sum_a pi(a|s) log pi(a|s)` in place of `log pi(a~|s)`, and a default target entropy of
//! `target_entropy_scale * ln |A|` (the paper's 0.98 of the uniform policy's entropy).
//!
//! With recurrent cores (`model.lstm_size > 0`) the same losses run over stored sequences
//! with burn-in ([`super::recurrent_sac`]).

use crate::algos::config::AlgoSection;
use crate::algos::offpolicy::check_actor_critic;
use crate::algos::offpolicy::Exploration;
use crate::algos::offpolicy::NoiseKind;
use crate::algos::offpolicy::ReplayOptions;
use crate::algos::target::TargetUpdate;
use serde::{Deserialize, Serialize};
use tch::{nn, Kind, Tensor};

use super::offpolicy::CapsOptions;
use super::recurrent_sac::sequence_losses;
use super::target::{priorities, read_metrics};
use super::td3::critic_loss;
use super::{Algorithm, Trained, Update};
use crate::checkpoint::state::TargetNet;
use crate::config::error::{check, ConfigError};
use crate::items::sequence::SequenceBatch;
use crate::items::transition::TransitionBatch;
use crate::models::{OffPolicyModel, PolicyKind};
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
    /// Target entropy in nats (none: minus the action dimension for continuous actions,
    /// `target_entropy_scale * ln(number of actions)` for discrete ones).
    pub target_entropy: Option<f64>,
    /// Discrete actions without `target_entropy`: the target entropy as a fraction of the
    /// uniform policy's, `ln(number of actions)` (Christodoulou 2019: 0.98).
    pub target_entropy_scale: f64,
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
    /// Actor-side exploration (SAC samples its policy: no noise and no epsilon by default).
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
            target_entropy_scale: 0.98,
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
                epsilon_start: 0.0,
                epsilon_end: 0.0,
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
        check(
            self.target_entropy_scale > 0.0 && self.target_entropy_scale <= 1.0,
            "algo.target_entropy_scale",
            "must be in (0, 1] (a fraction of the uniform policy's entropy)",
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

/// The soft value of discrete actions, `sum_a probs * (min_q - alpha * log_probs)`, `[B]`
/// (from `[B, n]` inputs): the exact expectation over the categorical policy.
pub fn expected_soft_value(
    probs: &Tensor,
    log_probs: &Tensor,
    min_q: &Tensor,
    alpha: &Tensor,
) -> Tensor {
    (probs * (min_q - log_probs * alpha)).sum_dim_intlist(-1, false, Kind::Float)
}

/// The discrete policy loss `mean_s sum_a probs * (alpha * log_probs - min_q)` (`min_q`
/// detached by the caller): minus the mean soft value.
pub fn categorical_policy_loss(
    probs: &Tensor,
    log_probs: &Tensor,
    min_q: &Tensor,
    alpha: &Tensor,
) -> Tensor {
    -expected_soft_value(probs, log_probs, min_q, alpha).mean(Kind::Float)
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
        let default_entropy = match model.discrete_actions() {
            Some(n) => config.target_entropy_scale * (n as f64).ln(),
            None => -(model.action_scale().size()[0] as f64),
        };
        Sac {
            target_entropy: config.target_entropy.unwrap_or(default_entropy),
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
        let discrete = self.trained.model.kind() == PolicyKind::Categorical;
        let y = tch::no_grad(|| match discrete {
            true => self.discrete_target(batch, &alpha),
            false => self.continuous_target(batch, &alpha),
        });
        let qs = self.trained.model.qs(&batch.obs, &batch.action);
        let q_loss = critic_loss(&qs, &y, &batch.weights) * 0.5;
        self.qf_optim.zero_grad();
        q_loss.backward();
        self.qf_optim.step(self.config.qf_lr);

        let (policy_loss, log_prob, caps) = match discrete {
            true => self.discrete_policy_loss(batch, &alpha),
            false => self.continuous_policy_loss(batch, &alpha),
        };
        self.pi_optim.zero_grad();
        policy_loss.backward();
        self.pi_optim.step(self.config.policy_lr);

        self.temperature_and_targets(&log_prob, with_target);
        let metrics = metrics(&q_loss, &policy_loss, &caps, alpha, &log_prob, &qs);
        vec![metrics, (qs.get(0) - &y).detach()]
    }

    /// The temperature's step (with `auto_alpha`) on the policy samples' log-likelihoods, and
    /// the target networks' when `with_target`.
    fn temperature_and_targets(&mut self, log_prob: &Tensor, with_target: bool) {
        if let Some(optim) = self.alpha_optim.as_mut() {
            let loss = alpha_loss(&self.log_alpha, log_prob, self.target_entropy);
            optim.zero_grad();
            loss.backward();
            optim.step(self.config.policy_lr);
        }
        if with_target {
            self.target
                .copy_from(&self.trained.model, self.config.target.tau);
        }
    }

    /// Recurrent SAC's update on a batch of stored sequences: both losses from the
    /// parameters before the update (the policy's backward pass reads the critics' heads,
    /// which the critics' step changes in place), then the steps. Runs as written, without
    /// a CUDA graph, as R2D2's.
    fn update_sequences(&mut self, batch: &SequenceBatch) -> Update {
        let alpha = self.alpha();
        let with_target = self.target_due();
        let out = sequence_losses(
            &self.config,
            &self.trained.model,
            &self.target,
            batch,
            &alpha,
        );
        self.qf_optim.zero_grad();
        self.pi_optim.zero_grad();
        out.q_loss.backward();
        out.policy_loss.backward();
        self.qf_optim.step(self.config.qf_lr);
        self.pi_optim.step(self.config.policy_lr);
        self.temperature_and_targets(&out.log_prob, with_target);
        let caps = Tensor::zeros([], (Kind::Float, alpha.device()));
        let m = metrics(
            &out.q_loss,
            &out.policy_loss,
            &caps,
            alpha,
            &out.log_prob,
            &out.qs,
        );
        self.trained.updates += 1;
        Update {
            metrics: read_metrics(&METRICS, &m),
            td_errors: priorities(&self.config.replay, || out.priorities.shallow_clone()),
        }
    }

    /// Whether this update also moves the target networks.
    fn target_due(&self) -> bool {
        (self.trained.updates + 1).is_multiple_of(self.config.target.period)
    }

    /// The soft TD target from an action sampled at `next_obs`, `[B]`.
    fn continuous_target(&self, batch: &TransitionBatch, alpha: &Tensor) -> Tensor {
        let (unit, log_prob) = self.trained.model.sample_action(&batch.next_obs);
        let next_action = self.target.to_env_scale(&unit);
        let (min_q, _) = self
            .target
            .qs(&batch.next_obs, &next_action)
            .min_dim(0, false);
        soft_target(&batch.reward, &batch.discount, &min_q, &log_prob, alpha)
    }

    /// The soft TD target with the exact expectation over the next state's actions, `[B]`.
    fn discrete_target(&self, batch: &TransitionBatch, alpha: &Tensor) -> Tensor {
        let (probs, log_probs) = self.trained.model.categorical(&batch.next_obs);
        let (min_q, _) = self.target.qs_all(&batch.next_obs).min_dim(0, false);
        let value = expected_soft_value(&probs, &log_probs, &min_q, alpha);
        &batch.reward + &batch.discount * value
    }

    /// The policy loss on a reparameterised sample (plus CAPS), the sample's log-likelihood
    /// `[B]` (for the temperature) and the CAPS term.
    fn continuous_policy_loss(
        &self,
        batch: &TransitionBatch,
        alpha: &Tensor,
    ) -> (Tensor, Tensor, Tensor) {
        let model = &self.trained.model;
        let (unit, log_prob) = model.sample_action(&batch.obs);
        let action = model.to_env_scale(&unit);
        let (min_q, _) = model.qs_for_policy(&batch.obs, &action).min_dim(0, false);
        let caps = caps_loss(model, &batch.obs, &batch.next_obs, &self.config.caps);
        let policy_loss = (&log_prob * alpha - min_q).mean(Kind::Float) + &caps;
        (policy_loss, log_prob, caps)
    }

    /// The categorical policy loss against the detached critics, the expected log-probability
    /// `sum_a pi log pi` `[B]` (minus the entropy, for the temperature) and a zero CAPS term
    /// (refused for discrete actions where the model is built).
    fn discrete_policy_loss(
        &self,
        batch: &TransitionBatch,
        alpha: &Tensor,
    ) -> (Tensor, Tensor, Tensor) {
        let model = &self.trained.model;
        let (probs, log_probs) = model.categorical(&batch.obs);
        let (min_q, _) = tch::no_grad(|| model.qs_all(&batch.obs).min_dim(0, false));
        let policy_loss = categorical_policy_loss(&probs, &log_probs, &min_q, alpha);
        let expected_log_prob = (&probs * &log_probs).sum_dim_intlist(-1, false, Kind::Float);
        let caps = Tensor::zeros([], (Kind::Float, batch.obs.device()));
        (policy_loss, expected_log_prob, caps)
    }

    /// One update on a batch of transitions (replayed from a CUDA graph when one is on).
    pub fn train(&mut self, batch: &TransitionBatch) -> Result<Update, GraphError> {
        // The observation statistics read their count back: outside the graph.
        self.trained.model.observe(&batch.obs);
        let with_target = self.target_due();
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

/// [`METRICS`] of an update, stacked on the device.
fn metrics(
    q_loss: &Tensor,
    policy_loss: &Tensor,
    caps: &Tensor,
    alpha: Tensor,
    log_prob: &Tensor,
    qs: &Tensor,
) -> Tensor {
    let detached = |t: &Tensor| t.detach().mean(Kind::Float);
    Tensor::stack(
        &[
            q_loss.detach(),
            policy_loss.detach(),
            caps.detach().mean(Kind::Float),
            alpha,
            -detached(log_prob),
            detached(qs),
        ],
        0,
    )
}

/// What [`Sac::train`] reports, in the order [`metrics`] stacks them.
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

    super::algorithm_parts!(trains_on: TransitionsOrSequences, state: [pi_optim, qf_optim, alpha_optim, target, alpha_vs]);

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

    /// The discrete expectations on a hand-computed batch of one row: probabilities 1/4, 3/4,
    /// minimum Q values 1 and 2, temperature 1/2.
    #[test]
    fn discrete_soft_value_and_policy_loss_are_exact_expectations() {
        let probs = Tensor::from_slice(&[0.25f32, 0.75]).view([1, 2]);
        let log_probs = probs.log();
        let min_q = Tensor::from_slice(&[1.0f32, 2.0]).view([1, 2]);
        let alpha = Tensor::from(0.5f32);
        let want = 0.25 * (1.0 - 0.5 * 0.25f64.ln()) + 0.75 * (2.0 - 0.5 * 0.75f64.ln());
        let value = expected_soft_value(&probs, &log_probs, &min_q, &alpha).double_value(&[0]);
        assert!((value - want).abs() < 1e-6, "{value} vs {want}");
        let loss = categorical_policy_loss(&probs, &log_probs, &min_q, &alpha).double_value(&[]);
        assert!((loss + want).abs() < 1e-6, "{loss} vs {}", -want);
    }

    /// One discrete SAC update against the same numbers computed row by row in f64 from the
    /// networks: the critic loss from the soft target (target critics = the online ones before
    /// the first update), the policy loss from the policy before its step and the critics after
    /// theirs, the entropy, and the default target entropy `0.98 ln 3`.
    #[test]
    fn discrete_update_matches_a_row_by_row_computation() {
        use crate::config::ModelConfig;
        use crate::models::Policy;
        use fleetrl_proto::space::Space;
        tch::manual_seed(3);
        let obs_space = Space::Box {
            shape: vec![2],
            low: vec![-1.0; 2],
            high: vec![1.0; 2],
        };
        let config = ModelConfig {
            hidden_sizes: vec![8],
            ..ModelConfig::default()
        };
        let build = || {
            let actions = Space::Discrete { n: 3 };
            let kind = PolicyKind::Categorical;
            OffPolicyModel::new(&config, kind, 2, &obs_space, &actions, tch::Device::Cpu).unwrap()
        };
        let (model, before) = (build(), build());
        let mut before = before;
        before.copy_from(&model, 1.0);
        let sac_config = SacConfig {
            initial_alpha: 0.3,
            ..SacConfig::default()
        };
        let mut sac = Sac::new(&sac_config, model, build());
        assert!((sac.target_entropy - 0.98 * 3f64.ln()).abs() < 1e-12);
        let cpu = (Kind::Float, tch::Device::Cpu);
        let batch = TransitionBatch {
            obs: Tensor::randn([4, 2], cpu),
            action: Tensor::from_slice(&[0i64, 2, 1, 2]),
            reward: Tensor::from_slice(&[1.0f32, -0.5, 0.0, 2.0]),
            discount: Tensor::from_slice(&[0.99f32, 0.0, 0.5, 0.99]),
            next_obs: Tensor::randn([4, 2], cpu),
            weights: Tensor::from_slice(&[1.0f32, 0.5, 2.0, 1.0]),
        };
        let update = sac.train(&batch).unwrap();

        let rows = |t: Tensor| -> Vec<Vec<f64>> {
            let t = t.to_kind(Kind::Double);
            (0..t.size()[0])
                .map(|i| Vec::<f64>::try_from(t.get(i)).unwrap())
                .collect()
        };
        let vec = |t: &Tensor| Vec::<f64>::try_from(t.to_kind(Kind::Double)).unwrap();
        let (alpha, n) = (0.3f64, 3);
        let (reward, discount, weights) = (
            vec(&batch.reward),
            vec(&batch.discount),
            vec(&batch.weights),
        );
        let action = Vec::<i64>::try_from(&batch.action).unwrap();
        let probs_next = rows(before.categorical(&batch.next_obs).0);
        let (q0_next, q1_next) = (
            rows(before.q_all(0, &batch.next_obs)),
            rows(before.q_all(1, &batch.next_obs)),
        );
        let (q0, q1) = (
            rows(before.q_all(0, &batch.obs)),
            rows(before.q_all(1, &batch.obs)),
        );
        let mut q_loss = 0.0;
        for b in 0..4 {
            let value: f64 = (0..n)
                .map(|a| {
                    let p = probs_next[b][a];
                    p * (q0_next[b][a].min(q1_next[b][a]) - alpha * p.ln())
                })
                .sum();
            let y = reward[b] + discount[b] * value;
            let a = action[b] as usize;
            q_loss += weights[b] * ((q0[b][a] - y).powi(2) + (q1[b][a] - y).powi(2)) / 4.0;
        }
        q_loss *= 0.5;
        let got = update.metrics.get("q_loss").unwrap();
        assert!(
            (got - q_loss).abs() < 1e-5 * q_loss.max(1.0),
            "{got} vs {q_loss}"
        );

        let probs = rows(before.categorical(&batch.obs).0);
        let model = &sac.trained.model;
        let (q0, q1) = (
            rows(model.q_all(0, &batch.obs)),
            rows(model.q_all(1, &batch.obs)),
        );
        let (mut policy_loss, mut entropy) = (0.0, 0.0);
        for b in 0..4 {
            for a in 0..n {
                let p = probs[b][a];
                policy_loss += p * (alpha * p.ln() - q0[b][a].min(q1[b][a])) / 4.0;
                entropy -= p * p.ln() / 4.0;
            }
        }
        let got = update.metrics.get("policy_loss").unwrap();
        assert!((got - policy_loss).abs() < 1e-5, "{got} vs {policy_loss}");
        let got = update.metrics.get("entropy").unwrap();
        assert!((got - entropy).abs() < 1e-5, "{got} vs {entropy}");
        // A categorical policy's action is an index, scored by the first critic.
        let step = model.act(&batch.obs, false);
        assert_eq!(step.action.kind(), Kind::Int64);
        let greedy = model.act(&batch.obs, true).action;
        assert!(greedy.equal(&model.categorical(&batch.obs).0.argmax(1, false)));
    }
}
