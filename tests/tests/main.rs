//! The scenarios, one module a file, linked into one test binary: each binary of this crate
//! links tonic, tokio and the fleetrl clients again (about 13 s of CPU each here), so one binary
//! for 28 scenarios rather than 28 binaries saves minutes of every test build.
//!
//! `auth.rs` and `compose_cluster.rs` stay binaries of their own: they install process-wide
//! settings (the run's token, the TLS CA that clients trust and children inherit) that would
//! reach every other scenario's clients and roles in a shared process.
//!
//! Run one file's scenarios with its module name as the filter:
//! `cargo test --release --workspace --test scenarios onpolicy_learns::`.

mod actor_churn;
mod actor_supervision;
mod bad_insert;
mod cartpole_learns;
mod chaos;
mod env_presets;
mod eval_twin;
mod health;
mod hostile_clients;
mod init_from;
mod interrupt;
mod k8s_manifests;
mod learner_restart;
mod meta_learns;
mod metrics;
mod multi_device;
mod offpolicy_learns;
mod onpolicy_learns;
mod ppod;
mod r2d2_learns;
mod replay_links;
mod replay_persistence;
mod replay_restart;
mod replay_shards;
mod resume;
mod shutdown;
mod tls;
mod user_errors;
