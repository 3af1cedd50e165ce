//! A run's directory: its lock, its token, the checkpoint `--resume` names, and the learner's
//! address that `fleetrl set` reads.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use fleetrl_core::checkpoint::{self, Checkpoint};
use fleetrl_proto::v1::learner_service_client::LearnerServiceClient;
use fleetrl_proto::v1::SetParameterRequest;
use fleetrl_runtime::net;

/// The file in a run's output directory that holds its learner's `host:port` while it runs.
pub(super) const LEARNER_ADDR_FILE: &str = "learner.addr";

/// Locks the run directory `out` for this launcher, so that a second `fleetrl train` into it
/// is refused instead of overwriting this run's token, config and logs and resuming from the
/// checkpoints it is writing. The lock holds while the returned `out/run.lock` stays open.
pub(super) fn lock_run_dir(out: &Path) -> anyhow::Result<std::fs::File> {
    fleetrl_runtime::dir_lock::lock(
        out,
        "run.lock",
        "`fleetrl train`",
        "give this run another --out, or wait until that one ends (it resumes from the \
         directory's checkpoints then)",
    )
}

/// The checkpoint `--resume` names for a run into `out`, loaded: none without one (or with
/// `auto` and no checkpoint yet), an error naming what to give when there is nothing to resume
/// (the learner would fail on it too, but only after the launcher had replaced the run's config
/// and token). `latest` and `auto` take the newest that loads, as the learner will.
pub(crate) fn resume_checkpoint(
    out: &Path,
    resume: Option<&str>,
) -> anyhow::Result<Option<Checkpoint>> {
    let checkpoints = out.join("checkpoints");
    match resume {
        None => Ok(None),
        Some("auto") => Ok(checkpoint::load_newest(&checkpoints)?),
        Some("latest") => match checkpoint::load_newest(&checkpoints)? {
            Some(ckpt) => Ok(Some(ckpt)),
            None => anyhow::bail!(
                "--resume latest: no checkpoint under {} (a run resumes from its own --out; \
                 without --resume it starts fresh)",
                checkpoints.display()
            ),
        },
        Some(path) => {
            let path = checkpoint::resolve(Path::new(path)).with_context(|| {
                format!("--resume {path} (or `latest`, the newest of this --out)")
            })?;
            Ok(Some(checkpoint::load(&path)?))
        }
    }
}

/// The run's token: the environment's (`FLEETRL_TOKEN_FILE`, `FLEETRL_TOKEN`), else a fresh
/// random one. Installed for this process and its children, and written to `out/run.token`
/// (mode 0600) for tools that talk to the running cluster.
pub(super) fn run_token(out: &Path) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let token = match net::auth::from_env()? {
        Some(token) => token,
        None => net::auth::Token::random().context("making the run's token")?,
    };
    net::auth::install(Some(token.clone()));
    let path = out.join("run.token");
    let _ = std::fs::remove_file(&path);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("writing {}", path.display()))?;
    writeln!(file, "{}", token.expose()).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// `fleetrl set RUN algo.KEY=VALUE`: asks the run's learner to change a live hyperparameter
/// and prints the change.
pub(crate) async fn set_parameter(
    run: &Path,
    assignment: &str,
    learner: Option<&str>,
) -> anyhow::Result<()> {
    let (key, value) = assignment.split_once('=').with_context(|| {
        format!("`{assignment}`: expected algo.KEY=VALUE, e.g. algo.learning_rate=1e-4")
    })?;
    let addr = match learner {
        Some(addr) => addr.to_string(),
        None => {
            let path = run.join(LEARNER_ADDR_FILE);
            std::fs::read_to_string(&path)
                .with_context(|| {
                    format!(
                        "reading {}: is the run still going? (or pass --learner host:port)",
                        path.display()
                    )
                })?
                .trim()
                .to_string()
        }
    };
    if net::auth::token().is_none() {
        let path = run.join("run.token");
        if let Ok(text) = std::fs::read_to_string(&path) {
            let token = net::auth::Token::new(&text, &path.display().to_string())?;
            net::auth::install(Some(token));
        }
    }
    let channel = net::connect(&addr, Duration::from_secs(10)).await?;
    let changed = LearnerServiceClient::new(channel)
        .set_parameter(SetParameterRequest {
            key: key.trim().to_string(),
            value: value.trim().to_string(),
        })
        .await
        .map_err(|status| anyhow::anyhow!("{}", status.message()))
        .with_context(|| format!("setting {}", key.trim()))?
        .into_inner();
    println!(
        "{}: {} -> {} (from policy version {})",
        key.trim(),
        changed.previous,
        changed.value,
        changed.policy_version
    );
    Ok(())
}
