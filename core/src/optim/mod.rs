//! Optimisers whose state is plain tensors, so checkpoints carry it.

use crate::config::error::check;
use crate::config::error::ConfigError;

mod adam;
mod graph;

pub use adam::{Adam, Flat, Rule};
pub use graph::{GraphBatch, GraphError, UpdateGraph, WARM_UP};

/// An update rule with its coefficients, as [`Adam::with_rule`] takes it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stepping {
    /// The rule.
    pub rule: Rule,
    /// RMSprop's smoothing constant (PyTorch's `alpha`; unused by the others).
    pub alpha: f64,
    /// SGD's or RMSprop's momentum (PyTorch's `momentum`; unused by Adam).
    pub momentum: f64,
    /// RMSprop divides by the centred second moment, `sqrt(E[g^2] - E[g]^2)` (PyTorch's
    /// `centered`; Graves 2013 and the DQN paper's variant).
    pub centered: bool,
}

impl Stepping {
    /// Adam, which has no coefficient here.
    pub const ADAM: Stepping = Stepping {
        rule: Rule::Adam,
        alpha: 0.0,
        momentum: 0.0,
        centered: false,
    };

    /// SGD with `momentum`.
    pub fn sgd(momentum: f64) -> Stepping {
        Stepping {
            rule: Rule::Sgd,
            momentum,
            ..Stepping::ADAM
        }
    }

    /// Plain RMSprop with smoothing constant `alpha`.
    pub fn rmsprop(alpha: f64) -> Stepping {
        Stepping {
            rule: Rule::Rmsprop,
            alpha,
            ..Stepping::ADAM
        }
    }
}

/// `optimizer` with the coefficient it uses (RMSprop's alpha, SGD's momentum).
pub(crate) fn rule(optimizer: Rule, rmsprop_alpha: f64, sgd_momentum: f64) -> Stepping {
    match optimizer {
        Rule::Adam => Stepping::ADAM,
        Rule::Rmsprop => Stepping::rmsprop(rmsprop_alpha),
        Rule::Sgd => Stepping::sgd(sgd_momentum),
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
