//! A map from item keys to small values, shaped by how a table hands keys out: in increasing
//! order (1, 2, 3, ...), and, with the usual FIFO remover, retired oldest first.
//!
//! While the held keys are dense, the map is a window of values indexed by `key - base` (a
//! `VecDeque`, vacant entries marked in the value itself): 4-16 bytes per key, O(1) lookups,
//! no hashing. A million-item table's bookkeeping maps took 2^21-bucket hash maps before (a
//! hash map doubles at 7/8 full), 25 bytes a bucket for the items alone. When removals leave
//! the window mostly vacant (a uniform or LIFO remover, explicit deletes), the map moves to a
//! `BTreeMap` and stays there until it is cleared, so memory follows the keys held, never the
//! span of keys ever seen.

use std::collections::{BTreeMap, VecDeque};

/// A value that has a vacant form, so the dense window needs no `Option` beside it.
pub(crate) trait Vacant: Copy {
    /// The value an empty window entry holds.
    const VACANT: Self;

    /// Whether this is [`Vacant::VACANT`].
    fn is_vacant(&self) -> bool;
}

impl Vacant for u32 {
    const VACANT: u32 = u32::MAX;

    fn is_vacant(&self) -> bool {
        *self == u32::MAX
    }
}

/// Vacant entries a dense window may hold beyond twice its held keys before the map turns
/// sparse.
const SLACK: usize = 4096;

/// Keys to values; see the module docs.
#[derive(Debug)]
pub(crate) struct KeyMap<V> {
    repr: Repr<V>,
    len: usize,
}

#[derive(Debug)]
enum Repr<V> {
    /// `window[i]` is key `base + i`'s value; the first and last entries are never vacant.
    Dense {
        base: u64,
        window: VecDeque<V>,
    },
    Sparse(BTreeMap<u64, V>),
}

impl<V: Vacant> Default for KeyMap<V> {
    fn default() -> Self {
        KeyMap {
            repr: Repr::Dense {
                base: 0,
                window: VecDeque::new(),
            },
            len: 0,
        }
    }
}

impl<V: Vacant> KeyMap<V> {
    /// Keys held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether the map is in its dense form.
    #[cfg(test)]
    fn is_dense(&self) -> bool {
        matches!(self.repr, Repr::Dense { .. })
    }

    /// The value under `key`.
    pub(crate) fn get(&self, key: u64) -> Option<&V> {
        match &self.repr {
            Repr::Dense { base, window } => key
                .checked_sub(*base)
                .and_then(|at| window.get(usize::try_from(at).ok()?))
                .filter(|value| !value.is_vacant()),
            Repr::Sparse(map) => map.get(&key),
        }
    }

    /// The value under `key`, to change in place.
    pub(crate) fn get_mut(&mut self, key: u64) -> Option<&mut V> {
        match &mut self.repr {
            Repr::Dense { base, window } => key
                .checked_sub(*base)
                .and_then(|at| window.get_mut(usize::try_from(at).ok()?))
                .filter(|value| !value.is_vacant()),
            Repr::Sparse(map) => map.get_mut(&key),
        }
    }

    /// Whether `key` is held.
    pub(crate) fn contains(&self, key: u64) -> bool {
        self.get(key).is_some()
    }

    /// Puts `value` under `key`; returns the value it replaced. `value` must not be vacant.
    pub(crate) fn insert(&mut self, key: u64, value: V) -> Option<V> {
        debug_assert!(!value.is_vacant(), "a vacant value cannot be held");
        if let Repr::Dense { base, window } = &mut self.repr {
            if window.is_empty() {
                *base = key;
            }
            // The window after the insert spans `lowest..=highest`.
            let lowest = (*base).min(key);
            let highest = (*base + window.len() as u64).saturating_sub(1).max(key);
            let span = highest - lowest + 1;
            if span <= (2 * (self.len + 1) + SLACK) as u64 {
                while key < *base {
                    window.push_front(V::VACANT);
                    *base -= 1;
                }
                let at = (key - *base) as usize;
                while window.len() <= at {
                    window.push_back(V::VACANT);
                }
                let old = std::mem::replace(&mut window[at], value);
                if old.is_vacant() {
                    self.len += 1;
                    return None;
                }
                return Some(old);
            }
        }
        let old = self.sparse().insert(key, value);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    /// Takes `key`'s value out.
    pub(crate) fn remove(&mut self, key: u64) -> Option<V> {
        let old = match &mut self.repr {
            Repr::Dense { base, window } => {
                let at = usize::try_from(key.checked_sub(*base)?).ok()?;
                let entry = window.get_mut(at)?;
                if entry.is_vacant() {
                    return None;
                }
                let old = std::mem::replace(entry, V::VACANT);
                while window.front().is_some_and(Vacant::is_vacant) {
                    window.pop_front();
                    *base += 1;
                }
                while window.back().is_some_and(Vacant::is_vacant) {
                    window.pop_back();
                }
                old
            }
            Repr::Sparse(map) => map.remove(&key)?,
        };
        self.len -= 1;
        if let Repr::Dense { window, .. } = &self.repr {
            if window.len() > 2 * self.len + SLACK {
                self.sparse();
            }
        }
        Some(old)
    }

    /// Forgets every key and returns to the dense form.
    pub(crate) fn clear(&mut self) {
        *self = KeyMap::default();
    }

    /// Held keys and their values in increasing key order.
    pub(crate) fn iter(&self) -> Box<dyn DoubleEndedIterator<Item = (u64, &V)> + '_> {
        match &self.repr {
            Repr::Dense { base, window } => Box::new(
                window
                    .iter()
                    .enumerate()
                    .filter(|(_, value)| !value.is_vacant())
                    .map(move |(at, value)| (base + at as u64, value)),
            ),
            Repr::Sparse(map) => Box::new(map.iter().map(|(&key, value)| (key, value))),
        }
    }

    /// The sparse form, moving the window's held keys into it first if the map is dense.
    fn sparse(&mut self) -> &mut BTreeMap<u64, V> {
        if let Repr::Dense { base, window } = &mut self.repr {
            let map = std::mem::take(window)
                .into_iter()
                .enumerate()
                .filter(|(_, value)| !value.is_vacant())
                .map(|(at, value)| (*base + at as u64, value))
                .collect();
            self.repr = Repr::Sparse(map);
        }
        match &mut self.repr {
            Repr::Sparse(map) => map,
            Repr::Dense { .. } => unreachable!("made sparse just above"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[test]
    fn fifo_use_stays_dense_and_exact() {
        let mut map = KeyMap::<u32>::default();
        for key in 1..=10_000u64 {
            assert_eq!(map.insert(key, key as u32), None);
            if key > 1000 {
                assert_eq!(map.remove(key - 1000), Some((key - 1000) as u32));
            }
        }
        assert!(map.is_dense());
        assert_eq!(map.len(), 1000);
        assert_eq!(map.get(9001), Some(&9001));
        assert_eq!(map.get(9000), None);
        assert_eq!(map.get(10_001), None);
        assert_eq!(map.iter().next(), Some((9001, &9001)));
        assert_eq!(map.iter().next_back(), Some((10_000, &10_000)));
    }

    #[test]
    fn scattered_removals_turn_it_sparse_and_clear_returns_it_dense() {
        let mut map = KeyMap::<u32>::default();
        for key in 1..=20_000u64 {
            map.insert(key, 7);
        }
        for key in (1..=20_000u64).filter(|k| k % 10 != 0) {
            map.remove(key);
        }
        assert!(!map.is_dense());
        assert_eq!(map.len(), 2000);
        assert_eq!(map.get(20), Some(&7));
        assert_eq!(map.get(21), None);
        map.clear();
        assert!(map.is_dense() && map.len() == 0);
        map.insert(5, 1);
        assert_eq!(map.iter().collect::<Vec<_>>(), vec![(5, &1)]);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64, u32),
        Remove(u64),
        Clear,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            8 => (0u64..12_000, 0u32..1000).prop_map(|(k, v)| Op::Insert(k, v)),
            8 => (0u64..12_000).prop_map(Op::Remove),
            1 => Just(Op::Clear),
        ]
    }

    proptest! {
        #[test]
        fn behaves_like_a_map(ops in prop::collection::vec(op(), 1..400)) {
            let mut map = KeyMap::<u32>::default();
            let mut model = HashMap::new();
            for op in ops {
                match op {
                    Op::Insert(k, v) => prop_assert_eq!(map.insert(k, v), model.insert(k, v)),
                    Op::Remove(k) => prop_assert_eq!(map.remove(k), model.remove(&k)),
                    Op::Clear => {
                        map.clear();
                        model.clear();
                    }
                }
                prop_assert_eq!(map.len(), model.len());
            }
            let mut expected: Vec<(u64, u32)> = model.into_iter().collect();
            expected.sort_unstable();
            let held: Vec<(u64, u32)> = map.iter().map(|(k, &v)| (k, v)).collect();
            prop_assert_eq!(held, expected);
            let reversed: Vec<u64> = map.iter().rev().map(|(k, _)| k).collect();
            prop_assert!(reversed.windows(2).all(|w| w[0] > w[1]));
        }
    }
}
