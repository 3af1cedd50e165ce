//! `fleetrl.v1.PolicyService`: validates each Act request at the edge (dtype, shape, rows,
//! finite values) against the policy's observation space, queues it for the inference
//! thread, and answers with its rows of the batch it joined. Nothing a client sends reaches
//! tch unchecked, and nothing it sends can stop the server.

use std::sync::Arc;
use std::time::Instant;

use fleetrl_core::items::rollout::Actions;
use fleetrl_proto::space::Space;
use fleetrl_proto::v1::policy_service_server::{PolicyService, PolicyServiceServer};
use fleetrl_proto::v1::{ActRequest, ActResponse, DescribeRequest, PolicyDescription};
use fleetrl_proto::{Dtype, Tensor};
use fleetrl_runtime::net::MAX_MESSAGE_BYTES;
use tokio::sync::oneshot;
use tonic::{Request, Response, Status};

use crate::batcher::{Job, Queue};
use crate::error::ServeError;
use crate::metrics::ServeMetrics;

/// The service's state.
pub(crate) struct Policy {
    pub(crate) queue: Queue,
    pub(crate) obs_space: Space,
    pub(crate) action_space: Space,
    pub(crate) env: String,
    pub(crate) algo: String,
    pub(crate) max_request_rows: usize,
    pub(crate) deterministic: bool,
    /// Width H of the policy's recurrent state (0: feed-forward).
    pub(crate) state_size: i64,
    pub(crate) metrics: Arc<ServeMetrics>,
}

impl Policy {
    /// The gRPC service, accepting requests up to the size of the largest valid one.
    pub(crate) fn into_server(self) -> PolicyServiceServer<Policy> {
        let row_bytes = self.obs_space.flat_dim() * 4;
        let largest = self.max_request_rows.saturating_mul(row_bytes) + 64 * 1024;
        PolicyServiceServer::new(self).max_decoding_message_size(largest.min(MAX_MESSAGE_BYTES))
    }

    /// The request's observations as `rows` flat f32 rows, or why they do not fit.
    fn observations(&self, request: &ActRequest) -> Result<(Vec<f32>, usize), ServeError> {
        let obs = request.observations.as_ref().ok_or(ServeError::Missing)?;
        let dtype = obs.validate()?;
        if !matches!(dtype, Dtype::F32 | Dtype::U8) {
            return Err(ServeError::Dtype(dtype));
        }
        let flat = self.obs_space.flat_dim();
        let shape_of_space = match &self.obs_space {
            Space::Box { shape, .. } => shape.clone(),
            Space::Discrete { .. } => vec![1],
        };
        let (rows, rest) = obs.shape.split_first().ok_or_else(|| self.shape(obs))?;
        let fits = rest == shape_of_space.as_slice() || rest == [flat as i64];
        if !fits {
            return Err(self.shape(obs));
        }
        let rows = usize::try_from(*rows).map_err(|_| self.shape(obs))?;
        if rows == 0 || rows > self.max_request_rows {
            let limit = self.max_request_rows;
            return Err(ServeError::Rows { rows, limit });
        }
        let values = obs.to_f32_widened()?;
        if let Some(at) = values.iter().position(|v| !v.is_finite()) {
            return Err(ServeError::NonFinite {
                row: at / flat.max(1),
            });
        }
        Ok((values, rows))
    }

    /// The request's states for `rows` rows, if it sent any, or why they do not fit.
    fn states(&self, request: &ActRequest, rows: usize) -> Result<Option<Vec<f32>>, ServeError> {
        let Some(state) = &request.state else {
            return Ok(None);
        };
        let h = self.state_size;
        if h == 0 {
            let text = "this policy is feed-forward; send no state".to_string();
            return Err(ServeError::State(text));
        }
        if state.validate()? != Dtype::F32 || state.shape != [rows as i64, 2 * h] {
            return Err(ServeError::State(format!(
                "{:?} {:?}; this policy takes F32 [{rows}, {}] (h, then c, per row)",
                state.checked_dtype()?,
                state.shape,
                2 * h
            )));
        }
        let values = state.to_vec::<f32>()?;
        if let Some(at) = values.iter().position(|v| !v.is_finite()) {
            let row = at / (2 * h) as usize;
            return Err(ServeError::State(format!(
                "row {row} holds NaN or infinity"
            )));
        }
        Ok(Some(values))
    }

    fn shape(&self, obs: &Tensor) -> ServeError {
        let want = match &self.obs_space {
            Space::Box { shape, .. } => {
                let dims: Vec<String> = shape.iter().map(i64::to_string).collect();
                dims.join(", ")
            }
            Space::Discrete { .. } => "1".to_string(),
        };
        ServeError::Shape {
            got: obs.shape.clone(),
            want,
            flat: self.obs_space.flat_dim(),
        }
    }

    async fn act(&self, request: &ActRequest) -> Result<ActResponse, ServeError> {
        let (obs, rows, state) = self
            .observations(request)
            .and_then(|(obs, rows)| Ok((obs, rows, self.states(request, rows)?)))
            .inspect_err(|_| self.metrics.refused_invalid.inc())?;
        let (reply, answer) = oneshot::channel();
        let job = Job {
            obs,
            rows,
            state,
            queued: Instant::now(),
            reply,
        };
        self.queue.submit(job).inspect_err(|e| {
            if matches!(e, ServeError::Busy { .. }) {
                self.metrics.refused_busy.inc();
            }
        })?;
        let answer = answer.await.map_err(|_| ServeError::Stopped)??;
        let actions = match answer.actions {
            Actions::Discrete(a) => Tensor::from_slice(&[rows as i64], &a),
            Actions::Continuous { dim, values } => {
                let shape = match &self.action_space {
                    Space::Box { shape, .. } => [&[rows as i64][..], shape].concat(),
                    Space::Discrete { .. } => vec![rows as i64, dim as i64],
                };
                Tensor::from_slice(&shape, &values)
            }
        };
        let width = 2 * self.state_size;
        let state = answer
            .state
            .map(|s| Tensor::from_slice(&[rows as i64, width], &s));
        Ok(ActResponse {
            actions: Some(actions),
            policy_version: answer.version,
            batch_rows: answer.batch_rows as u32,
            state,
        })
    }
}

#[tonic::async_trait]
impl PolicyService for Policy {
    #[tracing::instrument(skip_all, name = "act")]
    async fn act(&self, request: Request<ActRequest>) -> Result<Response<ActResponse>, Status> {
        Ok(Response::new(Policy::act(self, request.get_ref()).await?))
    }

    async fn describe(
        &self,
        _request: Request<DescribeRequest>,
    ) -> Result<Response<PolicyDescription>, Status> {
        Ok(Response::new(PolicyDescription {
            env: self.env.clone(),
            algo: self.algo.clone(),
            observation_space: Some((&self.obs_space).into()),
            action_space: Some((&self.action_space).into()),
            policy_version: self.metrics.policy_version.get() as i64,
            max_request_rows: self.max_request_rows as u32,
            deterministic: self.deterministic,
            state_size: self.state_size,
        }))
    }
}
