//! What actors write and learners read: fixed-length rollouts (on-policy), n-step
//! transitions and burn-in sequences (off-policy). The demo file format is `fleetrl_runtime::demo`.

pub mod check;
pub mod rollout;
pub mod sequence;
pub mod transition;
