//! FIFO remover: a full table evicts its oldest item.

use super::Remover;
use crate::buffers::order::InsertionOrder;

/// Evicts the oldest key first.
#[derive(Debug, Default)]
pub struct FifoRemover {
    order: InsertionOrder,
}

impl FifoRemover {
    /// An empty FIFO remover.
    pub fn new() -> FifoRemover {
        FifoRemover::default()
    }
}

impl Remover for FifoRemover {
    fn insert(&mut self, key: u64) {
        self.order.push(key);
    }

    fn remove(&mut self, key: u64) -> bool {
        self.order.remove(key)
    }

    fn victim(&self) -> Option<u64> {
        self.order.oldest(1).first().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_the_remover_contract() {
        super::super::check_contract(Box::new(FifoRemover::new()));
    }

    #[test]
    fn evicts_oldest_first() {
        let mut remover = FifoRemover::new();
        for key in [4, 2, 9] {
            remover.insert(key);
        }
        assert_eq!(remover.victim(), Some(4));
        remover.remove(4);
        assert_eq!(remover.victim(), Some(2));
    }
}
