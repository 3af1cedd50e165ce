//! `fleetrl train`: one replay server, one learner and N actors on loopback; progress, periodic
//! evaluation of the deterministic policy, the stop condition, and `summary.json`.

use std::net::SocketAddr;
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
    metrics_listen: Option<SocketAddr>,
) -> anyhow::Result<(Option<Summary>, bool)> {
    if config.actors.count == 0 {
        anyhow::bail!(
            "actors.count = 0: `fleetrl train` needs at least one actor to collect experience \
             (set actors.count, e.g. --set actors.count=2)"
        );
    }
    check_local_actors(config.actors.count, local_cores())?;
    let metrics = metrics_listen
        .map(|addr| MetricsPorts::new(addr, config.learner.world_size, config.actors.count))
        .transpose()?;
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
             one address cannot serve them all; `fleetrl train --metrics-listen HOST:PORT` \
             gives each role its own port from PORT up"
        );
    }
    if let Some(metrics) = &metrics {
        eprintln!("[fleetrl] metrics: {}", metrics.describe());
    }
    let started = Instant::now();
    let (mut cluster, addrs) = Cluster::start(
        &config_path,
        &demos_root,
        out,
        config.actors.count,
        config.learner.world_size,
        resume,
        metrics,
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

/// The roles' metrics addresses (`fleetrl train --metrics-listen HOST:PORT`): one host, one port
/// a role from PORT up, the replay server first, then the learner ranks, then the actors. An
/// actor restarted keeps its port.
#[derive(Debug, Clone, Copy)]
pub(super) struct MetricsPorts {
    base: SocketAddr,
    learner_ranks: u32,
    actors: u32,
}

impl MetricsPorts {
    /// Refuses port 0 (the roles would each take a port nobody is told of) and a range that
    /// runs past 65535.
    fn new(base: SocketAddr, learner_ranks: u32, actors: u32) -> anyhow::Result<MetricsPorts> {
        let roles = 1 + u64::from(learner_ranks) + u64::from(actors);
        let last = u64::from(base.port()) + roles - 1;
        anyhow::ensure!(
            base.port() != 0 && last <= u64::from(u16::MAX),
            "--metrics-listen {base}: the {roles} roles (the replay server, {learner_ranks} \
             learner rank(s), {actors} actor(s)) take one port each from {}; give a port in \
             [1, {}]",
            base.port(),
            u64::from(u16::MAX) + 1 - roles
        );
        Ok(MetricsPorts {
            base,
            learner_ranks,
            actors,
        })
    }

    fn at(&self, offset: u32) -> SocketAddr {
        // In range: checked in `new` for every role's offset.
        SocketAddr::new(self.base.ip(), self.base.port() + offset as u16)
    }

    pub(super) fn replay(&self) -> SocketAddr {
        self.at(0)
    }

    pub(super) fn learner(&self, rank: u32) -> SocketAddr {
        self.at(1 + rank)
    }

    pub(super) fn actor(&self, id: u32) -> SocketAddr {
        self.at(1 + self.learner_ranks + id)
    }

    /// Each role's address, for the run's log.
    fn describe(&self) -> String {
        let mut roles = vec![format!("replay-server {}", self.replay())];
        roles.extend((0..self.learner_ranks).map(|rank| match rank {
            0 => format!("learner {}", self.learner(0)),
            _ => format!("learner-rank-{rank} {}", self.learner(rank)),
        }));
        roles.extend((0..self.actors).map(|id| format!("actor-{id} {}", self.actor(id))));
        roles.join(", ")
    }
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

    /// The replay server, then the learner ranks, then the actors, one port each; port 0 and
    /// a range past 65535 are refused by name.
    #[test]
    fn metrics_ports_follow_the_roles() {
        let base: SocketAddr = "127.0.0.1:9100".parse().unwrap();
        let ports = MetricsPorts::new(base, 2, 3).unwrap();
        assert_eq!(ports.replay().port(), 9100);
        assert_eq!(
            (ports.learner(0).port(), ports.learner(1).port()),
            (9101, 9102)
        );
        assert_eq!((ports.actor(0).port(), ports.actor(2).port()), (9103, 9105));
        assert_eq!(
            ports.describe(),
            "replay-server 127.0.0.1:9100, learner 127.0.0.1:9101, learner-rank-1 \
             127.0.0.1:9102, actor-0 127.0.0.1:9103, actor-1 127.0.0.1:9104, actor-2 \
             127.0.0.1:9105"
        );
        assert!(MetricsPorts::new("127.0.0.1:65530".parse().unwrap(), 1, 4).is_ok());
        let error = MetricsPorts::new("127.0.0.1:65531".parse().unwrap(), 1, 4)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("--metrics-listen 127.0.0.1:65531") && error.contains("[1, 65530]"),
            "{error}"
        );
        let error = MetricsPorts::new("127.0.0.1:0".parse().unwrap(), 1, 1)
            .unwrap_err()
            .to_string();
        assert!(error.contains("--metrics-listen 127.0.0.1:0"), "{error}");
    }

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
