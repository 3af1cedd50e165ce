//! The one place where errors become gRPC status codes.

use fleetrl_proto::table::ReplayError;
use fleetrl_runtime::confine::ConfineError;
use fleetrl_runtime::demo::DemoError;
use tonic::{Code, Status};

/// Why a request to this server failed: a table error or a demo-service error.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ServiceError {
    /// A table refused the operation.
    #[error(transparent)]
    Replay(#[from] ReplayError),
    /// A demo (offered, or in the demos directory) is malformed or recorded in another env.
    #[error(transparent)]
    Demo(#[from] DemoError),
    /// The request is malformed; the message says what is missing or wrong.
    #[error("{0}")]
    InvalidRequest(String),
    /// `Configure` for another env than the one the demo buffers hold.
    #[error("demo buffers are configured for {configured}, not {requested}")]
    DemosConfiguredFor {
        /// The env the buffers hold.
        configured: String,
        /// The env the request names.
        requested: String,
    },
    /// A demo request before `Configure`.
    #[error("demo buffers are not configured (call Configure first)")]
    DemosNotConfigured,
    /// A `ppod.<field>` directory a client named leads out of the server's `--demos-root`
    /// (or cannot be looked up under it).
    #[error("ppod.{field}: {source}")]
    DemoDir {
        /// The spec field that names it.
        field: &'static str,
        /// Why it was refused.
        source: ConfineError,
    },
    /// A demo directory named to a server that reads none (an in-process server built
    /// without a demos root).
    #[error("this replay server reads no demo directories (it has no --demos-root)")]
    NoDemosRoot,
    /// A `Checkpoint` request to a server started without `--checkpoint-dir`.
    #[error("this replay server has no --checkpoint-dir")]
    NoCheckpointDir,
    /// The server failed (a checkpoint it could not write or read, a helper task that
    /// panicked): not the client's fault.
    #[error("{0}")]
    Internal(String),
}

impl From<ServiceError> for Status {
    /// | error | code |
    /// |---|---|
    /// | `Replay` | per [`code`] |
    /// | `Demo`, `InvalidRequest`, `DemoDir` | `INVALID_ARGUMENT` |
    /// | `DemosConfiguredFor` | `ALREADY_EXISTS` |
    /// | `DemosNotConfigured`, `NoCheckpointDir`, `NoDemosRoot` | `FAILED_PRECONDITION` |
    /// | `Internal` | `INTERNAL` |
    fn from(err: ServiceError) -> Status {
        let code = match &err {
            ServiceError::Replay(replay) => code(replay),
            ServiceError::Demo(_)
            | ServiceError::InvalidRequest(_)
            | ServiceError::DemoDir { .. } => Code::InvalidArgument,
            ServiceError::DemosConfiguredFor { .. } => Code::AlreadyExists,
            ServiceError::DemosNotConfigured
            | ServiceError::NoCheckpointDir
            | ServiceError::NoDemosRoot => Code::FailedPrecondition,
            ServiceError::Internal(_) => Code::Internal,
        };
        Status::new(code, err.to_string())
    }
}

/// The wire code of each [`ReplayError`] variant.
///
/// | variant | code | why |
/// |---|---|---|
/// | `InvalidItem` | `INVALID_ARGUMENT` | the item does not match the signature; the message names the field |
/// | `UnknownTable` | `NOT_FOUND` | no table has that name |
/// | `InvalidRequest` | `INVALID_ARGUMENT` | a batch size or priority that can never be served |
/// | `Conflict` | `ALREADY_EXISTS` | `EnsureTable` with another definition for an existing name |
/// | `RateLimited` | `RESOURCE_EXHAUSTED` | backpressure: the client backs off and retries |
/// | `Closed` | `UNAVAILABLE` | the server is shutting down: retry on another replica |
fn code(err: &ReplayError) -> Code {
    match err {
        ReplayError::InvalidItem { .. } => Code::InvalidArgument,
        ReplayError::UnknownTable(_) => Code::NotFound,
        ReplayError::InvalidRequest(_) => Code::InvalidArgument,
        ReplayError::Conflict(_) => Code::AlreadyExists,
        ReplayError::RateLimited => Code::ResourceExhausted,
        ReplayError::Closed => Code::Unavailable,
    }
}

/// The status a handler returns for `err`; its message is the error's display text.
pub(crate) fn to_status(err: ReplayError) -> Status {
    Status::new(code(&err), err.to_string())
}

/// The status of a request whose blocking helper task panicked or was cancelled: a server
/// bug, not the client's fault.
pub(crate) fn task_failed(err: tokio::task::JoinError) -> Status {
    ServiceError::Internal(format!("replay server task failed: {err}")).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_every_variant() {
        let cases = [
            (
                ReplayError::invalid_item("obs", "bad"),
                Code::InvalidArgument,
            ),
            (ReplayError::UnknownTable("t".into()), Code::NotFound),
            (
                ReplayError::InvalidRequest("batch".into()),
                Code::InvalidArgument,
            ),
            (ReplayError::Conflict("t".into()), Code::AlreadyExists),
            (ReplayError::RateLimited, Code::ResourceExhausted),
            (ReplayError::Closed, Code::Unavailable),
        ];
        for (err, expected) in cases {
            assert_eq!(to_status(err).code(), expected);
        }
        assert_eq!(
            to_status(ReplayError::invalid_item("obs", "bad")).message(),
            "field `obs`: bad"
        );
        let service = [
            (
                ServiceError::InvalidRequest("x".into()),
                Code::InvalidArgument,
            ),
            (ServiceError::DemosNotConfigured, Code::FailedPrecondition),
            (ServiceError::NoCheckpointDir, Code::FailedPrecondition),
            (ServiceError::NoDemosRoot, Code::FailedPrecondition),
            (ServiceError::Internal("x".into()), Code::Internal),
            (
                ServiceError::Replay(ReplayError::RateLimited),
                Code::ResourceExhausted,
            ),
            (
                ServiceError::DemosConfiguredFor {
                    configured: "a".into(),
                    requested: "b".into(),
                },
                Code::AlreadyExists,
            ),
        ];
        for (err, expected) in service {
            assert_eq!(Status::from(err).code(), expected);
        }
    }
}
