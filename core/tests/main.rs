//! The integration tests of `fleetrl-core`, one module a file, linked into one test binary:
//! each binary links libtorch and the crate again, so one binary for these files saves a link
//! and a compile of the crate's public API per file. Three files stay binaries of their own:
//! `no_alloc_step.rs` installs a counting global allocator for its whole process,
//! `metaworld_env.rs` loads Meta-World's MuJoCo, which cannot share a process with the
//! gymnasium MuJoCo that `gym_bridge.rs` loads, and `sb3_parity.rs` needs torch's global
//! random generator to itself.
//!
//! Run one file's tests with its module name as the filter:
//! `cargo test --release -p fleetrl-core --test integration minatar_fixture::`.

mod common;

mod acrobot_fixture;
mod cartpole_fixture;
mod gym_bridge;
mod minatar_fixture;
mod mountain_car_continuous_fixture;
mod mountain_car_fixture;
mod pendulum_fixture;
mod ppo_serial;
mod recurrent_rollout;
mod returns_fixture;
mod torchscript_model;

/// With `autotests = false` a new file in `tests/` that neither this list nor a `[[test]]` of
/// `Cargo.toml` names would never run: refuse it.
#[test]
fn every_test_file_is_built_and_run() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    let modules = std::fs::read_to_string(root.join("tests/main.rs")).expect("tests/main.rs");
    for entry in std::fs::read_dir(root.join("tests")).expect("tests/") {
        let path = entry.expect("a directory entry").path();
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if path.extension().is_none_or(|e| e != "rs") || stem == "main" {
            continue;
        }
        assert!(
            manifest.contains(&format!("path = \"tests/{stem}.rs\""))
                || modules.contains(&format!("\nmod {stem};\n")),
            "tests/{stem}.rs is neither a module of tests/main.rs nor a [[test]] of Cargo.toml: \
             it would never run; add `mod {stem};` to tests/main.rs"
        );
    }
}
