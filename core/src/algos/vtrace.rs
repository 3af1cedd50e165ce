//! V-trace off-policy targets (Espeholt et al. 2018, IMPALA, arXiv:1802.01561, eq. 1).
//!
//! With importance ratios `r_t = pi(a_t|x_t) / mu(a_t|x_t)` of the learner policy `pi` against
//! the behaviour policy `mu` that acted:
//!
//! - `rho_t = min(rho_bar, r_t)`, `c_t = lambda * min(c_bar, r_t)`;
//! - `delta_t = rho_t (r_t + gamma V(x_{t+1}) - V(x_t))`;
//! - `v_t - V(x_t) = delta_t + gamma c_t (v_{t+1} - V(x_{t+1}))`, with `v_T = V(x_T)`;
//! - policy-gradient advantage
//!   `min(pg_rho_bar, r_t) (r_t + gamma (lambda v_{t+1} + (1 - lambda) V(x_{t+1})) - V(x_t))`.
//!
//! This covers scalable_agent's `vtrace.py` (`c_bar = 1`, `lambda = 1`), rlax's `vtrace`
//! (`c_t = lambda min(1, r_t)`, its q-estimate mixes `lambda`) and SEED RL's. Episode ends
//! follow [`super::returns`]: after a terminal step the next value is 0; after a truncated one
//! it is V(final observation) (or 0 when `bootstrap_truncation` is off); either way the trace
//! stops there, since `x_{t+1}` belongs to the next episode.

use super::pg::{floats, tensor, Samples};
use super::returns::{Returns, StepData};
use crate::config::error::{check, ConfigError};
use crate::items::rollout::RolloutBatch;
use crate::models::{ActorCritic, Evaluation};
use serde::{Deserialize, Serialize};

/// V-trace's importance-weight clips for PPO and A2C (`[algo.vtrace]`; pytorchrl's
/// `VTraceBuffer`): the learner's current policy scores each batch once before the update,
/// and V-trace replaces GAE's advantages and value targets, correcting for the actors' lag.
/// The keys are IMPALA's.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VtraceClips {
    /// Clip of the TD importance weight, rho-bar.
    pub rho_bar: f64,
    /// Clip of the policy-gradient importance weight.
    pub pg_rho_bar: f64,
    /// Clip of the trace coefficient, c-bar.
    pub c_bar: f64,
}

impl Default for VtraceClips {
    fn default() -> Self {
        VtraceClips {
            rho_bar: 1.0,
            pg_rho_bar: 1.0,
            c_bar: 1.0,
        }
    }
}

impl VtraceClips {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        for (ok, key) in [
            (self.rho_bar > 0.0, "algo.vtrace.rho_bar"),
            (self.pg_rho_bar > 0.0, "algo.vtrace.pg_rho_bar"),
            (self.c_bar > 0.0, "algo.vtrace.c_bar"),
        ] {
            check(ok, key, "must be > 0")?;
        }
        Ok(())
    }
}

/// The V-trace coefficients.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VtraceParams {
    /// Discount gamma.
    pub discount: f32,
    /// Trace decay lambda (1 in the paper).
    pub lambda: f32,
    /// Clip of the TD importance weight, rho-bar (sets the fixed point).
    pub rho_bar: f32,
    /// Clip of the policy-gradient importance weight.
    pub pg_rho_bar: f32,
    /// Clip of the trace coefficient, c-bar (contraction speed only).
    pub c_bar: f32,
    /// Bootstrap from V(final observation) at a time-limit end; else treat it as terminal.
    pub bootstrap_truncation: bool,
}

impl VtraceParams {
    /// The coefficients of a policy-gradient algorithm's `algo.vtrace` clips, with its
    /// discount, trace decay and time-limit bootstrap.
    pub fn from_clips(
        clips: &VtraceClips,
        discount: f64,
        lambda: f64,
        bootstrap_truncation: bool,
    ) -> VtraceParams {
        VtraceParams {
            discount: discount as f32,
            lambda: lambda as f32,
            rho_bar: clips.rho_bar as f32,
            pg_rho_bar: clips.pg_rho_bar as f32,
            c_bar: clips.c_bar as f32,
            bootstrap_truncation,
        }
    }
}

impl Default for VtraceParams {
    fn default() -> Self {
        VtraceParams {
            discount: 0.99,
            lambda: 1.0,
            rho_bar: 1.0,
            pg_rho_bar: 1.0,
            c_bar: 1.0,
            bootstrap_truncation: true,
        }
    }
}

/// V-trace value targets and policy-gradient advantages, both `[T, B]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Vtrace {
    /// v_t, the value targets.
    pub vs: Vec<f32>,
    /// The (pg-rho-clipped) policy-gradient advantages.
    pub pg_advantage: Vec<f32>,
}

/// V-trace over `data` (values from the learner's current value function) with
/// `log_rho = log pi(a|x) - log mu(a|x)`, `[T, B]`.
pub fn vtrace(data: &StepData<'_>, log_rho: &[f32], p: &VtraceParams) -> Vtrace {
    let (t_len, b_len) = (data.t, data.b);
    debug_assert_eq!(log_rho.len(), t_len * b_len);
    let mut vs = vec![0.0f32; t_len * b_len];
    let mut pg_advantage = vec![0.0f32; t_len * b_len];
    for b in 0..b_len {
        // v_{t+1} - V(x_{t+1}) of the step after the current one, within the episode.
        let mut carry = 0.0f32;
        for t in (0..t_len).rev() {
            let i = t * b_len + b;
            let next = next_step(data, p.bootstrap_truncation, t, b);
            let ratio = log_rho[i].exp();
            let rho = ratio.min(p.rho_bar);
            let c = p.lambda * ratio.min(p.c_bar);
            let value = data.value[i];
            let delta = rho * (data.reward[i] + p.discount * next.value - value);
            let carried = if next.continues { carry } else { 0.0 };
            let correction = delta + p.discount * c * carried;
            vs[i] = value + correction;
            let next_vs = next.value + carried;
            let q =
                data.reward[i] + p.discount * (p.lambda * next_vs + (1.0 - p.lambda) * next.value);
            pg_advantage[i] = ratio.min(p.pg_rho_bar) * (q - value);
            carry = correction;
        }
    }
    Vtrace { vs, pg_advantage }
}

/// The learner's view of a batch: its scores of the behaviour actions (with gradients) and
/// its values of the observations after the unroll (`bootstrap_obs`, `[B]`, without). A
/// recurrent model unrolls over the rollouts' sequences from their stored states and values
/// `bootstrap_obs` from the state after the last step (zero where that step ended an
/// episode), as the actor would have.
pub fn learner_scores(
    model: &ActorCritic,
    batch: &RolloutBatch,
    samples: &Samples,
) -> (Evaluation, Vec<f32>) {
    let heads = model.heads();
    let device = model.var_store().device();
    let (eval, last) = match super::pg::sequence(batch, device) {
        None => (heads.evaluate(&samples.obs, &samples.action), None),
        Some(seq) => heads.evaluate_sequence_with_state(&samples.obs, &samples.action, &seq),
    };
    let _guard = tch::no_grad_guard();
    let obs = tensor(&batch.bootstrap_obs, device).view([batch.b as i64, -1]);
    let bootstrap = match last {
        None => heads.value(&obs),
        Some(state) => {
            let last_row = (batch.t - 1) * batch.b;
            let ended = batch.terminated[last_row..]
                .iter()
                .zip(&batch.truncated[last_row..]);
            let keep: Vec<f32> = ended.map(|(a, c)| f32::from(!(*a || *c))).collect();
            let state = state.masked(&tensor(&keep, device));
            heads.step(&obs, &state).1
        }
    };
    (eval, floats(&bootstrap))
}

/// V-trace in place of GAE for PPO and A2C (`algo.vtrace`, pytorchrl's `VTraceBuffer`): the
/// learner's current policy and value function score the batch once, before the update, and
/// V-trace corrects for the actors' lag. The advantages are the policy-gradient advantages,
/// the returns the value targets `v_s`; `data` supplies the rewards and episode ends. On an
/// on-policy batch (every ratio 1, clips >= 1) this is GAE with `lambda` from the learner's
/// values. Also returns the mean importance ratio.
pub fn vtrace_returns(
    model: &ActorCritic,
    batch: &RolloutBatch,
    data: &StepData<'_>,
    p: &VtraceParams,
) -> (Returns, f64) {
    let _guard = tch::no_grad_guard();
    let samples = Samples::new(batch, model.var_store().device());
    let (eval, bootstrap) = learner_scores(model, batch, &samples);
    let log_rho = floats(&(&eval.log_prob - &samples.behaviour_log_prob));
    let values = floats(&eval.value);
    let data = StepData {
        value: &values,
        bootstrap_value: &bootstrap,
        ..*data
    };
    let targets = vtrace(&data, &log_rho, p);
    let n = log_rho.len().max(1) as f64;
    let mean_ratio = log_rho.iter().map(|l| f64::from(*l).exp()).sum::<f64>() / n;
    let returns = Returns {
        advantage: targets.pg_advantage,
        returns: targets.vs,
    };
    (returns, mean_ratio)
}

/// V(x_{t+1}) as seen from step t, and whether the episode (and the trace) goes on to it.
struct Next {
    value: f32,
    continues: bool,
}

fn next_step(data: &StepData<'_>, bootstrap_truncation: bool, t: usize, b: usize) -> Next {
    let i = t * data.b + b;
    if data.terminated[i] {
        return Next {
            value: 0.0,
            continues: false,
        };
    }
    if data.truncated[i] {
        let value = if bootstrap_truncation {
            data.final_value[i]
        } else {
            0.0
        };
        return Next {
            value,
            continues: false,
        };
    }
    if t + 1 == data.t {
        // v_T = V(x_T): no correction beyond the unroll.
        return Next {
            value: data.bootstrap_value[b],
            continues: false,
        };
    }
    Next {
        value: data.value[i + data.b],
        continues: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algos::returns::gae;
    use crate::algos::testing::{cartpole_model, tiny_batch};
    use crate::models::RnnState;
    use tch::{Device, Tensor};

    /// On a batch the learner's own policy and values produced (every ratio 1), the V-trace
    /// targets PPO and A2C use are GAE's, for any lambda; a lagged batch (behaviour log-probs
    /// lower by 0.3: ratios e^0.3 > 1, clipped to 1) changes only the clipped terms, so the
    /// targets still match; with rho_bar = c_bar = 2 they differ.
    #[test]
    fn vtrace_returns_on_policy_are_gae() {
        let model = cartpole_model(7);
        let mut batch = tiny_batch();
        let samples = Samples::new(&batch, Device::Cpu);
        let own = {
            let _guard = tch::no_grad_guard();
            model.evaluate(&samples.obs, &samples.action)
        };
        batch.log_prob = floats(&own.log_prob);
        batch.value = floats(&own.value);
        batch.bootstrap_value = learner_scores(&model, &batch, &samples).1;
        assert_on_policy_targets_are_gae(&model, batch);
    }

    /// A recurrent model scores a batch as the actor stepped it: from each column's stored
    /// state, reset after the episode end, and on to the bootstrap observation. With the
    /// behaviour values and log-probs of a step-by-step pass, V-trace is again GAE.
    #[test]
    fn recurrent_scores_follow_the_actor_steps() {
        let config = crate::config::ModelConfig {
            lstm_size: 6,
            pre_lstm_sizes: vec![8, 5],
            ..Default::default()
        };
        let model = super::super::testing::cartpole_model_with(3, &config);
        let mut batch = tiny_batch();
        let (t, b) = (batch.t as i64, batch.b as i64);
        let init = RnnState {
            h: Tensor::randn([b, 6], (tch::Kind::Float, Device::Cpu)) * 0.5,
            c: Tensor::randn([b, 6], (tch::Kind::Float, Device::Cpu)) * 0.5,
        };
        batch.init_state = Some((floats(&init.h.view([-1])), floats(&init.c.view([-1]))));
        // The last step of column 1 ends an episode: its bootstrap starts from a zero state.
        batch.truncated[(batch.t - 1) * batch.b + 1] = true;
        let samples = Samples::new(&batch, Device::Cpu);
        let _guard = tch::no_grad_guard();
        let obs = samples.obs.view([t, b, -1]);
        let actions = samples.action.view([t, b]);
        let (mut log_prob, mut value) = (Vec::new(), Vec::new());
        let mut state = init;
        for step in 0..t {
            let (dist, v, next) = model.heads().step(&obs.get(step), &state);
            log_prob.extend(floats(&dist.log_prob(&actions.get(step))));
            value.extend(floats(&v));
            let rows = (step * b) as usize..((step + 1) * b) as usize;
            let keep: Vec<f32> = rows
                .map(|i| f32::from(!(batch.terminated[i] || batch.truncated[i])))
                .collect();
            state = next.masked(&Tensor::from_slice(&keep));
        }
        let boot_obs = Tensor::from_slice(&batch.bootstrap_obs).view([b, -1]);
        let bootstrap = floats(&model.heads().step(&boot_obs, &state).1);
        let (eval, got) = learner_scores(&model, &batch, &samples);
        for (g, w) in floats(&eval.log_prob).iter().zip(&log_prob) {
            assert!((g - w).abs() < 1e-5, "log-prob {g} vs stepped {w}");
        }
        for (g, w) in got.iter().zip(&bootstrap) {
            assert!((g - w).abs() < 1e-5, "bootstrap {g} vs stepped {w}");
        }
        (batch.log_prob, batch.value, batch.bootstrap_value) = (log_prob, value, bootstrap);
        drop(_guard);
        assert_on_policy_targets_are_gae(&model, batch);
    }

    fn assert_on_policy_targets_are_gae(model: &ActorCritic, mut batch: RolloutBatch) {
        for lambda in [0.8f32, 1.0] {
            let p = VtraceParams {
                lambda,
                ..VtraceParams::default()
            };
            let want = gae(&batch.step_data(), p.discount, lambda, true);
            let (got, ratio) = vtrace_returns(model, &batch, &batch.step_data(), &p);
            assert!((ratio - 1.0).abs() < 1e-5);
            for (g, w) in got.advantage.iter().zip(&want.advantage) {
                assert!((g - w).abs() < 1e-5, "advantage {g} vs GAE {w}");
            }
            for (g, w) in got.returns.iter().zip(&want.returns) {
                assert!((g - w).abs() < 1e-5, "target {g} vs GAE {w}");
            }
        }
        let p = VtraceParams::default();
        let want = gae(&batch.step_data(), p.discount, p.lambda, true);
        batch.log_prob.iter_mut().for_each(|l| *l -= 0.3);
        let (clipped, ratio) = vtrace_returns(model, &batch, &batch.step_data(), &p);
        assert!((ratio - 0.3f64.exp()).abs() < 1e-4, "{ratio}");
        assert!(clipped
            .returns
            .iter()
            .zip(&want.returns)
            .all(|(g, w)| (g - w).abs() < 1e-5));
        let loose = VtraceParams {
            rho_bar: 2.0,
            c_bar: 2.0,
            pg_rho_bar: 2.0,
            ..p
        };
        let (unclipped, _) = vtrace_returns(model, &batch, &batch.step_data(), &loose);
        assert!(unclipped
            .returns
            .iter()
            .zip(&want.returns)
            .any(|(g, w)| (g - w).abs() > 1e-3));
    }

    fn data<'a>(reward: &'a [f32], value: &'a [f32], term: &'a [bool]) -> StepData<'a> {
        StepData {
            t: reward.len(),
            b: 1,
            reward,
            value,
            terminated: term,
            truncated: &[false; 4][..reward.len()],
            final_value: &[0.0; 4][..reward.len()],
            bootstrap_value: &[0.25],
        }
    }

    /// On-policy (all ratios 1) with lambda = 1, v_s is the n-step bootstrapped return, i.e.
    /// GAE(lambda = 1) returns, and the pg advantage is the one-step TD target minus V(x_s).
    #[test]
    fn on_policy_vtrace_is_the_n_step_return() {
        let (r, v) = ([1.0, 0.5, -1.0, 2.0], [0.3, 0.1, 0.4, -0.2]);
        let term = [false, false, true, false];
        let d = data(&r, &v, &term);
        let out = vtrace(&d, &[0.0; 4], &VtraceParams::default());
        let want = gae(&d, 0.99, 1.0, true).returns;
        for (a, b) in out.vs.iter().zip(&want) {
            assert!((a - b).abs() < 1e-5, "{:?} vs {want:?}", out.vs);
        }
        // t = 0: r + gamma v_1 - V(x_0)
        let adv0 = 1.0 + 0.99 * out.vs[1] - 0.3;
        assert!((out.pg_advantage[0] - adv0).abs() < 1e-5);
        // t = 2 is terminal: r - V(x_2).
        assert!((out.pg_advantage[2] - (-1.0 - 0.4)).abs() < 1e-6);
    }

    /// A ratio of 0 (the learner would never take the action) cuts the trace and zeroes that
    /// step's TD correction: v_t = V(x_t).
    #[test]
    fn zero_ratio_keeps_the_value() {
        let (r, v) = ([1.0, 1.0], [0.5, 0.5]);
        let d = data(&r, &v, &[false, false]);
        let out = vtrace(&d, &[f32::NEG_INFINITY, 0.0], &VtraceParams::default());
        assert_eq!(out.vs[0], 0.5);
        assert_eq!(out.pg_advantage[0], 0.0);
    }
}
