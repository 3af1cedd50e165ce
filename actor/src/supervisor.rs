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

use crate::health;

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
        let (part, cause) = self.describe(ended);
        tracing::error!(%part, %cause, "stopping the actor");
        self.drain(grace, &[Part::Acting, Part::Inserter]).await;
        Err(Fault { part, cause })
    }

    /// Waits up to `grace` for each of `parts` (logging how they ended), then aborts the rest.
    async fn drain(&mut self, grace: Duration, parts: &[Part]) {
        let deadline = tokio::time::Instant::now() + grace;
        while self.parts.values().any(|p| parts.contains(p)) {
            match tokio::time::timeout_at(deadline, self.tasks.join_next_with_id()).await {
                Ok(Some(ended)) => {
                    let (part, cause) = self.describe(ended);
                    tracing::info!(%part, %cause, "stopped");
                }
                Ok(None) | Err(_) => break,
            }
        }
        self.tasks.abort_all();
    }

    fn describe(&mut self, ended: Result<(Id, Outcome), tokio::task::JoinError>) -> (Part, String) {
        let (id, cause) = match ended {
            Ok((id, Ok(()))) => (id, "ended".to_string()),
            Ok((id, Err(error))) => (id, format!("failed: {error:#}")),
            Err(error) if error.is_panic() => (error.id(), format!("panicked: {error}")),
            Err(error) => (error.id(), format!("was cancelled: {error}")),
        };
        let part = self
            .parts
            .remove(&id)
            .expect("every task is spawned with its part");
        (part, cause)
    }
}
