//! Removers: which item a full replay table evicts to make room. One implementation per file.

mod fifo;

pub use fifo::FifoRemover;

/// Chooses the item a full table evicts before storing a new one.
///
/// Contract:
/// - Only the owning table calls it, with the table's lock held: no locking of its own, never
///   blocks, about O(log n) per call.
/// - The table inserts each key once and calls `remove` for every item it deletes, whether
///   evicted on this remover's advice or taken out by sampling.
/// - No method fails; `victim` is `None` only when no key is held.
pub trait Remover: Send + std::fmt::Debug {
    /// Tracks a newly stored `key`.
    fn insert(&mut self, key: u64);

    /// Stops tracking `key`; returns whether it was present.
    fn remove(&mut self, key: u64) -> bool;

    /// The key to evict next, without removing it.
    fn victim(&self) -> Option<u64>;
}

/// The contract every [`Remover`] must pass; each implementation's tests call it.
#[cfg(test)]
pub(crate) fn check_contract(mut remover: Box<dyn Remover>) {
    assert_eq!(remover.victim(), None, "an empty remover has no victim");
    for key in [1, 2, 3] {
        remover.insert(key);
    }
    let victim = remover.victim().expect("a victim while keys are held");
    assert_eq!(remover.victim(), Some(victim), "victim does not remove");
    assert!(remover.remove(victim));
    assert!(!remover.remove(victim));
    assert_ne!(remover.victim(), Some(victim));
    for key in [1, 2, 3] {
        remover.remove(key);
    }
    assert_eq!(remover.victim(), None);
}
