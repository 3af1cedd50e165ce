//! Uniform selector: every held key equally likely, drawn with replacement.

use std::collections::HashMap;

use rand::rngs::SmallRng;
use rand::Rng;

use super::Selector;

/// Keys in a dense vector (swap-remove), so insert, remove and pick are O(1).
#[derive(Debug, Default)]
pub struct UniformSelector {
    keys: Vec<u64>,
    index_of: HashMap<u64, usize>,
}

impl Selector for UniformSelector {
    fn name(&self) -> &'static str {
        "uniform"
    }

    fn insert(&mut self, key: u64, _priority: f64) {
        if self.index_of.contains_key(&key) {
            return;
        }
        self.index_of.insert(key, self.keys.len());
        self.keys.push(key);
    }

    fn update(&mut self, key: u64, _priority: f64) -> bool {
        self.index_of.contains_key(&key)
    }

    fn remove(&mut self, key: u64) -> bool {
        let Some(index) = self.index_of.remove(&key) else {
            return false;
        };
        self.keys.swap_remove(index);
        if let Some(&moved) = self.keys.get(index) {
            self.index_of.insert(moved, index);
        }
        true
    }

    fn clear(&mut self) {
        self.keys.clear();
        self.index_of.clear();
    }

    fn len(&self) -> usize {
        self.keys.len()
    }

    fn select(&mut self, n: usize, rng: &mut SmallRng) -> Vec<(u64, f64)> {
        if self.keys.is_empty() {
            return Vec::new();
        }
        let probability = 1.0 / self.keys.len() as f64;
        (0..n)
            .map(|_| (self.keys[rng.random_range(0..self.keys.len())], probability))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_the_selector_contract() {
        super::super::check_contract(Box::<UniformSelector>::default());
    }
}
