//! `fleetrl train`: one replay server, one learner and N actors on loopback; progress, periodic
//! evaluation of the deterministic policy, the stop condition, and `summary.json`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use fleetrl_core::checkpoint::{self, Checkpoint};
use fleetrl_core::config::RunConfig;
use fleetrl_proto::v1::learner_service_client::LearnerServiceClient;
use fleetrl_proto::v1::{
    GetStatusRequest, LearnerStatus, SaveCheckpointRequest, SetParameterRequest,
};
use fleetrl_runtime::net;
use fleetrl_runtime::net::Channel;
use tokio::sync::{oneshot, watch};

use crate::eval_cmd::evaluate_checkpoint;
use crate::progress::Progress;
use crate::summary::{success_text, Evaluation, Summary};
use fleetrl_runtime::launch::{self, Role};

const START_PATIENCE: Duration = Duration::from_secs(120);
const STOP_GRACE: Duration = Duration::from_secs(30);
/// How long a failed call waits for the role behind it to exit (the learner drains for a few
/// seconds after a failure before it does).
const ROLE_EXIT_PATIENCE: Duration = Duration::from_secs(10);
/// How long a launcher that has lost its learner waits for a signal of its own before it calls
/// the loss a failure: a scheduler that signals every process of the job stops the learner at
/// about the moment the launcher's signal comes, and on a loaded machine the launcher can see
/// the learner gone first by more than a second (a test signalling 400 ms apart saw it fail
/// with a one-second wait, beside two benchmark lanes on 2 cores).
const SIGNAL_GRACE: Duration = Duration::from_secs(3);
const MAX_ACTOR_RESTARTS: u32 = 10;
/// How long a run may show no movement at all (no env step reported, none trained, no update)
/// before the launcher says so.
const STALL_WARNING: Duration = Duration::from_secs(120);

/// The running cluster.
struct Cluster {
    replay: Role,
    learner: Role,
    actors: Vec<Role>,
    actor_args: Vec<String>,
    logs: PathBuf,
    restarts: u32,
}

fn s(x: impl ToString) -> String {
    x.to_string()
}

impl Cluster {
    async fn start(
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

    async fn start_actor(&self, id: u32) -> anyhow::Result<Role> {
        let mut args = self.actor_args.clone();
        args.extend([s("--actor-id"), s(id)]);
        let log = self.logs.join(format!("actor-{id}.log"));
        Role::start(&format!("actor-{id}"), "fleet-actor", &args, &log).await
    }

    /// Fails if a server died; restarts actors that died (they are stateless).
    async fn supervise(&mut self) -> anyhow::Result<()> {
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

    async fn stop(mut self) {
        futures::future::join_all(self.actors.iter_mut().map(|a| a.stop(STOP_GRACE))).await;
        self.learner.stop(STOP_GRACE).await;
        self.replay.stop(STOP_GRACE).await;
    }
}

struct SocketAddrs {
    learner: String,
}

/// Why a run ended.
enum Outcome {
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
    let demos_root = demos_root(&mut config.ppod)?;
    let config_path = out.join("config.toml");
    std::fs::write(&config_path, config.to_toml())
        .with_context(|| format!("writing {}", config_path.display()))?;
    let started = Instant::now();
    let (mut cluster, addrs) =
        Cluster::start(&config_path, &demos_root, out, config.actors.count, resume).await?;
    let channel = net::connect(&addrs.learner, START_PATIENCE).await?;
    let mut learner = LearnerServiceClient::new(channel);
    let mut run = Running {
        config: &config,
        cluster: &mut cluster,
        learner: &mut learner,
        progress: Progress::new(config.stop.total_env_steps),
        last_status: LearnerStatus::default(),
        interrupts: watch_interrupts()?,
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

/// The file in a run's output directory that holds its learner's `host:port` while it runs.
const LEARNER_ADDR_FILE: &str = "learner.addr";

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

/// Locks the run directory `out` for this launcher, so that a second `fleetrl train` into it
/// is refused instead of overwriting this run's token, config and logs and resuming from the
/// checkpoints it is writing. The lock holds while the returned `out/run.lock` stays open.
fn lock_run_dir(out: &Path) -> anyhow::Result<std::fs::File> {
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
fn run_token(out: &Path) -> anyhow::Result<()> {
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

type LoopResult = (Outcome, Vec<Evaluation>, LearnerStatus);

/// A run between its start and its summary: what the loop, the evaluations and the finish
/// share.
struct Running<'a> {
    config: &'a RunConfig,
    cluster: &'a mut Cluster,
    learner: &'a mut LearnerServiceClient<Channel>,
    progress: Progress,
    /// How many Ctrl-Cs and SIGTERMs the launcher has received (see [`watch_interrupts`]).
    interrupts: watch::Receiver<u32>,
    /// The learner's status as last read.
    last_status: LearnerStatus,
    started: Instant,
}

/// Counts the Ctrl-Cs (SIGINT) and SIGTERMs (what `kill`, `timeout` and job schedulers send)
/// the launcher receives. The first ends training (the run then evaluates its latest
/// checkpoint and writes the summary); a second skips what is left of that evaluation. Either
/// one also ends an evaluation in progress, so that an env stuck in `step` cannot hold the run.
fn watch_interrupts() -> anyhow::Result<watch::Receiver<u32>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut sigint = signal(SignalKind::interrupt()).context("listening for Ctrl-C")?;
    let mut sigterm = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
    let (tx, rx) = watch::channel(0);
    tokio::spawn(async move {
        loop {
            let got = tokio::select! {
                got = sigint.recv() => got,
                got = sigterm.recv() => got,
            };
            if got.is_none() {
                break;
            }
            tx.send_modify(|n| *n += 1);
        }
    });
    Ok(rx)
}

/// Resolves once the launcher has received `n` signals (Ctrl-C or SIGTERM) in all; never if
/// it cannot listen for them.
async fn signalled(interrupts: &mut watch::Receiver<u32>, n: u32) {
    if interrupts.wait_for(|&got| got >= n).await.is_err() {
        std::future::pending::<()>().await;
    }
}

impl Running<'_> {
    /// Trains until a stop condition: the outcome, the evaluations made, the last status.
    async fn train(&mut self) -> anyhow::Result<LoopResult> {
        let config = self.config;
        let target = config.stop.target_return;
        let mut evaluations = Vec::new();
        let mut next_eval = config.eval_interval_env_steps();
        let mut ticker = tokio::time::interval(Duration::from_millis(250));
        let mut stall = StallWatch::new(Instant::now());
        loop {
            tokio::select! {
                _ = signalled(&mut self.interrupts, 1) => return self.interrupted(evaluations).await,
                _ = ticker.tick() => {}
            }
            let status = match self.observe().await {
                Ok(status) => status,
                Err(e) => return self.failed(e, evaluations).await,
            };
            self.progress.update(&status);
            if let Some(still) = stall.check(&status, Instant::now()) {
                self.progress.println(&format!(
                    "warning: nothing has moved for {} s (no env step reported or trained, no \
                     update): an env stuck in `step`, a role waiting on another, or one update \
                     that takes this long; the roles' logs are in {}",
                    still.as_secs(),
                    self.cluster.logs.display()
                ));
            }
            let steps = status.env_steps_trained;
            if steps >= config.stop.total_env_steps {
                self.progress.finish("step budget reached");
                return Ok((Outcome::Budget, evaluations, status));
            }
            let wall = config.stop.max_wall_seconds;
            if wall > 0.0 && self.started.elapsed().as_secs_f64() >= wall {
                self.progress.finish("wall-clock limit reached");
                return Ok((Outcome::WallClock, evaluations, status));
            }
            let on_target = config.eval.on_target_training_return
                && target.is_some_and(|t| status.recent_return >= t);
            let evaluated_at = evaluations.last().map_or(0, |e: &Evaluation| e.env_steps);
            let fresh = steps > evaluated_at;
            if fresh && status.updates > 0 && (steps >= next_eval || on_target) {
                next_eval = steps + config.eval_interval_env_steps();
                let eval = match self.evaluate(true).await {
                    Ok(Some(eval)) => eval,
                    Ok(None) => return self.interrupted(evaluations).await,
                    Err(e) => return self.failed(e, evaluations).await,
                };
                self.report(&eval);
                // The run waited for the evaluation; that was not a stall.
                stall = StallWatch::new(Instant::now());
                let solved = target.is_some_and(|t| eval.mean_return >= t);
                evaluations.push(eval);
                if solved {
                    self.progress.finish("solved");
                    return Ok((Outcome::Solved, evaluations, status));
                }
            }
        }
    }

    /// Fails if a server died (restarting actors that did), else the learner's status.
    async fn observe(&mut self) -> anyhow::Result<LearnerStatus> {
        self.cluster.supervise().await?;
        self.status().await
    }

    /// Training failed with `error`: an interrupt after all if a signal arrives with it (a
    /// signal to every process of the run stops the learner at about the moment it reaches the
    /// launcher, which may see the learner gone first), else a failure with the exit of the
    /// role that failed if it exits soon, else with the error.
    async fn failed(
        &mut self,
        error: anyhow::Error,
        evaluations: Vec<Evaluation>,
    ) -> anyhow::Result<LoopResult> {
        let signal = signalled(&mut self.interrupts, 1);
        if tokio::time::timeout(SIGNAL_GRACE, signal).await.is_ok() {
            return self.interrupted(evaluations).await;
        }
        // A server that is stopping refuses connections before its process exits; its exit
        // and log say why (a diverged update, say) better than "connection refused" does.
        let waited = Instant::now();
        let mut error = error;
        while waited.elapsed() < ROLE_EXIT_PATIENCE {
            if let Err(exit) = self.cluster.supervise().await {
                error = exit;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let status = self.last_status.clone();
        Ok((Outcome::Failed(error), evaluations, status))
    }

    async fn status(&mut self) -> anyhow::Result<LearnerStatus> {
        let status = self
            .learner
            .get_status(GetStatusRequest {})
            .await?
            .into_inner();
        self.last_status = status.clone();
        Ok(status)
    }

    /// The end of training by Ctrl-C or SIGTERM. A signal sent to every process of the run
    /// (a job scheduler's, systemd's) stops the learner too, after its final checkpoint: the
    /// summary then holds its last status as the launcher read it.
    async fn interrupted(&mut self, evaluations: Vec<Evaluation>) -> anyhow::Result<LoopResult> {
        let status = match self.status().await {
            Ok(status) => status,
            Err(_) => self.last_status.clone(),
        };
        self.progress
            .finish("interrupted: evaluating the latest checkpoint (Ctrl-C again to skip it)");
        Ok((Outcome::Interrupted, evaluations, status))
    }

    /// Prints an evaluation's result.
    fn report(&self, eval: &Evaluation) {
        let what = match eval.adaptation_returns.as_slice() {
            [before, _, ..] => format!(
                "adapted return {:.2} (before adapting {before:.2})",
                eval.mean_return
            ),
            // A task-agnostic run (`tasks.multi_task`) plays the held-out tasks once each,
            // with nothing to adapt.
            [_] => format!(
                "return {:.2} on {} held-out tasks",
                eval.mean_return, self.config.tasks.num_test
            ),
            [] => format!(
                "mean return {:.1} over {} episodes",
                eval.mean_return, self.config.eval.episodes
            ),
        };
        let controls = [eval.success_rate_no_context, eval.success_rate_other_task];
        let success = eval
            .success_rate
            .map(|s| format!(", success {}", success_text(s, controls, 0)))
            .unwrap_or_default();
        self.progress.println(&format!(
            "eval at {} steps: {what}{success} (version {})",
            eval.env_steps, eval.policy_version
        ));
    }

    /// Checkpoints the learner now and evaluates exactly that checkpoint, still supervising
    /// the cluster meanwhile (and, while `training`, showing its progress); `None` if a Ctrl-C
    /// came first.
    ///
    /// The evaluation plays on a thread of its own, which an interrupt leaves behind: an env
    /// stuck in `step` must not hold the run, and the process exits soon after.
    async fn evaluate(&mut self, training: bool) -> anyhow::Result<Option<Evaluation>> {
        let interrupts = *self.interrupts.borrow() + 1;
        let saved = self
            .learner
            .save_checkpoint(SaveCheckpointRequest {})
            .await?
            .into_inner();
        let env_steps = self.status().await?.env_steps_trained;
        let path = PathBuf::from(&saved.path);
        let episodes = self.config.eval.episodes as usize;
        let (done, mut result) = oneshot::channel();
        std::thread::Builder::new()
            .name("evaluation".into())
            .spawn(move || {
                let _ = done.send(evaluate_checkpoint(&path, episodes, None, None, None, &[]));
            })
            .context("starting the evaluation's thread")?;
        let begun = Instant::now();
        let mut warned = false;
        let mut ticker = tokio::time::interval(Duration::from_millis(250));
        let (result, _seed) = loop {
            tokio::select! {
                result = &mut result => {
                    break result.context("the evaluation's thread panicked")??;
                }
                _ = signalled(&mut self.interrupts, interrupts) => return Ok(None),
                _ = ticker.tick() => {}
            }
            self.cluster.supervise().await?;
            if training {
                let status = self.status().await?;
                self.progress.update(&status);
            }
            if !warned && begun.elapsed() >= STALL_WARNING {
                warned = true;
                self.progress.println(&format!(
                    "warning: the evaluation of {} has run for {} s; if its env is stuck in \
                     `step`, Ctrl-C stops the run",
                    saved.path,
                    begun.elapsed().as_secs()
                ));
            }
        };
        Ok(Some(Evaluation {
            env_steps,
            policy_version: saved.policy_version,
            mean_return: result.mean(),
            std_return: result.std(),
            success_rate: result.success_rate(),
            success_rate_no_context: result.no_context_success_rate(),
            success_rate_other_task: result.other_task_success_rate(),
            adaptation_returns: result.adaptation,
            wall_seconds: self.started.elapsed().as_secs_f64(),
            checkpoint: saved.path,
        }))
    }

    /// Evaluates the final policy (unless the run was solved by its last evaluation, or
    /// failed) and writes `out/summary.json`. A Ctrl-C during that evaluation skips it: the run
    /// is then interrupted, its summary reports the last evaluation that finished, and there is
    /// no summary if none had. Returns the summary and whether the run was interrupted; a
    /// failed run's error after its summary (of the evaluations before the failure) is written.
    async fn finish(
        &mut self,
        out: &Path,
        mut outcome: Outcome,
        mut evaluations: Vec<Evaluation>,
        status: LearnerStatus,
    ) -> anyhow::Result<(Option<Summary>, bool)> {
        if !matches!(outcome, Outcome::Solved | Outcome::Failed(_)) {
            match self.evaluate(false).await {
                Ok(Some(eval)) => evaluations.push(eval),
                Ok(None) => {
                    self.progress
                        .println("interrupted: the final evaluation is skipped");
                    outcome = Outcome::Interrupted;
                }
                // The signal reached the learner as well, which has written its final
                // checkpoint and gone.
                Err(e) if matches!(outcome, Outcome::Interrupted) => {
                    self.progress.println(&format!(
                        "no final evaluation: the learner has stopped too (was every process \
                         of the run signalled?); its final checkpoint is the newest in {} ({})",
                        out.join("checkpoints").display(),
                        e.root_cause()
                    ));
                }
                Err(e) => return Err(e),
            }
        }
        let interrupted = matches!(outcome, Outcome::Interrupted);
        let (reason, failure) = match outcome {
            Outcome::Solved => ("solved", None),
            Outcome::Budget => ("step_budget", None),
            Outcome::WallClock => ("wall_clock", None),
            Outcome::Interrupted => ("interrupted", None),
            Outcome::Failed(error) => ("failed", Some(error)),
        };
        let Some(last) = evaluations.last() else {
            return failure.map_or(Ok((None, interrupted)), Err);
        };
        let mut summary = Summary::new(
            self.config,
            &status,
            last,
            &evaluations,
            self.started.elapsed().as_secs_f64(),
            reason,
        );
        summary.error = failure.as_ref().map(|e| format!("{e:#}"));
        let path = out.join("summary.json");
        let written = summary.write(&path);
        if let Some(error) = failure {
            // The role's error is what the user needs: a summary that cannot be written is
            // said beside it, not in its place.
            self.progress.println(&match written {
                Ok(()) => format!(
                    "the run failed; its {} evaluations before the failure are in {}",
                    evaluations.len(),
                    path.display()
                ),
                Err(e) => format!(
                    "the run failed, and its {} evaluations could not be written to {}: {e:#}",
                    evaluations.len(),
                    path.display()
                ),
            });
            return Err(error);
        }
        written?;
        Ok((Some(summary), interrupted))
    }
}

/// Notices a run in which nothing moves for [`STALL_WARNING`]: once per stall, again only
/// after something moved.
struct StallWatch {
    /// Env steps reported, env steps trained and updates, as last seen.
    counters: (u64, u64, u64),
    /// When they last changed.
    since: Instant,
    warned: bool,
}

impl StallWatch {
    fn new(now: Instant) -> StallWatch {
        StallWatch {
            counters: (0, 0, 0),
            since: now,
            warned: false,
        }
    }

    /// How long nothing has moved, the first time that reaches [`STALL_WARNING`].
    fn check(&mut self, status: &LearnerStatus, now: Instant) -> Option<Duration> {
        let counters = (
            status.env_steps_reported,
            status.env_steps_trained,
            status.updates,
        );
        if counters != self.counters {
            *self = StallWatch::new(now);
            self.counters = counters;
            return None;
        }
        let still = now.duration_since(self.since);
        if still < STALL_WARNING || self.warned {
            return None;
        }
        self.warned = true;
        Some(still)
    }
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

    fn status(reported: u64, trained: u64, updates: u64) -> LearnerStatus {
        LearnerStatus {
            env_steps_reported: reported,
            env_steps_trained: trained,
            updates,
            ..LearnerStatus::default()
        }
    }

    /// Warned once when nothing moves for the whole period, not before; any counter that
    /// moves starts the period again, and a later stall is warned again.
    #[test]
    fn a_stall_is_warned_once_and_movement_resets_it() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut watch = StallWatch::new(t0);
        assert_eq!(watch.check(&status(10, 0, 0), at(1)), None);
        assert_eq!(watch.check(&status(10, 0, 0), at(100)), None);
        assert_eq!(
            watch.check(&status(10, 0, 0), at(121)),
            Some(Duration::from_secs(120))
        );
        assert_eq!(watch.check(&status(10, 0, 0), at(500)), None);
        // Only the updates move: that is movement.
        assert_eq!(watch.check(&status(10, 0, 1), at(501)), None);
        assert_eq!(watch.check(&status(10, 0, 1), at(600)), None);
        assert_eq!(
            watch.check(&status(10, 0, 1), at(621)),
            Some(Duration::from_secs(120))
        );
    }
}
