//! What bursar instances write on NATS, as types: journal batches, leases, snapshot pointers and
//! chunks, the owner's answer to an admission. Every message is serialised from these and read back
//! into them; nothing is built or picked apart by hand.
//!
//! A journal message holds one [`JournalBatch`] per line (JSON Lines): an instance's writer puts the
//! group commits of all its partitions that are ready together into one message
//! ([`crate::journal`]); a message written before issue 54 holds one batch, without a newline.

use bursar_engine::{Snapshot, SourceFile, Transition};
use bursar_model::Decision;
use bursar_model::api::{AdmitReply, Sequenced};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// Header: the fencing epoch (the lease revision at acquisition) of the owner that wrote a snapshot
/// chunk or a fence (journal batches carry theirs in each line).
pub const EPOCH_HEADER: &str = "Bursar-Epoch";
/// Header: which publish of which writer a journal message is (`<writer>/<n>`), so a writer that lost
/// an acknowledgement can tell whether its message was stored.
pub const COMMIT_HEADER: &str = "Bursar-Commit";
/// Header: which chunk of a snapshot a message is, `i/n`.
pub const CHUNK_HEADER: &str = "Bursar-Chunk";

/// One applied input with what it produced, as journaled by a partition owner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JournalEntry {
    /// The input's line as applied (for a wall tick, its canonical line).
    pub raw: String,
    /// Its decisions, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub decisions: Vec<Decision>,
    /// The job steps it caused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<Transition>,
    /// Digest of the policy set that decided.
    pub policy_set: String,
    /// For a submission checked by the ledger partition: its answer (what a replay uses instead of
    /// asking again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ledger: Option<bursar_engine::LedgerAnswer>,
    /// Who sent the input and how they proved it, as the front end that took it authenticated them
    /// (absent for the owners' own inputs: wall ticks, run facts, ledger ops).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender: Option<bursar_model::Sender>,
}

/// A policy set that came into force in a partition (at takeover and on every reload).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyLoad {
    /// Its digest.
    pub digest: String,
    /// Its files.
    pub files: Vec<SourceFile>,
}

/// A reload that failed while `in_force` stayed in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReloadFailure {
    /// The errors.
    pub error: String,
    /// The digest of the set that stays.
    pub in_force: String,
}

/// One line of a journal message: a group commit of a partition owner, or the fence a new owner
/// writes on its predecessor's subject when it takes over (`takeover`: it holds no entries).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct JournalBatch {
    /// The partition.
    pub partition: u32,
    /// The writer's fencing epoch.
    pub epoch: u64,
    /// The writer's instance name.
    pub instance: String,
    /// The events-stream sequence of the last event of the partition the writer had consumed.
    pub events_through: u64,
    /// True for a fence (a takeover marker: it holds no entries): from here on, the partition's
    /// batches of an older epoch on this subject are refused.
    #[serde(default)]
    pub takeover: bool,
    /// Policy sets that came into force before the entries.
    #[serde(default)]
    pub policy_sets: Vec<PolicyLoad>,
    /// Reloads that failed before the entries.
    #[serde(default)]
    pub reload_failures: Vec<ReloadFailure>,
    /// The applied inputs, in order.
    #[serde(default)]
    pub entries: Vec<JournalEntry>,
}

/// The batches of a journal message, in order (its lines; a message written before issue 54 is one
/// batch). A line that cannot be read is an error.
pub fn batches(payload: &[u8]) -> impl Iterator<Item = Result<JournalBatch, serde_json::Error>> + '_ {
    payload.split(|b| *b == b'\n').filter(|l| !l.iter().all(u8::is_ascii_whitespace)).map(serde_json::from_slice)
}

/// The writing side of [`JournalBatch`]: entries already serialised (so a batch can be split by size
/// before it is sent).
#[derive(Debug, Serialize)]
pub struct JournalBatchOut<'a> {
    /// The partition.
    pub partition: u32,
    /// The writer's fencing epoch.
    pub epoch: u64,
    /// The writer's instance name.
    pub instance: &'a str,
    /// The events-stream sequence covered.
    pub events_through: u64,
    /// A takeover marker.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub takeover: bool,
    /// Policy sets that came into force.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub policy_sets: &'a [PolicyLoad],
    /// Reloads that failed.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub reload_failures: &'a [ReloadFailure],
    /// The entries, serialised.
    pub entries: &'a [Box<RawValue>],
}

/// The value of a lease key: who holds the partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseValue {
    /// The owner's instance name.
    pub instance: String,
    /// Wall time of the write, ms (for people reading the bucket; expiry is judged by revisions).
    pub at_ms: i64,
    /// Set by a handover: the instance that held the partition and names `instance` as the
    /// receiver, which takes it at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
}

/// The value of a member key: an instance's heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberValue {
    /// Partitions it owns.
    pub owns: Vec<u32>,
    /// Wall time of the write, ms.
    pub at_ms: i64,
}

/// Where a partition's newest snapshot is, and which journal subject its owner writes: the value
/// of its key in the pointer bucket, written with compare-and-set on the revision so a fenced owner
/// cannot move it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct SnapshotPointer {
    /// The epoch of the owner that last wrote the pointer.
    pub epoch: u64,
    /// The snapshot, if one was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotRef>,
    /// The journal subject the partition's owner writes its batches on (its instance's writer); a
    /// pointer written before issue 54 has none, and its owner wrote `bursar.journal.<p>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub journal: Option<String>,
    /// The stream sequence after which that owner's batches follow (its takeover's last fence).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub since: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A snapshot's chunks on `bursar.snapshots.<p>` and what it covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRef {
    /// Stream sequence of the first chunk.
    pub first_seq: u64,
    /// How many chunks (consecutive messages on the subject).
    pub chunks: u32,
    /// Bytes in all.
    pub bytes: u64,
    /// Every journal message of the partition up to this stream sequence is in the snapshot.
    pub journal_seq: u64,
    /// The events-stream sequence covered.
    pub events_through: u64,
}

/// The content of a snapshot: the engine and what the partition keeps beside it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PartitionSnapshot {
    /// The partition.
    pub partition: u32,
    /// The engine.
    pub engine: Snapshot,
    /// Journal messages covered (stream sequence of the last).
    pub journal_seq: u64,
    /// Events consumed (stream sequence of the last).
    pub events_through: u64,
    /// Recent admission decisions by event id, oldest first, to answer a resent submission.
    pub admissions: Vec<(String, Sequenced)>,
}

/// What the owner answers on `bursar.admit.<p>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum OwnerAnswer {
    /// Decided (or decided before): the reply to send.
    Decided {
        /// The reply.
        reply: Box<AdmitReply>,
    },
    /// Not decided: the HTTP status and why. `retry` says the request may go to the next owner.
    Refused {
        /// HTTP status.
        status: u16,
        /// Why, as a sentence.
        error: String,
        /// Whether another attempt (at the next owner) may succeed.
        retry: bool,
    },
}

/// The NATS header on a forwarded admission that asks only what it would be answered
/// (`POST /v1/admit?test_only=true`): the owner previews it and records nothing.
pub const TEST_ONLY_HEADER: &str = "Bursar-Test-Only";

/// The NATS header a front end puts on every event it publishes and every admission it forwards:
/// the sender it authenticated, as JSON, for the owner to journal beside the input.
pub const SENDER_HEADER: &str = "Bursar-Sender";

/// The headers that carry `sender` (none without one).
pub fn sender_headers(sender: Option<&bursar_model::Sender>) -> async_nats::HeaderMap {
    let mut h = async_nats::HeaderMap::new();
    if let Some(json) = sender.and_then(|s| serde_json::to_string(s).ok()) {
        h.insert(SENDER_HEADER, json.as_str());
    }
    h
}

/// The sender a message's headers carry.
pub fn sender_of(headers: Option<&async_nats::HeaderMap>) -> Option<bursar_model::Sender> {
    let v = headers?.get(SENDER_HEADER)?;
    serde_json::from_str(v.as_str()).ok()
}
