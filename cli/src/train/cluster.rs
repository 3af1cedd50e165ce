//! The running cluster: the replay server, the learner and the actors as child processes,
//! restarted actors, and the learner's address written for `fleetrl set`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

use super::{LEARNER_ADDR_FILE, START_PATIENCE};
use fleetrl_runtime::launch::{self, Role};

/// How long a stopping role may take to exit before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(30);
/// Actor restarts, all actors together, before the launcher gives up on the run.
const MAX_ACTOR_RESTARTS: u32 = 10;

/// The running cluster.
pub(super) struct Cluster {
    pub(super) replay: Role,
    pub(super) learner: Role,
    pub(super) actors: Vec<Role>,
    pub(super) actor_args: Vec<String>,
    pub(super) logs: PathBuf,
    pub(super) restarts: u32,
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
        resume: Option<&str>,
    ) -> anyhow::Result<(Cluster, SocketAddrs)> {
        let logs = out.join("logs");
        std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
        let config = s(config_path.display());
        let replay_log = logs.join("replay-server.log");
        let mut replay = Role::start(
            "replay-server",
            "fleet-replay-server",
            &[
                s("--listen"),
                s("127.0.0.1:0"),
                s("--demos-root"),
                s(demos_root.display()),
            ],
            &replay_log,
        )
        .await?;
        let replay_addr = replay.listening_addr(START_PATIENCE, &replay_log).await?;
        let mut learner_args = vec![
            s("--listen"),
            s("127.0.0.1:0"),
            s("--replay"),
            s(replay_addr),
            s("--config"),
            config,
            s("--run-dir"),
            s(out.display()),
        ];
        if let Some(resume) = resume {
            learner_args.extend([s("--resume"), s(resume)]);
        }
        let learner_log = logs.join("learner.log");
        let mut learner =
            Role::start("learner", "fleet-learner", &learner_args, &learner_log).await?;
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
            actors: Vec::new(),
            actor_args,
            logs,
            restarts: 0,
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
        let log = self.logs.join(format!("actor-{id}.log"));
        Role::start(&format!("actor-{id}"), "fleet-actor", &args, &log).await
    }

    /// Fails if a server died; restarts actors that died (they are stateless).
    pub(super) async fn supervise(&mut self) -> anyhow::Result<()> {
        for role in [&mut self.replay, &mut self.learner] {
            if let Some(status) = role.exited() {
                let log = self.logs.join(format!("{}.log", role.name));
                anyhow::bail!(
                    "{} exited ({status}){}",
                    role.name,
                    launch::quote_log(&role.name, &log)
                );
            }
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
        self.learner.stop(STOP_GRACE).await;
        self.replay.stop(STOP_GRACE).await;
    }
}

pub(super) struct SocketAddrs {
    pub(super) learner: String,
}
