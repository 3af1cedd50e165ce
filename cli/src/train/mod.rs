//! `fleetrl train`: one replay server, one learner and N actors on loopback; progress, periodic
//! evaluation of the deterministic policy, the stop condition, and `summary.json`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use fleetrl_core::config::RunConfig;
use fleetrl_proto::v1::learner_service_client::LearnerServiceClient;
use fleetrl_proto::v1::LearnerStatus;
use fleetrl_runtime::net;
use fleetrl_runtime::signals::Signals;

use crate::progress::Progress;
use crate::summary::Summary;

mod cluster;
mod run_dir;
mod running;

use cluster::Cluster;
use run_dir::{lock_run_dir, run_token, LEARNER_ADDR_FILE};
pub(crate) use run_dir::{resume_checkpoint, set_parameter};
use running::Running;

/// How long the launcher waits for each role to answer at start.
pub(super) const START_PATIENCE: Duration = Duration::from_secs(120);

/// Why a run ended.
pub(super) enum Outcome {
    Solved,
    Budget,
    WallClock,
    Interrupted,
    /// A role failed (the learner's update diverged, say): the error, reported after the
    /// summary of the evaluations made before it is written.
    Failed(anyhow::Error),
}

/// Runs training to its stop condition and writes `out/summary.json`. Returns the summary
/// (none if the run was interrupted before any evaluation finished) and whether the run was
/// interrupted.
pub(crate) async fn train(
    config: RunConfig,
    out: &Path,
    resume: Option<&str>,
) -> anyhow::Result<(Option<Summary>, bool)> {
    if config.actors.count == 0 {
        anyhow::bail!(
            "actors.count = 0: `fleetrl train` needs at least one actor to collect experience \
             (set actors.count, e.g. --set actors.count=2)"
        );
    }
    check_local_actors(config.actors.count, local_cores())?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let _lock = lock_run_dir(out)?;
    run_token(out)?;
    let mut config = config;
    crate::minari::resolve(&mut config, out)?;
    let demos_root = demos_root(&mut config.ppod)?;
    if config.learner.world_size > 1 {
        // Every rank on this machine: rank 0's store on a free loopback port.
        config.learner.rendezvous = format!("127.0.0.1:{}", cluster::free_loopback_port()?);
    }
    let config_path = out.join("config.toml");
    std::fs::write(&config_path, config.to_toml())
        .with_context(|| format!("writing {}", config_path.display()))?;
    let listen = fleetrl_runtime::telemetry::metrics::LISTEN_ENV;
    if std::env::var_os(listen).is_some() {
        eprintln!(
            "[fleetrl] {listen} is ignored: `fleetrl train` starts every role on this host and \
             one address cannot serve them all; to scrape the roles' metrics, start them \
             yourself with --metrics-listen (docs/deploy.md)"
        );
    }
    let started = Instant::now();
    let (mut cluster, addrs) = Cluster::start(
        &config_path,
        &demos_root,
        out,
        config.actors.count,
        config.learner.world_size,
        resume,
    )
    .await?;
    let channel = net::connect(&addrs.learner, START_PATIENCE).await?;
    let mut learner = LearnerServiceClient::new(channel);
    let mut run = Running {
        config: &config,
        cluster: &mut cluster,
        learner: &mut learner,
        progress: Progress::new(config.stop.total_env_steps),
        last_status: LearnerStatus::default(),
        interrupts: Signals::listen().context("listening for Ctrl-C and SIGTERM")?,
        started,
    };
    let finished = match run.train().await {
        Ok((outcome, evaluations, status)) => run.finish(out, outcome, evaluations, status).await,
        Err(e) => Err(e),
    };
    cluster.stop().await;
    let _ = std::fs::remove_file(out.join(LEARNER_ADDR_FILE));
    finished
}

/// The replay server's `--demos-root` for this config: the directory holding every
/// `ppod.*_dir` it names, which are made absolute (the server refuses names outside its root).
fn demos_root(ppod: &mut fleetrl_core::config::PpodConfig) -> anyhow::Result<PathBuf> {
    let names = [
        &mut ppod.demos_dir,
        &mut ppod.initial_agent_demos_dir,
        &mut ppod.supplementary_dir,
        &mut ppod.target_dir,
    ];
    fleetrl_runtime::confine::absolute_under_one_root(names)
        .context("resolving the ppod.*_dir directories")
}

/// Actor processes `fleetrl train` starts per core of this machine at most. Each holds
/// libtorch (about 200 MB resident) and steps its own envs: more than this many a core only
/// share the cores, while a typo (`actors.count=100000`) would start processes until the
/// machine runs out of memory.
const LOCAL_ACTORS_PER_CORE: u32 = 8;

fn local_cores() -> u32 {
    fleetrl_core::cpu::cores() as u32
}

/// Refuses more actor processes than [`LOCAL_ACTORS_PER_CORE`] times `cores`, saying what
/// to do instead.
fn check_local_actors(count: u32, cores: u32) -> anyhow::Result<()> {
    let most = LOCAL_ACTORS_PER_CORE * cores;
    anyhow::ensure!(
        count <= most,
        "actors.count = {count}: `fleetrl train` starts every actor as a process on this \
         machine, and with {cores} cores it starts at most {most} ({LOCAL_ACTORS_PER_CORE} a \
         core; each holds about 200 MB); step more envs in each (actors.envs_per_actor), or \
         run the actors on other machines (docker-compose or Kubernetes, see the README)"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_actors_are_bounded_by_the_cores() {
        assert!(check_local_actors(16, 2).is_ok());
        let error = check_local_actors(100_000, 2).unwrap_err().to_string();
        assert!(
            error.contains("actors.count = 100000")
                && error.contains("with 2 cores it starts at most 16")
                && error.contains("actors.envs_per_actor"),
            "{error}"
        );
    }
}
