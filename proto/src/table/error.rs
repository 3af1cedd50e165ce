//! The one error type of replay tables. Servers map it to wire codes in exactly one place.

/// Why a table operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    /// No table has this name.
    #[error("unknown table `{0}`")]
    UnknownTable(String),
    /// An item does not match the table's signature; nothing was stored.
    #[error("field `{field}`: {reason}")]
    InvalidItem {
        /// The offending field (missing, extra, or mismatched).
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The request itself is malformed (a batch size of 0 or above the table's capacity, a
    /// negative priority, an ill-formed table spec).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// A table of this name exists with another definition; the message names the difference.
    #[error("{0}")]
    Conflict(String),
    /// Backpressure: the rate limiter did not allow the operation in time. Callers back off and
    /// retry. Given to sample requests with a rate-limiter timeout.
    #[error("rate limited: the table could not serve the request in time")]
    RateLimited,
    /// The table was shut down; no operation on it will succeed again.
    #[error("table is closed")]
    Closed,
}

impl ReplayError {
    /// An [`ReplayError::InvalidItem`] for `field`.
    pub fn invalid_item(field: &str, reason: impl Into<String>) -> ReplayError {
        ReplayError::InvalidItem {
            field: field.to_string(),
            reason: reason.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_item_names_the_field() {
        let err = ReplayError::invalid_item("obs", "shape [3] does not match signature [4]");
        assert_eq!(
            err.to_string(),
            "field `obs`: shape [3] does not match signature [4]"
        );
    }
}
