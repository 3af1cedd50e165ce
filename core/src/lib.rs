//! fleetrl-core: what every fleetrl role shares.
//!
//! - [`envs`]: the [`envs::Env`] trait, native environments, wrappers and vectorised envs.
//! - [`models`]: tch networks and the policy the actors and learner share.
//! - [`algos`]: the learning algorithms; their math is pure and unit-tested without an env.
//! - [`buffers`]: replay tables (signature, samplers, removers, rate limiters).
//! - [`items`]: what actors write (rollouts, transitions, sequences, demos).
//! - [`acting`]: acting loops, exploration, PPO+D demo replay, evaluation.
//! - [`config`]: the run configuration every binary reads.
//! - [`telemetry`], [`checkpoint`]: logs, TensorBoard event files, checkpoints.

pub mod acting;
pub mod algos;
pub mod broadcast;
pub mod buffers;
pub mod checkpoint;
pub mod config;
pub mod envs;
pub mod items;
pub mod launch;
pub mod models;
pub mod net;
pub mod optim;
pub mod replay_client;
pub mod telemetry;
