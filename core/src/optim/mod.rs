//! Optimisers whose state is plain tensors, so checkpoints carry it.

use crate::config::error::check;
use crate::config::error::ConfigError;

mod adam;
mod graph;

pub use adam::{Adam, Flat, Rule};
pub use graph::{GraphBatch, GraphError, UpdateGraph, WARM_UP};

/// `optimizer` with the coefficient it uses (RMSprop's alpha, SGD's momentum).
pub(crate) fn rule(optimizer: Rule, rmsprop_alpha: f64, sgd_momentum: f64) -> (Rule, f64) {
    match optimizer {
        Rule::Adam => (Rule::Adam, 0.0),
        Rule::Rmsprop => (Rule::Rmsprop, rmsprop_alpha),
        Rule::Sgd => (Rule::Sgd, sgd_momentum),
    }
}

/// Checks `rmsprop_alpha` and `sgd_momentum`.
pub(crate) fn check_rule(rmsprop_alpha: f64, sgd_momentum: f64) -> Result<(), ConfigError> {
    check(
        (0.0..1.0).contains(&rmsprop_alpha),
        "algo.rmsprop_alpha",
        "must be in [0, 1)",
    )?;
    check(
        (0.0..1.0).contains(&sgd_momentum),
        "algo.sgd_momentum",
        "must be in [0, 1)",
    )
}
