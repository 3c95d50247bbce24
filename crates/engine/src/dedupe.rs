//! Remembering event ids so that a resent event is ignored, in bounded memory.
//!
//! Each id is kept as a 128-bit hash (XXH3-128 with a fixed seed: one pass, deterministic across
//! runs, machines and versions, since XXH3 is a specified algorithm) for a window of event time
//! (24 h by default) and up to a capacity (4 million ids by default), whichever is reached first. A
//! producer that resends within the window is deduplicated; the memory bound is about
//! `capacity × 40 bytes` (a 32-byte queue entry, and a 4-byte position and a control byte in the
//! table) whatever the length of the input.
//!
//! The hashes are stored once, in arrival order (the queue that ages them out); the look-up table
//! holds only each one's position in that queue, so it is a quarter of the size it would be holding
//! the 16-byte hashes themselves (it was, until December 2026: 48 bytes per id).
//!
//! Snapshots written before December 2026 hold ids hashed with two SipHash-2-4 passes (hash version
//! 1). Restored, those entries stay at the front of the queue until they leave the window, and while
//! any remains an id is looked up under both hashes, so an event resent across the upgrade is still
//! a duplicate; new ids are stored under XXH3 only.

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};

use bursar_model::{Duration, Timestamp};
use hashbrown::HashTable;
use serde::{Deserialize, Serialize};

/// The hash of the ids this build stores.
const HASH_VERSION: u8 = 2;

/// The set of recently seen event ids.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Dedupe {
    /// Positions in `order` of the remembered hashes, as sequence numbers: `front` is the first
    /// entry's (wrapping; `capacity` is at most `u32::MAX`).
    #[serde(skip)]
    seen: HashTable<u32>,
    #[serde(skip)]
    front: u32,
    order: VecDeque<(Timestamp, u128)>,
    window: Duration,
    capacity: usize,
    /// The hash of the entries of `order` past the first `legacy` (absent in old snapshots: 1).
    #[serde(default = "version_1")]
    hash: u8,
    /// Entries at the front of `order` hashed with [`legacy_hash`] (version 1).
    #[serde(default)]
    legacy: usize,
}

fn version_1() -> u8 {
    1
}

fn id_hash(id: &str) -> u128 {
    xxhash_rust::xxh3::xxh3_128_with_seed(id.as_bytes(), 0x6275_7273_6172_6964)
}

/// Version 1: two SipHash-2-4 passes with fixed keys, as snapshots before December 2026 hold.
fn legacy_hash(id: &str) -> u128 {
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
        Dedupe {
            seen: HashTable::new(),
            front: 0,
            order: VecDeque::new(),
            window,
            capacity: capacity.clamp(1, u32::MAX as usize),
            hash: HASH_VERSION,
            legacy: 0,
        }
    }

    /// The table's hash of a stored hash (both hashes are uniform: their low half will do).
    fn key(h: u128) -> u64 {
        h as u64
    }

    /// Whether hash `h` is remembered.
    fn has(&self, h: u128) -> bool {
        let (order, front) = (&self.order, self.front);
        self.seen.find(Self::key(h), |&s| order[s.wrapping_sub(front) as usize].1 == h).is_some()
    }

    /// Records `id` seen at `now`; false if it was already seen (a duplicate).
    pub fn insert(&mut self, id: &str, now: Timestamp) -> bool {
        if self.legacy > 0 && self.has(legacy_hash(id)) {
            return false;
        }
        let h = id_hash(id);
        if self.has(h) {
            return false;
        }
        self.order.push_back((now, h));
        let (order, front) = (&self.order, self.front);
        let seq = front.wrapping_add((order.len() - 1) as u32);
        self.seen.insert_unique(Self::key(h), seq, |&s| Self::key(order[s.wrapping_sub(front) as usize].1));
        let horizon = Timestamp(now.0.saturating_sub(self.window.0));
        while let Some(&(t, old)) = self.order.front() {
            if t < horizon || self.order.len() > self.capacity {
                let front = self.front;
                if let Ok(found) = self.seen.find_entry(Self::key(old), |&s| s == front) {
                    found.remove();
                }
                self.order.pop_front();
                self.front = front.wrapping_add(1);
                self.legacy = self.legacy.saturating_sub(1);
            } else {
                break;
            }
        }
        true
    }

    /// True when `id` was seen and is still remembered (what [`Dedupe::insert`] would call a duplicate).
    pub fn contains(&self, id: &str) -> bool {
        self.has(id_hash(id)) || (self.legacy > 0 && self.has(legacy_hash(id)))
    }

    /// Ids remembered.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// True when nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Rebuilds the hash set after deserialisation; a version-1 snapshot's entries become the legacy
    /// front of the queue.
    pub fn rebuild(&mut self) {
        if self.hash != HASH_VERSION {
            self.legacy = self.order.len();
            self.hash = HASH_VERSION;
        }
        self.legacy = self.legacy.min(self.order.len());
        self.front = 0;
        let order = &self.order;
        let mut seen = HashTable::with_capacity(order.len());
        for (i, (_, h)) in order.iter().enumerate() {
            seen.insert_unique(Self::key(*h), i as u32, |&s| Self::key(order[s as usize].1));
        }
        self.seen = seen;
    }
}

impl Default for Dedupe {
    fn default() -> Self {
        Dedupe::new(Duration::hours(24), 4_000_000)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Against the obvious model (the ids of the last `capacity` inserts inside the window), over
        /// random ids, times and capacities, through a snapshot and back at a random point.
        #[test]
        fn agrees_with_a_queue_of_the_recent_ids(
            ops in proptest::collection::vec((0u16..400, 0i64..50), 1..1500),
            capacity in 1usize..300,
            cut in 0usize..1500,
        ) {
            let window = Duration(2_000);
            let mut d = Dedupe::new(window, capacity);
            let mut model: VecDeque<(i64, String)> = VecDeque::new();
            let mut now = 0i64;
            for (i, (id, step)) in ops.into_iter().enumerate() {
                if i == cut {
                    d = serde_json::from_str(&serde_json::to_string(&d).unwrap()).unwrap();
                    d.rebuild();
                }
                now += step;
                let id = format!("e{id}");
                let fresh = !model.iter().any(|(_, x)| *x == id);
                prop_assert_eq!(d.contains(&id), !fresh);
                prop_assert_eq!(d.insert(&id, Timestamp(now)), fresh, "{} at {}", id, now);
                if fresh {
                    model.push_back((now, id));
                    while model.front().is_some_and(|(t, _)| *t < now - window.0) || model.len() > capacity {
                        model.pop_front();
                    }
                }
                prop_assert_eq!(d.len(), model.len());
                prop_assert_eq!(d.seen.len(), model.len());
            }
            let ids: HashSet<&str> = model.iter().map(|(_, x)| x.as_str()).collect();
            for id in 0..400 {
                let id = format!("e{id}");
                prop_assert_eq!(d.contains(&id), ids.contains(id.as_str()));
            }
        }
    }

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

    #[test]
    fn ids_remembered_by_an_old_snapshot_stay_duplicates_until_they_leave_the_window() {
        // A version-1 snapshot: SipHash entries, no `hash` or `legacy` field.
        // (serde_json's `Value` cannot hold a u128, so the line is written by hand.)
        let entry = |t: i64, id: &str| serde_json::to_string(&(Timestamp(t), legacy_hash(id))).unwrap();
        let window = serde_json::to_string(&Duration::hours(1)).unwrap();
        let old = format!(r#"{{"order":[{},{}],"window":{window},"capacity":10}}"#, entry(0, "a"), entry(1, "b"));
        let mut d: Dedupe = serde_json::from_str(&old).unwrap();
        d.rebuild();
        assert_eq!((d.hash, d.legacy), (HASH_VERSION, 2));
        assert!(d.contains("a") && d.contains("b"));
        assert!(!d.insert("a", Timestamp(2)), "resent across the upgrade: still a duplicate");
        assert!(d.insert("c", Timestamp(3)));
        assert!(!d.insert("c", Timestamp(4)));
        // A snapshot of the mixed state keeps the split.
        let mut again: Dedupe = serde_json::from_str(&serde_json::to_string(&d).unwrap()).unwrap();
        again.rebuild();
        assert_eq!(again.legacy, 2);
        assert!(!again.insert("b", Timestamp(5)) && !again.insert("c", Timestamp(5)));
        // Once the old entries leave the window, only XXH3 is computed.
        assert!(again.insert("d", Timestamp(Duration::hours(2).0)));
        assert_eq!((again.legacy, again.len()), (0, 1));
        assert!(again.insert("a", Timestamp(Duration::hours(2).0 + 1)), "forgotten with the window");
    }
}
