//! PPO+D's demo buffers in the learner's TensorBoard: polls the replay server's
//! `DemoService.State` (first shard) and hands the latest rho, phi, reward threshold and demo
//! counts to the trainer, which writes them with its other scalars (`ppod/...`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fleetrl_proto::v1::demo_service_client::DemoServiceClient;
use fleetrl_proto::v1::{DemoState, DemoStateRequest};

/// The latest demo state seen, shared with the trainer.
#[derive(Debug, Clone, Default)]
pub(crate) struct DemoStats(Arc<Mutex<Option<DemoState>>>);

impl DemoStats {
    /// The scalars to log, empty until the demo buffers answered once.
    pub(crate) fn scalars(&self) -> Vec<(&'static str, f64)> {
        let state = self.0.lock().expect("demo stats lock poisoned");
        let Some(s) = state.as_ref() else {
            return Vec::new();
        };
        let mut values = vec![
            ("ppod/rho", s.rho),
            ("ppod/phi", s.phi),
            ("ppod/initial_demos", f64::from(s.initial_demos)),
            ("ppod/agent_demos", f64::from(s.agent_demos)),
            ("ppod/value_demos", f64::from(s.value_demos)),
            ("ppod/successes", s.successes as f64),
        ];
        if s.reward_threshold.is_finite() {
            values.push(("ppod/reward_threshold", s.reward_threshold));
        }
        values
    }

    /// Polls `replay` every `period` for as long as the process runs (errors, such as buffers
    /// not configured yet, are retried quietly).
    pub(crate) fn spawn_poller(&self, replay: String, period: Duration) {
        let shared = self.0.clone();
        tokio::spawn(async move {
            let mut client = None;
            loop {
                tokio::time::sleep(period).await;
                if client.is_none() {
                    client = fleetrl_runtime::net::connect(&replay, Duration::from_secs(1))
                        .await
                        .ok()
                        .map(DemoServiceClient::new);
                }
                let Some(c) = client.as_mut() else { continue };
                match c.state(DemoStateRequest {}).await {
                    Ok(reply) => {
                        *shared.lock().expect("demo stats lock poisoned") = Some(reply.into_inner())
                    }
                    Err(status) => tracing::debug!(%status, "demo buffers not readable yet"),
                }
            }
        });
    }
}
