//! FIFO sampler: the oldest items first, as an on-policy queue hands out rollouts.

use super::Sampler;
use crate::buffers::order::InsertionOrder;

/// Samples the oldest keys first, in insertion order; priorities are ignored.
#[derive(Debug, Default)]
pub struct FifoSampler {
    order: InsertionOrder,
}

impl FifoSampler {
    /// An empty FIFO sampler.
    pub fn new() -> FifoSampler {
        FifoSampler::default()
    }
}

impl Sampler for FifoSampler {
    fn name(&self) -> &'static str {
        "fifo"
    }

    fn insert(&mut self, key: u64, _priority: f64) {
        self.order.push(key);
    }

    fn remove(&mut self, key: u64) -> bool {
        self.order.remove(key)
    }

    fn sample(&mut self, n: usize) -> Vec<u64> {
        self.order.oldest(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_the_sampler_contract() {
        super::super::check_contract(Box::new(FifoSampler::new()));
    }

    #[test]
    fn samples_oldest_first() {
        let mut sampler = FifoSampler::new();
        for key in [5, 6, 7, 8] {
            sampler.insert(key, 0.0);
        }
        assert_eq!(sampler.sample(2), vec![5, 6]);
        sampler.remove(5);
        sampler.remove(6);
        assert_eq!(sampler.sample(5), vec![7, 8]);
    }
}
