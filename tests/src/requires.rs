//! Whether a test that needs something this machine may lack runs, skips or fails: the one
//! place that decides.
//!
//! A tool CI installs (docker, kubectl) is required under `CI=true`: its absence fails the
//! test, so a CI image without it cannot pass by skipping. Elsewhere the test skips. A GPU is
//! never required: GPU-only tests skip without one, on CI too. Every skip writes
//! `SKIPPED <test>: <why>` straight to the process's stderr, past the test harness's output
//! capture, so it shows in `cargo test` output even when the test passes.

use std::io::Write;

/// What a test needs from the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// A command-line tool that CI installs (docker, compose, kubectl or kustomize).
    Tool,
    /// A GPU (or a CUDA build of libtorch): optional everywhere.
    Gpu,
}

/// What to do with a test whose need is met or not.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    Run,
    Skip(String),
    Fail(String),
}

/// The decision itself, free of the environment: `missing` says why the need is unmet.
fn verdict(need: Need, missing: Option<String>, ci: bool) -> Verdict {
    match (missing, need) {
        (None, _) => Verdict::Run,
        (Some(why), Need::Tool) if ci => Verdict::Fail(why),
        (Some(why), _) => Verdict::Skip(why),
    }
}

/// Whether this is a CI run (`CI=true`, as GitHub Actions, GitLab and most CI systems set it).
pub fn on_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

/// Whether `test` should run, given why its `need` is unmet (`missing`; `None`: met).
/// `Ok(false)` after printing the skip; an error (failing the test) for a [`Need::Tool`]
/// missing on CI.
pub fn should_run(test: &str, need: Need, missing: Option<String>) -> anyhow::Result<bool> {
    match verdict(need, missing, on_ci()) {
        Verdict::Run => Ok(true),
        Verdict::Skip(why) => {
            let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
            Ok(false)
        }
        Verdict::Fail(why) => {
            anyhow::bail!("{test} needs a tool that CI must install (CI=true): {why}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_tool_fails_on_ci_and_skips_elsewhere() {
        let why = || Some("no docker".to_string());
        assert_eq!(
            verdict(Need::Tool, why(), true),
            Verdict::Fail("no docker".into())
        );
        assert_eq!(
            verdict(Need::Tool, why(), false),
            Verdict::Skip("no docker".into())
        );
        assert_eq!(verdict(Need::Tool, None, true), Verdict::Run);
    }

    #[test]
    fn a_missing_gpu_skips_even_on_ci() {
        let why = Some("no CUDA device".to_string());
        assert_eq!(
            verdict(Need::Gpu, why.clone(), true),
            Verdict::Skip("no CUDA device".into())
        );
        assert_eq!(
            verdict(Need::Gpu, why, false),
            Verdict::Skip("no CUDA device".into())
        );
        assert_eq!(verdict(Need::Gpu, None, false), Verdict::Run);
    }
}
