//! Rate limiters: when a table lets an insert or a sample proceed. One implementation per file.

mod queue;

pub use queue::QueueLimiter;

/// Lifetime counters of a table, as rate limiters see them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Items ever stored.
    pub inserted: u64,
    /// Items ever handed out in batches (an item sampled twice counts twice).
    pub sampled: u64,
}

/// Decides whether an insert or a sample may proceed now; the table waits while it says no.
///
/// Contract:
/// - A pure decision from the arguments and the limiter's fixed configuration: no side effects,
///   never blocks, and is called with the table's lock held (hence `Send`, not `Sync`).
/// - Monotone, so the table knows whom to wake: a refused insert can only become allowed after
///   a sample (or a removal), and a refused sample only after an insert.
/// - Never fails: requests that can never be served (a batch larger than the table) are
///   rejected by the table before the limiter is asked.
pub trait RateLimiter: Send + std::fmt::Debug {
    /// Short name shown in logs, e.g. `"queue"`.
    fn name(&self) -> &'static str;

    /// Whether one item may be stored into a table now holding `size` items.
    fn can_insert(&self, size: u64, counters: &Counters) -> bool;

    /// Whether a batch of `n` items may be sampled from a table now holding `size` items.
    fn can_sample(&self, n: usize, size: u64, counters: &Counters) -> bool;
}
