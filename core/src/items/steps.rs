//! The time-major `[T, B]` step columns of a rollout (flattened row-major: `t * B + b`), as
//! the return and advantage estimators read them.

/// The per-step data returns are computed from; every slice is `[T, B]` except
/// `bootstrap_value`, which is `[B]` (V of the observation after the last step).
#[derive(Debug, Clone, Copy)]
pub struct StepData<'a> {
    /// Steps per column.
    pub t: usize,
    /// Columns (envs).
    pub b: usize,
    /// r_t.
    pub reward: &'a [f32],
    /// V(s_t) as the behaviour policy estimated it.
    pub value: &'a [f32],
    /// The step ended in a terminal state.
    pub terminated: &'a [bool],
    /// The step ended the episode by time limit.
    pub truncated: &'a [bool],
    /// V(final observation) at truncated steps (ignored elsewhere).
    pub final_value: &'a [f32],
    /// V(s_T) per column.
    pub bootstrap_value: &'a [f32],
}

/// rlpyt's `valid_from_done`, per column of `[T, B]` flags: steps up to and including the
/// first episode end are valid (1), every later step 0. Used when envs are not reset in the
/// middle of a batch (`mid_batch_reset = false`): what follows an end is padding.
pub fn valid_from_done(done: &[bool], t: usize, b: usize) -> Vec<f32> {
    debug_assert_eq!(done.len(), t * b);
    let mut valid = vec![1.0f32; t * b];
    for col in 0..b {
        let mut ended = false;
        for row in 0..t {
            let i = row * b + col;
            if ended {
                valid[i] = 0.0;
            }
            ended |= done[i];
        }
    }
    valid
}
