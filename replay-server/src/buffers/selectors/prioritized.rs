//! Prioritized selector: key `i` is picked with probability `p_i^a / sum_j p_j^a`, from a sum
//! tree, so insert, update, remove and each pick cost O(log n).

use rand::rngs::SmallRng;
use rand::Rng;

use super::Selector;
use crate::buffers::keymap::KeyMap;

/// A complete binary tree over dense slots whose every inner node holds the sum of its leaves.
///
/// Inner sums are recomputed from their two children on every change (never adjusted by a
/// difference), so rounding error cannot accumulate however many updates a long run makes.
#[derive(Debug, Clone)]
pub struct SumTree {
    /// Leaves `capacity..2 * capacity`; node `i` has children `2i` and `2i + 1`; index 0 unused.
    nodes: Vec<f64>,
    capacity: usize,
    len: usize,
}

impl Default for SumTree {
    fn default() -> Self {
        SumTree {
            nodes: vec![0.0; 2],
            capacity: 1,
            len: 0,
        }
    }
}

impl SumTree {
    /// Weights held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no weight is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The sum of every weight.
    pub fn total(&self) -> f64 {
        self.nodes[1]
    }

    /// The weight in `slot`.
    pub fn get(&self, slot: usize) -> f64 {
        self.nodes[self.capacity + slot]
    }

    /// Appends a weight in the next slot, growing the tree when full; returns the slot.
    pub fn push(&mut self, weight: f64) -> usize {
        if self.len == self.capacity {
            self.grow();
        }
        let slot = self.len;
        self.len += 1;
        self.set(slot, weight);
        slot
    }

    /// Removes the last slot, returning its weight.
    pub fn pop(&mut self) -> Option<f64> {
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        let weight = self.get(self.len);
        self.set(self.len, 0.0);
        Some(weight)
    }

    /// Sets the weight of a held `slot` and refreshes the sums above it.
    pub fn set(&mut self, slot: usize, weight: f64) {
        debug_assert!(slot < self.len || weight == 0.0);
        let mut node = self.capacity + slot;
        self.nodes[node] = weight;
        while node > 1 {
            node /= 2;
            self.nodes[node] = self.nodes[2 * node] + self.nodes[2 * node + 1];
        }
    }

    /// The slot whose cumulative weight range holds `mass` (clamped into `[0, total)`); never a
    /// zero-weight slot while the total is positive. `None` when the total is zero.
    pub fn find(&self, mass: f64) -> Option<usize> {
        if self.total() <= 0.0 {
            return None;
        }
        let mut mass = mass.clamp(0.0, self.total());
        let mut node = 1;
        while node < self.capacity {
            let (left, right) = (2 * node, 2 * node + 1);
            node = if self.nodes[right] <= 0.0 {
                left
            } else if self.nodes[left] <= 0.0 || mass >= self.nodes[left] {
                mass = (mass - self.nodes[left]).max(0.0);
                right
            } else {
                left
            };
        }
        Some(node - self.capacity)
    }

    /// Empties the tree, keeping its capacity.
    pub fn clear(&mut self) {
        self.nodes.iter_mut().for_each(|n| *n = 0.0);
        self.len = 0;
    }

    /// Checks that every inner node is the sum of its children, to rounding.
    pub fn is_consistent(&self) -> bool {
        (1..self.capacity).all(|node| {
            let sum = self.nodes[2 * node] + self.nodes[2 * node + 1];
            (self.nodes[node] - sum).abs() <= 1e-9 * sum.abs().max(1.0)
        }) && (self.len..self.capacity).all(|slot| self.get(slot) == 0.0)
    }

    fn grow(&mut self) {
        let capacity = self.capacity * 2;
        let mut nodes = vec![0.0; 2 * capacity];
        nodes[capacity..capacity + self.len]
            .copy_from_slice(&self.nodes[self.capacity..self.capacity + self.len]);
        for node in (1..capacity).rev() {
            nodes[node] = nodes[2 * node] + nodes[2 * node + 1];
        }
        self.nodes = nodes;
        self.capacity = capacity;
    }
}

/// Picks keys in proportion to `priority ^ exponent`; all-zero weights fall back to uniform.
#[derive(Debug)]
pub struct PrioritizedSelector {
    exponent: f64,
    tree: SumTree,
    key_of_slot: Vec<u64>,
    /// Each key's slot in the tree; 4 bytes per key while the held keys are dense.
    slot_of: KeyMap<u32>,
}

impl PrioritizedSelector {
    /// An empty selector with priority exponent `exponent` (checked by the table spec).
    pub fn new(exponent: f64) -> PrioritizedSelector {
        PrioritizedSelector {
            exponent,
            tree: SumTree::default(),
            key_of_slot: Vec::new(),
            slot_of: KeyMap::default(),
        }
    }

    /// The tree, for consistency checks.
    pub fn tree(&self) -> &SumTree {
        &self.tree
    }

    fn weight(&self, priority: f64) -> f64 {
        priority.powf(self.exponent)
    }
}

impl Selector for PrioritizedSelector {
    fn name(&self) -> &'static str {
        "prioritized"
    }

    fn insert(&mut self, key: u64, priority: f64) {
        if self.update(key, priority) {
            return;
        }
        let slot = self.tree.push(self.weight(priority));
        self.key_of_slot.push(key);
        // A table holds at most 2^31 items (`TableSpec::check`), so a slot fits a u32.
        self.slot_of.insert(key, slot as u32);
    }

    fn update(&mut self, key: u64, priority: f64) -> bool {
        match self.slot_of.get(key) {
            Some(&slot) => {
                self.tree.set(slot as usize, self.weight(priority));
                true
            }
            None => false,
        }
    }

    fn remove(&mut self, key: u64) -> bool {
        let Some(slot) = self.slot_of.remove(key) else {
            return false;
        };
        // Move the last slot into the freed one, keeping the slots dense.
        let last_weight = self.tree.pop().expect("a held key has a slot");
        let last_key = self.key_of_slot.pop().expect("a held key has a slot");
        if last_key != key {
            self.tree.set(slot as usize, last_weight);
            self.key_of_slot[slot as usize] = last_key;
            self.slot_of.insert(last_key, slot);
        }
        true
    }

    fn clear(&mut self) {
        self.tree.clear();
        self.key_of_slot.clear();
        self.slot_of.clear();
    }

    fn len(&self) -> usize {
        self.key_of_slot.len()
    }

    fn select(&mut self, n: usize, rng: &mut SmallRng) -> Vec<(u64, f64)> {
        let len = self.key_of_slot.len();
        if len == 0 {
            return Vec::new();
        }
        let total = self.tree.total();
        (0..n)
            .map(|_| match self.tree.find(rng.random::<f64>() * total) {
                Some(slot) => (self.key_of_slot[slot], self.tree.get(slot) / total),
                None => (self.key_of_slot[rng.random_range(0..len)], 1.0 / len as f64),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;

    #[test]
    fn passes_the_selector_contract() {
        super::super::check_contract(Box::new(PrioritizedSelector::new(1.0)));
    }

    #[test]
    fn zero_priorities_are_never_picked_unless_all_are_zero() {
        let mut selector = PrioritizedSelector::new(1.0);
        let mut rng = SmallRng::seed_from_u64(3);
        selector.insert(1, 0.0);
        selector.insert(2, 0.0);
        let all_zero = selector.select(50, &mut rng);
        assert!(all_zero.iter().all(|&(_, p)| p == 0.5));
        selector.insert(3, 2.0);
        assert!(selector
            .select(200, &mut rng)
            .iter()
            .all(|&(k, p)| k == 3 && p == 1.0));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(f64),
        Update(usize, f64),
        Remove(usize),
        Select(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0.0f64..10.0).prop_map(Op::Insert),
            (any::<usize>(), 0.0f64..10.0).prop_map(|(i, p)| Op::Update(i, p)),
            any::<usize>().prop_map(Op::Remove),
            (1usize..8).prop_map(Op::Select),
        ]
    }

    proptest! {
        #[test]
        fn sum_tree_stays_consistent_under_any_operations(
            exponent in 0.0f64..2.0,
            ops in prop::collection::vec(op(), 0..300),
        ) {
            let mut selector = PrioritizedSelector::new(exponent);
            let mut model: Vec<(u64, f64)> = Vec::new();
            let mut next_key = 1;
            let mut rng = SmallRng::seed_from_u64(11);
            for op in ops {
                match op {
                    Op::Insert(p) => {
                        selector.insert(next_key, p);
                        model.push((next_key, p));
                        next_key += 1;
                    }
                    Op::Update(i, p) if !model.is_empty() => {
                        let i = i % model.len();
                        prop_assert!(selector.update(model[i].0, p));
                        model[i].1 = p;
                    }
                    Op::Remove(i) if !model.is_empty() => {
                        let (key, _) = model.swap_remove(i % model.len());
                        prop_assert!(selector.remove(key));
                    }
                    Op::Select(n) => {
                        let total: f64 = model.iter().map(|(_, p)| p.powf(exponent)).sum();
                        for (key, probability) in selector.select(n, &mut rng) {
                            let (_, p) = model.iter().find(|(k, _)| *k == key).copied().unwrap();
                            if total > 0.0 {
                                prop_assert!(p.powf(exponent) > 0.0, "zero weight picked");
                                prop_assert!((probability - p.powf(exponent) / total).abs() < 1e-9);
                            }
                        }
                    }
                    _ => {}
                }
                prop_assert!(selector.tree().is_consistent());
                prop_assert_eq!(selector.len(), model.len());
                let total: f64 = model.iter().map(|(_, p)| p.powf(exponent)).sum();
                prop_assert!((selector.tree().total() - total).abs() <= 1e-9 * total.max(1.0));
            }
        }
    }
}
