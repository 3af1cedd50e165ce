//! Keys in insertion order, with removal of any key in O(log n): the shared core of the FIFO
//! sampler and the FIFO remover.

use std::collections::{BTreeMap, HashMap};

/// Keys ordered by when they were pushed, oldest first.
#[derive(Debug, Default)]
pub(crate) struct InsertionOrder {
    next_seq: u64,
    by_seq: BTreeMap<u64, u64>,
    seq_of: HashMap<u64, u64>,
}

impl InsertionOrder {
    /// Appends `key` as the newest; a key already present moves to the back.
    pub(crate) fn push(&mut self, key: u64) {
        self.remove(key);
        let seq = self.next_seq;
        self.next_seq += 1;
        self.by_seq.insert(seq, key);
        self.seq_of.insert(key, seq);
    }

    /// Forgets `key`; returns whether it was present.
    pub(crate) fn remove(&mut self, key: u64) -> bool {
        match self.seq_of.remove(&key) {
            Some(seq) => self.by_seq.remove(&seq).is_some(),
            None => false,
        }
    }

    /// The `n` oldest keys, oldest first (fewer if fewer are present).
    pub(crate) fn oldest(&self, n: usize) -> Vec<u64> {
        self.by_seq.values().take(n).copied().collect()
    }

    /// Number of keys held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        debug_assert_eq!(self.by_seq.len(), self.seq_of.len());
        self.by_seq.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_insertion_order_across_removals() {
        let mut order = InsertionOrder::default();
        for key in [7, 3, 9, 1] {
            order.push(key);
        }
        assert!(order.remove(3));
        assert!(!order.remove(3));
        order.push(7);
        assert_eq!(order.oldest(10), vec![9, 1, 7]);
        assert_eq!(order.oldest(1), vec![9]);
        assert_eq!(order.len(), 3);
    }
}
