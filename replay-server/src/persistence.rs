//! Checkpoints of every table: on request, periodically, and at shutdown; restore at start.
//! The on-disk format and its checks live in `crate::buffers::persist`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::buffers::{persist, Table};
use anyhow::Context;
use tracing::info;

use crate::demos::DemoHub;
use crate::service::Tables;

/// How many checkpoints to keep: the newest, and one to fall back on if it is damaged.
const KEEP: usize = 2;

/// Writes checkpoints of a server's tables to one directory, one at a time.
#[derive(Debug)]
pub(crate) struct Checkpointer {
    dir: PathBuf,
    writing: tokio::sync::Mutex<()>,
    /// PPO+D's demo buffers, saved into `<dir>/demos` with every checkpoint.
    demos: Option<std::sync::Arc<DemoHub>>,
}

impl Checkpointer {
    /// A checkpointer writing under `dir`.
    pub(crate) fn new(dir: PathBuf) -> Checkpointer {
        Checkpointer {
            dir,
            writing: tokio::sync::Mutex::new(()),
            demos: None,
        }
    }

    /// Also saves `demos` with every checkpoint.
    pub(crate) fn with_demos(mut self, demos: std::sync::Arc<DemoHub>) -> Checkpointer {
        self.demos = Some(demos);
        self
    }

    /// The checkpoint root.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Snapshots every table (each consistent on its own: every item acked before the call is
    /// in it) and writes them on a blocking thread. Returns the checkpoint's directory.
    pub(crate) async fn write(&self, tables: &Tables) -> anyhow::Result<PathBuf> {
        let _one_at_a_time = self.writing.lock().await;
        let started = Instant::now();
        let snapshots: Vec<_> = tables.all().iter().map(|t| t.snapshot()).collect();
        let items: usize = snapshots.iter().map(|s| s.items.len()).sum();
        let dir = self.dir.clone();
        let demos = self.demos.clone();
        let path = tokio::task::spawn_blocking(move || -> anyhow::Result<PathBuf> {
            let path = persist::write(&dir, &snapshots, KEEP)?;
            if let Some(demos) = demos {
                demos.save(&dir).context("saving the demo buffers")?;
            }
            Ok(path)
        })
        .await
        .context("checkpoint task failed")??;
        info!(
            path = %path.display(),
            tables = tables.names().len(),
            items,
            seconds = format!("{:.3}", started.elapsed().as_secs_f64()),
            "replay checkpoint written"
        );
        Ok(path)
    }

    /// Loads the newest valid checkpoint into `tables`; returns whether one was found.
    pub(crate) fn restore(&self, tables: &Tables) -> anyhow::Result<bool> {
        let Some((path, snapshots)) = persist::read_latest(&self.dir)? else {
            info!(dir = %self.dir.display(), "no replay checkpoint to restore; starting empty");
            return Ok(false);
        };
        for snapshot in snapshots {
            let name = snapshot.spec.name.clone();
            let items = snapshot.items.len();
            let counters = snapshot.counters;
            let table = Table::restore(snapshot)
                .with_context(|| format!("restoring table `{name}` from {}", path.display()))?;
            tables.adopt(table)?;
            info!(
                table = %name,
                items,
                inserted = counters.inserted,
                sampled = counters.sampled,
                "restored table from checkpoint"
            );
        }
        info!(path = %path.display(), "restored replay checkpoint");
        Ok(true)
    }

    /// Writes a checkpoint every `period` until the task is dropped; failures are logged and
    /// retried at the next tick.
    pub(crate) async fn periodically(&self, tables: Tables, period: Duration) {
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            if let Err(error) = self.write(&tables).await {
                tracing::error!(
                    error = format!("{error:#}"),
                    "periodic replay checkpoint failed"
                );
            }
        }
    }
}
