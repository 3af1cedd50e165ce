//! Samplers: which items a table hands out next. One implementation per file.

mod fifo;

pub use fifo::FifoSampler;

/// Picks the keys a table samples next.
///
/// Contract:
/// - Only the owning table calls it, with the table's lock held: implementations need no
///   locking of their own (hence `Send`, not `Sync`), must never block, and should cost about
///   O(log n) per key.
/// - The table inserts each key once, and calls `remove` for every item it deletes (sampled out
///   of a queue, evicted); `sample` itself never forgets a key.
/// - No method fails: the table validates requests (priority finite and >= 0, batch size) and
///   asks its rate limiter before calling `sample`.
pub trait Sampler: Send + std::fmt::Debug {
    /// Short name shown in table info, e.g. `"fifo"`.
    fn name(&self) -> &'static str;

    /// Makes `key` sampleable with `priority` (ignored by samplers without priorities).
    fn insert(&mut self, key: u64, priority: f64);

    /// Stops sampling `key`; returns whether it was present.
    fn remove(&mut self, key: u64) -> bool;

    /// The next `n` keys, in batch order. Samplers without replacement return
    /// `min(n, len)` distinct keys.
    fn sample(&mut self, n: usize) -> Vec<u64>;
}

/// The contract every [`Sampler`] must pass; each implementation's tests call it.
#[cfg(test)]
pub(crate) fn check_contract(mut sampler: Box<dyn Sampler>) {
    assert!(!sampler.name().is_empty());
    assert!(
        sampler.sample(3).is_empty(),
        "an empty sampler returns no keys"
    );
    for key in [10, 11, 12] {
        sampler.insert(key, 1.0);
    }
    let first = sampler.sample(2);
    assert_eq!(first.len(), 2);
    assert!(first.iter().all(|k| [10, 11, 12].contains(k)));
    assert_eq!(sampler.sample(3).len(), 3, "sampling does not forget keys");
    assert!(sampler.remove(11));
    assert!(!sampler.remove(11), "a removed key is gone");
    for _ in 0..8 {
        assert!(
            !sampler.sample(2).contains(&11),
            "a removed key is never sampled"
        );
    }
}
