//! Observation and action spaces and actions: what an env declares and what every role
//! (actor, learner, replay server validating demos) agrees on.

/// An observation or action space.
#[derive(Debug, Clone, PartialEq)]
pub enum Space {
    /// Integers `0..n`.
    Discrete {
        /// Number of actions.
        n: i64,
    },
    /// A box of f32 values with per-element bounds (infinite bounds allowed).
    Box {
        /// Shape of one value.
        shape: Vec<i64>,
        /// Lower bound per element (row-major, product(shape) entries).
        low: Vec<f32>,
        /// Upper bound per element.
        high: Vec<f32>,
    },
}

impl Space {
    /// Number of scalar elements in one value of this space (1 for discrete).
    pub fn flat_dim(&self) -> usize {
        match self {
            Space::Discrete { .. } => 1,
            Space::Box { shape, .. } => shape.iter().product::<i64>() as usize,
        }
    }
}

/// An action for one env.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// An index into a [`Space::Discrete`].
    Discrete(i64),
    /// A point in a [`Space::Box`].
    Continuous(Vec<f32>),
}

impl From<&Space> for crate::v1::Space {
    fn from(space: &Space) -> Self {
        use crate::v1::space::Kind;
        let kind = match space {
            Space::Discrete { n } => Kind::Discrete(*n),
            Space::Box { shape, low, high } => Kind::Box(crate::v1::BoxSpace {
                shape: shape.clone(),
                low: low.clone(),
                high: high.clone(),
            }),
        };
        crate::v1::Space { kind: Some(kind) }
    }
}

/// Why a wire space is not a [`Space`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpaceError {
    /// The message has no kind.
    #[error("the space is missing")]
    Missing,
    /// A box whose bounds do not have one entry per element, or a negative dimension.
    #[error("box space with shape {shape:?} has {low} low and {high} high bounds")]
    BadBox {
        /// The declared shape.
        shape: Vec<i64>,
        /// Number of lower bounds.
        low: usize,
        /// Number of upper bounds.
        high: usize,
    },
    /// A discrete space with no actions.
    #[error("discrete space with {0} actions")]
    BadDiscrete(i64),
}

impl TryFrom<&crate::v1::Space> for Space {
    type Error = SpaceError;

    fn try_from(space: &crate::v1::Space) -> Result<Self, SpaceError> {
        use crate::v1::space::Kind;
        match space.kind.as_ref().ok_or(SpaceError::Missing)? {
            Kind::Discrete(n) if *n > 0 => Ok(Space::Discrete { n: *n }),
            Kind::Discrete(n) => Err(SpaceError::BadDiscrete(*n)),
            Kind::Box(b) => {
                let elements = b
                    .shape
                    .iter()
                    .try_fold(1usize, |acc, &d| acc.checked_mul(usize::try_from(d).ok()?));
                if elements != Some(b.low.len()) || b.low.len() != b.high.len() {
                    return Err(SpaceError::BadBox {
                        shape: b.shape.clone(),
                        low: b.low.len(),
                        high: b.high.len(),
                    });
                }
                Ok(Space::Box {
                    shape: b.shape.clone(),
                    low: b.low.clone(),
                    high: b.high.clone(),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spaces_round_trip_and_bad_boxes_are_refused() {
        let spaces = [
            Space::Discrete { n: 3 },
            Space::Box {
                shape: vec![2, 1],
                low: vec![-1.0, f32::NEG_INFINITY],
                high: vec![1.0, f32::INFINITY],
            },
        ];
        for space in &spaces {
            let wire = crate::v1::Space::from(space);
            assert_eq!(&Space::try_from(&wire).unwrap(), space);
        }
        let mut bad = crate::v1::Space::from(&spaces[1]);
        if let Some(crate::v1::space::Kind::Box(b)) = bad.kind.as_mut() {
            b.low.pop();
        }
        assert!(matches!(
            Space::try_from(&bad),
            Err(SpaceError::BadBox { .. })
        ));
        let none = crate::v1::Space { kind: None };
        assert_eq!(Space::try_from(&none), Err(SpaceError::Missing));
    }
}
