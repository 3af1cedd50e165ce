//! The rate limiter: when a table lets an insert or a sample proceed (see
//! [`RateLimiterSpec`] for the rule, shared by the min-size, samples-per-insert and queue kinds).

use fleetrl_proto::table::{LimiterBounds, RateLimiterSpec};

/// Lifetime counters of a table, as the rate limiter sees them. Persisted with the table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Counters {
    /// Items ever stored.
    pub inserted: u64,
    /// Items ever handed out in batches (an item sampled twice counts twice).
    pub sampled: u64,
    /// Items ever deleted: evicted, sampled out, or deleted on request.
    pub deleted: u64,
}

/// Decides whether an insert or a sample may proceed now; the table waits while it says no.
///
/// A pure decision from the counters and fixed bounds, called with the table's lock held.
/// Monotone, so the table knows whom to wake: a refused insert can only become allowed after a
/// sample or a deletion, a refused sample only after an insert.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimiter {
    spec: RateLimiterSpec,
    bounds: LimiterBounds,
}

impl RateLimiter {
    /// The limiter a (checked) spec describes.
    pub fn new(spec: RateLimiterSpec) -> RateLimiter {
        RateLimiter {
            spec,
            bounds: spec.bounds(),
        }
    }

    /// Short name for logs, e.g. `"queue"`.
    pub fn name(&self) -> &'static str {
        self.spec.name()
    }

    /// The limiter's bounds.
    pub fn bounds(&self) -> LimiterBounds {
        self.bounds
    }

    /// `inserted * samples_per_insert - sampled`: how far sampling lags the target.
    pub fn diff(&self, counters: &Counters) -> f64 {
        counters.inserted as f64 * self.bounds.samples_per_insert - counters.sampled as f64
    }

    /// Whether one more item may be stored into a table now holding `size` items.
    pub fn can_insert(&self, size: u64, counters: &Counters) -> bool {
        if size < self.bounds.min_size_to_sample {
            return true;
        }
        self.diff(counters) + self.bounds.samples_per_insert <= self.bounds.max_diff
    }

    /// Whether a batch of `n` items may be sampled from a table now holding `size` items.
    pub fn can_sample(&self, n: usize, size: u64, counters: &Counters) -> bool {
        size >= self.bounds.min_size_to_sample
            && self.diff(counters) - n as f64 >= self.bounds.min_diff
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn queue_allows_inserts_below_capacity_and_samples_when_enough() {
        let limiter = RateLimiter::new(RateLimiterSpec::Queue { size: 4 });
        let mut c = Counters::default();
        for _ in 0..4 {
            let size = c.inserted - c.deleted;
            assert!(limiter.can_insert(size, &c));
            c.inserted += 1;
        }
        assert!(!limiter.can_insert(4, &c));
        assert!(limiter.can_sample(4, 4, &c));
        assert!(!limiter.can_sample(5, 4, &c));
        c.sampled += 1;
        c.deleted += 1;
        assert!(limiter.can_insert(3, &c));
    }

    #[test]
    fn min_size_only_gates_samples() {
        let limiter = RateLimiter::new(RateLimiterSpec::MinSize { min_size: 3 });
        let c = Counters {
            inserted: 1_000_000,
            sampled: 0,
            deleted: 0,
        };
        assert!(limiter.can_insert(1_000_000, &c));
        assert!(!limiter.can_sample(1, 2, &Counters { inserted: 2, ..c }));
        assert!(limiter.can_sample(
            1,
            3,
            &Counters {
                inserted: 3,
                sampled: 1_000_000,
                deleted: 0
            }
        ));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert,
        Sample(usize),
        Evict,
    }

    proptest! {
        /// Whatever callers attempt, in any order, the ratio never leaves its error buffer
        /// once the table has reached its minimum size.
        #[test]
        fn samples_per_insert_stays_within_its_bounds(
            spi in 0.25f64..8.0,
            min_size in 1u64..50,
            slack in 0.0f64..20.0,
            ops in prop::collection::vec(prop_oneof![
                Just(Op::Insert),
                (1usize..16).prop_map(Op::Sample),
                Just(Op::Evict),
            ], 0..400),
        ) {
            let error_buffer = 2.0 * spi.max(1.0) + slack;
            let limiter = RateLimiter::new(RateLimiterSpec::SamplesPerInsert {
                samples_per_insert: spi,
                min_size_to_sample: min_size,
                error_buffer,
            });
            let bounds = limiter.bounds();
            let mut c = Counters::default();
            let mut reached_min_size = false;
            for op in ops {
                let size = c.inserted - c.deleted;
                match op {
                    Op::Insert if limiter.can_insert(size, &c) => {
                        c.inserted += 1;
                        if size + 1 > min_size {
                            prop_assert!(limiter.diff(&c) <= bounds.max_diff + 1e-9);
                        }
                    }
                    Op::Sample(n) if limiter.can_sample(n, size, &c) => {
                        c.sampled += n as u64;
                        prop_assert!(limiter.diff(&c) >= bounds.min_diff - 1e-9);
                    }
                    Op::Evict if size > 0 => c.deleted += 1,
                    _ => {}
                }
                reached_min_size |= c.inserted >= min_size;
                if reached_min_size && c.sampled > 0 {
                    prop_assert!(limiter.diff(&c) >= bounds.min_diff - 1e-9);
                }
            }
        }

        /// A limiter that was checked never deadlocks a lone client alternating inserts and
        /// samples of one item.
        #[test]
        fn checked_limiters_always_let_one_side_proceed(
            spi in 0.25f64..8.0,
            min_size in 1u64..50,
            steps in 1usize..500,
        ) {
            let limiter = RateLimiter::new(RateLimiterSpec::SamplesPerInsert {
                samples_per_insert: spi,
                min_size_to_sample: min_size,
                error_buffer: 2.0 * spi.max(1.0),
            });
            let mut c = Counters::default();
            for _ in 0..steps {
                let size = c.inserted;
                if limiter.can_sample(1, size, &c) {
                    c.sampled += 1;
                } else {
                    prop_assert!(limiter.can_insert(size, &c), "stalled at {:?}", c);
                    c.inserted += 1;
                }
            }
        }
    }
}
