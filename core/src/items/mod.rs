//! What actors write and learners read: fixed-length rollouts (on-policy), n-step
//! transitions and burn-in sequences (off-policy), and recorded demonstrations (PPO+D, BC).

pub mod demo;
pub mod rollout;
pub mod sequence;
pub mod transition;
