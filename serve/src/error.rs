//! Why an Act call is refused, and the one table from those reasons to gRPC codes.

use tonic::{Code, Status};

/// Why an Act call got no actions.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ServeError {
    /// The request has no observations.
    #[error("the request has no observations")]
    Missing,
    /// The observations are not a valid tensor (unknown dtype, bytes that do not fit the shape).
    #[error("observations: {0}")]
    Tensor(#[from] fleetrl_proto::TensorError),
    /// The observations' dtype is neither F32 nor U8.
    #[error("observations are {0:?}; send F32 (or U8 for byte images)")]
    Dtype(fleetrl_proto::Dtype),
    /// The observations' shape does not fit the policy's observation space.
    #[error("observations of shape {got:?}; this policy takes [N, {want}] (or [N, {flat}])")]
    Shape {
        /// The shape sent.
        got: Vec<i64>,
        /// The observation space's shape, as text.
        want: String,
        /// Its flat size.
        flat: usize,
    },
    /// The batch is empty or too large.
    #[error("{rows} observation rows; one request may carry 1 to {limit} (--max-request-rows)")]
    Rows {
        /// Rows sent.
        rows: usize,
        /// The server's limit.
        limit: usize,
    },
    /// A state sent to a feed-forward policy, or one that does not fit a recurrent policy.
    #[error("state: {0}")]
    State(String),
    /// A value is NaN or infinite.
    #[error("observation row {row} holds NaN or infinity")]
    NonFinite {
        /// The first such row.
        row: usize,
    },
    /// The queue is full.
    #[error("{queued} rows are queued already (--max-queued-rows {limit}); retry shortly")]
    Busy {
        /// Rows waiting.
        queued: usize,
        /// The server's bound.
        limit: usize,
    },
    /// No weights have arrived from the learner yet.
    #[error("no policy yet: the learner has not sent its weights")]
    NoWeights,
    /// The inference thread has stopped (the server is going down).
    #[error("the policy server is stopping")]
    Stopped,
}

impl From<ServeError> for Status {
    fn from(error: ServeError) -> Status {
        let code = match &error {
            ServeError::Missing
            | ServeError::Tensor(_)
            | ServeError::Dtype(_)
            | ServeError::Shape { .. }
            | ServeError::Rows { .. }
            | ServeError::State(_)
            | ServeError::NonFinite { .. } => Code::InvalidArgument,
            ServeError::Busy { .. } => Code::ResourceExhausted,
            ServeError::NoWeights | ServeError::Stopped => Code::Unavailable,
        };
        Status::new(code, error.to_string())
    }
}
