//! fleetrl-core: what every fleetrl role shares.
//!
//! - [`envs`]: the [`envs::Env`] trait, native environments, wrappers and vectorised envs.
//! - [`models`]: tch networks and the policy the actors and learner share.
//! - [`algos`]: the learning algorithms; their math is pure and unit-tested without an env.
//! - [`buffers`]: replay tables (signature, samplers, removers, rate limiters).
//! - [`rollout`]: the rollout item actors insert and the learner trains on.
//! - [`config`]: the run configuration every binary reads.
//! - [`telemetry`], [`checkpoint`]: logs, TensorBoard event files, checkpoints.

pub mod acting;
pub mod algos;
pub mod broadcast;
pub mod buffers;
pub mod checkpoint;
pub mod config;
pub mod demo;
pub mod envs;
pub mod eval;
pub mod exploration;
pub mod launch;
pub mod models;
pub mod net;
pub mod optim;
pub mod policy_loader;
pub mod ppod;
pub mod replay_client;
pub mod rollout;
pub mod scripted;
pub mod sequences;
pub mod telemetry;
pub mod transition;
