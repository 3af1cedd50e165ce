//! Uniform selector: every held key equally likely, drawn with replacement.

use rand::rngs::SmallRng;
use rand::Rng;

use super::Selector;
use crate::buffers::keymap::KeyMap;

/// Keys in a dense vector (swap-remove), so insert, remove and pick are O(1). Each key's
/// place is a [`KeyMap`]: 4 bytes per key while the held keys are dense.
#[derive(Debug, Default)]
pub struct UniformSelector {
    keys: Vec<u64>,
    index_of: KeyMap<u32>,
}

impl Selector for UniformSelector {
    fn name(&self) -> &'static str {
        "uniform"
    }

    fn insert(&mut self, key: u64, _priority: f64) {
        if self.index_of.contains(key) {
            return;
        }
        // A table holds at most 2^31 items (`TableSpec::check`), so an index fits a u32.
        self.index_of.insert(key, self.keys.len() as u32);
        self.keys.push(key);
    }

    fn update(&mut self, key: u64, _priority: f64) -> bool {
        self.index_of.contains(key)
    }

    fn remove(&mut self, key: u64) -> bool {
        let Some(index) = self.index_of.remove(key) else {
            return false;
        };
        self.keys.swap_remove(index as usize);
        if let Some(&moved) = self.keys.get(index as usize) {
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
