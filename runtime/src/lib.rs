//! fleetrl-runtime: the torch-free plumbing every fleetrl binary shares, so that the replay
//! server links neither libtorch nor Python.
//!
//! - [`net`]: gRPC server and channel settings, connecting with retries, SIGTERM-aware serving.
//! - [`telemetry`]: logging, the Prometheus registry and endpoint, TensorBoard event files, the
//!   `listening on` announcement.
//! - [`launch`]: starting fleetrl binaries as child processes (the `fleetrl` launcher, the
//!   replay bench and the integration tests).
//! - [`demo`]: the demo file format (PPO+D, behaviour cloning) and what actors and the replay
//!   server share about demo buffers.
//! - [`confine`]: directories a network client names, kept under a root the server chose.
//! - [`dir_lock`]: one process per run, learner or replay checkpoint directory.
//! - [`private`]: every file the roles write is readable by their user only.
//! - [`signals`]: SIGTERM and Ctrl-C, heard from a binary's first line to its exit.

pub mod confine;
pub mod demo;
pub mod dir_lock;
pub mod launch;
pub mod net;
pub mod private;
pub mod signals;
pub mod telemetry;
