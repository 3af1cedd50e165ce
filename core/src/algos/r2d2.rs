//! Recurrent DQN on stored sequences: R2D2 (Kapturowski et al. 2019, "Recurrent Experience
//! Replay in Distributed Reinforcement Learning", ICLR). [`super::dqn::Dqn`] trains through
//! here when its model has an LSTM core; the optimiser step and target updates are DQN's.
//!
//! Per batch of sequences (each `L` steps with the actor's LSTM state before step 0):
//! 1. Both networks unroll from the stored state, resetting it after every ended step. The
//!    online network's first `burn_in` steps run without gradient (the state is only warmed
//!    up), the rest with it.
//! 2. Bootstrap values `V(t) = Q_target(o_t, argmax_a Q(o_t, a))` (double Q) at every step,
//!    and at each episode's final observation by one more step from the state it reached.
//! 3. n-step targets inside the sequence for steps `burn_in .. L - 1` (the last step only
//!    bootstraps; the horizon shortens near the end): rewards summed up to `n` steps, cut at
//!    a terminal step (no bootstrap) or a time limit (bootstrap from the final observation).
//! 4. Loss: Huber on the TD errors, averaged over time, weighted per sequence by the
//!    importance weights. Priority: `eta * max |td| + (1 - eta) * mean |td|`.

use tch::{Kind, Tensor};

use super::dqn::DqnConfig;
use super::target::td_loss;
use crate::items::sequence::SequenceBatch;
use crate::models::{RecurrentNet, RnnState, Unrolled};

/// `Q_target(s, argmax_a picker(s, a))` along the last dimension: `picker` is the online
/// network's Q values with `double_q`, else the target's own.
pub fn bootstrap_values(online: &Tensor, target: &Tensor, double_q: bool) -> Tensor {
    let picker = if double_q { online } else { target };
    let best = picker.argmax(-1, true);
    target.gather(-1, &best, false).squeeze_dim(-1)
}

/// n-step targets `[T - 1, B]` for steps `0 .. T - 1` of sequences of rewards `[T, B]`.
/// `boot[t]` values observation t, `boot_final[t]` the final observation of an episode that
/// ended at step t. A terminal step ends the sum with no bootstrap, a truncated one with
/// `gamma^(k+1) boot_final`; otherwise the sum bootstraps from `boot` at most `n` steps on,
/// and never past step `T - 1`.
pub fn n_step_targets(
    reward: &Tensor,
    terminated: &Tensor,
    truncated: &Tensor,
    boot: &Tensor,
    boot_final: &Tensor,
    gamma: f64,
    n: usize,
) -> Tensor {
    let steps = reward.size()[0];
    let mut targets = Vec::with_capacity(steps.max(1) as usize - 1);
    for t in 0..steps - 1 {
        let horizon = (n as i64).min(steps - 1 - t);
        let mut sum = reward.get(t).zeros_like();
        let mut alive = sum.ones_like();
        let mut scale = 1.0;
        for j in t..t + horizon {
            let (ended, cut) = (terminated.get(j), truncated.get(j));
            sum += &alive * (reward.get(j) * scale + &cut * boot_final.get(j) * (scale * gamma));
            alive *= 1.0 - (ended + &cut).clamp(0.0, 1.0);
            scale *= gamma;
        }
        targets.push(sum + alive * boot.get(t + horizon) * scale);
    }
    Tensor::stack(&targets, 0)
}

/// [`n_step_targets`] `[T - 1, B]` of `batch`'s rewards and episode ends.
pub fn sequence_targets(
    batch: &SequenceBatch,
    boot: &Tensor,
    boot_final: &Tensor,
    gamma: f64,
    n: u32,
) -> Tensor {
    n_step_targets(
        &batch.reward,
        &batch.terminated,
        &batch.truncated,
        boot,
        boot_final,
        gamma,
        n as usize,
    )
}

/// R2D2's priority of each sequence from its |TD errors| `[T, B]`: `[B]`.
pub fn sequence_priorities(td_abs: &Tensor, eta: f64) -> Tensor {
    let max = td_abs.amax(0, false);
    let mean = td_abs.mean_dim(0, false, Kind::Float);
    max * eta + mean * (1.0 - eta)
}

/// Unrolls `net`'s core over the whole sequence, the first `burn_in` steps without gradient,
/// then on from their (detached) state with gradient.
pub fn unroll_with_burn_in(
    net: &RecurrentNet,
    obs: &Tensor,
    init: &RnnState,
    resets: &Tensor,
    burn_in: i64,
) -> Unrolled {
    if burn_in == 0 {
        return net.unroll(obs, init, resets);
    }
    let warm = tch::no_grad(|| {
        net.unroll(
            &obs.narrow(0, 0, burn_in),
            init,
            &resets.narrow(0, 0, burn_in),
        )
    });
    let last = burn_in - 1;
    let state = RnnState {
        h: warm.h.get(last).detach(),
        c: warm.c.get(last).detach(),
    };
    let rest = obs.size()[0] - burn_in;
    let learn = net.unroll(
        &obs.narrow(0, burn_in, rest),
        &state,
        &resets.narrow(0, burn_in, rest),
    );
    let join = |a: &Tensor, b: &Tensor| Tensor::cat(&[a.detach(), b.shallow_clone()], 0);
    Unrolled {
        h: join(&warm.h, &learn.h),
        c: join(&warm.c, &learn.c),
    }
}

/// The loss of one batch and what DQN reports of it.
#[derive(Debug)]
pub struct SequenceLoss {
    /// Scalar loss, with gradient through the online network's post-burn-in steps.
    pub loss: Tensor,
    /// Q values of the taken actions on the trained steps `[T', B]`.
    pub q: Tensor,
    /// R2D2 priority per sequence `[B]`.
    pub priorities: Tensor,
}

/// The R2D2 loss of `batch` for `online` against `target` (see the module doc).
pub fn sequence_loss(
    config: &DqnConfig,
    online: &RecurrentNet,
    target: &RecurrentNet,
    batch: &SequenceBatch,
) -> SequenceLoss {
    let replay = &config.replay;
    let burn_in = replay.burn_in as i64;
    let resets = batch.resets();
    let run = unroll_with_burn_in(online, &batch.obs, &batch.state, &resets, burn_in);
    let q_all = online.head(&run.h, None);
    let y = tch::no_grad(|| {
        let slow = target.unroll(&batch.obs, &batch.state, &resets);
        let run = run.detach();
        let boot = bootstrap_values(
            &q_all.detach(),
            &target.head(&slow.h, None),
            config.double_q,
        );
        let boot_final = bootstrap_values(
            &online.head(&online.final_obs_core(&batch.final_obs, &run), None),
            &target.head(&target.final_obs_core(&batch.final_obs, &slow), None),
            config.double_q,
        );
        sequence_targets(batch, &boot, &boot_final, config.discount, replay.n_step)
    });
    let trained = y.size()[0] - burn_in;
    let action = batch.action.narrow(0, burn_in, trained).unsqueeze(2);
    let q = q_all
        .narrow(0, burn_in, trained)
        .gather(2, &action, false)
        .squeeze_dim(2);
    let delta = &q - y.narrow(0, burn_in, trained);
    let per_sequence = td_loss(&delta, config.huber).mean_dim(0, false, Kind::Float);
    SequenceLoss {
        loss: (per_sequence * &batch.weights).mean(Kind::Float),
        priorities: sequence_priorities(&delta.detach().abs(), replay.priority_eta),
        q,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{nn, Device};

    fn column(values: &[f32]) -> Tensor {
        Tensor::from_slice(values).unsqueeze(1)
    }

    fn values(t: &Tensor) -> Vec<f32> {
        Vec::<f32>::try_from(t.view([-1])).unwrap()
    }

    /// Four steps with a terminal at step 1 and a time limit at step 2 (gamma 0.5, n 2):
    /// step 0 sums r0 + g r1 and stops (terminal), step 1 is terminal, step 2 bootstraps from
    /// its final observation, and no target looks past the sequence's last step.
    #[test]
    fn n_step_targets_stop_at_terminals_and_bootstrap_at_time_limits() {
        let reward = column(&[1.0, 2.0, 4.0, 8.0]);
        let terminated = column(&[0.0, 1.0, 0.0, 0.0]);
        let truncated = column(&[0.0, 0.0, 1.0, 0.0]);
        let boot = column(&[100.0, 200.0, 300.0, 400.0]);
        let boot_final = column(&[10.0, 20.0, 30.0, 40.0]);
        let y = n_step_targets(&reward, &terminated, &truncated, &boot, &boot_final, 0.5, 2);
        // step 2: r2 + 0.5 * V_final(2) = 4 + 15; horizon 1 (the sequence ends at step 3).
        assert_eq!(values(&y), vec![1.0 + 0.5 * 2.0, 2.0, 4.0 + 0.5 * 30.0]);
        // Without episode ends: r0 + g r1 + g^2 V(2), r1 + g r2 + g^2 V(3), r2 + g V(3).
        let none = column(&[0.0; 4]);
        let y = n_step_targets(&reward, &none, &none, &boot, &boot_final, 0.5, 2);
        assert_eq!(values(&y), vec![2.0 + 75.0, 4.0 + 100.0, 4.0 + 200.0]);
    }

    #[test]
    fn priorities_mix_the_max_and_the_mean_td_error() {
        let td = Tensor::from_slice(&[1.0f32, 0.0, 3.0, 2.0]).view([2, 2]);
        let p = values(&sequence_priorities(&td, 0.9));
        assert!((p[0] - (0.9 * 3.0 + 0.1 * 2.0)).abs() < 1e-6, "{p:?}");
        assert!((p[1] - (0.9 * 2.0 + 0.1 * 1.0)).abs() < 1e-6, "{p:?}");
    }

    /// Gradients reach the observations after the burn-in and none before it, and the
    /// burned-in Q values equal a plain unroll's.
    #[test]
    fn burn_in_leaves_no_gradient() {
        let vs = nn::VarStore::new(Device::Cpu);
        let net = crate::models::recurrent_net::tiny(&vs, 4);
        let obs = Tensor::randn([6, 2, 3], (Kind::Float, Device::Cpu)).set_requires_grad(true);
        let init = RnnState::zeros(2, 4, Device::Cpu);
        let resets = Tensor::zeros([6, 2], (Kind::Float, Device::Cpu));
        let run = unroll_with_burn_in(&net, &obs, &init, &resets, 2);
        let plain = tch::no_grad(|| net.unroll(&obs, &init, &resets));
        assert!(run.h.allclose(&plain.h, 1e-6, 1e-6, false));
        run.h.sum(Kind::Float).backward();
        let grad = obs
            .grad()
            .abs()
            .sum_dim_intlist([1i64, 2].as_slice(), false, Kind::Float);
        let per_step = values(&grad);
        assert_eq!(&per_step[..2], &[0.0, 0.0]);
        assert!(per_step[2..].iter().all(|g| *g > 0.0), "{per_step:?}");
    }
}
