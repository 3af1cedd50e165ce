//! Recurrent TD3 and DDPG on stored sequences: TD3's losses (Fujimoto et al. 2018) on R2D2's
//! replay of sequences with burn-in (Kapturowski et al. 2019), with a core of its own for the
//! deterministic policy and for every critic, as Ni et al. 2022 ("Recurrent Model-Free RL Can
//! Be a Strong Baseline for Many POMDPs", arXiv:2110.05038) train recurrent TD3.
//! [`super::td3::Td3`] trains through here when its model has recurrent cores; the optimiser
//! steps, the policy delay and the target updates are TD3's.
//!
//! Per batch of sequences (each `L` steps, stored with the actor's states of the policy's and
//! every critic's core before step 0):
//! 1. The target policy and the target critics unroll their own cores from the stored states
//!    (no gradient). The target action at every step, and at each episode's final observation
//!    by one more core step, is `clip(pi_target(o) + clip(eps, -c, c), -1, 1)` (target policy
//!    smoothing; none for DDPG), its value `min_k Q_target_k`.
//! 2. n-step targets inside the sequence for steps `burn_in .. L - 1`, as R2D2's, clipped as
//!    garage clips returns (`algo.clip_return`).
//! 3. The critics unroll with burn-in; critic loss `sum_k mean(w (Q_k(o_t, a_t) - y_t)^2)`
//!    over the trained steps. Priority: R2D2's mix of the first critic's max and mean |td|.
//! 4. Every `policy_delay` updates the policy unrolls with burn-in too; policy loss
//!    `-mean(Q_0(o_t, pi(o_t)))` over the same steps, the first critic's state detached and
//!    its weights frozen.
//!
//! Steps 1-3 are [`super::sequence_critics`], as recurrent SAC's.

use tch::{Kind, Tensor};

use super::r2d2::unroll_with_burn_in;
use super::sequence_critics::{fit_critics, Bootstrap, CriticFit};
use super::td3::{clip_target, Td3Config};
use crate::items::sequence::SequenceBatch;
use crate::models::OffPolicyModel;

/// The losses of one batch and what TD3 reports of it.
#[derive(Debug)]
pub struct SequenceLosses {
    /// The critics' loss, Q values and priorities.
    pub critics: CriticFit,
    /// Policy loss with gradient through the policy's post-burn-in steps only, when this
    /// update steps the policy.
    pub policy_loss: Option<Tensor>,
}

/// The n-step targets `[T - 1, B]` of every step but the last (no gradient), from the target
/// policy's smoothed actions.
fn targets(config: &Td3Config, target: &OffPolicyModel, batch: &SequenceBatch) -> Tensor {
    let _guard = tch::no_grad_guard();
    let pi = target
        .recurrent()
        .expect("recurrent TD3 has a recurrent policy");
    let parts = target.split_state(&batch.state);
    let run = pi.unroll(&batch.obs, &parts[0], &batch.resets());
    let value = |pi_h: &Tensor, hs: &[Tensor]| {
        let unit = config.target_action(&target.recurrent_mean_action(pi_h));
        let action = target.to_env_scale(&unit);
        target.recurrent_qs(hs, &action).min_dim(0, false).0
    };
    let policy = Bootstrap { pi, run: &run };
    let (gamma, n) = (config.discount, config.replay.n_step);
    let y = super::sequence_critics::targets(target, batch, policy, value, gamma, n);
    clip_target(y, config.clip_return, config.clip_pos_returns)
}

/// Recurrent TD3's losses on `batch` for `online` against `target`, the policy's only when
/// `with_policy` (see the module doc).
pub fn sequence_losses(
    config: &Td3Config,
    online: &OffPolicyModel,
    target: &OffPolicyModel,
    batch: &SequenceBatch,
    with_policy: bool,
) -> SequenceLosses {
    let burn_in = config.replay.burn_in as i64;
    let parts = online.split_state(&batch.state);
    let y = targets(config, target, batch);
    let eta = config.replay.priority_eta;
    let critics = fit_critics(online, batch, &parts, &y, burn_in, eta);
    let policy_loss = with_policy.then(|| {
        let pi = online
            .recurrent()
            .expect("recurrent TD3 has a recurrent policy");
        let run = unroll_with_burn_in(pi, &batch.obs, &parts[0], &batch.resets(), burn_in);
        let h = run.h.narrow(0, burn_in, critics.trained_steps());
        let action = online.to_env_scale(&online.recurrent_mean_action(&h));
        -online
            .recurrent_qs_for_policy(&critics.hs[..1], &action)
            .mean(Kind::Float)
    });
    SequenceLosses {
        critics,
        policy_loss,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algos::sequence_critics::testing::{assert_trains, batch, replay};
    use crate::models::PolicyKind;

    fn model(seed: i64) -> OffPolicyModel {
        crate::algos::sequence_critics::testing::model(PolicyKind::Deterministic, seed)
    }

    /// TD3 with `burn_in`, `n_step` and `target_noise` set.
    fn config(burn_in: u32, n_step: u32, target_noise: f64) -> Td3Config {
        Td3Config {
            target_noise,
            replay: replay(burn_in, n_step),
            ..Td3Config::default()
        }
    }

    /// Shapes over the trained steps; the policy's loss only on a policy update; neither loss
    /// sends gradient to the first `burn_in` observations, both to the later ones, the critic
    /// loss reaches only the critics' weights and the policy loss only the policy's.
    #[test]
    fn losses_train_the_steps_after_the_burn_in_and_their_own_networks() {
        let (online, target) = (model(1), model(2));
        let config = config(3, 2, 0.2);
        let batch = batch(8, 2);
        let out = sequence_losses(&config, &online, &target, &batch, false);
        assert!(out.policy_loss.is_none());
        // 8 steps: targets for steps 0..7, of which 3..7 are trained.
        assert_eq!(out.critics.qs.size(), vec![2, 4, 2]);
        assert_eq!(out.critics.priorities.size(), vec![2]);
        let losses = |with_policy| sequence_losses(&config, &online, &target, &batch, with_policy);
        assert_trains(&online, &batch, 3, ("qf", "pi."), || {
            losses(false).critics.q_loss
        });
        assert_trains(&online, &batch, 3, ("pi.", "qf"), || {
            losses(true).policy_loss.expect("a policy update")
        });
    }

    /// Without smoothing the critics regress on TD3's targets exactly: with burn-in 0 and
    /// n = 1, the first step's target is `r_0 + gamma min_k Q_target_k(o_1, pi_target(o_1))`
    /// on the target networks' own unrolls, and a terminal step's target is its reward alone.
    #[test]
    fn targets_are_one_step_values_of_the_target_policy_cut_at_terminals() {
        let target = model(4);
        let config = config(0, 1, 0.0);
        let batch = batch(5, 2);
        let y = targets(&config, &target, &batch);
        assert_eq!(y.size(), vec![4, 2]);
        let terminal = y.get(2).get(1).double_value(&[]);
        assert!((terminal - batch.reward.get(2).get(1).double_value(&[])).abs() < 1e-6);
        let _guard = tch::no_grad_guard();
        let (parts, resets) = (target.split_state(&batch.state), batch.resets());
        let unroll = |i: usize| {
            let net = match i {
                0 => target.recurrent().unwrap(),
                k => &target.recurrent_critics()[k - 1],
            };
            net.unroll(&batch.obs, &parts[i], &resets).h.get(1).get(0)
        };
        let unit = target.recurrent_mean_action(&unroll(0).unsqueeze(0));
        let hs = [unroll(1).unsqueeze(0), unroll(2).unsqueeze(0)];
        let q = target.recurrent_qs(&hs, &target.to_env_scale(&unit));
        let min_q = q.min().double_value(&[]);
        let r0 = batch.reward.get(0).get(0).double_value(&[]);
        let y0 = y.get(0).get(0).double_value(&[]);
        assert!((y0 - (r0 + config.discount * min_q)).abs() < 1e-5, "{y0}");
    }
}
