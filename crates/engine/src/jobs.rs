//! The job table: every tracked job's id and record side by side in a slab of fixed-size chunks, found
//! by id through a hash table that holds only slot numbers.
//!
//! It replaces a `HashMap<Arc<str>, Box<JobRecord>>`, whose buckets (a 16-byte id and an 8-byte box,
//! up to twice as many buckets as jobs right after the table grows) cost about 50 bytes per job at a
//! million jobs, on top of a separate allocation per record. Here a bucket is a 4-byte slot number
//! (about 10 bytes per job at the same load), a record lives in its slot with its id, and the slab
//! grows one chunk at a time, so a record never moves when the table grows and growing never copies
//! the records. A removed job's slot is reused by the next job.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use hashbrown::HashTable;
use rustc_hash::FxHasher;
use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::state::JobRecord;

/// Slots per chunk of the slab.
const CHUNK: usize = 1024;

/// A slot: the job's id and record, or nothing when its job was removed.
type Slot = Option<(Arc<str>, JobRecord)>;

/// Tracked jobs by id.
#[derive(Clone, Default)]
pub struct JobTable {
    /// Slot numbers, hashed by their job's id.
    index: HashTable<u32>,
    /// The slab: chunks of `CHUNK` slots, each allocated whole when the previous one fills.
    chunks: Vec<Vec<Slot>>,
    /// Empty slots, reused before the slab grows.
    free: Vec<u32>,
}

fn hash_id(id: &str) -> u64 {
    let mut h = FxHasher::default();
    id.hash(&mut h);
    h.finish()
}

fn slot(chunks: &[Vec<Slot>], s: u32) -> &(Arc<str>, JobRecord) {
    match &chunks[s as usize / CHUNK][s as usize % CHUNK] {
        Some(entry) => entry,
        None => unreachable!("the index holds only full slots"),
    }
}

impl JobTable {
    fn find(&self, id: &str) -> Option<u32> {
        let chunks = &self.chunks;
        self.index.find(hash_id(id), |&s| &*slot(chunks, s).0 == id).copied()
    }

    fn slot_mut(&mut self, s: u32) -> &mut Slot {
        &mut self.chunks[s as usize / CHUNK][s as usize % CHUNK]
    }

    /// The record of job `id`.
    pub fn get(&self, id: &str) -> Option<&JobRecord> {
        self.find(id).map(|s| &slot(&self.chunks, s).1)
    }

    /// The record of job `id`, to change it.
    pub fn get_mut(&mut self, id: &str) -> Option<&mut JobRecord> {
        let s = self.find(id)?;
        self.slot_mut(s).as_mut().map(|(_, r)| r)
    }

    /// Whether job `id` is tracked.
    pub fn contains_key(&self, id: &str) -> bool {
        self.find(id).is_some()
    }

    /// Tracks job `id` with `record`; returns the record it replaces, if the job was tracked.
    pub fn insert(&mut self, id: Arc<str>, record: JobRecord) -> Option<JobRecord> {
        let hash = hash_id(&id);
        let chunks = &self.chunks;
        if let Some(&s) = self.index.find(hash, |&s| *slot(chunks, s).0 == *id) {
            return self.slot_mut(s).as_mut().map(|(_, r)| std::mem::replace(r, record));
        }
        let s = match self.free.pop() {
            Some(s) => s,
            None => {
                if self.chunks.last().is_none_or(|c| c.len() == CHUNK) {
                    self.chunks.push(Vec::with_capacity(CHUNK));
                }
                let n = (self.chunks.len() - 1) * CHUNK + self.chunks.last().map_or(0, Vec::len);
                #[expect(clippy::panic, reason = "4 billion tracked jobs would take more than 500 GB of records")]
                let Ok(s) = u32::try_from(n) else { panic!("more than {} tracked jobs", u32::MAX) };
                if let Some(c) = self.chunks.last_mut() {
                    c.push(None);
                }
                s
            }
        };
        *self.slot_mut(s) = Some((id, record));
        let chunks = &self.chunks;
        self.index.insert_unique(hash, s, |&s| hash_id(&slot(chunks, s).0));
        None
    }

    /// Stops tracking job `id`; returns its id and record.
    pub fn remove_entry(&mut self, id: &str) -> Option<(Arc<str>, JobRecord)> {
        let chunks = &self.chunks;
        let found = self.index.find_entry(hash_id(id), |&s| &*slot(chunks, s).0 == id).ok()?;
        let (s, _) = found.remove();
        self.free.push(s);
        self.slot_mut(s).take()
    }

    /// Stops tracking job `id`; returns its record.
    pub fn remove(&mut self, id: &str) -> Option<JobRecord> {
        self.remove_entry(id).map(|(_, r)| r)
    }

    /// Every tracked job, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &JobRecord)> {
        self.chunks.iter().flatten().flatten().map(|(id, r)| (id, r))
    }

    /// Every tracked job's record.
    pub fn values(&self) -> impl Iterator<Item = &JobRecord> {
        self.iter().map(|(_, r)| r)
    }

    /// Every tracked job's record, to change it.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut JobRecord> {
        self.chunks.iter_mut().flatten().flatten().map(|(_, r)| r)
    }

    /// Number of tracked jobs.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// True when no job is tracked.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }
}

impl fmt::Debug for JobTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// Serialized as a map from id to record, as the hash map it replaced was.
impl Serialize for JobTable {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.iter())
    }
}

impl<'de> Deserialize<'de> for JobTable {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<JobTable, D::Error> {
        struct Jobs;
        impl<'de> Visitor<'de> for Jobs {
            type Value = JobTable;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map from job id to job record")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<JobTable, A::Error> {
                let mut jobs = JobTable::default();
                while let Some((id, record)) = map.next_entry::<Arc<str>, JobRecord>()? {
                    jobs.insert(id, record);
                }
                Ok(jobs)
            }
        }
        d.deserialize_map(Jobs)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use bursar_model::Gpus;

    fn record(gpus: u32) -> JobRecord {
        let mut r: JobRecord = serde_json::from_str(crate::state::tests::STORED_RECORD).unwrap();
        r.gpus = gpus.into();
        r
    }

    #[test]
    fn a_slot_is_an_id_and_a_record() {
        assert_eq!(size_of::<Slot>(), size_of::<(Arc<str>, JobRecord)>());
    }

    #[test]
    fn serializes_as_a_map_and_back() {
        let mut jobs = JobTable::default();
        jobs.insert(Arc::from("a"), record(1));
        jobs.insert(Arc::from("b"), record(2));
        let json = serde_json::to_string(&jobs).unwrap();
        let as_map: BTreeMap<String, JobRecord> = serde_json::from_str(&json).unwrap();
        assert_eq!(as_map.len(), 2);
        assert_eq!(as_map["b"].gpus, 2);
        let back: JobTable = serde_json::from_str(&json).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back.get("a").map(|r| r.gpus), Some(Gpus::whole(1)));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u16, u32),
        Remove(u16),
        Change(u16, u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Ids from a small range, so inserts meet existing jobs and removals find some.
        let id = 0u16..3000;
        prop_oneof![
            3 => (id.clone(), any::<u32>()).prop_map(|(i, g)| Op::Insert(i, g)),
            2 => id.clone().prop_map(Op::Remove),
            1 => (id, any::<u32>()).prop_map(|(i, g)| Op::Change(i, g)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Whatever the sequence of inserts, removals and changes, the table holds what a map would,
        /// and never more slots than the most jobs it held at once.
        #[test]
        fn behaves_as_a_map(ops in proptest::collection::vec(op(), 1..4000)) {
            let mut jobs = JobTable::default();
            let mut model: BTreeMap<String, u32> = BTreeMap::new();
            let mut most = 0;
            for op in ops {
                match op {
                    Op::Insert(i, g) => {
                        let old = jobs.insert(Arc::from(i.to_string()), record(g)).map(|r| r.gpus.floor());
                        prop_assert_eq!(old, model.insert(i.to_string(), g));
                    }
                    Op::Remove(i) => {
                        let old = jobs.remove_entry(&i.to_string()).map(|(id, r)| (id.to_string(), r.gpus.floor()));
                        prop_assert_eq!(old, model.remove_entry(&i.to_string()));
                    }
                    Op::Change(i, g) => {
                        if let Some(r) = jobs.get_mut(&i.to_string()) {
                            r.gpus = g.into();
                        }
                        if let Some(v) = model.get_mut(&i.to_string()) {
                            *v = g;
                        }
                    }
                }
                most = most.max(model.len());
                prop_assert_eq!(jobs.len(), model.len());
            }
            let mut held: Vec<(String, u32)> = jobs.iter().map(|(id, r)| (id.to_string(), r.gpus.floor())).collect();
            held.sort();
            prop_assert_eq!(held, model.iter().map(|(k, v)| (k.clone(), *v)).collect::<Vec<_>>());
            for (k, v) in &model {
                prop_assert_eq!(jobs.get(k).map(|r| r.gpus), Some(Gpus::whole(*v)));
                prop_assert!(jobs.contains_key(k));
            }
            let slots: usize = jobs.chunks.iter().map(Vec::len).sum();
            prop_assert_eq!(slots, most, "a slot per job at the peak, no more");
        }
    }
}
