//! Deep Q-Networks (Mnih et al. 2015, Nature 518) with double Q-learning (van Hasselt et al.
//! 2016, arXiv:1509.06461), n-step targets (computed on the actors) and prioritized replay
//! (Schaul et al. 2016, arXiv:1511.05952): the importance weights scale each row's loss and
//! the |TD errors| go back to the table as new priorities.
//!
//! Per batch: `y = R_n + gamma_n Q_target(s', a*)` with `a* = argmax_a Q(s', a)` (double Q)
//! or `argmax_a Q_target(s', a)`; loss `mean(w * huber(Q(s, a) - y))`; one Adam step with a
//! global gradient-norm clip; the target network follows every `target.period` updates by
//! Polyak averaging with `target.tau` (1: a hard copy).
//!
//! With an LSTM core (`model.lstm_size > 0`) the same optimiser and target network train on
//! stored sequences instead, R2D2-style: see [`super::r2d2`].

use crate::algos::config::AlgoSection;
use crate::algos::offpolicy::Exploration;
use crate::algos::offpolicy::ReplayOptions;
use crate::algos::target::TargetUpdate;
use crate::optim::{Rule, Stepping};
use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor};

use super::r2d2::sequence_loss;
use super::target::{priorities, read_metrics, td_loss};
use super::{Algorithm, Trained, Update};
use crate::checkpoint::state::TargetNet;
use crate::config::error::{check, ConfigError};
use crate::items::sequence::SequenceBatch;
use crate::items::transition::TransitionBatch;
use crate::models::OffPolicyModel;
use crate::optim::{Adam, GraphError, UpdateGraph};

/// DQN (Mnih et al. 2015) with double Q (van Hasselt et al. 2016), n-step returns and
/// prioritized replay: the Rainbow ingredients SB3 and rlpyt offer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DqnConfig {
    /// Discount factor gamma.
    pub discount: f64,
    /// Adam learning rate.
    pub learning_rate: f64,
    /// Pick the next action with the online network, value it with the target network.
    pub double_q: bool,
    /// Clip rewards to [-this, this] on the actors (0: no clipping).
    pub reward_clip: f64,
    /// Global gradient-norm clip (0: none).
    pub clip_grad_norm: f64,
    /// Huber loss on the TD error (else squared error).
    pub huber: bool,
    /// Target network updates.
    pub target: TargetUpdate,
    /// Updates between weight publications to the actors.
    pub publish_interval: u64,
    /// The replay table.
    pub replay: ReplayOptions,
    /// Epsilon-greedy exploration on the actors.
    pub explore: Exploration,
    /// The update rule: "adam" (default), "rmsprop" (the DQN and MinAtar papers') or "sgd".
    pub optimizer: Rule,
    /// The optimiser's epsilon (Adam's, or RMSprop's).
    pub optimizer_eps: f64,
    /// RMSprop's smoothing constant (PyTorch's `alpha`).
    pub rmsprop_alpha: f64,
    /// RMSprop's momentum (PyTorch's `momentum`; the MinAtar paper's DQN uses 0.95).
    pub rmsprop_momentum: f64,
    /// RMSprop divides by the centred second moment (PyTorch's `centered`; the DQN and MinAtar
    /// papers' variant).
    pub rmsprop_centered: bool,
    /// SGD's momentum.
    pub sgd_momentum: f64,
}

impl DqnConfig {
    /// The optimiser's rule and its coefficients.
    pub fn rule(&self) -> Stepping {
        let stepping = crate::optim::rule(self.optimizer, self.rmsprop_alpha, self.sgd_momentum);
        match self.optimizer {
            Rule::Rmsprop => Stepping {
                momentum: self.rmsprop_momentum,
                centered: self.rmsprop_centered,
                ..stepping
            },
            _ => stepping,
        }
    }
}

impl Default for DqnConfig {
    fn default() -> Self {
        DqnConfig {
            discount: 0.99,
            learning_rate: 1e-3,
            double_q: true,
            reward_clip: 0.0,
            clip_grad_norm: 10.0,
            huber: true,
            target: TargetUpdate {
                tau: 1.0,
                period: 250,
            },
            publish_interval: 1,
            replay: ReplayOptions::default(),
            explore: Exploration::default(),
            optimizer: Rule::Adam,
            optimizer_eps: 1e-8,
            rmsprop_alpha: 0.99,
            rmsprop_momentum: 0.0,
            rmsprop_centered: false,
            sgd_momentum: 0.0,
        }
    }
}

impl AlgoSection for DqnConfig {
    fn discount(&self) -> f64 {
        self.discount
    }

    fn validate(&self, _batch: u64) -> Result<(), ConfigError> {
        DqnConfig::validate(self)
    }
}

impl DqnConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        check(
            self.learning_rate > 0.0,
            "algo.learning_rate",
            "must be > 0",
        )?;
        check(self.reward_clip >= 0.0, "algo.reward_clip", "must be >= 0")?;
        check(
            self.optimizer_eps > 0.0,
            "algo.optimizer_eps",
            "must be > 0",
        )?;
        crate::optim::check_rule(self.rmsprop_alpha, self.sgd_momentum)?;
        check(
            (0.0..1.0).contains(&self.rmsprop_momentum),
            "algo.rmsprop_momentum",
            "must be in [0, 1)",
        )?;
        let rmsprop_only = "applies to algo.optimizer = \"rmsprop\" only";
        let rmsprop = self.optimizer == Rule::Rmsprop;
        check(
            rmsprop || self.rmsprop_momentum == 0.0,
            "algo.rmsprop_momentum",
            rmsprop_only,
        )?;
        check(
            rmsprop || !self.rmsprop_centered,
            "algo.rmsprop_centered",
            rmsprop_only,
        )?;
        self.target.validate()?;
        self.replay.validate()?;
        self.explore.validate()
    }
}

/// The TD target `reward + discount * Q_target(next, a*)`, `[B]`. `next_online` are the online
/// network's Q values at `next_obs` for double Q (they pick `a*`; without them the target
/// network's own argmax does), `next_target` the target network's, both `[B, n]`.
pub fn td_target(
    reward: &Tensor,
    discount: &Tensor,
    next_online: Option<&Tensor>,
    next_target: &Tensor,
) -> Tensor {
    let picker = next_online.unwrap_or(next_target);
    let best = picker.argmax(1, true);
    let value = next_target.gather(1, &best, false).squeeze_dim(1);
    reward + discount * value
}

/// DQN's learner state.
#[derive(Debug)]
pub struct Dqn {
    config: DqnConfig,
    trained: Trained<OffPolicyModel>,
    target: TargetNet<OffPolicyModel>,
    optim: Adam,
    graph: UpdateGraph,
}

impl Dqn {
    /// DQN over `model`, with `target` (same shape) as its target network.
    pub fn new(config: &DqnConfig, model: OffPolicyModel, mut target: OffPolicyModel) -> Dqn {
        target.copy_from(&model, 1.0);
        let optim = Adam::new(model.var_store(), config.optimizer_eps).with_rule(config.rule());
        Dqn {
            config: config.clone(),
            trained: Trained::new(model, "updates"),
            target: TargetNet(target),
            optim,
            graph: UpdateGraph::default(),
        }
    }
}

impl Dqn {
    /// Whether the update about to run ends with the target network's update.
    fn target_due(&self) -> bool {
        (self.trained.updates + 1).is_multiple_of(self.config.target.period)
    }

    /// One optimiser step on `loss`, and the target update when `with_target`, all device
    /// work: returns the metrics `[q_loss, q_mean, grad_norm]` and the TD errors, unread.
    fn descend(
        &mut self,
        loss: &Tensor,
        q: &Tensor,
        td: &Tensor,
        with_target: bool,
    ) -> Vec<Tensor> {
        let c = &self.config;
        self.optim.zero_grad();
        loss.backward();
        let grad_norm = self.optim.clipped_step(c.learning_rate, c.clip_grad_norm);
        if with_target {
            self.target.copy_from(&self.trained.model, c.target.tau);
        }
        let q_mean = q.detach().mean(Kind::Float);
        vec![
            Tensor::stack(&[loss.detach(), q_mean, grad_norm], 0),
            td.detach(),
        ]
    }

    /// Counts the update and reads back what [`Dqn::descend`] returned; `|td|` goes back to
    /// the table as priorities.
    fn finish(&mut self, out: &[Tensor]) -> Update {
        self.trained.updates += 1;
        Update {
            metrics: read_metrics(&["q_loss", "q_mean", "grad_norm"], &out[0]),
            td_errors: priorities(&self.config.replay, || out[1].shallow_clone()),
        }
    }

    /// R2D2's update on a batch of stored sequences.
    fn update_sequences(&mut self, batch: &SequenceBatch) -> Update {
        let (Some(online), Some(target)) =
            (self.trained.model.recurrent(), self.target.recurrent())
        else {
            unreachable!("update_sequences runs for recurrent models only");
        };
        let out = sequence_loss(&self.config, online, target, batch);
        let with_target = self.target_due();
        let out = self.descend(&out.loss, &out.q, &out.priorities, with_target);
        self.finish(&out)
    }

    /// The loss on a batch of transitions, with the chosen actions' Q values and the TD
    /// errors.
    fn loss(&self, batch: &TransitionBatch) -> (Tensor, Tensor, Tensor) {
        let c = &self.config;
        let y = tch::no_grad(|| {
            // Without double Q the online network's values at `next_obs` are not needed.
            let next_online = c
                .double_q
                .then(|| self.trained.model.q_values(&batch.next_obs));
            let next_target = self.target.q_values(&batch.next_obs);
            td_target(
                &batch.reward,
                &batch.discount,
                next_online.as_ref(),
                &next_target,
            )
        });
        let q = self
            .trained
            .model
            .q_values(&batch.obs)
            .gather(1, &batch.action.unsqueeze(1), false)
            .squeeze_dim(1);
        let delta = &q - &y;
        let loss = (td_loss(&delta, c.huber) * &batch.weights).mean(Kind::Float);
        (loss, q, delta)
    }

    /// One update on a batch of transitions (replayed from a CUDA graph when one is on).
    pub fn train(&mut self, batch: &TransitionBatch) -> Result<Update, GraphError> {
        // The observation statistics read their count back: outside the graph.
        self.trained.model.observe(&batch.obs);
        let with_target = self.target_due();
        let out = UpdateGraph::train(
            self,
            |dqn| &mut dqn.graph,
            u32::from(with_target),
            batch,
            |dqn, b| {
                let (loss, q, delta) = dqn.loss(b);
                dqn.descend(&loss, &q, &delta, with_target)
            },
        )?;
        Ok(self.finish(&out))
    }
}

impl Algorithm for Dqn {
    /// Graphs for the updates on transitions; R2D2's sequence updates run as written.
    fn use_cuda_graph(&mut self, enabled: bool) -> Result<(), GraphError> {
        let device = self.trained.model.var_store().device();
        self.graph = UpdateGraph::over(enabled, device, &mut [&mut self.optim])?;
        Ok(())
    }

    super::algorithm_parts!(trains_on: TransitionsOrSequences, state: [optim, target]);

    fn join_group(
        &mut self,
        group: &std::sync::Arc<crate::collective::Group>,
    ) -> Result<(), crate::collective::CollectiveError> {
        self.optim.join(group);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RMSprop's momentum and centring are refused by name under another optimiser, where they
    /// would do nothing, and carried into the optimiser's stepping under RMSprop.
    #[test]
    fn rmsprop_settings_apply_to_rmsprop_only() {
        for (key, config) in [
            (
                "algo.rmsprop_momentum",
                DqnConfig {
                    rmsprop_momentum: 0.95,
                    ..DqnConfig::default()
                },
            ),
            (
                "algo.rmsprop_centered",
                DqnConfig {
                    rmsprop_centered: true,
                    ..DqnConfig::default()
                },
            ),
        ] {
            let error = config
                .validate()
                .expect_err("refused under Adam")
                .to_string();
            assert!(error.contains(key) && error.contains("rmsprop"), "{error}");
            let rmsprop = DqnConfig {
                optimizer: Rule::Rmsprop,
                ..config
            };
            rmsprop.validate().expect("valid under RMSprop");
            let stepping = rmsprop.rule();
            assert_eq!(stepping.rule, Rule::Rmsprop);
            assert_eq!(
                (stepping.momentum, stepping.centered),
                (rmsprop.rmsprop_momentum, rmsprop.rmsprop_centered)
            );
        }
    }

    #[test]
    fn double_q_values_the_online_argmax_with_the_target_network() {
        let reward = Tensor::from_slice(&[1.0f32, 0.0]);
        let discount = Tensor::from_slice(&[0.5f32, 0.0]);
        let online = Tensor::from_slice(&[1.0f32, 3.0, 5.0, 0.0]).view([2, 2]);
        let target = Tensor::from_slice(&[10.0f32, 2.0, 7.0, 9.0]).view([2, 2]);
        let double = td_target(&reward, &discount, Some(&online), &target);
        assert_eq!(Vec::<f32>::try_from(&double).unwrap(), vec![2.0, 0.0]);
        let plain = td_target(&reward, &discount, None, &target);
        assert_eq!(Vec::<f32>::try_from(&plain).unwrap(), vec![6.0, 0.0]);
    }
}
