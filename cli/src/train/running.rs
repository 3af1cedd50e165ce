//! A run between its start and its summary: the loop that watches progress, the periodic
//! evaluations, interrupts, stalls and the finish.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use fleetrl_core::acting::eval::{eval_seed, EvalResult};
use fleetrl_core::config::RunConfig;
use fleetrl_proto::v1::learner_service_client::LearnerServiceClient;
use fleetrl_proto::v1::{GetStatusRequest, LearnerStatus, SaveCheckpointRequest};
use fleetrl_runtime::net::Channel;
use fleetrl_runtime::signals::Signals;
use tokio::sync::oneshot;

use super::{Cluster, Outcome};
use crate::eval_cmd::evaluate_checkpoint;
use crate::progress::Progress;
use crate::summary::{success_text, Confirmation, Evaluation, Summary};

/// How long a failed call waits for the role behind it to exit (the learner drains for a few
/// seconds after a failure before it does).
const ROLE_EXIT_PATIENCE: Duration = Duration::from_secs(10);
/// How long a launcher that has lost its learner waits for a signal of its own before it calls
/// the loss a failure: a scheduler that signals every process of the job stops the learner at
/// about the moment the launcher's signal comes, and on a loaded machine the launcher can see
/// the learner gone first by more than a second (a test signalling 400 ms apart saw it fail
/// with a one-second wait, beside two benchmark lanes on 2 cores).
const SIGNAL_GRACE: Duration = Duration::from_secs(3);
/// How long a run may show no movement at all (no env step reported, none trained, no update)
/// before the launcher says so.
const STALL_WARNING: Duration = Duration::from_secs(120);

pub(super) type LoopResult = (Outcome, Vec<Evaluation>, LearnerStatus);

/// A run between its start and its summary: what the loop, the evaluations and the finish
/// share.
pub(super) struct Running<'a> {
    pub(super) config: &'a RunConfig,
    pub(super) cluster: &'a mut Cluster,
    pub(super) learner: &'a mut LearnerServiceClient<Channel>,
    pub(super) progress: Progress,
    /// The Ctrl-Cs (SIGINT) and SIGTERMs (what `kill`, `timeout` and job schedulers send)
    /// the launcher receives. The first ends training (the run then evaluates its latest
    /// checkpoint and writes the summary); a second skips what is left of that evaluation.
    /// Either one also ends an evaluation in progress, so that an env stuck in `step` cannot
    /// hold the run.
    pub(super) interrupts: Signals,
    /// The learner's status as last read.
    pub(super) last_status: LearnerStatus,
    pub(super) started: Instant,
}

/// When an early evaluation (the training return at the target, `eval.on_target_training_return`)
/// may come: only after the run has trained for as long as the last evaluation took. A policy
/// whose training return hovers at the target would otherwise be evaluated (and, when its 20
/// episodes pass, confirmed on 100 more) on every tick, and those evaluations took the CPU its
/// training needed: on 2 cores, evaluating back to back left about half of it to the actors and
/// the learner. Paced so, evaluations take at most half the wall time; the scheduled ones
/// (`eval.interval_env_steps`) are never held.
#[derive(Debug, Default)]
struct EvalPacing {
    /// The last evaluation's end and how long it took.
    last: Option<(Instant, Duration)>,
}

impl EvalPacing {
    fn ready(&self, now: Instant) -> bool {
        self.last
            .is_none_or(|(ended, took)| now.saturating_duration_since(ended) >= took)
    }

    fn evaluated(&mut self, begun: Instant, ended: Instant) {
        self.last = Some((ended, ended.saturating_duration_since(begun)));
    }
}

impl Running<'_> {
    /// Trains until a stop condition: the outcome, the evaluations made, the last status.
    pub(super) async fn train(&mut self) -> anyhow::Result<LoopResult> {
        let config = self.config;
        let target = config.stop.target_return;
        let mut evaluations = Vec::new();
        let mut next_eval = config.eval_interval_env_steps();
        let mut ticker = tokio::time::interval(Duration::from_millis(250));
        let mut stall = StallWatch::new(Instant::now());
        let mut pacing = EvalPacing::default();
        loop {
            tokio::select! {
                _ = self.interrupts.received(1) => return self.interrupted(evaluations).await,
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
            let due = steps >= next_eval || (on_target && pacing.ready(Instant::now()));
            if fresh && status.updates > 0 && due {
                next_eval = steps + config.eval_interval_env_steps();
                let begun = Instant::now();
                let eval = match self.evaluate(true).await {
                    Ok(Some(eval)) => eval,
                    Ok(None) => return self.interrupted(evaluations).await,
                    Err(e) => return self.failed(e, evaluations).await,
                };
                pacing.evaluated(begun, Instant::now());
                // The run waited for the evaluation; that was not a stall.
                stall = StallWatch::new(Instant::now());
                let solved = eval.solved(target);
                evaluations.push(eval);
                if solved {
                    self.progress.finish("solved");
                    return Ok((Outcome::Solved, evaluations, status));
                }
            }
        }
    }

    /// Fails if a server died (restarting actors that did), else the learner's status.
    pub(super) async fn observe(&mut self) -> anyhow::Result<LearnerStatus> {
        self.cluster.supervise().await?;
        self.status().await
    }

    /// Training failed with `error`: an interrupt after all if a signal arrives with it (a
    /// signal to every process of the run stops the learner at about the moment it reaches the
    /// launcher, which may see the learner gone first), else a failure with the exit of the
    /// role that failed if it exits soon, else with the error.
    pub(super) async fn failed(
        &mut self,
        error: anyhow::Error,
        evaluations: Vec<Evaluation>,
    ) -> anyhow::Result<LoopResult> {
        // Meanwhile the roles that exit are noted in order: the first is the one named.
        let grace = Instant::now();
        while grace.elapsed() < SIGNAL_GRACE {
            let signal = self.interrupts.received(1);
            if tokio::time::timeout(Duration::from_millis(100), signal)
                .await
                .is_ok()
            {
                return self.interrupted(evaluations).await;
            }
            self.cluster.note_exits();
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

    pub(super) async fn status(&mut self) -> anyhow::Result<LearnerStatus> {
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
    pub(super) async fn interrupted(
        &mut self,
        evaluations: Vec<Evaluation>,
    ) -> anyhow::Result<LoopResult> {
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
    /// the cluster meanwhile (and, while `training`, showing its progress); if it reaches the
    /// target, confirms it on `eval.confirm_episodes` start states no evaluation played
    /// before. `None` if a Ctrl-C came first.
    pub(super) async fn evaluate(&mut self, training: bool) -> anyhow::Result<Option<Evaluation>> {
        let saved = self
            .learner
            .save_checkpoint(SaveCheckpointRequest {})
            .await?
            .into_inner();
        let env_steps = self.status().await?.env_steps_trained;
        let eval = &self.config.eval;
        let seed = eval_seed(self.config, saved.policy_version);
        let path = PathBuf::from(&saved.path);
        let Some(result) = self.play(&path, eval.episodes, seed, training).await? else {
            return Ok(None);
        };
        let mut evaluation = Evaluation {
            env_steps,
            policy_version: saved.policy_version,
            seed,
            mean_return: result.mean(),
            std_return: result.std(),
            success_rate: result.success_rate(),
            success_rate_no_context: result.no_context_success_rate(),
            success_rate_other_task: result.other_task_success_rate(),
            adaptation_returns: result.adaptation,
            confirmation: None,
            wall_seconds: self.started.elapsed().as_secs_f64(),
            checkpoint: saved.path,
        };
        if training {
            self.report(&evaluation);
        }
        let Some(target) = self.config.stop.target_return else {
            return Ok(Some(evaluation));
        };
        if evaluation.mean_return < target {
            return Ok(Some(evaluation));
        }
        // The episodes after the evaluation's own: no evaluation of this run (each of another
        // checkpoint, from another hash) or of a neighbouring seed's run played them.
        let confirm_seed = seed + u64::from(eval.episodes);
        self.progress.println(&format!(
            "version {} is at the target {target} ({:.1}): confirming it on {} fresh episodes \
             (seeds from {confirm_seed})",
            evaluation.policy_version, evaluation.mean_return, eval.confirm_episodes
        ));
        let Some(result) = self
            .play(&path, eval.confirm_episodes, confirm_seed, training)
            .await?
        else {
            return Ok(None);
        };
        let confirmation = Confirmation::of(&result, confirm_seed);
        self.progress.println(&format!(
            "{}: mean return {:.2} ± {:.2} (standard error) over {} fresh episodes{}",
            if confirmation.mean_return >= target {
                "confirmed"
            } else {
                "not confirmed"
            },
            confirmation.mean_return,
            confirmation.std_error,
            confirmation.episodes,
            if confirmation.mean_return >= target {
                String::new()
            } else {
                format!(", below the target {target}: training goes on")
            }
        ));
        evaluation.confirmation = Some(confirmation);
        Ok(Some(evaluation))
    }

    /// Plays `episodes` episodes from `seed` with the policy in checkpoint `path`, still
    /// supervising the cluster meanwhile (and, while `training`, showing its progress); `None`
    /// if a Ctrl-C came first.
    ///
    /// The evaluation plays on a thread of its own, which an interrupt leaves behind: an env
    /// stuck in `step` must not hold the run, and the process exits soon after.
    async fn play(
        &mut self,
        path: &Path,
        episodes: u32,
        seed: u64,
        training: bool,
    ) -> anyhow::Result<Option<EvalResult>> {
        let interrupts = self.interrupts.count() + 1;
        let (done, mut result) = oneshot::channel();
        let checkpoint = path.to_path_buf();
        std::thread::Builder::new()
            .name("evaluation".into())
            .spawn(move || {
                let played = evaluate_checkpoint(
                    &checkpoint,
                    episodes as usize,
                    Some(seed),
                    None,
                    None,
                    &[],
                );
                let _ = done.send(played);
            })
            .context("starting the evaluation's thread")?;
        let begun = Instant::now();
        let mut warned = false;
        let mut ticker = tokio::time::interval(Duration::from_millis(250));
        loop {
            tokio::select! {
                result = &mut result => {
                    let (result, _seed) = result.context("the evaluation's thread panicked")??;
                    return Ok(Some(result));
                }
                _ = self.interrupts.received(interrupts) => return Ok(None),
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
                    path.display(),
                    begun.elapsed().as_secs()
                ));
            }
        }
    }

    /// Evaluates the final policy (unless the run was solved by its last evaluation, or
    /// failed) and writes `out/summary.json`. A Ctrl-C during that evaluation skips it: the run
    /// is then interrupted, its summary reports the last evaluation that finished, and there is
    /// no summary if none had. Returns the summary and whether the run was interrupted; a
    /// failed run's error after its summary (of the evaluations before the failure) is written.
    pub(super) async fn finish(
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
pub(super) struct StallWatch {
    /// Env steps reported, env steps trained and updates, as last seen.
    pub(super) counters: (u64, u64, u64),
    /// When they last changed.
    pub(super) since: Instant,
    pub(super) warned: bool,
}

impl StallWatch {
    pub(super) fn new(now: Instant) -> StallWatch {
        StallWatch {
            counters: (0, 0, 0),
            since: now,
            warned: false,
        }
    }

    /// How long nothing has moved, the first time that reaches [`STALL_WARNING`].
    pub(super) fn check(&mut self, status: &LearnerStatus, now: Instant) -> Option<Duration> {
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
    fn an_early_evaluation_waits_as_long_as_the_last_one_took() {
        let start = Instant::now();
        let mut pacing = EvalPacing::default();
        assert!(pacing.ready(start), "the first evaluation is never held");
        let ended = start + Duration::from_secs(6);
        pacing.evaluated(start, ended);
        assert!(!pacing.ready(ended));
        assert!(!pacing.ready(ended + Duration::from_millis(5_999)));
        assert!(pacing.ready(ended + Duration::from_secs(6)));
    }

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
