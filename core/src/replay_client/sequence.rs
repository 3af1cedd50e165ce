//! Cutting a stream of steps into fixed-length items: transitions (length 1), rollouts (length
//! T, no overlap) and recurrent training sequences (length L, consecutive items sharing
//! `overlap` steps, R2D2-style, so each has burn-in context).

use std::collections::VecDeque;

use fleetrl_proto::{Tensor, TensorError, TensorMap};

/// Why a [`SequenceBuilder`] cannot be made or cannot stack its steps.
#[derive(Debug, thiserror::Error)]
pub enum SequenceError {
    /// A length of 0.
    #[error("sequence length must be at least 1")]
    ZeroLength,
    /// An overlap that leaves no new step per item.
    #[error("overlap ({overlap}) must be smaller than the sequence length ({length})")]
    Overlap {
        /// The overlap asked for.
        overlap: usize,
        /// The sequence length.
        length: usize,
    },
    /// Steps whose fields do not stack (a missing field, mismatched shapes or dtypes).
    #[error("stacking steps: {0}")]
    Stack(#[from] TensorError),
}

/// Turns steps (one `TensorMap` of per-step fields each) into items whose fields are the steps
/// stacked along a leading time dimension of `length`. After an item, the oldest
/// `length - overlap` steps are dropped, so consecutive items share `overlap` steps.
#[derive(Debug, Clone)]
pub struct SequenceBuilder {
    length: usize,
    overlap: usize,
    steps: VecDeque<TensorMap>,
}

impl SequenceBuilder {
    /// Items of `length` steps sharing `overlap` steps; `overlap < length` is required.
    pub fn new(length: usize, overlap: usize) -> Result<SequenceBuilder, SequenceError> {
        if length == 0 {
            return Err(SequenceError::ZeroLength);
        }
        if overlap >= length {
            return Err(SequenceError::Overlap { overlap, length });
        }
        Ok(SequenceBuilder {
            length,
            overlap,
            steps: VecDeque::with_capacity(length),
        })
    }

    /// Adds one step; returns an item when `length` steps have gathered.
    pub fn push(&mut self, step: TensorMap) -> Result<Option<TensorMap>, SequenceError> {
        self.steps.push_back(step);
        if self.steps.len() < self.length {
            return Ok(None);
        }
        let mut item = TensorMap::default();
        for name in self.steps[0].tensors.keys() {
            let parts: Vec<&Tensor> = self
                .steps
                .iter()
                .map(|s| s.field(name))
                .collect::<Result<_, _>>()?;
            item.tensors.insert(name.clone(), Tensor::stack(&parts)?);
        }
        self.steps.drain(..self.length - self.overlap);
        Ok(Some(item))
    }

    /// Forgets the steps of an unfinished item (at an episode end, so that no item spans two
    /// episodes).
    pub fn reset(&mut self) {
        self.steps.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(t: i64) -> TensorMap {
        TensorMap::from_pairs([
            ("t", Tensor::scalar(t)),
            ("obs", Tensor::from_slice(&[2], &[t as f32, 0.0])),
        ])
    }

    fn times(item: &TensorMap) -> Vec<i64> {
        item.field("t").unwrap().to_vec::<i64>().unwrap()
    }

    #[test]
    fn overlapping_sequences_share_their_burn_in() {
        let mut builder = SequenceBuilder::new(4, 2).unwrap();
        let mut items = Vec::new();
        for t in 0..9 {
            if let Some(item) = builder.push(step(t)).unwrap() {
                items.push(item);
            }
        }
        let cut: Vec<Vec<i64>> = items.iter().map(times).collect();
        assert_eq!(
            cut,
            vec![vec![0, 1, 2, 3], vec![2, 3, 4, 5], vec![4, 5, 6, 7]]
        );
        assert_eq!(items[0].field("obs").unwrap().shape, vec![4, 2]);
        builder.reset();
        assert!(builder.push(step(100)).unwrap().is_none());
    }

    #[test]
    fn transitions_and_rollouts_are_the_edge_cases() {
        let mut one = SequenceBuilder::new(1, 0).unwrap();
        assert_eq!(times(&one.push(step(5)).unwrap().unwrap()), vec![5]);
        let mut rollout = SequenceBuilder::new(3, 0).unwrap();
        let got: Vec<_> = (0..6)
            .filter_map(|t| rollout.push(step(t)).unwrap())
            .map(|i| times(&i))
            .collect();
        assert_eq!(got, vec![vec![0, 1, 2], vec![3, 4, 5]]);
        assert!(matches!(
            SequenceBuilder::new(3, 3),
            Err(SequenceError::Overlap {
                overlap: 3,
                length: 3
            })
        ));
        assert!(matches!(
            SequenceBuilder::new(0, 0),
            Err(SequenceError::ZeroLength)
        ));
    }
}
