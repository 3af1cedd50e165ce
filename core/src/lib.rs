//! fleetrl-core: what every fleetrl role shares.
//!
//! - [`envs`]: the [`envs::Env`] trait, native environments, wrappers and vectorised envs.
//! - [`models`]: tch networks and the policy the actors and learner share.
//! - [`algos`]: the learning algorithms; their math is pure and unit-tested without an env.
//! - [`items`]: what actors write (rollouts, transitions, sequences, demos).
//! - [`acting`]: acting loops, exploration, PPO+D demo replay, evaluation.
//! - [`tasks`]: task families for meta-RL (goals, target velocities) and their train/test sets.
//! - [`config`]: the run configuration every binary reads.
//! - [`checkpoint`]: learner checkpoints (weights, optimiser state, counters).
//! - [`optim`]: optimisers whose state is plain tensors (checkpointed), and CUDA graph replay.
//! - [`broadcast`]: the weight stream from the learner to its subscribers, in chunks.
//! - [`replay_client`]: inserts and samples across one or many replay servers (shards).
//! - [`collective`]: learners across processes on libtorch's c10d (gloo, NCCL).
//! - [`cpu`]: CPU settings for the threads and process that train.
//! - [`suggest`]: "did you mean" for mistyped presets, env ids and algorithm names.
//!
//! Torch-free plumbing (gRPC settings, telemetry, the launcher, the demo file format) is in
//! `fleetrl-runtime`; replay table declarations are in `fleetrl_proto::table`.

pub mod acting;
pub mod algos;
pub mod broadcast;
pub mod checkpoint;
pub mod collective;
pub mod config;
pub mod cpu;
pub mod envs;
pub mod items;
pub mod models;
pub mod optim;
pub mod replay_client;
pub mod suggest;
pub mod tasks;
