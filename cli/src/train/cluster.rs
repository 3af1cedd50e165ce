//! The running cluster: the replay server, the learner (its rank 0, and the other learner
//! ranks with `learner.world_size > 1`) and the actors as child processes, restarted actors,
//! and the learner's address written for `fleetrl set`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

use super::{MetricsPorts, LEARNER_ADDR_FILE, START_PATIENCE};
use fleetrl_runtime::launch::{self, Role};

/// How long a stopping role may take to exit before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(30);
/// Actor restarts, all actors together, before the launcher gives up on the run.
const MAX_ACTOR_RESTARTS: u32 = 10;

/// The running cluster.
pub(super) struct Cluster {
    pub(super) replay: Role,
    /// The learner the actors and the launcher talk to: rank 0 with several ranks.
    pub(super) learner: Role,
    /// Learner ranks 1.. (`learner.world_size > 1`); each stops the run if it exits.
    pub(super) ranks: Vec<Role>,
    pub(super) actors: Vec<Role>,
    pub(super) actor_args: Vec<String>,
    /// Where each role serves its metrics (`fleetrl train --metrics-listen`), if anywhere.
    metrics: Option<MetricsPorts>,
    pub(super) logs: PathBuf,
    pub(super) restarts: u32,
    /// The first server or learner rank seen exited, and how: when one learner rank dies the
    /// others exit soon after, and the run names the one that went first.
    pub(super) first_exit: Option<(String, std::process::ExitStatus)>,
}

pub(super) fn s(x: impl ToString) -> String {
    x.to_string()
}

impl Cluster {
    pub(super) async fn start(
        config_path: &Path,
        demos_root: &Path,
        out: &Path,
        actors: u32,
        learner_ranks: u32,
        resume: Option<&str>,
        metrics: Option<MetricsPorts>,
    ) -> anyhow::Result<(Cluster, SocketAddrs)> {
        let logs = out.join("logs");
        std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
        let config = s(config_path.display());
        let replay_log = logs.join("replay-server.log");
        let mut replay_args = vec![
            s("--listen"),
            s("127.0.0.1:0"),
            s("--demos-root"),
            s(demos_root.display()),
        ];
        replay_args.extend(metrics_args(metrics.map(|m| m.replay())));
        let mut replay = Role::start(
            "replay-server",
            "fleet-replay-server",
            &replay_args,
            &replay_log,
        )
        .await?;
        let replay_addr = replay.listening_addr(START_PATIENCE, &replay_log).await?;
        let learner_args = |run_dir: &Path, rank: u32| {
            let mut args = vec![
                s("--listen"),
                s("127.0.0.1:0"),
                s("--replay"),
                s(replay_addr),
                s("--config"),
                config.clone(),
                s("--run-dir"),
                s(run_dir.display()),
            ];
            if learner_ranks > 1 {
                args.extend([s("--set"), format!("learner.rank={rank}")]);
            }
            args.extend(metrics_args(metrics.map(|m| m.learner(rank))));
            args
        };
        let mut rank0_args = learner_args(out, 0);
        if let Some(resume) = resume {
            rank0_args.extend([s("--resume"), s(resume)]);
        }
        let learner_log = logs.join("learner.log");
        let mut learner =
            Role::start("learner", "fleet-learner", &rank0_args, &learner_log).await?;
        // The other ranks start fresh in run directories of their own (they never
        // checkpoint); rank 0 broadcasts its weights and state, resumed or not.
        let mut ranks = Vec::new();
        for rank in 1..learner_ranks {
            let name = rank_name(rank);
            let dir = out.join("ranks").join(&name);
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            let log = logs.join(format!("{name}.log"));
            let args = learner_args(&dir, rank);
            ranks.push(Role::start(&name, "fleet-learner", &args, &log).await?);
        }
        let learner_addr = learner.listening_addr(START_PATIENCE, &learner_log).await?;
        // For `fleetrl set` and other tools that talk to the running learner.
        let addr_file = out.join(LEARNER_ADDR_FILE);
        std::fs::write(&addr_file, format!("{learner_addr}\n"))
            .with_context(|| format!("writing {}", addr_file.display()))?;
        let actor_args = vec![
            s("--learner"),
            s(learner_addr),
            s("--replay"),
            s(replay_addr),
            s("--health-listen"),
            s("127.0.0.1:0"),
        ];
        let mut cluster = Cluster {
            replay,
            learner,
            ranks,
            actors: Vec::new(),
            actor_args,
            metrics,
            logs,
            restarts: 0,
            first_exit: None,
        };
        for id in 0..actors {
            let actor = cluster.start_actor(id).await?;
            cluster.actors.push(actor);
        }
        Ok((
            cluster,
            SocketAddrs {
                learner: learner_addr.to_string(),
            },
        ))
    }

    pub(super) async fn start_actor(&self, id: u32) -> anyhow::Result<Role> {
        let mut args = self.actor_args.clone();
        args.extend([s("--actor-id"), s(id)]);
        args.extend(metrics_args(self.metrics.map(|m| m.actor(id))));
        let log = self.logs.join(format!("actor-{id}.log"));
        Role::start(&format!("actor-{id}"), "fleet-actor", &args, &log).await
    }

    /// Remembers the first server or learner rank seen exited; call it often while a run
    /// may be failing, so that the one that went first is the one named.
    pub(super) fn note_exits(&mut self) {
        if self.first_exit.is_some() {
            return;
        }
        let servers = [&mut self.replay, &mut self.learner];
        for role in servers.into_iter().chain(self.ranks.iter_mut()) {
            if let Some(status) = role.exited() {
                self.first_exit = Some((role.name.clone(), status));
                return;
            }
        }
    }

    /// Fails if a server or a learner rank died (naming the first seen, see
    /// [`Cluster::note_exits`]); restarts actors that died (they are stateless).
    pub(super) async fn supervise(&mut self) -> anyhow::Result<()> {
        self.note_exits();
        if let Some((name, status)) = &self.first_exit {
            let world_size = self.ranks.len() + 1;
            let log = self.logs.join(format!("{name}.log"));
            let what = match name.strip_prefix("learner-rank-") {
                Some(rank) => format!("learner rank {rank} (of {world_size})"),
                None if name == "learner" && world_size > 1 => {
                    format!("the learner (rank 0 of {world_size})")
                }
                None => name.clone(),
            };
            anyhow::bail!("{what} exited ({status}){}", launch::quote_log(name, &log));
        }
        for id in 0..self.actors.len() {
            let Some(status) = self.actors[id].exited() else {
                continue;
            };
            self.restarts += 1;
            if self.restarts > MAX_ACTOR_RESTARTS {
                let log = self.logs.join(format!("actor-{id}.log"));
                anyhow::bail!(
                    "actors keep exiting (last: actor-{id}, {status}){}",
                    launch::quote_log(&format!("actor-{id}"), &log)
                );
            }
            tracing::warn!(actor = id, %status, "actor exited; starting a new one");
            self.actors[id] = self.start_actor(id as u32).await?;
        }
        Ok(())
    }

    pub(super) async fn stop(mut self) {
        futures::future::join_all(self.actors.iter_mut().map(|a| a.stop(STOP_GRACE))).await;
        // Rank 0 first: it writes the final checkpoint and leaves the group, which the other
        // ranks follow.
        self.learner.stop(STOP_GRACE).await;
        futures::future::join_all(self.ranks.iter_mut().map(|r| r.stop(STOP_GRACE))).await;
        self.replay.stop(STOP_GRACE).await;
    }
}

/// A role's `--metrics-listen` arguments, none without an address.
fn metrics_args(addr: Option<std::net::SocketAddr>) -> Vec<String> {
    addr.map(|a| vec![s("--metrics-listen"), s(a)])
        .unwrap_or_default()
}

/// The role (and log) name of learner rank `rank` (1 and up; rank 0 is `learner`).
fn rank_name(rank: u32) -> String {
    format!("learner-rank-{rank}")
}

/// A free port on loopback for the learner ranks' rendezvous (rank 0's store listens on it).
pub(super) fn free_loopback_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .context("finding a free loopback port for the learner ranks' rendezvous")?;
    Ok(listener.local_addr()?.port())
}

pub(super) struct SocketAddrs {
    pub(super) learner: String,
}
