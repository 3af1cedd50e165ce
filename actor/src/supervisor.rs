//! The one place the actor's tasks and its acting thread are joined. None of them should end
//! while the actor runs: when one does (an error, a panic, a lost learner), the actor logs
//! why, turns health NOT_SERVING, stops the others and exits non-zero, so compose or
//! Kubernetes start a fresh one. SIGTERM stops acting, lets the inserter flush for a grace
//! period and exits 0.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::{Id, JoinSet};
use tonic_health::server::HealthReporter;

use fleetrl_runtime::net::health;

/// The actor's long-running parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    /// The acting thread.
    Acting,
    /// The replay inserter.
    Inserter,
    /// The weight subscription.
    Weights,
    /// The episode reporter.
    Reporter,
    /// The health server.
    Health,
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Part::Acting => "the acting thread",
            Part::Inserter => "the inserter",
            Part::Weights => "the weight subscription",
            Part::Reporter => "the episode reporter",
            Part::Health => "the health server",
        })
    }
}

/// Why the actor stopped on its own.
#[derive(Debug, thiserror::Error)]
#[error("{part} {cause}")]
pub(crate) struct Fault {
    part: Part,
    cause: String,
}

type Outcome = Result<(), anyhow::Error>;

/// The running parts.
#[derive(Default)]
pub(crate) struct Supervisor {
    tasks: JoinSet<Outcome>,
    parts: HashMap<Id, Part>,
}

impl Supervisor {
    /// Runs `task` as `part`.
    pub(crate) fn spawn<E>(
        &mut self,
        part: Part,
        task: impl Future<Output = Result<(), E>> + Send + 'static,
    ) where
        E: Into<anyhow::Error> + 'static,
    {
        let handle = self
            .tasks
            .spawn(async move { task.await.map_err(Into::into) });
        self.parts.insert(handle.id(), part);
    }

    /// Runs `work` on a blocking thread as `part`.
    pub(crate) fn spawn_blocking<E>(
        &mut self,
        part: Part,
        work: impl FnOnce() -> Result<(), E> + Send + 'static,
    ) where
        E: Into<anyhow::Error> + 'static,
    {
        let handle = self
            .tasks
            .spawn_blocking(move || work().map_err(Into::into));
        self.parts.insert(handle.id(), part);
    }

    /// Waits for `shutdown` or for a part to end. On `shutdown`: sets `stop`, gives the acting
    /// thread and the inserter `grace` each to finish, and returns `Ok`. When a part ends
    /// first: health NOT_SERVING, `stop`, what the others say within `grace`, and the
    /// [`Fault`].
    pub(crate) async fn run(
        mut self,
        shutdown: impl Future<Output = ()>,
        stop: watch::Sender<bool>,
        health: HealthReporter,
        grace: Duration,
    ) -> Result<(), Fault> {
        let ended = tokio::select! {
            () = shutdown => None,
            ended = self.tasks.join_next_with_id() => ended,
        };
        let Some(ended) = ended else {
            tracing::info!("shutting down");
            let _ = stop.send(true);
            self.drain(grace, &[Part::Acting, Part::Inserter]).await;
            return Ok(());
        };
        health::set(&health, false).await;
        let _ = stop.send(true);
        let first = self.describe(ended);
        tracing::error!(part = %first.part, cause = %first.cause, "stopping the actor");
        let rest = self.drain(grace, &[Part::Acting, Part::Inserter]).await;
        // A part that merely ended is often the consequence of another's failure (the acting
        // thread fails, so the inserter's input closes and it ends): the failure is the fault.
        let fault = match first.failed {
            true => first,
            false => rest.into_iter().find(|e| e.failed).unwrap_or(first),
        };
        Err(Fault {
            part: fault.part,
            cause: fault.cause,
        })
    }

    /// Waits up to `grace` for each of `parts` (logging how they ended), then aborts the rest.
    /// Returns how those that ended in time ended.
    async fn drain(&mut self, grace: Duration, parts: &[Part]) -> Vec<Ended> {
        let deadline = tokio::time::Instant::now() + grace;
        let mut ended = Vec::new();
        while self.parts.values().any(|p| parts.contains(p)) {
            match tokio::time::timeout_at(deadline, self.tasks.join_next_with_id()).await {
                Ok(Some(outcome)) => {
                    let e = self.describe(outcome);
                    tracing::info!(part = %e.part, cause = %e.cause, "stopped");
                    ended.push(e);
                }
                Ok(None) | Err(_) => break,
            }
        }
        self.tasks.abort_all();
        ended
    }

    fn describe(&mut self, ended: Result<(Id, Outcome), tokio::task::JoinError>) -> Ended {
        let (id, cause, failed) = match ended {
            Ok((id, Ok(()))) => (id, "ended".to_string(), false),
            Ok((id, Err(error))) => (id, format!("failed: {error:#}"), true),
            Err(error) if error.is_panic() => (error.id(), format!("panicked: {error}"), true),
            Err(error) => (error.id(), format!("was cancelled: {error}"), false),
        };
        let part = self
            .parts
            .remove(&id)
            .expect("every task is spawned with its part");
        Ended {
            part,
            cause,
            failed,
        }
    }
}

/// How a part ended.
struct Ended {
    part: Part,
    /// "ended", "failed: ...", "panicked: ...".
    cause: String,
    /// An error or a panic, not a plain end.
    failed: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `supervisor` with no shutdown until a part ends; its fault.
    async fn fault_of(supervisor: Supervisor, grace: Duration) -> Fault {
        let (stop, _stopped) = watch::channel(false);
        let (health, _service) = tonic_health::server::health_reporter();
        supervisor
            .run(std::future::pending(), stop, health, grace)
            .await
            .unwrap_err()
    }

    /// The acting thread fails a moment after the inserter has ended (its input closed): the
    /// actor's fault is the acting thread's error, not "the inserter ended".
    #[tokio::test]
    async fn a_failure_is_the_fault_even_when_another_part_ended_first() {
        let mut supervisor = Supervisor::default();
        supervisor.spawn(Part::Inserter, async { Ok::<_, anyhow::Error>(()) });
        supervisor.spawn_blocking(Part::Acting, || {
            std::thread::sleep(Duration::from_millis(200));
            Err(anyhow::anyhow!("the env broke"))
        });
        let fault = fault_of(supervisor, Duration::from_secs(30)).await;
        assert_eq!(fault.part, Part::Acting);
        assert_eq!(fault.to_string(), "the acting thread failed: the env broke");
    }

    /// When the only part that stopped merely ended, that is the fault.
    #[tokio::test]
    async fn a_part_that_ends_alone_is_the_fault() {
        let mut supervisor = Supervisor::default();
        supervisor.spawn(Part::Reporter, async { Ok::<_, anyhow::Error>(()) });
        supervisor.spawn(Part::Weights, std::future::pending::<anyhow::Result<()>>());
        let fault = fault_of(supervisor, Duration::from_millis(100)).await;
        assert_eq!(fault.to_string(), "the episode reporter ended");
    }
}
