//! The scenarios, one module a file, linked into one test binary: each binary of this crate
//! compiles tonic's clients and links tokio and the fleetrl crates again (12-22 s of CPU each
//! here for the files that call the services), so one binary for 28 files compiles in 58 s of
//! CPU where the 28 took about 250 s.
//!
//! `auth.rs` and `compose_cluster.rs` stay binaries of their own: they install process-wide
//! settings (the run's token, the TLS CA that clients trust and children inherit) that would
//! reach every other scenario's clients and roles in a shared process. `sparse_pearl.rs` is
//! one too: the long tier, `#[ignore]`d, whose PEARL run would starve the scenarios beside it.
//!
//! Run one file's scenarios with its module name as the filter:
//! `cargo test --release --workspace --test scenarios onpolicy_learns::`.

mod actor_churn;
mod actor_supervision;
mod bad_insert;
mod cartpole_learns;
mod chaos;
mod docs;
mod env_presets;
mod eval_twin;
mod export;
mod health;
mod hostile_clients;
mod hostile_demos;
mod idle_sockets;
mod init_from;
mod interrupt;
mod k8s_manifests;
mod learner_ranks;
mod learner_restart;
mod meta_learns;
mod metrics;
mod minari;
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
mod serve;
mod shutdown;
mod stalled_subscribers;
mod tls;
mod user_errors;

/// With `autotests = false` cargo builds only the test targets `Cargo.toml` names, so a new
/// file in `tests/` that neither this list nor a `[[test]]` names would never run: refuse it.
#[test]
fn every_scenario_file_is_built_and_run() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest: toml::Table = std::fs::read_to_string(root.join("Cargo.toml"))
        .expect("tests/Cargo.toml")
        .parse()
        .expect("tests/Cargo.toml parses");
    let targets: Vec<&str> = manifest["test"]
        .as_array()
        .expect("[[test]] targets")
        .iter()
        .filter_map(|t| t.get("path").and_then(|p| p.as_str()))
        .collect();
    let modules = std::fs::read_to_string(root.join("tests/main.rs")).expect("tests/main.rs");
    for entry in std::fs::read_dir(root.join("tests")).expect("tests/") {
        let path = entry.expect("a directory entry").path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("a UTF-8 name");
        assert!(
            targets.contains(&format!("tests/{stem}.rs").as_str())
                || modules.contains(&format!("\nmod {stem};\n")),
            "tests/{stem}.rs is neither a module of tests/main.rs nor a [[test]] in \
             tests/Cargo.toml: it would never run; add `mod {stem};` to tests/main.rs"
        );
    }
}
