//! Selectors: which items a table hands out next (as its sampler) or evicts next (as its
//! remover). As in Reverb, one abstraction serves both roles; one implementation per file.

mod ordered;
mod prioritized;
mod uniform;

pub use ordered::{Order, OrderedSelector};
pub use prioritized::{PrioritizedSelector, SumTree};
pub use uniform::UniformSelector;

use rand::rngs::SmallRng;

use fleetrl_proto::table::SelectorKind;

/// Picks keys among the items a table holds.
///
/// Contract:
/// - Only the owning table calls it, with the table's lock held: no locking of its own (hence
///   `Send`, not `Sync`), never blocks, about O(log n) per key.
/// - The table inserts each key once, updates priorities only of held keys, and calls `remove`
///   for every item it deletes; `select` itself never forgets a key.
/// - No method fails: the table validates priorities (finite, >= 0) and batch sizes first.
pub trait Selector: Send + std::fmt::Debug {
    /// Short name shown in table info, e.g. `"fifo"`.
    fn name(&self) -> &'static str;

    /// Tracks `key` with `priority` (ignored by selectors without priorities).
    fn insert(&mut self, key: u64, priority: f64);

    /// Changes the priority of a held `key`; returns whether it was held.
    fn update(&mut self, key: u64, priority: f64) -> bool;

    /// Stops tracking `key`; returns whether it was held.
    fn remove(&mut self, key: u64) -> bool;

    /// Forgets every key.
    fn clear(&mut self);

    /// Keys held.
    fn len(&self) -> usize;

    /// Whether no key is held.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Up to `n` keys with the probability each had of being picked. Selectors with
    /// replacement return exactly `n` keys (none when empty); the others return
    /// `min(n, len)` distinct keys in their order, each with probability 1.
    fn select(&mut self, n: usize, rng: &mut SmallRng) -> Vec<(u64, f64)>;
}

/// The selector a [`SelectorKind`] names, empty.
pub fn build(kind: SelectorKind) -> Box<dyn Selector> {
    match kind {
        SelectorKind::Uniform => Box::new(UniformSelector::default()),
        SelectorKind::Prioritized { exponent } => Box::new(PrioritizedSelector::new(exponent)),
        SelectorKind::Fifo => Box::new(OrderedSelector::new(Order::Fifo)),
        SelectorKind::Lifo => Box::new(OrderedSelector::new(Order::Lifo)),
        SelectorKind::MaxHeap => Box::new(OrderedSelector::new(Order::MaxHeap)),
        SelectorKind::MinHeap => Box::new(OrderedSelector::new(Order::MinHeap)),
    }
}

/// The contract every [`Selector`] must pass; each implementation's tests call it.
#[cfg(test)]
pub(crate) fn check_contract(mut selector: Box<dyn Selector>) {
    use rand::SeedableRng;
    let mut rng = SmallRng::seed_from_u64(7);
    assert!(!selector.name().is_empty());
    assert!(
        selector.select(3, &mut rng).is_empty(),
        "an empty selector picks nothing"
    );
    for key in [10, 11, 12] {
        selector.insert(key, 1.0);
    }
    assert_eq!(selector.len(), 3);
    let first = selector.select(2, &mut rng);
    assert_eq!(first.len(), 2);
    for (key, probability) in &first {
        assert!([10, 11, 12].contains(key));
        assert!(*probability > 0.0 && *probability <= 1.0);
    }
    assert_eq!(selector.len(), 3, "selecting does not forget keys");
    assert!(selector.update(12, 5.0));
    assert!(
        !selector.update(99, 5.0),
        "updating an unknown key reports it"
    );
    assert!(selector.remove(11));
    assert!(!selector.remove(11), "a removed key is gone");
    for _ in 0..16 {
        assert!(
            selector.select(2, &mut rng).iter().all(|(k, _)| *k != 11),
            "a removed key is never picked"
        );
    }
    selector.clear();
    assert!(selector.is_empty());
    assert!(selector.select(1, &mut rng).is_empty());
}
