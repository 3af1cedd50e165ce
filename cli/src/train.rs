//! `fleetrl train`: one replay server, one learner and N actors on loopback; progress, periodic
//! evaluation of the deterministic policy, the stop condition, and `summary.json`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use fleetrl_core::config::RunConfig;
use fleetrl_proto::v1::learner_service_client::LearnerServiceClient;
use fleetrl_proto::v1::{
    GetStatusRequest, LearnerStatus, SaveCheckpointRequest, SetParameterRequest,
};
use fleetrl_runtime::net;
use fleetrl_runtime::net::Channel;

use crate::eval_cmd::evaluate_checkpoint;
use crate::progress::Progress;
use crate::summary::{Evaluation, Summary};
use fleetrl_runtime::launch::{self, Role};

const START_PATIENCE: Duration = Duration::from_secs(120);
const STOP_GRACE: Duration = Duration::from_secs(30);
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
            &[s("--listen"), s("127.0.0.1:0")],
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
                anyhow::bail!("{} exited ({status}){}", role.name, launch::quote_log(&log));
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
                    launch::quote_log(&log)
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
}

/// Runs training to its stop condition and writes `out/summary.json`. Returns the summary.
pub(crate) async fn train(
    config: RunConfig,
    out: &Path,
    resume: Option<&str>,
) -> anyhow::Result<(Summary, bool)> {
    if config.actors.count == 0 {
        anyhow::bail!(
            "actors.count = 0: `fleetrl train` needs at least one actor to collect experience \
             (set actors.count, e.g. --set actors.count=2)"
        );
    }
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    run_token(out)?;
    let config_path = out.join("config.toml");
    std::fs::write(&config_path, config.to_toml())
        .with_context(|| format!("writing {}", config_path.display()))?;
    let started = Instant::now();
    let (mut cluster, addrs) =
        Cluster::start(&config_path, out, config.actors.count, resume).await?;
    let channel = net::connect(&addrs.learner, START_PATIENCE).await?;
    let mut learner = LearnerServiceClient::new(channel);
    let result = run_loop(&config, &mut cluster, &mut learner, started).await;
    let finished = match result {
        Ok((outcome, evaluations, status)) => {
            finish(
                &config,
                out,
                &mut learner,
                outcome,
                evaluations,
                status,
                started,
            )
            .await
        }
        Err(e) => Err(e),
    };
    cluster.stop().await;
    let _ = std::fs::remove_file(out.join(LEARNER_ADDR_FILE));
    finished
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

async fn run_loop(
    config: &RunConfig,
    cluster: &mut Cluster,
    learner: &mut LearnerServiceClient<Channel>,
    started: Instant,
) -> anyhow::Result<LoopResult> {
    let target = config.stop.target_return;
    let mut progress = Progress::new(config.stop.total_env_steps);
    let mut evaluations = Vec::new();
    let mut next_eval = config.eval_interval_env_steps();
    let mut ticker = tokio::time::interval(Duration::from_millis(250));
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    let mut stall = StallWatch::new(Instant::now());
    loop {
        tokio::select! {
            _ = &mut interrupted => {
                let status = learner.get_status(GetStatusRequest {}).await?.into_inner();
                progress.finish("interrupted");
                return Ok((Outcome::Interrupted, evaluations, status));
            }
            _ = ticker.tick() => {}
        }
        cluster.supervise().await?;
        let status = learner.get_status(GetStatusRequest {}).await?.into_inner();
        progress.update(&status);
        if let Some(still) = stall.check(&status, Instant::now()) {
            progress.println(&format!(
                "warning: nothing has moved for {} s (no env step reported or trained, no \
                 update): an env stuck in `step`, a role waiting on another, or one update that \
                 takes this long; the roles' logs are in {}",
                still.as_secs(),
                cluster.logs.display()
            ));
        }
        let steps = status.env_steps_trained;
        if steps >= config.stop.total_env_steps {
            progress.finish("step budget reached");
            return Ok((Outcome::Budget, evaluations, status));
        }
        let wall = config.stop.max_wall_seconds;
        if wall > 0.0 && started.elapsed().as_secs_f64() >= wall {
            progress.finish("wall-clock limit reached");
            return Ok((Outcome::WallClock, evaluations, status));
        }
        let on_target = config.eval.on_target_training_return
            && target.is_some_and(|t| status.recent_return >= t);
        let evaluated_at = evaluations.last().map_or(0, |e: &Evaluation| e.env_steps);
        let fresh = steps > evaluated_at;
        if fresh && status.updates > 0 && (steps >= next_eval || on_target) {
            next_eval = steps + config.eval_interval_env_steps();
            let eval = evaluate_now(config, learner, started).await?;
            let what = match eval.adaptation_returns.as_slice() {
                [before, _, ..] => format!(
                    "adapted return {:.2} (before adapting {before:.2})",
                    eval.mean_return
                ),
                // A task-agnostic run (`tasks.multi_task`) plays the held-out tasks once each,
                // with nothing to adapt.
                [_] => format!(
                    "return {:.2} on {} held-out tasks",
                    eval.mean_return, config.tasks.num_test
                ),
                [] => format!(
                    "mean return {:.1} over {} episodes",
                    eval.mean_return, config.eval.episodes
                ),
            };
            let success = eval
                .success_rate
                .map(|s| format!(", success {:.0}%", 100.0 * s))
                .unwrap_or_default();
            progress.println(&format!(
                "eval at {} steps: {what}{success} (version {})",
                eval.env_steps, eval.policy_version
            ));
            // The run waited for the evaluation; that was not a stall.
            stall = StallWatch::new(Instant::now());
            let solved = target.is_some_and(|t| eval.mean_return >= t);
            evaluations.push(eval);
            if solved {
                progress.finish("solved");
                return Ok((Outcome::Solved, evaluations, status));
            }
        }
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

/// Checkpoints the learner now and evaluates exactly that checkpoint.
async fn evaluate_now(
    config: &RunConfig,
    learner: &mut LearnerServiceClient<Channel>,
    started: Instant,
) -> anyhow::Result<Evaluation> {
    let saved = learner
        .save_checkpoint(SaveCheckpointRequest {})
        .await?
        .into_inner();
    let env_steps = learner
        .get_status(GetStatusRequest {})
        .await?
        .into_inner()
        .env_steps_trained;
    let path = PathBuf::from(&saved.path);
    let episodes = config.eval.episodes as usize;
    let (result, _seed) =
        tokio::task::spawn_blocking(move || evaluate_checkpoint(&path, episodes, None, None, None))
            .await??;
    Ok(Evaluation {
        env_steps,
        policy_version: saved.policy_version,
        mean_return: result.mean(),
        std_return: result.std(),
        success_rate: result.success_rate(),
        adaptation_returns: result.adaptation,
        wall_seconds: started.elapsed().as_secs_f64(),
        checkpoint: saved.path,
    })
}

async fn finish(
    config: &RunConfig,
    out: &Path,
    learner: &mut LearnerServiceClient<Channel>,
    outcome: Outcome,
    mut evaluations: Vec<Evaluation>,
    status: LearnerStatus,
    started: Instant,
) -> anyhow::Result<(Summary, bool)> {
    let needs_final_eval = !matches!(outcome, Outcome::Solved);
    if needs_final_eval {
        evaluations.push(evaluate_now(config, learner, started).await?);
    }
    let last = evaluations
        .last()
        .context("at least one evaluation was made")?;
    let reason = match outcome {
        Outcome::Solved => "solved",
        Outcome::Budget => "step_budget",
        Outcome::WallClock => "wall_clock",
        Outcome::Interrupted => "interrupted",
    };
    let summary = Summary::new(
        config,
        &status,
        last,
        &evaluations,
        started.elapsed().as_secs_f64(),
        reason,
    );
    summary.write(&out.join("summary.json"))?;
    Ok((summary, matches!(outcome, Outcome::Interrupted)))
}

#[cfg(test)]
mod tests {
    use super::*;

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
