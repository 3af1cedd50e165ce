//! What recurrent SAC and TD3 share on R2D2's stored sequences (Kapturowski et al. 2019): the
//! critics' half of their update. Each network has its own core and its own part of the stored
//! state ([`OffPolicyModel::split_state`]: the policy's, then each critic's).
//!
//! - Targets: the target critics unroll from their stored states (no gradient); the
//!   algorithm's bootstrap value of each step, from its policy's core outputs and the target
//!   critics', at every step and (one more core step) at each episode's final observation,
//!   gives R2D2's n-step targets inside the sequence ([`super::r2d2::n_step_targets`]).
//! - Fit: the online critics unroll with burn-in; critic loss
//!   `sum_k mean(w (Q_k(o_t, a_t) - y_t)^2)` over the steps after the burn-in (but the last,
//!   which only bootstraps). Priority: R2D2's mix of the first critic's max and mean |td|.
//!
//! The policies' losses are the algorithms' own ([`super::recurrent_sac`],
//! [`super::recurrent_td3`]); they read the critics' core outputs on the trained steps,
//! detached.

use tch::Tensor;

use super::r2d2::{sequence_priorities, sequence_targets, unroll_with_burn_in};
use super::td3::critic_loss;
use crate::items::sequence::SequenceBatch;
use crate::models::{OffPolicyModel, RecurrentNet, RnnState, Unrolled};

/// Each critic unrolled from its part of the stored state (`parts[1..]`; `parts[0]` is the
/// policy's), plainly or with burn-in.
pub(super) fn unroll_critics(
    critics: &[RecurrentNet],
    parts: &[RnnState],
    batch: &SequenceBatch,
    resets: &Tensor,
    burn_in: Option<i64>,
) -> Vec<Unrolled> {
    (critics.iter().zip(&parts[1..]))
        .map(|(net, state)| match burn_in {
            Some(b) => unroll_with_burn_in(net, &batch.obs, state, resets, b),
            None => net.unroll(&batch.obs, state, resets),
        })
        .collect()
}

/// The policy the targets bootstrap with (SAC: the online one; TD3: the target one) and its
/// unroll over the sequence.
pub(super) struct Bootstrap<'a> {
    /// The policy network.
    pub(super) pi: &'a RecurrentNet,
    /// Its core's states along the sequence.
    pub(super) run: &'a Unrolled,
}

/// n-step targets `[T - 1, B]` of every step but the last (no gradient), `discount` gamma over
/// `n` steps: `value(pi_h, critic_hs)` `[T, B]` is the algorithm's bootstrap value at the
/// bootstrap policy's core outputs `pi_h` `[T, B, H]` and the target critics' `critic_hs`.
pub(super) fn targets(
    target: &OffPolicyModel,
    batch: &SequenceBatch,
    policy: Bootstrap<'_>,
    value: impl Fn(&Tensor, &[Tensor]) -> Tensor,
    discount: f64,
    n: u32,
) -> Tensor {
    let _guard = tch::no_grad_guard();
    let parts = target.split_state(&batch.state);
    let critics = target.recurrent_critics();
    let slow = unroll_critics(critics, &parts, batch, &batch.resets(), None);
    let hs: Vec<Tensor> = slow.iter().map(|run| run.h.shallow_clone()).collect();
    let boot = value(&policy.run.h, &hs);
    let pi_final = policy.pi.final_obs_core(&batch.final_obs, policy.run);
    let hs_final: Vec<Tensor> = (critics.iter().zip(&slow))
        .map(|(net, run)| net.final_obs_core(&batch.final_obs, run))
        .collect();
    let boot_final = value(&pi_final, &hs_final);
    sequence_targets(batch, &boot, &boot_final, discount, n)
}

/// The critics' side of one batch.
#[derive(Debug)]
pub struct CriticFit {
    /// `sum_k mean(w (Q_k - y)^2)` over the trained steps, with gradient to the critics only.
    pub q_loss: Tensor,
    /// Every critic's Q value of the taken actions on the trained steps `[K, T', B]`.
    pub qs: Tensor,
    /// Every critic's core outputs on the trained steps `[T', B, H]`, detached: what the
    /// policy's loss reads.
    pub hs: Vec<Tensor>,
    /// R2D2 priority per sequence `[B]`.
    pub priorities: Tensor,
}

impl CriticFit {
    /// Steps trained per sequence, `T'`.
    pub fn trained_steps(&self) -> i64 {
        self.qs.size()[1]
    }
}

/// Fits `online`'s critics, each unrolled from its part of the stored state (`parts`, split
/// from `batch.state`) with `burn_in` steps of burn-in, to the targets `y` `[T - 1, B]` on the
/// steps after the burn-in; `eta` mixes the priorities.
pub(super) fn fit_critics(
    online: &OffPolicyModel,
    batch: &SequenceBatch,
    parts: &[RnnState],
    y: &Tensor,
    burn_in: i64,
    eta: f64,
) -> CriticFit {
    let resets = batch.resets();
    let critics = online.recurrent_critics();
    let runs = unroll_critics(critics, parts, batch, &resets, Some(burn_in));
    let trained = y.size()[0] - burn_in;
    let y = y.narrow(0, burn_in, trained);
    let hs: Vec<Tensor> = (runs.iter())
        .map(|run| run.h.narrow(0, burn_in, trained))
        .collect();
    let qs = online.recurrent_qs(&hs, &batch.action.narrow(0, burn_in, trained));
    let weights = batch.weights.unsqueeze(0).expand_as(&y);
    let k = qs.size()[0];
    let q_loss = critic_loss(
        &qs.reshape([k, -1]),
        &y.reshape([-1]),
        &weights.reshape([-1]),
    );
    let td = (qs.get(0) - &y).detach().abs();
    CriticFit {
        q_loss,
        priorities: sequence_priorities(&td, eta),
        hs: hs.iter().map(Tensor::detach).collect(),
        qs,
    }
}

/// What the recurrent actor-critic losses' tests share.
#[cfg(test)]
pub(super) mod testing {
    use tch::{Device, Kind, Tensor};

    use crate::algos::offpolicy::ReplayOptions;
    use crate::items::sequence::SequenceBatch;
    use crate::models::{OffPolicyModel, PolicyKind, RnnState};

    /// Replay options with `burn_in` and `n_step` set.
    pub(in crate::algos) fn replay(burn_in: u32, n_step: u32) -> ReplayOptions {
        ReplayOptions {
            burn_in,
            n_step,
            ..ReplayOptions::default()
        }
    }

    /// A tiny recurrent model of `kind` (4-unit cores, two critics), seeded.
    pub(in crate::algos) fn model(kind: PolicyKind, seed: i64) -> OffPolicyModel {
        tch::manual_seed(seed);
        crate::models::tiny_recurrent_actor_critic(kind).expect("the tiny model builds")
    }

    /// A batch of `b` sequences of `l` steps for the tiny model; the second ends an episode
    /// at step 2.
    pub(in crate::algos) fn batch(l: i64, b: i64) -> SequenceBatch {
        let cpu = (Kind::Float, Device::Cpu);
        let terminated = Tensor::zeros([l, b], cpu);
        let _ = terminated.get(2).get(1).fill_(1.0);
        SequenceBatch {
            obs: Tensor::randn([l, b, 2], cpu).set_requires_grad(true),
            action: Tensor::rand([l, b, 1], cpu) * 4.0 - 2.0,
            reward: Tensor::randn([l, b], cpu),
            terminated,
            truncated: Tensor::zeros([l, b], cpu),
            final_obs: Tensor::zeros([l, b, 2], cpu),
            state: RnnState::zeros(b, 12, Device::Cpu),
            weights: Tensor::ones([b], cpu),
        }
    }

    /// Runs `loss` backward from zeroed gradients and checks that it reaches the weights
    /// under `own` and none under `other`, and the observations of the steps after the first
    /// `burn_in` (but the last) only.
    pub(in crate::algos) fn assert_trains(
        online: &OffPolicyModel,
        batch: &SequenceBatch,
        burn_in: usize,
        (own, other): (&str, &str),
        loss: impl FnOnce() -> Tensor,
    ) {
        let vars = online.var_store().variables();
        for t in vars.values().chain([&batch.obs]) {
            let mut g = t.grad();
            if g.defined() {
                let _ = g.zero_();
            }
        }
        loss().backward();
        let grad_norm = |prefix: &str| -> f64 {
            (vars.iter())
                .filter(|(n, t)| n.starts_with(prefix) && t.grad().defined())
                .map(|(_, t)| t.grad().square().sum(Kind::Float).double_value(&[]))
                .sum()
        };
        assert!(grad_norm(own) > 0.0, "{own}");
        assert_eq!(grad_norm(other), 0.0, "{other}");
        let g = (batch.obs.grad().abs()).sum_dim_intlist([1i64, 2].as_slice(), false, Kind::Float);
        let steps = Vec::<f32>::try_from(g).expect("per-step gradients");
        let last = steps.len() - 1;
        assert!(
            steps[..burn_in].iter().all(|g| *g == 0.0),
            "{own}: {steps:?}"
        );
        assert!(
            steps[burn_in..last].iter().all(|g| *g > 0.0),
            "{own}: {steps:?}"
        );
    }
}
