//! The replay server's tests over its public API, one module a file, linked into one test
//! binary: each binary compiles tonic's clients and links the server again, so one binary
//! compiles in 22 s of CPU here where the three took 69 s.

mod replay_fuzz;
mod replay_service;
mod replay_tables;

/// With `autotests = false` cargo builds only `tests/main.rs`, so a new file in `tests/` left
/// out of the list above would never run: refuse it.
#[test]
fn every_test_file_is_a_module() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let modules = std::fs::read_to_string(dir.join("main.rs")).expect("tests/main.rs");
    for entry in std::fs::read_dir(&dir).expect("tests/") {
        let path = entry.expect("a directory entry").path();
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("a UTF-8 name");
        if path.extension().is_some_and(|e| e == "rs") && stem != "main" {
            assert!(
                modules.contains(&format!("\nmod {stem};\n")),
                "replay-server/tests/{stem}.rs is not a module of tests/main.rs, so it would \
                 never run: add `mod {stem};` there"
            );
        }
    }
}
