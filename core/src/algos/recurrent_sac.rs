//! Recurrent SAC on stored sequences: SAC's losses (Haarnoja et al. 2018) on R2D2's replay of
//! sequences with burn-in (Kapturowski et al. 2019), as pytorchrl trains SAC with a
//! `recurrent_net`. [`super::sac::Sac`] trains through here when its model has recurrent
//! cores; the optimiser steps, the temperature and the target updates are SAC's.
//!
//! Per batch of sequences (each `L` steps, stored with the actor's states of the policy's and
//! every critic's core before step 0):
//! 1. The policy and every critic unroll their own core from their stored state, resetting it
//!    after every ended step, the first `burn_in` steps without gradient. The target critics
//!    unroll from the same stored states.
//! 2. Soft values `V(o_t) = min_k Q_target_k(o_t, a'_t) - alpha log pi(a'_t | o_t)` with
//!    `a'_t ~ pi` at every step, and at each episode's final observation by one more core step
//!    from the state the sequence reached.
//! 3. n-step targets inside the sequence for steps `burn_in .. L - 1`, as R2D2's
//!    ([`super::r2d2::n_step_targets`]): cut at a terminal step, bootstrapped from the final
//!    observation at a time limit.
//! 4. Critic loss `1/2 sum_k mean(w (Q_k(o_t, a_t) - y_t)^2)` over the trained steps; policy
//!    loss `mean(alpha log pi(a~_t | o_t) - min_k Q_k(o_t, a~_t))` over the same steps, the
//!    critics' states detached and their weights frozen; the temperature loss on the same
//!    log-likelihoods. Priority: R2D2's mix of the first critic's max and mean |td|.
//!
//! Steps 1-4 but the policy's and temperature's losses are [`super::sequence_critics`], which
//! recurrent TD3 shares.

use tch::{Kind, Tensor};

use super::r2d2::unroll_with_burn_in;
use super::sac::SacConfig;
use super::sequence_critics::{fit_critics, Bootstrap};
use crate::items::sequence::SequenceBatch;
use crate::models::{OffPolicyModel, Unrolled};

/// The losses of one batch and what SAC reports of it.
#[derive(Debug)]
pub struct SequenceLosses {
    /// Critic loss, with gradient through the critics' post-burn-in steps.
    pub q_loss: Tensor,
    /// Policy loss, with gradient through the policy's post-burn-in steps only.
    pub policy_loss: Tensor,
    /// The reparameterised samples' log-likelihoods on the trained steps `[T', B]`.
    pub log_prob: Tensor,
    /// Every critic's Q value of the taken actions on the trained steps `[K, T', B]`.
    pub qs: Tensor,
    /// R2D2 priority per sequence `[B]`.
    pub priorities: Tensor,
}

/// The soft value `min_k Q_k - alpha log pi` `[T, B]` of a fresh policy sample at the
/// policy's core outputs `pi_h`, the target critics reading theirs, `critic_hs`.
fn soft_values(
    online: &OffPolicyModel,
    target: &OffPolicyModel,
    pi_h: &Tensor,
    critic_hs: &[Tensor],
    alpha: &Tensor,
) -> Tensor {
    let (unit, log_prob) = online.recurrent_sample(pi_h);
    let action = online.to_env_scale(&unit);
    let (min_q, _) = target.recurrent_qs(critic_hs, &action).min_dim(0, false);
    min_q - log_prob * alpha
}

/// The n-step soft targets `[T - 1, B]` of every step but the last (no gradient), from the
/// online policy's run `pi_run`.
fn targets(
    config: &SacConfig,
    online: &OffPolicyModel,
    target: &OffPolicyModel,
    batch: &SequenceBatch,
    pi_run: &Unrolled,
    alpha: &Tensor,
) -> Tensor {
    let policy = Bootstrap {
        pi: online
            .recurrent()
            .expect("recurrent SAC has a recurrent policy"),
        run: pi_run,
    };
    let value = |pi_h: &Tensor, hs: &[Tensor]| soft_values(online, target, pi_h, hs, alpha);
    let (gamma, n) = (config.discount, config.replay.n_step);
    super::sequence_critics::targets(target, batch, policy, value, gamma, n)
}

/// Recurrent SAC's losses on `batch` for `online` against `target` at temperature `alpha`
/// (see the module doc).
pub fn sequence_losses(
    config: &SacConfig,
    online: &OffPolicyModel,
    target: &OffPolicyModel,
    batch: &SequenceBatch,
    alpha: &Tensor,
) -> SequenceLosses {
    let burn_in = config.replay.burn_in as i64;
    let parts = online.split_state(&batch.state);
    let pi = online
        .recurrent()
        .expect("recurrent SAC has a recurrent policy");
    let pi_run = unroll_with_burn_in(pi, &batch.obs, &parts[0], &batch.resets(), burn_in);
    let y = targets(config, online, target, batch, &pi_run.detach(), alpha);
    let eta = config.replay.priority_eta;
    let critics = fit_critics(online, batch, &parts, &y, burn_in, eta);
    let trained = critics.trained_steps();
    let (unit, log_prob) = online.recurrent_sample(&pi_run.h.narrow(0, burn_in, trained));
    let (min_q, _) = online
        .recurrent_qs_for_policy(&critics.hs, &online.to_env_scale(&unit))
        .min_dim(0, false);
    let policy_loss = (&log_prob * alpha - min_q).mean(Kind::Float);
    SequenceLosses {
        q_loss: critics.q_loss * 0.5,
        policy_loss,
        log_prob,
        qs: critics.qs,
        priorities: critics.priorities,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algos::sequence_critics::testing::{assert_trains, batch, replay};
    use crate::algos::sequence_critics::unroll_critics;
    use crate::models::PolicyKind;
    use tch::Device;

    fn model(seed: i64) -> OffPolicyModel {
        crate::algos::sequence_critics::testing::model(PolicyKind::SquashedGaussian, seed)
    }

    /// SAC with `burn_in` and `n_step` set.
    fn config(burn_in: u32, n_step: u32) -> SacConfig {
        SacConfig {
            replay: replay(burn_in, n_step),
            ..SacConfig::default()
        }
    }

    /// Shapes over the trained steps, and the burn-in: neither loss sends gradient to the
    /// first `burn_in` observations, both send it to the later ones, the critic loss reaches
    /// only the critics' weights and the policy loss only the policy's.
    #[test]
    fn losses_train_the_steps_after_the_burn_in_and_their_own_networks() {
        let (online, target) = (model(1), model(2));
        let config = config(3, 1);
        let batch = batch(8, 2);
        let alpha = Tensor::from(0.2f32);
        let out = sequence_losses(&config, &online, &target, &batch, &alpha);
        // 8 steps: targets for steps 0..7, of which 3..7 are trained.
        assert_eq!(out.qs.size(), vec![2, 4, 2]);
        assert_eq!(out.log_prob.size(), vec![4, 2]);
        assert_eq!(out.priorities.size(), vec![2]);
        let losses = || sequence_losses(&config, &online, &target, &batch, &alpha);
        assert_trains(&online, &batch, 3, ("qf", "pi."), || losses().q_loss);
        assert_trains(&online, &batch, 3, ("pi.", "qf"), || losses().policy_loss);
    }

    /// The critics regress on SAC's soft targets: with burn-in 0, n = 1 and no episode end
    /// in the first sequence, the first step's target is `r_0 + gamma V(o_1)`, and a
    /// terminal step's target is its reward alone.
    #[test]
    fn targets_are_one_step_soft_values_cut_at_terminals() {
        let (online, target) = (model(3), model(4));
        let config = config(0, 1);
        let batch = batch(5, 2);
        let alpha = Tensor::from(0.0f32);
        let pi = online.recurrent().unwrap();
        let parts = online.split_state(&batch.state);
        let run = tch::no_grad(|| pi.unroll(&batch.obs, &parts[0], &batch.resets()));
        let y = targets(&config, &online, &target, &batch, &run, &alpha);
        assert_eq!(y.size(), vec![4, 2]);
        let terminal = y.get(2).get(1).double_value(&[]);
        assert!((terminal - batch.reward.get(2).get(1).double_value(&[])).abs() < 1e-6);
        // With alpha 0 the soft value is min_k Q_target_k at a sampled action: bounded by the
        // target critics' values over the action box.
        let r0 = batch.reward.get(0).get(0).double_value(&[]);
        let v1 = (y.get(0).get(0).double_value(&[]) - r0) / config.discount;
        let slow = tch::no_grad(|| {
            unroll_critics(
                target.recurrent_critics(),
                &parts,
                &batch,
                &batch.resets(),
                None,
            )
        });
        let hs: Vec<Tensor> = slow
            .iter()
            .map(|r| r.h.get(1).get(0).unsqueeze(0))
            .collect();
        let grid = Tensor::linspace(-2.0, 2.0, 401, (Kind::Float, Device::Cpu)).unsqueeze(1);
        let hs: Vec<Tensor> = hs.iter().map(|h| h.expand([401, 4], false)).collect();
        let min_q = tch::no_grad(|| target.recurrent_qs(&hs, &grid).min_dim(0, false).0);
        let (lo, hi) = (min_q.min().double_value(&[]), min_q.max().double_value(&[]));
        assert!(
            lo - 1e-4 <= v1 && v1 <= hi + 1e-4,
            "{v1} not in [{lo}, {hi}]"
        );
    }
}
