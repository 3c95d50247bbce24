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
//! - A decision row holds each value once: its wire JSON is stored only when the columns cannot
//!   give it back (placement hints); read it with [`StoredDecision::wire_json`] or
//!   [`StoredDecision::to_decision`].
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
//! every write also appends an [`anchor`] (its own chain) recording the heads of the three and binding
//! prune checkpoints, policy sets and engine snapshots. [`verify::verify`] re-walks the chains, checks
//! them against the anchors and one another, and names the first problem of each;
//! [`verify::prune`] deletes old rows and records an anchored checkpoint the remaining chain starts
//! from. [`AuditLog::latest_snapshot`] restores only a snapshot that matches its anchor. The
//! `lifecycle` table is derived data (the engine's steps for the logged events), not chained: each
//! commit's anchor records the SHA-256 of the steps it wrote, and `verify` recomputes it. Every
//! derived table is in one list, [`derived::DERIVED_TABLES`].
//!
//! A [`Witness`] attached with [`AuditLog::set_witness`] signs the head (Ed25519, the key outside
//! the database) after every write and appends it to a file the attacker cannot edit with the
//! database; [`verify::verify_with_witness`] then also catches truncation, rollback and a re-hash.
//! [`AuditLog::attach_witness`] attaches one only over signed ground (writes no signed head covers
//! are refused, or adopted on request and recorded), and with one attached a restore takes only a
//! snapshot a signed head covers ([`trust`]).
//!
//! ```no_run
//! use bursar_audit::{AuditLog, Durability, SigningKey, Witness};
//! # fn demo() -> bursar_audit::Result<()> {
//! let mut log = AuditLog::open("audit.db", Durability::Durable)?;
//! log.attach_witness(Witness::open(SigningKey::from_file("/etc/bursar/audit.key")?, "/var/log/bursar/witness.jsonl")?, false)?;
//! // every append, record_policy_set, save_snapshot from here on is signed after it commits
//! # Ok(()) }
//! ```
//!
//! # Layout
//! - [`log`] — [`AuditLog`], [`Record`], the stored row types and the typed reads.
//! - [`writer`] — [`Writer`], the journal: group commit on its own thread.
//! - [`lock`] — [`WriterLock`], one writer per log: the `flock` every writing handle holds.
//! - [`outbox`] — [`Outbox`], the notifier's cursor and notices (`bursar-notify`): typed reads and
//!   writes of the two tables schema version 4 added.
//! - [`query`] — filters, `explain` and `stats`.
//! - [`verify`] — chain verification (with or without a witness) and pruning.
//! - [`anchor`] — the anchors chain that binds the others and the side data.
//! - [`witness`] — keys, signed heads, the witness file.
//! - [`trust`] — what a witness vouches for: the unsigned writes a signing process refuses (or
//!   adopts) and the snapshots a restore may use.
//! - [`derived`] — [`derived::DERIVED_TABLES`], the one list of derived tables (`verify --deep`,
//!   `prune` and docs/audit.md read it); copying the file and comparing tables, for `verify --deep`.
//! - [`schema`] — the versioned schema and its migrations; [`canon`]: the canonical row hash.
//! - [`error`] — [`AuditError`].

pub mod anchor;
pub mod canon;
pub mod checkpoint;
pub mod derived;
pub mod error;
pub mod lock;
pub mod log;
pub mod outbox;
pub mod query;
pub mod schema;
pub mod trust;
pub mod verify;
pub mod witness;
pub mod writer;

pub use bursar_engine::SourceFile;
pub use bursar_session::Journal;
pub use error::{AuditError, Result};
pub use lock::WriterLock;
pub use log::{
    Appended, AuditLog, Durability, EventRow, PolicyLoad, Record, RestorePoint, SnapshotRejected, StoredDecision,
    StoredEvent, StoredRefusal, StoredSnapshot, StoredStep, stores_as_columns, wall_ms,
};
pub use outbox::{Delivered, NewNotice, NoticeRow, Outbox, OutboxCursor, Resolved};
pub use witness::{PublicKey, SignedHead, SigningKey, Witness};
pub use writer::{CommitHook, Failing, Health, PruneDone, Totals, Writer, WriterConfig, WriterStats, no_hook};
