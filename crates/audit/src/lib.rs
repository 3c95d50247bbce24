//! bursar's audit log: every applied input and every decision, durable in SQLite (bundled, so a fresh
//! machine needs no system library), queryable, explainable and tamper-evident.
//!
//! Boundaries: this crate stores and reads; it does not evaluate policies, parse policy files or print.
//! It is the only crate that writes SQL against the audit tables: what `serve`, `replay` and the report
//! need from them is a typed query here. It depends on `bursar-model` (inputs, decisions),
//! `bursar-engine` ([`SourceFile`], the job steps it stores) and `bursar-session` (the [`Journal`]
//! trait it implements).
//!
//! # The journal (used by `bursar eval --audit` and by `serve`)
//!
//! [`Writer`] implements [`bursar_session::Journal`]: a session hands it each applied input with its
//! decisions and job steps, the writer thread commits them in groups, calls a hook after each commit
//! (where `eval` prints) and, for `serve`, returns a receipt per input from [`Journal::flush`] with
//! every decision's sequence number (the stream cursor). Policy loads and engine snapshots travel on
//! the same channel, in order.
//!
//! ```no_run
//! use bursar_audit::{AuditLog, Durability, Writer, WriterConfig, no_hook};
//! # fn demo() -> bursar_audit::Result<()> {
//! let log = AuditLog::open("audit.db", Durability::Durable)?;          // create or migrate forward
//! let writer = Writer::spawn(log, WriterConfig { receipts: true, ..WriterConfig::default() }, no_hook())?;
//! // … Session::new(engine, writer, Origin::Producer) and feed it; session.flush() returns receipts.
//! let page = AuditLog::open_read("audit.db")?.decisions_since(0, 1000)?; // the stream after a cursor
//! # let _ = (writer, page); Ok(()) }
//! ```
//!
//! - [`AuditLog::append`] writes a batch of [`Record`]s (raw input + parsed columns, its decisions,
//!   its job steps, the policy-set digest) in one transaction and returns, per record, the input's
//!   sequence number and the range of decision sequence numbers. An input id already in the log is
//!   skipped with its decisions (`duplicate: true`), so replays and reruns never duplicate rows.
//! - Decision `seq` is an INTEGER PRIMARY KEY assigned in commit order: a stream cursor.
//! - [`Durability::Durable`] is `synchronous=FULL` (a returned commit survives power loss);
//!   [`Durability::Fast`] is `synchronous=NORMAL`, which may lose the last few milliseconds of commits on
//!   power loss (never on a crash of the process alone).
//! - Typed reads: [`AuditLog::events_since`] (recovery, replay, facts), [`AuditLog::decisions_since`]
//!   (the decision stream), [`AuditLog::steps_since`] (the job lifecycle, for the report),
//!   [`AuditLog::admission_of`] (a resent submission), [`AuditLog::latest_snapshot`] (recovery).
//!
//! # Tamper evidence
//!
//! Events, decisions and policy loads each form a hash chain over canonical row content ([`canon`]);
//! [`verify::verify`] re-walks them and names the first row edited, removed or reordered;
//! [`verify::prune`] deletes old rows and records a checkpoint the remaining chain starts from. The
//! `lifecycle` table is derived data (the engine's steps for the logged events), not chained.
//!
//! # Layout
//! - [`log`] — [`AuditLog`], [`Record`], the stored row types and the typed reads.
//! - [`writer`] — [`Writer`], the journal: group commit on its own thread.
//! - [`outbox`] — [`Outbox`], the notifier's cursor and notices (`bursar-notify`): typed reads and
//!   writes of the two tables schema version 3 added.
//! - [`query`] — filters, `explain` and `stats`.
//! - [`verify`] — chain verification and pruning.
//! - [`schema`] — the versioned schema and its migrations; [`canon`]: the canonical row hash.
//! - [`error`] — [`AuditError`].

pub mod canon;
pub mod error;
pub mod log;
pub mod outbox;
pub mod query;
pub mod schema;
pub mod verify;
pub mod writer;

pub use bursar_engine::SourceFile;
pub use bursar_session::Journal;
pub use error::{AuditError, Result};
pub use log::{
    Appended, AuditLog, Durability, EventRow, PolicyLoad, Record, StoredDecision, StoredEvent, StoredSnapshot,
    StoredStep, wall_ms,
};
pub use outbox::{Delivered, NewNotice, NoticeRow, Outbox, OutboxCursor, Resolved};
pub use writer::{CommitHook, Writer, WriterConfig, WriterStats, no_hook};
