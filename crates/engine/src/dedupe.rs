//! Remembering event ids so that a resent event is ignored, in bounded memory.
//!
//! Each id is kept as a 128-bit hash (two SipHash-2-4 passes with fixed keys: deterministic across runs
//! and machines) for a window of event time (24 h by default) and up to a capacity (4 million ids by
//! default), whichever is reached first. A producer that resends within the window is deduplicated; the
//! memory bound is `capacity × ~40 bytes` whatever the length of the input.

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};

use bursar_model::{Duration, Timestamp};
use rustc_hash::FxHashSet;
use serde::{Deserialize, Serialize};

/// The set of recently seen event ids.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Dedupe {
    #[serde(skip)]
    seen: FxHashSet<u128>,
    order: VecDeque<(Timestamp, u128)>,
    window: Duration,
    capacity: usize,
}

fn id_hash(id: &str) -> u128 {
    #[expect(deprecated, reason = "SipHasher is the only std hasher with fixed, documented keys")]
    let mut a = std::hash::SipHasher::new_with_keys(0x6275_7273_6172_0001, 0x6964_7300_0000_0001);
    #[expect(deprecated, reason = "SipHasher is the only std hasher with fixed, documented keys")]
    let mut b = std::hash::SipHasher::new_with_keys(0x6275_7273_6172_0002, 0x6964_7300_0000_0002);
    id.hash(&mut a);
    id.hash(&mut b);
    (u128::from(a.finish()) << 64) | u128::from(b.finish())
}

impl Dedupe {
    /// A set that remembers ids for `window` of event time, at most `capacity` of them.
    pub fn new(window: Duration, capacity: usize) -> Dedupe {
        Dedupe { seen: FxHashSet::default(), order: VecDeque::new(), window, capacity: capacity.max(1) }
    }

    /// Records `id` seen at `now`; false if it was already seen (a duplicate).
    pub fn insert(&mut self, id: &str, now: Timestamp) -> bool {
        let h = id_hash(id);
        if !self.seen.insert(h) {
            return false;
        }
        self.order.push_back((now, h));
        let horizon = Timestamp(now.0.saturating_sub(self.window.0));
        while let Some(&(t, old)) = self.order.front() {
            if t < horizon || self.order.len() > self.capacity {
                self.order.pop_front();
                self.seen.remove(&old);
            } else {
                break;
            }
        }
        true
    }

    /// True when `id` was seen and is still remembered (what [`Dedupe::insert`] would call a duplicate).
    pub fn contains(&self, id: &str) -> bool {
        self.seen.contains(&id_hash(id))
    }

    /// Ids remembered.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// True when nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Rebuilds the hash set after deserialisation.
    pub fn rebuild(&mut self) {
        self.seen = self.order.iter().map(|(_, h)| *h).collect();
    }
}

impl Default for Dedupe {
    fn default() -> Self {
        Dedupe::new(Duration::hours(24), 4_000_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_within_window_and_capacity() {
        let mut d = Dedupe::new(Duration::hours(1), 3);
        assert!(d.insert("a", Timestamp(0)));
        assert!(!d.insert("a", Timestamp(1)));
        assert!(d.insert("b", Timestamp(2)));
        assert!(d.insert("c", Timestamp(3)));
        assert!(d.insert("d", Timestamp(4))); // evicts "a" by capacity
        assert!(d.insert("a", Timestamp(5)));
        // Window: everything older than an hour goes.
        assert!(d.insert("e", Timestamp(Duration::hours(2).0)));
        assert_eq!(d.len(), 1);
    }
}
