//! How the policy server batches and bounds its work: its own flags (each also an
//! environment variable), validated at start.

use std::time::Duration;

/// Batching and admission limits.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Limits {
    /// Most rows (observations) in one forward pass: requests that arrive together are run as
    /// one batch up to this size.
    #[arg(long, env = "FLEETRL_SERVE_MAX_BATCH_ROWS", default_value_t = 256)]
    pub(crate) max_batch_rows: usize,
    /// Milliseconds the first request of a batch waits for others to join it (0: a batch is
    /// what is already queued when the previous pass ends, so a lone caller never waits).
    #[arg(long, env = "FLEETRL_SERVE_BATCH_WINDOW_MS", default_value_t = 0.0)]
    pub(crate) batch_window_ms: f64,
    /// Most rows one Act request may carry; more get INVALID_ARGUMENT (at most
    /// --max-batch-rows).
    #[arg(long, env = "FLEETRL_SERVE_MAX_REQUEST_ROWS", default_value_t = 256)]
    pub(crate) max_request_rows: usize,
    /// Most rows waiting for the forward pass; a request past it gets RESOURCE_EXHAUSTED.
    #[arg(long, env = "FLEETRL_SERVE_MAX_QUEUED_ROWS", default_value_t = 8192)]
    pub(crate) max_queued_rows: usize,
    /// Sample actions from the policy instead of answering its most likely ones.
    #[arg(long = "stochastic", env = "FLEETRL_SERVE_STOCHASTIC", action = clap::ArgAction::SetTrue)]
    stochastic: bool,
    /// Filled in from `stochastic` by [`Limits::validated`].
    #[arg(skip)]
    pub(crate) deterministic: bool,
}

/// Longest batching window accepted: a window is a latency every lone caller pays.
const MAX_WINDOW_MS: f64 = 1000.0;

impl Limits {
    /// The limits, or an error naming the flag that is out of range.
    pub(crate) fn validated(mut self) -> anyhow::Result<Limits> {
        if self.max_batch_rows == 0 {
            anyhow::bail!("--max-batch-rows must be at least 1");
        }
        if self.max_request_rows == 0 || self.max_request_rows > self.max_batch_rows {
            anyhow::bail!(
                "--max-request-rows {} must be between 1 and --max-batch-rows ({})",
                self.max_request_rows,
                self.max_batch_rows
            );
        }
        if self.max_queued_rows < self.max_request_rows {
            anyhow::bail!(
                "--max-queued-rows {} must be at least --max-request-rows ({})",
                self.max_queued_rows,
                self.max_request_rows
            );
        }
        let window = self.batch_window_ms;
        if !(window.is_finite() && (0.0..=MAX_WINDOW_MS).contains(&window)) {
            anyhow::bail!("--batch-window-ms {window} must be between 0 and {MAX_WINDOW_MS}");
        }
        self.deterministic = !self.stochastic;
        Ok(self)
    }

    /// The batching window.
    pub(crate) fn batch_window(&self) -> Duration {
        Duration::from_secs_f64(self.batch_window_ms / 1000.0)
    }
}
