//! The server's view of the audit log (`bursar-audit`): the calls the engine thread and the readers
//! make, with sequence numbers as `u64` and errors flattened to text for answers and logs.
//!
//! One [`Store`] opened with [`Store::open`] is the single writer (owned by the engine thread); readers
//! (decision streams, duplicate-admission look-ups) open their own with [`Store::open_read`], which
//! SQLite's WAL mode lets run beside the writer.

use std::path::Path;
use std::sync::Arc;

use bursar_audit::{AuditLog, Durability};
use bursar_engine::PolicySet;
use bursar_model::{Decision, Event};

/// An audit-log failure, as text (the audit crate's message, which says what was being done).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct StoreError(pub String);

impl From<bursar_audit::AuditError> for StoreError {
    fn from(e: bursar_audit::AuditError) -> Self {
        StoreError(e.to_string())
    }
}

/// One applied event and its decisions, to be appended.
#[derive(Debug)]
pub struct Entry {
    /// The line as received (or the synthetic tick line).
    pub raw: String,
    /// The event.
    pub event: Event,
    /// Its decisions.
    pub decisions: Vec<Decision>,
    /// Digest of the policy set that made them.
    pub policy_set: String,
}

/// What an append assigned.
#[derive(Debug, Default)]
pub struct Appended {
    /// The newest event seq written, if any.
    pub last_event_seq: Option<u64>,
    /// Per entry, the seqs of its decisions (empty for an entry the log already had).
    pub decision_seqs: Vec<Vec<u64>>,
}

/// The audit log.
#[derive(Debug)]
pub struct Store {
    log: AuditLog,
}

fn u(seq: i64) -> u64 {
    u64::try_from(seq).unwrap_or(0)
}

fn i(seq: u64) -> i64 {
    i64::try_from(seq).unwrap_or(i64::MAX)
}

impl Store {
    /// Opens (creating) the audit database for writing. `durable` is `synchronous=FULL`.
    pub fn open(path: &Path, durable: bool) -> Result<Store, StoreError> {
        let d = if durable { Durability::Durable } else { Durability::Fast };
        Ok(Store { log: AuditLog::open(path, d)? })
    }

    /// Opens the audit database read-only.
    pub fn open_read(path: &Path) -> Result<Store, StoreError> {
        Ok(Store { log: AuditLog::open_read(path)? })
    }

    /// Appends entries in one transaction.
    pub fn append(&mut self, entries: &[Entry]) -> Result<Appended, StoreError> {
        let rows: Vec<bursar_audit::Entry> = entries
            .iter()
            .map(|e| bursar_audit::Entry::new(&e.raw, &e.event, e.decisions.clone(), Arc::from(e.policy_set.as_str())))
            .collect();
        let done = self.log.append(&rows)?;
        let mut out = Appended::default();
        for a in done {
            if let Some(s) = a.event_seq {
                out.last_event_seq = Some(u(s));
            }
            out.decision_seqs.push(a.decisions.map(u).collect());
        }
        Ok(out)
    }

    /// Records a policy load: `set` on success, `error` on failure (the set in force stays).
    pub fn record_load(
        &mut self,
        _event_seq: u64,
        set: Option<&Arc<PolicySet>>,
        error: Option<&str>,
    ) -> Result<(), StoreError> {
        match (set, error) {
            (Some(set), _) => {
                self.log.record_policy_set(set.digest(), set.files())?;
            }
            (None, Some(e)) => {
                self.log.record_policy_failure(e, None)?;
            }
            (None, None) => {}
        }
        Ok(())
    }

    /// Records a failed load while `in_force` stays in force.
    pub fn record_failure(&mut self, error: &str, in_force: &str) -> Result<(), StoreError> {
        self.log.record_policy_failure(error, Some(in_force))?;
        Ok(())
    }

    /// Stores an engine snapshot covering events up to `event_seq`, keeping the two newest.
    pub fn save_snapshot(&mut self, event_seq: u64, policy_set: &str, blob: &[u8]) -> Result<(), StoreError> {
        self.log.save_snapshot(i(event_seq), Some(policy_set), blob)?;
        self.log.prune_snapshots(2)?;
        Ok(())
    }

    /// The newest snapshot: the event seq it covers and its blob.
    pub fn load_snapshot(&self) -> Result<Option<(u64, Vec<u8>)>, StoreError> {
        Ok(self.log.latest_snapshot()?.map(|s| (u(s.event_seq), s.blob)))
    }

    /// Up to `limit` logged events after `seq`: their seqs and raw lines.
    pub fn events_after(&self, seq: u64, limit: usize) -> Result<Vec<(u64, String)>, StoreError> {
        Ok(self.log.events_since(i(seq), limit)?.into_iter().map(|e| (u(e.seq), e.raw)).collect())
    }

    /// Up to `limit` decisions after `seq`: their seqs and wire JSON.
    pub fn decisions_after(&self, seq: u64, limit: usize) -> Result<Vec<(u64, String)>, StoreError> {
        Ok(self.log.decisions_since(i(seq), limit)?.into_iter().map(|d| (u(d.seq), d.json)).collect())
    }

    /// The newest event seq in the log.
    pub fn last_event_seq(&self) -> u64 {
        u(self.log.last_event_seq())
    }

    /// The admission decision logged for event `event_id` about job `job`, with its seq.
    pub fn admission_of(&self, job: &str, event_id: &str) -> Result<Option<(u64, String)>, StoreError> {
        let mut st = self
            .log
            .connection()
            .prepare_cached(
                "SELECT seq, json FROM decisions WHERE job = ?1 AND event_id = ?2 AND admission = 1 ORDER BY seq LIMIT 1",
            )
            .map_err(|e| StoreError(format!("audit log: cannot look up an admission: {e}")))?;
        let mut rows = st
            .query_map([job, event_id], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))
            .map_err(|e| StoreError(format!("audit log: cannot look up an admission: {e}")))?;
        match rows.next() {
            Some(Ok((s, json))) => Ok(Some((u(s), json))),
            Some(Err(e)) => Err(StoreError(format!("audit log: cannot look up an admission: {e}"))),
            None => Ok(None),
        }
    }
}
