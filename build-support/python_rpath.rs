//! Build script shared by every package that links fleetrl-core: with the `python` feature on
//! anywhere in the build, core links libpython, so each binary and test binary gets a run-time
//! search path to `.venv/libpython` (a link scripts/setup.sh makes to the venv's Python
//! library directory), as `.cargo/config.toml` does for libtorch. Binaries in target/*/ and
//! test binaries in target/*/deps/ both resolve to the project's `.venv`. The learner's build
//! scripts (learner/build.rs, core/build.rs) call `main` from their own.

/// Prints the link argument (this is the whole build script of every other package).
pub(crate) fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!(
            "cargo:rustc-link-arg=-Wl,-rpath,$ORIGIN/../../.venv/libpython:$ORIGIN/../../../.venv/libpython"
        );
    }
    println!("cargo:rerun-if-changed=../build-support/python_rpath.rs");
}
