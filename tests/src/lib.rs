//! fleetrl-tests: scenarios across the real binaries. [`Sandbox`] starts a replay server, a
//! learner and N actors as separate processes on 127.0.0.1 with ephemeral ports, the way the
//! launcher does, and gives the test clients and handles to kill or add actors.
//!
//! The binaries must be built first (`cargo build --release --bins`; the README's test command
//! does it). One scenario per file in `tests/`. [`compose`] runs the same roles in containers;
//! [`requires`] decides whether a test that needs a tool or a GPU runs, skips or fails; [`rpc`]
//! lists every RPC from the protos' descriptors and calls any of them with any bytes;
//! [`stopping`] sends SIGTERM to a role that waits on a peer.

pub mod cli;
pub mod compose;
pub mod meta;
pub mod requires;
pub mod rpc;
pub mod stopping;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use fleetrl_proto::v1::demo_service_client::DemoServiceClient;
use fleetrl_proto::v1::learner_service_client::LearnerServiceClient;
use fleetrl_proto::v1::replay_service_client::ReplayServiceClient;
use fleetrl_proto::v1::{GetStatusRequest, LearnerStatus};
use fleetrl_runtime::launch::Role;
use fleetrl_runtime::net::Channel;

const PATIENCE: Duration = Duration::from_secs(120);

/// A running cluster of real processes; everything is killed on drop.
pub struct Sandbox {
    /// Scratch directory with the config, logs and checkpoints.
    pub dir: PathBuf,
    /// The replay server's address.
    pub replay_addr: SocketAddr,
    /// The learner's address.
    pub learner_addr: SocketAddr,
    replay: Role,
    learner: Role,
    actors: Vec<Actor>,
    /// Where each role serves Prometheus metrics, when asked for ([`SandboxBuilder::metrics`]).
    metrics: Option<Metrics>,
    /// Extra arguments for every actor ([`SandboxBuilder::actor_arg`]).
    actor_args: Vec<String>,
    /// The learner's command line, for restarts.
    learner_args: Vec<String>,
}

/// The metrics addresses of a sandbox's roles.
#[derive(Debug, Clone, Copy)]
pub struct Metrics {
    /// The replay server's.
    pub replay: SocketAddr,
    /// The learner's.
    pub learner: SocketAddr,
    /// The first actor's.
    pub actor: SocketAddr,
}

/// A running actor and the address of its health service.
struct Actor {
    id: u32,
    role: Role,
    health_addr: SocketAddr,
}

/// Builds a [`Sandbox`].
pub struct SandboxBuilder {
    name: String,
    preset: String,
    actors: u32,
    overrides: Vec<String>,
    metrics: bool,
    actor_args: Vec<String>,
}

impl Sandbox {
    /// A sandbox for the `cartpole-ppo` preset, named after the test.
    pub fn builder(name: &str) -> SandboxBuilder {
        SandboxBuilder {
            name: name.to_string(),
            preset: "cartpole-ppo".to_string(),
            actors: 2,
            overrides: Vec::new(),
            metrics: false,
            actor_args: Vec::new(),
        }
    }

    /// Where the roles serve metrics; `None` unless the sandbox was built with
    /// [`SandboxBuilder::metrics`].
    pub fn metrics(&self) -> Option<Metrics> {
        self.metrics
    }

    /// A learner client.
    pub async fn learner(&self) -> anyhow::Result<LearnerServiceClient<Channel>> {
        let channel =
            fleetrl_runtime::net::connect(&self.learner_addr.to_string(), PATIENCE).await?;
        Ok(LearnerServiceClient::new(channel))
    }

    /// A replay client.
    pub async fn replay(&self) -> anyhow::Result<ReplayServiceClient<Channel>> {
        let channel =
            fleetrl_runtime::net::connect(&self.replay_addr.to_string(), PATIENCE).await?;
        Ok(ReplayServiceClient::new(channel))
    }

    /// The learner's status now.
    pub async fn status(&self) -> anyhow::Result<LearnerStatus> {
        Ok(self
            .learner()
            .await?
            .get_status(GetStatusRequest {})
            .await?
            .into_inner())
    }

    /// Polls the status every 200 ms until `done` holds, failing after `timeout`.
    pub async fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&LearnerStatus) -> bool,
    ) -> anyhow::Result<LearnerStatus> {
        let start = Instant::now();
        loop {
            let status = self.status().await?;
            if done(&status) {
                return Ok(status);
            }
            if start.elapsed() > timeout {
                anyhow::bail!("timed out after {timeout:?} waiting for {what}; last status: {status:?}; logs in {}", self.dir.display());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Starts another actor with this id and waits for its health service.
    pub async fn add_actor(&mut self, id: u32) -> anyhow::Result<()> {
        let log = self.dir.join(format!("actor-{id}.log"));
        let metrics = self.metrics.filter(|_| self.actors.is_empty() && id == 0);
        let mut extra = metrics_args(metrics.map(|m| m.actor));
        extra.extend_from_slice(&self.actor_args);
        let mut role = start_actor(&log, id, self.learner_addr, self.replay_addr, &extra).await?;
        let health_addr = role.listening_addr(PATIENCE, &log).await?;
        self.actors.push(Actor {
            id,
            role,
            health_addr,
        });
        Ok(())
    }

    /// Starts a policy server (`fleet-serve`) on a free loopback port with `args` (its source:
    /// `--checkpoint PATH` or `--follow ADDR`, and any limits), logging to
    /// `serve-<name>.log`; the process (killed on drop) and its address.
    pub async fn start_serve(
        &self,
        name: &str,
        args: &[String],
    ) -> anyhow::Result<(Role, SocketAddr)> {
        let log = self.dir.join(format!("serve-{name}.log"));
        let mut all = vec!["--listen".to_string(), "127.0.0.1:0".to_string()];
        all.extend_from_slice(args);
        let mut role = Role::start(&format!("serve-{name}"), "fleet-serve", &all, &log).await?;
        let addr = role.listening_addr(PATIENCE, &log).await?;
        Ok((role, addr))
    }

    /// Where each actor serves `grpc.health.v1.Health`, by id.
    pub fn actor_health_addrs(&self) -> Vec<(u32, SocketAddr)> {
        self.actors.iter().map(|a| (a.id, a.health_addr)).collect()
    }

    /// SIGKILLs the actor with this id, as a crash would.
    pub async fn kill_actor(&mut self, id: u32) -> anyhow::Result<()> {
        let at = self
            .actors
            .iter()
            .position(|a| a.id == id)
            .context("no such actor")?;
        let mut actor = self.actors.remove(at);
        actor.role.kill().await;
        Ok(())
    }

    /// SIGKILLs the replay server, as a crash would, and starts a new one (no checkpoint: it
    /// comes back empty) on the same address.
    pub async fn crash_and_restart_replay(&mut self) -> anyhow::Result<()> {
        self.replay.kill().await;
        let log = self.dir.join("replay-server-restarted.log");
        let mut args = vec!["--listen".to_string(), self.replay_addr.to_string()];
        args.extend(metrics_args(self.metrics.map(|m| m.replay)));
        let mut replay = Role::start("replay-server", "fleet-replay-server", &args, &log).await?;
        let addr = replay.listening_addr(PATIENCE, &log).await?;
        anyhow::ensure!(
            addr == self.replay_addr,
            "restarted on {addr}, not {}",
            self.replay_addr
        );
        self.replay = replay;
        Ok(())
    }

    /// SIGKILLs the learner, as a crash would, and starts a new one on the same address that
    /// resumes from the newest checkpoint (`--resume latest`).
    pub async fn crash_and_resume_learner(&mut self) -> anyhow::Result<()> {
        self.learner.kill().await;
        self.resume_learner().await
    }

    /// SIGTERMs the learner, as an orchestrator rolling it would (it writes a final
    /// checkpoint), and starts a new one on the same address that resumes from it.
    pub async fn restart_learner(&mut self) -> anyhow::Result<()> {
        self.learner.stop(Duration::from_secs(60)).await;
        self.resume_learner().await
    }

    async fn resume_learner(&mut self) -> anyhow::Result<()> {
        let mut args = self.learner_args.clone();
        let listen = args
            .iter()
            .position(|a| a == "--listen")
            .context("a --listen flag")?;
        args[listen + 1] = self.learner_addr.to_string();
        args.extend(["--resume".to_string(), "latest".to_string()]);
        let log = self.dir.join("learner-resumed.log");
        let mut learner = Role::start("learner", "fleet-learner", &args, &log).await?;
        let addr = learner.listening_addr(PATIENCE, &log).await?;
        anyhow::ensure!(
            addr == self.learner_addr,
            "resumed on {addr}, not {}",
            self.learner_addr
        );
        self.learner = learner;
        Ok(())
    }

    /// SIGKILLs the learner, as a crash would.
    pub async fn kill_learner(&mut self) {
        self.learner.kill().await;
    }

    /// Waits up to `timeout` for the actor with this id to exit; its exit status.
    pub async fn wait_actor_exit(
        &mut self,
        id: u32,
        timeout: Duration,
    ) -> anyhow::Result<std::process::ExitStatus> {
        let actor = self
            .actors
            .iter_mut()
            .find(|a| a.id == id)
            .context("no such actor")?;
        let start = Instant::now();
        loop {
            if let Some(status) = actor.role.exited() {
                return Ok(status);
            }
            if start.elapsed() > timeout {
                anyhow::bail!(
                    "actor {id} still running after {timeout:?}; logs in {}",
                    self.dir.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGTERMs the learner, as an orchestrator stopping it would, and waits up to `grace` for
    /// it to exit (SIGKILL after that); how long it took.
    pub async fn terminate_learner(&mut self, grace: Duration) -> Duration {
        let start = Instant::now();
        self.learner.stop(grace).await;
        start.elapsed()
    }

    /// The learner's exit status, once it has exited.
    pub fn learner_exited(&mut self) -> Option<std::process::ExitStatus> {
        self.learner.exited()
    }

    /// The learner's and the replay server's process ids, while they run.
    pub fn pids(&self) -> (Option<u32>, Option<u32>) {
        (self.learner.pid(), self.replay.pid())
    }

    /// Fails if a server process has exited.
    pub fn check_servers(&mut self) -> anyhow::Result<()> {
        for role in [&mut self.replay, &mut self.learner] {
            if let Some(status) = role.exited() {
                anyhow::bail!(
                    "{} exited with {status}; logs in {}",
                    role.name,
                    self.dir.display()
                );
            }
        }
        Ok(())
    }
}

async fn start_actor(
    log: &Path,
    id: u32,
    learner: SocketAddr,
    replay: SocketAddr,
    extra: &[String],
) -> anyhow::Result<Role> {
    let mut args = vec![
        "--learner".to_string(),
        learner.to_string(),
        "--replay".to_string(),
        replay.to_string(),
        "--actor-id".to_string(),
        id.to_string(),
        "--health-listen".to_string(),
        "127.0.0.1:0".to_string(),
    ];
    args.extend_from_slice(extra);
    Role::start(&format!("actor-{id}"), "fleet-actor", &args, log).await
}

/// `--metrics-listen ADDR`, or nothing.
fn metrics_args(addr: Option<SocketAddr>) -> Vec<String> {
    addr.map(|a| vec!["--metrics-listen".to_string(), a.to_string()])
        .unwrap_or_default()
}

/// Polls the `grpc.health.v1.Health` service at `addr` every 20 ms until it reports `want`,
/// failing after `timeout`.
pub async fn wait_health(
    addr: SocketAddr,
    want: tonic_health::pb::health_check_response::ServingStatus,
    timeout: Duration,
) -> anyhow::Result<()> {
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;
    let channel = fleetrl_runtime::net::connect(&addr.to_string(), PATIENCE).await?;
    let mut client = HealthClient::new(channel);
    let started = Instant::now();
    loop {
        let request = HealthCheckRequest {
            service: String::new(),
        };
        let status = client.check(request).await?.into_inner().status;
        if status == want as i32 {
            return Ok(());
        }
        anyhow::ensure!(
            started.elapsed() < timeout,
            "{addr} never reported {want:?} (last: {status})"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A path under the system's temporary directory for one test's files: `STEM-PID-N`, with N
/// counting the calls in this process, so tests running side by side in one binary never share
/// a directory (a shared one makes the second learner refuse the first one's run directory).
/// Whatever an earlier process left at that path is removed.
pub fn scratch(stem: &str) -> PathBuf {
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("{stem}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&path);
    let _ = std::fs::remove_file(&path);
    path
}

/// A role's log without its colours (`ESC [ ... m`), so that `key=value` reads as such.
pub fn read_log(path: &Path) -> String {
    let log = std::fs::read_to_string(path).unwrap_or_default();
    let mut plain = String::with_capacity(log.len());
    let mut chars = log.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            chars.by_ref().find(|&c| c == 'm');
        } else {
            plain.push(c);
        }
    }
    plain
}

/// Waits for `child` to exit, at most `limit`; its status and how long that took.
pub fn wait_exit(
    child: &mut std::process::Child,
    limit: Duration,
) -> (Option<std::process::ExitStatus>, Duration) {
    let started = Instant::now();
    while started.elapsed() < limit {
        if let Ok(Some(status)) = child.try_wait() {
            return (Some(status), started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    (None, started.elapsed())
}

/// A loopback address with a port that was free a moment ago.
fn free_addr() -> anyhow::Result<SocketAddr> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

impl SandboxBuilder {
    /// Number of actors to start with.
    pub fn actors(mut self, n: u32) -> Self {
        self.actors = n;
        self
    }

    /// The preset under `configs/` to start from (default `cartpole-ppo`).
    pub fn preset(mut self, name: &str) -> Self {
        self.preset = name.to_string();
        self
    }

    /// A config override, `dotted.key=value`.
    pub fn set(mut self, assignment: &str) -> Self {
        self.overrides.push(assignment.to_string());
        self
    }

    /// An extra command-line argument for every actor.
    pub fn actor_arg(mut self, arg: &str) -> Self {
        self.actor_args.push(arg.to_string());
        self
    }

    /// Has the replay server, the learner and the first actor serve Prometheus metrics
    /// ([`Sandbox::metrics`]).
    pub fn metrics(mut self) -> Self {
        self.metrics = true;
        self
    }

    /// Starts the processes and waits until both servers listen. The metrics ports are picked
    /// free before the roles start, so another scenario's server can take one in between (a
    /// CI run saw an actor refused with "Address already in use"): such a start is tried
    /// again with new ports, up to three times.
    pub async fn start(self) -> anyhow::Result<Sandbox> {
        let mut tries = 0;
        loop {
            tries += 1;
            match self.start_once().await {
                Err(e) if tries < 3 && format!("{e:#}").contains("Address already in use") => {
                    eprintln!("a port was taken meanwhile, starting again: {e:#}");
                }
                started => return started,
            }
        }
    }

    async fn start_once(&self) -> anyhow::Result<Sandbox> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let dir = scratch(&format!("fleetrl-{}", self.name));
        std::fs::create_dir_all(&dir)?;
        let config = fleetrl_core::config::RunConfig::load(
            &root
                .join(format!("configs/{}.toml", self.preset))
                .display()
                .to_string(),
            &self.overrides,
        )?;
        let config_path = dir.join("config.toml");
        std::fs::write(&config_path, config.to_toml())?;
        let cfg = config_path.display().to_string();
        let s = |x: &str| x.to_string();
        let metrics = if self.metrics {
            Some(Metrics {
                replay: free_addr()?,
                learner: free_addr()?,
                actor: free_addr()?,
            })
        } else {
            None
        };
        let replay_log = dir.join("replay-server.log");
        let mut replay_args = vec![s("--listen"), s("127.0.0.1:0")];
        replay_args.extend(metrics_args(metrics.map(|m| m.replay)));
        let mut replay = Role::start(
            "replay-server",
            "fleet-replay-server",
            &replay_args,
            &replay_log,
        )
        .await?;
        let replay_addr = replay.listening_addr(PATIENCE, &replay_log).await?;
        let learner_log = dir.join("learner.log");
        let mut learner_args = vec![
            s("--listen"),
            s("127.0.0.1:0"),
            s("--replay"),
            replay_addr.to_string(),
            s("--config"),
            cfg,
            s("--run-dir"),
            dir.display().to_string(),
        ];
        learner_args.extend(metrics_args(metrics.map(|m| m.learner)));
        let mut learner =
            Role::start("learner", "fleet-learner", &learner_args, &learner_log).await?;
        let learner_addr = learner.listening_addr(PATIENCE, &learner_log).await?;
        let mut sandbox = Sandbox {
            dir,
            replay_addr,
            learner_addr,
            replay,
            learner,
            actors: Vec::new(),
            metrics,
            actor_args: self.actor_args.clone(),
            learner_args,
        };
        for id in 0..self.actors {
            sandbox.add_actor(id).await?;
        }
        Ok(sandbox)
    }
}

/// A lone `fleet-replay-server` process serving the tables of a TOML file, for the replay
/// scenarios (persistence, shards).
pub struct ReplayProcess {
    /// Its address.
    pub addr: SocketAddr,
    /// Its log file.
    pub log: PathBuf,
    /// The process.
    pub role: Role,
}

impl ReplayProcess {
    /// Starts a server in `dir` named `name`, declaring the tables of `tables_toml`, with
    /// checkpoints under `checkpoint_dir` (periodic ones off) if given.
    pub async fn start(
        dir: &Path,
        name: &str,
        tables_toml: &str,
        checkpoint_dir: Option<&Path>,
    ) -> anyhow::Result<ReplayProcess> {
        Self::start_with(dir, name, tables_toml, checkpoint_dir, &[]).await
    }

    /// [`ReplayProcess::start`] with more flags (`--demos-root DIR`, say).
    pub async fn start_with(
        dir: &Path,
        name: &str,
        tables_toml: &str,
        checkpoint_dir: Option<&Path>,
        extra: &[String],
    ) -> anyhow::Result<ReplayProcess> {
        std::fs::create_dir_all(dir)?;
        let tables = dir.join(format!("{name}-tables.toml"));
        std::fs::write(&tables, tables_toml)?;
        let log = dir.join(format!("{name}.log"));
        let mut args = vec![
            "--listen".to_string(),
            "127.0.0.1:0".into(),
            "--tables".into(),
            tables.display().to_string(),
        ];
        if let Some(checkpoints) = checkpoint_dir {
            args.extend([
                "--checkpoint-dir".into(),
                checkpoints.display().to_string(),
                "--checkpoint-interval-s".into(),
                "0".into(),
            ]);
        }
        args.extend_from_slice(extra);
        let mut role = Role::start(name, "fleet-replay-server", &args, &log).await?;
        let addr = role.listening_addr(PATIENCE, &log).await?;
        Ok(ReplayProcess { addr, log, role })
    }

    /// A client of this server.
    pub async fn client(&self) -> anyhow::Result<ReplayServiceClient<Channel>> {
        let channel = fleetrl_runtime::net::connect(&self.addr.to_string(), PATIENCE).await?;
        Ok(ReplayServiceClient::new(channel)
            .max_decoding_message_size(fleetrl_runtime::net::MAX_MESSAGE_BYTES))
    }

    /// A client of this server's demo service (PPO+D's demo buffers).
    pub async fn demos(&self) -> anyhow::Result<DemoServiceClient<Channel>> {
        let channel = fleetrl_runtime::net::connect(&self.addr.to_string(), PATIENCE).await?;
        Ok(DemoServiceClient::new(channel))
    }

    /// The server's info on `table`.
    pub async fn info(&self, table: &str) -> anyhow::Result<fleetrl_proto::v1::TableInfo> {
        let tables = self
            .client()
            .await?
            .info(fleetrl_proto::v1::InfoRequest {})
            .await?
            .into_inner()
            .tables;
        tables
            .into_iter()
            .find(|t| t.name == table)
            .with_context(|| format!("no table `{table}` on {}", self.addr))
    }
}

/// Runs `fleetrl train --config PRESET --set ...` to completion (from the repository root,
/// output in a fresh temporary directory), returning its exit status, stderr and, when it
/// succeeded, its `summary.json`.
pub fn train_preset(
    name: &str,
    preset: &str,
    overrides: &[&str],
    env: &[(&str, &str)],
) -> anyhow::Result<(std::process::ExitStatus, String, Option<serde_json::Value>)> {
    let out = crate::scratch(&format!("fleetrl-{name}"));
    let mut cmd = cli::fleetrl_command(&["train", "--config", preset]);
    for o in overrides {
        cmd.args(["--set", o]);
    }
    cmd.envs(env.iter().copied());
    let run = cmd.arg("--out").arg(&out).output()?;
    let mut stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    if !run.status.success() {
        // The launcher points at the failing role's log; keep what it says.
        for entry in std::fs::read_dir(out.join("logs"))
            .into_iter()
            .flatten()
            .flatten()
        {
            stderr.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
        }
    }
    let summary = std::fs::read(out.join("summary.json"))
        .ok()
        .map(|bytes| serde_json::from_slice(&bytes))
        .transpose()?;
    let _ = std::fs::remove_dir_all(&out);
    Ok((run.status, stderr, summary))
}
