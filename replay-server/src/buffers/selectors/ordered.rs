//! Deterministic selectors: FIFO and LIFO by key, max-heap and min-heap by priority.

use std::collections::{BTreeSet, HashMap};

use rand::rngs::SmallRng;

use super::Selector;
use crate::buffers::keymap::{KeyMap, Vacant};

/// The order an [`OrderedSelector`] hands keys out in. Keys are given in insertion order, so
/// ties and the FIFO/LIFO orders follow keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Oldest first.
    Fifo,
    /// Newest first.
    Lifo,
    /// Highest priority first, ties oldest first.
    MaxHeap,
    /// Lowest priority first, ties oldest first.
    MinHeap,
}

/// Keys in a total order, first key first; O(log n) insert, update, remove and pick.
///
/// FIFO and LIFO order follows from the key alone, so those orders keep only the set of held
/// keys, as a [`KeyMap`]: one byte per key while the keys are dense (a million-item FIFO
/// remover is 1 MB; as an ordered set of ranks it was 20 MB). The heaps rank by priority.
#[derive(Debug)]
pub struct OrderedSelector {
    order: Order,
    /// The held keys, for FIFO and LIFO.
    held: KeyMap<Held>,
    /// The held keys by rank, for the priority orders.
    ranked: BTreeSet<Rank>,
    /// Each key's rank, for the priority orders.
    rank_of: HashMap<u64, Rank>,
}

/// A held key's mark in [`OrderedSelector::held`].
#[derive(Debug, Clone, Copy)]
struct Held(bool);

impl Vacant for Held {
    const VACANT: Held = Held(false);

    fn is_vacant(&self) -> bool {
        !self.0
    }
}

/// Sort position of a key in a heap: its priority (negated for the max-heap), then the key.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Rank {
    primary: f64,
    tie: u64,
}

impl Eq for Rank {}

impl Ord for Rank {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.primary
            .total_cmp(&other.primary)
            .then(self.tie.cmp(&other.tie))
    }
}

impl PartialOrd for Rank {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl OrderedSelector {
    /// An empty selector handing keys out in `order`.
    pub fn new(order: Order) -> OrderedSelector {
        OrderedSelector {
            order,
            held: KeyMap::default(),
            ranked: BTreeSet::new(),
            rank_of: HashMap::new(),
        }
    }

    fn by_priority(&self) -> bool {
        matches!(self.order, Order::MaxHeap | Order::MinHeap)
    }

    /// The rank `key` holds now, if it is held (priority orders).
    fn current(&self, key: u64) -> Option<Rank> {
        self.rank_of.get(&key).copied()
    }

    fn rank(&self, key: u64, priority: f64) -> Rank {
        Rank {
            primary: match self.order {
                Order::MaxHeap => -priority,
                _ => priority,
            },
            tie: key,
        }
    }
}

impl Selector for OrderedSelector {
    fn name(&self) -> &'static str {
        match self.order {
            Order::Fifo => "fifo",
            Order::Lifo => "lifo",
            Order::MaxHeap => "max_heap",
            Order::MinHeap => "min_heap",
        }
    }

    fn insert(&mut self, key: u64, priority: f64) {
        if !self.by_priority() {
            self.held.insert(key, Held(true));
            return;
        }
        self.remove(key);
        let rank = self.rank(key, priority);
        self.ranked.insert(rank);
        self.rank_of.insert(key, rank);
    }

    fn update(&mut self, key: u64, priority: f64) -> bool {
        if !self.by_priority() {
            return self.held.contains(key);
        }
        if self.current(key).is_none() {
            return false;
        }
        self.insert(key, priority);
        true
    }

    fn remove(&mut self, key: u64) -> bool {
        if !self.by_priority() {
            return self.held.remove(key).is_some();
        }
        match self.rank_of.remove(&key) {
            Some(rank) => self.ranked.remove(&rank),
            None => false,
        }
    }

    fn clear(&mut self) {
        self.held.clear();
        self.ranked.clear();
        self.rank_of.clear();
    }

    fn len(&self) -> usize {
        if self.by_priority() {
            self.ranked.len()
        } else {
            self.held.len()
        }
    }

    fn select(&mut self, n: usize, _rng: &mut SmallRng) -> Vec<(u64, f64)> {
        let keys: Box<dyn Iterator<Item = u64>> = match self.order {
            Order::Fifo => Box::new(self.held.iter().map(|(key, _)| key)),
            Order::Lifo => Box::new(self.held.iter().rev().map(|(key, _)| key)),
            Order::MaxHeap | Order::MinHeap => Box::new(self.ranked.iter().map(|rank| rank.tie)),
        };
        keys.take(n).map(|key| (key, 1.0)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn picks(order: Order, items: &[(u64, f64)], n: usize) -> Vec<u64> {
        let mut selector = OrderedSelector::new(order);
        for &(key, priority) in items {
            selector.insert(key, priority);
        }
        let mut rng = SmallRng::seed_from_u64(0);
        selector
            .select(n, &mut rng)
            .into_iter()
            .map(|(k, _)| k)
            .collect()
    }

    #[test]
    fn passes_the_selector_contract() {
        for order in [Order::Fifo, Order::Lifo, Order::MaxHeap, Order::MinHeap] {
            super::super::check_contract(Box::new(OrderedSelector::new(order)));
        }
    }

    #[test]
    fn each_order_picks_as_defined() {
        let items = [(1, 0.5), (2, 3.0), (3, 0.5), (4, 3.0), (5, 1.0)];
        assert_eq!(picks(Order::Fifo, &items, 3), vec![1, 2, 3]);
        assert_eq!(picks(Order::Lifo, &items, 3), vec![5, 4, 3]);
        assert_eq!(picks(Order::MaxHeap, &items, 3), vec![2, 4, 5]);
        assert_eq!(picks(Order::MinHeap, &items, 3), vec![1, 3, 5]);
        assert_eq!(picks(Order::Fifo, &items, 9).len(), 5, "no more than held");
    }

    #[test]
    fn update_moves_a_key_in_a_heap() {
        let mut selector = OrderedSelector::new(Order::MaxHeap);
        for key in 1..=4 {
            selector.insert(key, key as f64);
        }
        assert!(selector.update(1, 10.0));
        let mut rng = SmallRng::seed_from_u64(0);
        assert_eq!(selector.select(1, &mut rng), vec![(1, 1.0)]);
    }
}
