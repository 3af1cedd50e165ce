//! TD3 (Fujimoto et al. 2018, arXiv:1802.09477): clipped double Q over `num_critics` critics,
//! target policy smoothing and delayed policy updates. With one critic, no smoothing and a
//! delay of 1 it is DDPG (Lillicrap et al. 2016, arXiv:1509.02971), which `name = "ddpg"`
//! selects.
//!
//! Per batch: `a' = clip(pi_target(s') + clip(eps, -c, c), -1, 1)`, eps ~ N(0, sigma);
//! `y = R_n + gamma_n min_k Q_target_k(s', a')`; critic loss `sum_k mean(w (Q_k(s, a) - y)^2)`.
//! Every `policy_delay` updates: policy loss `-mean(Q_0(s, pi(s)))`, then Polyak targets.
//!
//! With recurrent cores (`model.lstm_size > 0`) the same losses run over stored sequences
//! with burn-in ([`super::recurrent_td3`]).

use crate::algos::config::AlgoSection;
use crate::algos::offpolicy::check_actor_critic;
use crate::algos::offpolicy::Exploration;
use crate::algos::offpolicy::ReplayOptions;
use crate::algos::target::TargetUpdate;
use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor};

use super::recurrent_td3::sequence_losses;
use super::target::{priorities, read_metrics};
use super::{Algorithm, Metrics, Trained, Update};
use crate::checkpoint::state::TargetNet;
use crate::config::error::{check, ConfigError};
use crate::items::sequence::SequenceBatch;
use crate::items::transition::TransitionBatch;
use crate::models::OffPolicyModel;
use crate::optim::{Adam, GraphError, UpdateGraph};

/// TD3 (Fujimoto et al. 2018); with `policy_delay = 1`, `target_noise = 0` and one critic it
/// is DDPG (Lillicrap et al. 2016), which `name = "ddpg"` selects.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Td3Config {
    /// Discount factor gamma.
    pub discount: f64,
    /// Adam learning rate of the policy.
    pub policy_lr: f64,
    /// Adam learning rate of the critics.
    pub qf_lr: f64,
    /// Number of Q networks; the target takes their minimum.
    pub num_critics: u32,
    /// Critic updates per policy (and target) update.
    pub policy_delay: u32,
    /// Target policy smoothing: std of the Gaussian noise on the target action (fraction of
    /// the action half-range; 0 disables).
    pub target_noise: f64,
    /// Target policy smoothing: the noise is clipped to +-this.
    pub target_noise_clip: f64,
    /// Target network updates (Polyak tau each policy update).
    pub target: TargetUpdate,
    /// L2 weight decay of the policy's Adam (added to the gradient, as PyTorch's
    /// `weight_decay`; garage's `policy_weight_decay`).
    pub policy_weight_decay: f64,
    /// L2 weight decay of the critics' Adam (garage's `qf_weight_decay`).
    pub qf_weight_decay: f64,
    /// Critic targets are clipped to `[-clip_return, clip_return]` (garage's `clip_return`;
    /// `inf` leaves them alone).
    pub clip_return: f64,
    /// Clip positive targets to 0 instead of `clip_return`, for tasks whose returns are never
    /// positive (garage's `clip_pos_returns`).
    pub clip_pos_returns: bool,
    /// Updates between weight publications to the actors.
    pub publish_interval: u64,
    /// The replay table.
    pub replay: ReplayOptions,
    /// Action noise on the actors.
    pub explore: Exploration,
}

impl Default for Td3Config {
    fn default() -> Self {
        Td3Config {
            discount: 0.99,
            policy_lr: 1e-3,
            qf_lr: 1e-3,
            num_critics: 2,
            policy_delay: 2,
            target_noise: 0.2,
            target_noise_clip: 0.5,
            target: TargetUpdate {
                tau: 0.005,
                period: 1,
            },
            policy_weight_decay: 0.0,
            qf_weight_decay: 0.0,
            clip_return: f64::INFINITY,
            clip_pos_returns: false,
            publish_interval: 1,
            replay: ReplayOptions {
                batch_size: 256,
                samples_per_insert: 256.0,
                ..ReplayOptions::default()
            },
            explore: Exploration::default(),
        }
    }
}

impl AlgoSection for Td3Config {
    fn discount(&self) -> f64 {
        self.discount
    }

    fn validate(&self, _batch: u64) -> Result<(), ConfigError> {
        Td3Config::validate(self)
    }
}

/// Keys `name = "ddpg"` sets when the file does not: DDPG is TD3 without its three tricks.
pub(crate) const DDPG_DEFAULTS: [(&str, i64); 3] =
    [("policy_delay", 1), ("target_noise", 0), ("num_critics", 1)];

impl Td3Config {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        check_actor_critic(self.policy_lr, self.qf_lr, self.num_critics)?;
        check(self.policy_delay >= 1, "algo.policy_delay", "must be >= 1")?;
        for (value, key) in [
            (self.policy_weight_decay, "algo.policy_weight_decay"),
            (self.qf_weight_decay, "algo.qf_weight_decay"),
        ] {
            check(
                value.is_finite() && value >= 0.0,
                key,
                "must be finite and >= 0",
            )?;
        }
        check(
            self.clip_return > 0.0,
            "algo.clip_return",
            "must be > 0 (inf: no clipping)",
        )?;
        self.target.validate()?;
        self.replay.validate()?;
        self.explore.validate()
    }

    /// The target policy's action `unit` `[..., A]` in [-1, 1] with target policy smoothing
    /// (a fresh draw of the noise; none when `target_noise` is 0).
    pub(super) fn target_action(&self, unit: &Tensor) -> Tensor {
        if self.target_noise <= 0.0 {
            return unit.shallow_clone();
        }
        let noise = unit.randn_like();
        smoothed_action(unit, &noise, self.target_noise, self.target_noise_clip)
    }
}

/// The critics' regression loss: `sum_k mean(w (Q_k - y)^2)` for `qs` `[K, B]`, `y` and `w` `[B]`.
pub fn critic_loss(qs: &Tensor, y: &Tensor, weights: &Tensor) -> Tensor {
    ((qs - y.unsqueeze(0)).square() * weights.unsqueeze(0))
        .mean_dim(1, false, Kind::Float)
        .sum(Kind::Float)
}

/// Target policy smoothing: `clip(a + clip(noise * std, -clip, clip), -1, 1)` on unit actions.
pub fn smoothed_action(unit: &Tensor, noise: &Tensor, std: f64, clip: f64) -> Tensor {
    (unit + (noise * std).clamp(-clip, clip)).clamp(-1.0, 1.0)
}

/// TD3's (and DDPG's) learner state.
#[derive(Debug)]
pub struct Td3 {
    config: Td3Config,
    trained: Trained<OffPolicyModel>,
    target: TargetNet<OffPolicyModel>,
    pi_optim: Adam,
    qf_optim: Adam,
    last_policy_loss: f64,
    graph: UpdateGraph,
}

impl Td3 {
    /// TD3 over `model` (a deterministic policy and its critics), `target` its target copy.
    pub fn new(config: &Td3Config, model: OffPolicyModel, mut target: OffPolicyModel) -> Td3 {
        target.copy_from(&model, 1.0);
        let pi_optim = Adam::over(model.var_store(), 1e-8, "pi.")
            .with_weight_decay(config.policy_weight_decay);
        let qf_optim =
            Adam::over(model.var_store(), 1e-8, "qf").with_weight_decay(config.qf_weight_decay);
        Td3 {
            config: config.clone(),
            trained: Trained::new(model, "updates"),
            target: TargetNet(target),
            pi_optim,
            qf_optim,
            last_policy_loss: 0.0,
            graph: UpdateGraph::default(),
        }
    }

    fn target_value(&self, batch: &TransitionBatch) -> Tensor {
        let c = &self.config;
        tch::no_grad(|| {
            let unit = c.target_action(&self.target.mean_action(&batch.next_obs));
            let next_action = self.target.to_env_scale(&unit);
            let (min_q, _) = self
                .target
                .qs(&batch.next_obs, &next_action)
                .min_dim(0, false);
            clip_target(
                &batch.reward + &batch.discount * min_q,
                c.clip_return,
                c.clip_pos_returns,
            )
        })
    }
}

/// garage's return clipping of critic targets: into `[-clip_return, clip_return]`, or
/// `[-clip_return, 0]` with `clip_pos_returns`. An infinite `clip_return` leaves them alone.
pub(super) fn clip_target(y: Tensor, clip_return: f64, clip_pos_returns: bool) -> Tensor {
    let high = if clip_pos_returns { 0.0 } else { clip_return };
    if clip_return.is_infinite() && !clip_pos_returns {
        return y;
    }
    y.clamp(-clip_return, high)
}

impl Td3 {
    /// The update's device work: the critics' step, and the policy's and the targets' when
    /// `with_policy`. Returns `[q_loss, policy_loss, q_mean]` (the policy loss zero without
    /// the policy step) and the first critic's TD errors, unread.
    fn descend(&mut self, batch: &TransitionBatch, with_policy: bool) -> Vec<Tensor> {
        let y = self.target_value(batch);
        let qs = self.trained.model.qs(&batch.obs, &batch.action);
        let q_loss = critic_loss(&qs, &y, &batch.weights);
        self.qf_optim.zero_grad();
        q_loss.backward();
        self.qf_optim.step(self.config.qf_lr);
        let policy_loss = if with_policy {
            let action = self
                .trained
                .model
                .to_env_scale(&self.trained.model.mean_action(&batch.obs));
            let policy_loss = -self
                .trained
                .model
                .q_for_policy(0, &batch.obs, &action)
                .mean(Kind::Float);
            self.pi_optim.zero_grad();
            policy_loss.backward();
            self.pi_optim.step(self.config.policy_lr);
            self.target
                .copy_from(&self.trained.model, self.config.target.tau);
            policy_loss.detach()
        } else {
            q_loss.zeros_like()
        };
        let metrics = Tensor::stack(
            &[q_loss.detach(), policy_loss, qs.detach().mean(Kind::Float)],
            0,
        );
        vec![metrics, (qs.get(0) - &y).detach()]
    }

    /// Whether this update steps the policy (and the targets) too.
    fn policy_due(&self) -> bool {
        (self.trained.updates + 1).is_multiple_of(self.config.policy_delay as u64)
    }

    /// One update on a batch of transitions (replayed from a CUDA graph when one is on).
    pub fn train(&mut self, batch: &TransitionBatch) -> Result<Update, GraphError> {
        // The observation statistics read their count back: outside the graph.
        self.trained.model.observe(&batch.obs);
        let with_policy = self.policy_due();
        let out = UpdateGraph::train(
            self,
            |td3| &mut td3.graph,
            u32::from(with_policy),
            batch,
            |td3, b| td3.descend(b, with_policy),
        )?;
        Ok(self.finish(&out[0], with_policy, || out[1].shallow_clone()))
    }

    /// Recurrent TD3's update on a batch of stored sequences: both losses from the
    /// parameters before the update (the policy's backward pass reads the first critic's
    /// head, which the critics' step changes in place), then the steps; the policy's and the
    /// targets' every `policy_delay` updates. Runs as written, without a CUDA graph, as
    /// R2D2's.
    fn update_sequences(&mut self, batch: &SequenceBatch) -> Update {
        let with_policy = self.policy_due();
        let model = &self.trained.model;
        let out = sequence_losses(&self.config, model, &self.target, batch, with_policy);
        let q_loss = &out.critics.q_loss;
        self.qf_optim.zero_grad();
        self.pi_optim.zero_grad();
        q_loss.backward();
        if let Some(policy_loss) = &out.policy_loss {
            policy_loss.backward();
        }
        self.qf_optim.step(self.config.qf_lr);
        if out.policy_loss.is_some() {
            self.pi_optim.step(self.config.policy_lr);
            self.target
                .copy_from(&self.trained.model, self.config.target.tau);
        }
        let policy_loss = out.policy_loss.unwrap_or_else(|| q_loss.zeros_like());
        let qs = out.critics.qs.detach().mean(Kind::Float);
        let metrics = Tensor::stack(&[q_loss.detach(), policy_loss.detach(), qs], 0);
        self.finish(&metrics, with_policy, || out.critics.priorities)
    }

    /// Counts the update and reports `metrics` (`[q_loss, policy_loss, q_mean]`; between
    /// policy steps the last policy loss stands) and the priorities `td` gives.
    fn finish(
        &mut self,
        metrics: &Tensor,
        with_policy: bool,
        td: impl FnOnce() -> Tensor,
    ) -> Update {
        self.trained.updates += 1;
        let Metrics(mut metrics) = read_metrics(&["q_loss", "policy_loss", "q_mean"], metrics);
        if with_policy {
            self.last_policy_loss = metrics[1].1;
        }
        metrics[1].1 = self.last_policy_loss;
        Update {
            metrics: Metrics(metrics),
            td_errors: priorities(&self.config.replay, td),
        }
    }
}

impl Algorithm for Td3 {
    /// One graph for the critics' step alone and one with the delayed policy and target step.
    fn use_cuda_graph(&mut self, enabled: bool) -> Result<(), GraphError> {
        let device = self.trained.model.var_store().device();
        let optims = &mut [&mut self.pi_optim, &mut self.qf_optim];
        self.graph = UpdateGraph::over(enabled, device, optims)?;
        Ok(())
    }

    super::algorithm_parts!(trains_on: TransitionsOrSequences, state: [pi_optim, qf_optim, target]);

    fn join_group(
        &mut self,
        group: &std::sync::Arc<crate::collective::Group>,
    ) -> Result<(), crate::collective::CollectiveError> {
        self.pi_optim.join(group);
        self.qf_optim.join(group);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn critic_loss_sums_weighted_mean_squared_errors_over_critics() {
        let qs = Tensor::from_slice(&[1.0f32, 2.0, 0.0, 4.0]).view([2, 2]);
        let y = Tensor::from_slice(&[0.0f32, 2.0]);
        let w = Tensor::from_slice(&[1.0f32, 0.5]);
        // critic 0: (1 + 0) / 2; critic 1: (0 + 0.5 * 4) / 2.
        let loss = critic_loss(&qs, &y, &w).double_value(&[]);
        assert!((loss - 1.5).abs() < 1e-6, "{loss}");
    }

    #[test]
    fn targets_are_clipped_as_garage_clips_returns() {
        let y = || Tensor::from_slice(&[-50.0f32, -2.0, 3.0, 40.0]);
        let got = |t: Tensor| Vec::<f32>::try_from(&t).unwrap();
        assert_eq!(
            got(clip_target(y(), f64::INFINITY, false)),
            [-50.0, -2.0, 3.0, 40.0]
        );
        assert_eq!(got(clip_target(y(), 10.0, false)), [-10.0, -2.0, 3.0, 10.0]);
        assert_eq!(got(clip_target(y(), 10.0, true)), [-10.0, -2.0, 0.0, 0.0]);
        assert_eq!(
            got(clip_target(y(), f64::INFINITY, true)),
            [-50.0, -2.0, 0.0, 0.0]
        );
    }

    #[test]
    fn smoothing_noise_is_clipped_and_actions_stay_in_range() {
        let unit = Tensor::from_slice(&[0.9f32, -0.2, 0.0]);
        let noise = Tensor::from_slice(&[10.0f32, -10.0, 0.5]);
        let out = Vec::<f32>::try_from(&smoothed_action(&unit, &noise, 0.2, 0.5)).unwrap();
        let expected = [1.0f32, -0.7, 0.1];
        for (o, e) in out.iter().zip(expected) {
            assert!((o - e).abs() < 1e-6, "{out:?}");
        }
    }
}
