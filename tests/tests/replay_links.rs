//! The replay server is torch-free: `ldd` of the built `fleet-replay-server` names neither
//! libtorch nor libpython, while the learner (the control) does link libtorch.

use std::path::Path;
use std::process::Command;

/// The shared libraries `binary` loads, as `ldd` prints them.
fn ldd(binary: &Path) -> String {
    let out = Command::new("ldd")
        .arg(binary)
        .output()
        .unwrap_or_else(|e| panic!("running ldd on {}: {e}", binary.display()));
    assert!(
        out.status.success(),
        "ldd {} failed: {out:?}",
        binary.display()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn replay_server_links_neither_libtorch_nor_libpython() {
    let bin = fleetrl_runtime::launch::bin_dir().unwrap();
    let replay = ldd(&bin.join("fleet-replay-server"));
    for forbidden in ["libtorch", "libc10", "libpython"] {
        assert!(
            !replay.contains(forbidden),
            "fleet-replay-server links {forbidden}:\n{replay}"
        );
    }
    let learner = ldd(&bin.join("fleet-learner"));
    assert!(
        learner.contains("libtorch"),
        "the control failed: fleet-learner does not link libtorch:\n{learner}"
    );
}
