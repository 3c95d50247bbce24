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
//! [`verify::verify`] re-walks them and names the first row edited, removed or reordered;
//! [`verify::prune`] deletes old rows and records a checkpoint the remaining chain starts from.
//!
//! # Layout
//! - [`log`] — [`AuditLog`], [`Entry`], the stored row types.
//! - [`writer`] — [`Writer`], the group-commit thread.
//! - [`query`] — filters, `explain` and `stats`.
//! - [`verify`] — chain verification and pruning.
//! - [`schema`] — the versioned schema and its migrations; [`canon`]: the canonical row hash.
//! - [`error`] — [`AuditError`].

pub mod canon;
pub mod error;
pub mod log;
pub mod query;
pub mod schema;
pub mod verify;
pub mod writer;

pub use bursar_engine::SourceFile;
pub use error::{AuditError, Result};
pub use log::{
    Appended, AuditLog, Durability, Entry, EventRow, PolicyLoad, StoredDecision, StoredEvent, StoredSnapshot, wall_ms,
};
pub use writer::{CommitHook, Writer, WriterConfig, WriterStats};
