//! Queue rate limiter: inserts wait while the queue is full, samples while it is too short.

use super::{Counters, RateLimiter};

/// Limits a queue of `capacity` items: an insert waits while `size >= capacity`, a sample of
/// `n` waits while `size < n`. Each item is then sampled exactly once if the table removes
/// sampled items, which is what makes a table an on-policy queue.
#[derive(Debug, Clone, Copy)]
pub struct QueueLimiter {
    capacity: u64,
}

impl QueueLimiter {
    /// A limiter for a queue holding at most `capacity` items.
    pub fn new(capacity: u64) -> QueueLimiter {
        QueueLimiter { capacity }
    }
}

impl RateLimiter for QueueLimiter {
    fn name(&self) -> &'static str {
        "queue"
    }

    fn can_insert(&self, size: u64, _counters: &Counters) -> bool {
        size < self.capacity
    }

    fn can_sample(&self, n: usize, size: u64, _counters: &Counters) -> bool {
        size >= n as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn insert_allowed_exactly_below_capacity(capacity in 1u64..64, size in 0u64..128) {
            let limiter = QueueLimiter::new(capacity);
            prop_assert_eq!(limiter.can_insert(size, &Counters::default()), size < capacity);
        }

        #[test]
        fn sample_allowed_exactly_when_enough_items(n in 1usize..64, size in 0u64..128) {
            let limiter = QueueLimiter::new(64);
            prop_assert_eq!(limiter.can_sample(n, size, &Counters::default()), size >= n as u64);
        }
    }
}
