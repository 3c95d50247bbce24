//! bursar's audit log: every applied event and every decision, durable in SQLite (bundled, so a fresh
//! machine needs no system library), queryable, explainable and tamper-evident.
//!
//! Boundaries: this crate stores and reads; it does not evaluate policies, parse policy files or print.
//! It depends on `bursar-model` (events, decisions) and `bursar-engine` (only for [`SourceFile`]).
//!
//! # The stable API (used by `bursar eval --audit` and by `serve`)
//!
//! ```no_run
//! use std::sync::Arc;
//! use bursar_audit::{AuditLog, Durability, Entry};
//! # fn demo(raw: &str, event: &bursar_model::Event, decisions: Vec<bursar_model::Decision>) -> bursar_audit::Result<()> {
//! let mut log = AuditLog::open("audit.db", Durability::Durable)?;      // create or migrate forward
//! log.record_policy_set("3f2a…", &[])?;                                 // a (re)load that succeeded
//! log.record_policy_failure("policies/q.toml:3: bad limit", Some("3f2a…"))?; // one that failed
//! let set: Arc<str> = Arc::from("3f2a…");
//! let done = log.append(&[Entry::new(raw, event, decisions, set)])?;  // ONE transaction
//! let seqs = done[0].decisions.clone();                                // decision seq numbers
//! let page = log.decisions_since(0, 1000)?;                            // the stream after a cursor
//! let replay = log.events_since(0, 1000)?;                             // events for state recovery
//! log.save_snapshot(log.last_event_seq(), Some("3f2a…"), b"engine state")?;
//! let snap = log.latest_snapshot()?;                                   // blob + event seq it covers
//! # let _ = (seqs, page, replay, snap); Ok(()) }
//! ```
//!
//! - [`AuditLog::append`] writes a batch of [`Entry`]s (raw event + parsed columns, its decisions, the
//!   policy-set digest) in one transaction and returns, per entry, the event's sequence number and the
//!   range of decision sequence numbers. An event id already in the log is skipped with its decisions
//!   (`duplicate: true`), so replays and reruns never duplicate rows.
//! - Decision `seq` is an INTEGER PRIMARY KEY assigned in commit order: a stream cursor.
//! - [`Writer`] runs an [`AuditLog`] on its own thread with a bounded channel and group commit, and
//!   calls a hook after each commit (that is where decisions are handed on).
//! - [`Durability::Durable`] is `synchronous=FULL` (a returned commit survives power loss);
//!   [`Durability::Fast`] is `synchronous=NORMAL`, which may lose the last few milliseconds of commits on
//!   power loss (never on a crash of the process alone).
//!
//! # Tamper evidence
//!
//! Events, decisions and policy loads each form a hash chain over canonical row content ([`canon`]);
//! every write also appends an [`anchor`] (its own chain) recording the heads of the three and binding
//! prune checkpoints, policy sets and engine snapshots. [`verify::verify`] re-walks the chains, checks
//! them against the anchors and one another, and names the first problem of each;
//! [`verify::prune`] deletes old rows and records an anchored checkpoint the remaining chain starts
//! from. [`AuditLog::latest_snapshot`] restores only a snapshot that matches its anchor.
//!
//! A [`Witness`] attached with [`AuditLog::set_witness`] signs the head (Ed25519, the key outside
//! the database) after every write and appends it to a file the attacker cannot edit with the
//! database; [`verify::verify_with_witness`] then also catches truncation, rollback and a re-hash.
//!
//! ```no_run
//! use bursar_audit::{AuditLog, Durability, SigningKey, Witness};
//! # fn demo() -> bursar_audit::Result<()> {
//! let mut log = AuditLog::open("audit.db", Durability::Durable)?;
//! log.set_witness(Witness::open(SigningKey::from_file("/etc/bursar/audit.key")?, "/var/log/bursar/witness.jsonl")?);
//! // every append, record_policy_set, save_snapshot from here on is signed after it commits
//! # Ok(()) }
//! ```
//!
//! # Layout
//! - [`log`] — [`AuditLog`], [`Entry`], the stored row types.
//! - [`writer`] — [`Writer`], the group-commit thread.
//! - [`query`] — filters, `explain` and `stats`.
//! - [`verify`] — chain verification (with or without a witness) and pruning.
//! - [`anchor`] — the anchors chain that binds the others and the side data.
//! - [`witness`] — keys, signed heads, the witness file.
//! - [`derived`] — copying the file and comparing derived tables, for `verify --deep`.
//! - [`schema`] — the versioned schema and its migrations; [`canon`]: the canonical row hash.
//! - [`error`] — [`AuditError`].

pub mod anchor;
pub mod canon;
pub mod derived;
pub mod error;
pub mod log;
pub mod query;
pub mod schema;
pub mod verify;
pub mod witness;
pub mod writer;

pub use bursar_engine::SourceFile;
pub use error::{AuditError, Result};
pub use log::{
    Appended, AuditLog, Durability, Entry, EventRow, PolicyLoad, RestorePoint, SnapshotRejected, StoredDecision,
    StoredEvent, StoredSnapshot, wall_ms,
};
pub use witness::{PublicKey, SignedHead, SigningKey, Witness};
pub use writer::{CommitHook, Writer, WriterConfig, WriterStats};
