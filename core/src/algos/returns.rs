//! Returns and advantages over time-major `[T, B]` data (flattened row-major: `t * B + b`).
//!
//! Generalized Advantage Estimation (Schulman et al. 2016, arXiv:1506.02438), with the
//! done convention of rlpyt (`done[t]` ends the episode *after* step t) and SB3's time-limit
//! bootstrap: at a truncation the next value is V(final observation), not 0 and not the value
//! of the next episode's first observation.

pub use crate::items::steps::{valid_from_done, StepData};

/// Advantages and value targets, both `[T, B]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Returns {
    /// A_t (GAE).
    pub advantage: Vec<f32>,
    /// A_t + V(s_t), the TD(lambda) return used as the value target.
    pub returns: Vec<f32>,
}

/// GAE(gamma, lambda). `bootstrap_truncation = false` treats truncation as termination
/// (rlpyt's and CleanRL's choice).
pub fn gae(data: &StepData<'_>, discount: f32, lambda: f32, bootstrap_truncation: bool) -> Returns {
    let (t_len, b_len) = (data.t, data.b);
    debug_assert_eq!(data.reward.len(), t_len * b_len);
    debug_assert_eq!(data.bootstrap_value.len(), b_len);
    let mut advantage = vec![0.0f32; t_len * b_len];
    for b in 0..b_len {
        let mut carry = 0.0f32;
        for t in (0..t_len).rev() {
            let i = t * b_len + b;
            let next_value = if t + 1 == t_len {
                data.bootstrap_value[b]
            } else {
                data.value[i + b_len]
            };
            let (next_value, done) = if data.terminated[i] {
                (0.0, true)
            } else if data.truncated[i] {
                (
                    if bootstrap_truncation {
                        data.final_value[i]
                    } else {
                        0.0
                    },
                    true,
                )
            } else {
                (next_value, false)
            };
            let delta = data.reward[i] + discount * next_value - data.value[i];
            carry = delta + if done { 0.0 } else { discount * lambda * carry };
            advantage[i] = carry;
        }
    }
    let returns = advantage
        .iter()
        .zip(data.value)
        .map(|(a, v)| a + v)
        .collect();
    Returns { advantage, returns }
}

/// Discounted returns with bootstrap (GAE with lambda = 1, plus the values back).
pub fn discounted_returns(
    data: &StepData<'_>,
    discount: f32,
    bootstrap_truncation: bool,
) -> Vec<f32> {
    gae(data, discount, 1.0, bootstrap_truncation).returns
}

/// Mean of `x` over entries where `valid` is 1 (all of them when `valid` is `None`).
pub fn valid_mean(x: &[f32], valid: Option<&[f32]>) -> f32 {
    match valid {
        None => x.iter().sum::<f32>() / x.len().max(1) as f32,
        Some(v) => {
            let total: f32 = v.iter().sum();
            x.iter().zip(v).map(|(a, w)| a * w).sum::<f32>() / total.max(1.0)
        }
    }
}

/// Advantage normalisation over valid entries: `(A - mean) / max(std, 1e-8)` with the
/// population mean and std of the valid entries (rlpyt's `process_returns`); invalid entries
/// become 0 so they add nothing to a loss.
pub fn normalize_advantage(advantage: &[f32], valid: Option<&[f32]>) -> Vec<f32> {
    let mean = valid_mean(advantage, valid);
    let squared: Vec<f32> = advantage.iter().map(|a| (a - mean) * (a - mean)).collect();
    let std = valid_mean(&squared, valid).sqrt().max(1e-8);
    let weight = |i: usize| valid.map_or(1.0, |v| v[i]);
    advantage
        .iter()
        .enumerate()
        .map(|(i, a)| weight(i) * (a - mean) / std)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const R: [f32; 3] = [1.0, 1.0, 1.0];
    const V: [f32; 3] = [0.5, 0.4, 0.3];
    const F: [bool; 3] = [false; 3];

    fn data<'a>(term: &'a [bool], trunc: &'a [bool], final_value: &'a [f32]) -> StepData<'a> {
        StepData {
            t: 3,
            b: 1,
            reward: &R,
            value: &V,
            terminated: term,
            truncated: trunc,
            final_value,
            bootstrap_value: &[0.2],
        }
    }

    fn close(a: &[f32], b: &[f32]) {
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < 1e-5, "{a:?} vs {b:?}");
        }
    }

    // Worked by hand with gamma 0.9, lambda 0.8:
    // d2 = 1 + .9*.2 - .3 = .88; d1 = 1 + .9*.3 - .4 = .87; d0 = 1 + .9*.4 - .5 = .86
    // A2 = .88; A1 = .87 + .72*.88 = 1.5036; A0 = .86 + .72*1.5036 = 1.942592
    #[test]
    fn gae_without_dones() {
        let r = gae(&data(&F, &F, &[0.0; 3]), 0.9, 0.8, true);
        close(&r.advantage, &[1.942592, 1.5036, 0.88]);
        close(&r.returns, &[2.442592, 1.9036, 1.18]);
    }

    // Terminal at t=1: d1 = 1 - .4 = .6 and nothing flows back across it.
    #[test]
    fn gae_cuts_at_termination() {
        let r = gae(&data(&[false, true, false], &F, &[0.0; 3]), 0.9, 0.8, true);
        close(&r.advantage, &[0.86 + 0.72 * 0.6, 0.6, 0.88]);
    }

    // Truncated at t=1 with V(final obs) = .7: d1 = 1 + .9*.7 - .4 = 1.23.
    #[test]
    fn gae_bootstraps_truncation_from_final_value() {
        let trunc = [false, true, false];
        let r = gae(&data(&F, &trunc, &[0.0, 0.7, 0.0]), 0.9, 0.8, true);
        close(&r.advantage, &[0.86 + 0.72 * 1.23, 1.23, 0.88]);
        let as_terminal = gae(&data(&F, &trunc, &[0.0, 0.7, 0.0]), 0.9, 0.8, false);
        close(&as_terminal.advantage, &[0.86 + 0.72 * 0.6, 0.6, 0.88]);
    }

    // lambda = 1: R2 = 1 + .9*.2 = 1.18; R1 = 1 + .9*1.18 = 2.062; R0 = 1 + .9*2.062 = 2.8558
    #[test]
    fn discounted_returns_by_hand() {
        close(
            &discounted_returns(&data(&F, &F, &[0.0; 3]), 0.9, true),
            &[2.8558, 2.062, 1.18],
        );
    }

    // Two columns are independent: column b of a [T, 2] batch equals the [T, 1] result.
    #[test]
    fn columns_are_independent() {
        let reward = [1.0, 0.0, 1.0, 0.5, 1.0, 2.0];
        let value = [0.5, 0.1, 0.4, 0.2, 0.3, 0.3];
        let term = [false, false, true, false, false, false];
        let two = StepData {
            t: 3,
            b: 2,
            reward: &reward,
            value: &value,
            terminated: &term,
            truncated: &[false; 6],
            final_value: &[0.0; 6],
            bootstrap_value: &[0.2, 0.9],
        };
        let r = gae(&two, 0.99, 0.95, true);
        let col0 = gae(
            &data(&[false, true, false], &F, &[0.0; 3]),
            0.99,
            0.95,
            true,
        );
        close(
            &[r.advantage[0], r.advantage[2], r.advantage[4]],
            &col0.advantage,
        );
    }

    proptest! {
        // With lambda = 0 the advantage is the one-step TD error, whatever came after.
        #[test]
        fn lambda_zero_is_td_error(rewards in proptest::collection::vec(-5.0f32..5.0, 4),
                                   values in proptest::collection::vec(-5.0f32..5.0, 4),
                                   boot in -5.0f32..5.0) {
            let d = StepData { t: 4, b: 1, reward: &rewards, value: &values,
                terminated: &[false; 4], truncated: &[false; 4], final_value: &[0.0; 4],
                bootstrap_value: &[boot] };
            let r = gae(&d, 0.9, 0.0, true);
            for t in 0..4 {
                let next = if t == 3 { boot } else { values[t + 1] };
                let td = rewards[t] + 0.9 * next - values[t];
                prop_assert!((r.advantage[t] - td).abs() < 1e-4);
            }
        }
    }
}
