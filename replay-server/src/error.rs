//! The one place where errors become gRPC status codes.

use fleetrl_proto::table::ReplayError;
use tonic::{Code, Status};

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
    Status::internal(format!("replay server task failed: {err}"))
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
    }
}
