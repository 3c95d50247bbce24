//! [`AuditLog`]: one connection to an audit database, the synchronous core every other part uses.
//!
//! Appends go through [`AuditLog::append`]: a batch of [`Entry`]s (an event and its decisions) is
//! written in ONE transaction with prepared statements, and the hash chains advance only once the
//! commit succeeded. Reads ([`AuditLog::decisions_since`], [`AuditLog::events_since`]) work on the
//! same connection or on a second one opened with [`AuditLog::open_read`] (WAL lets readers run
//! beside the writer).

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use bursar_engine::{SourceFile, Step, Transition};
use bursar_model::{Decision, DecisionKind, Event, EventKind, FinishStatus, Hints, Input, Timestamp};
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use serde::Serialize;

use crate::anchor::{self, Heads, UPSERT_HEAD, What};
use crate::canon::{Canon, GENESIS, Hash, hex};
use crate::error::{AuditError, Result};
use crate::schema;
use crate::witness::Witness;

/// How hard a commit tries to reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// `synchronous=FULL`: a committed transaction survives power loss. The default.
    #[default]
    Durable,
    /// `synchronous=NORMAL` (with WAL): survives a crash of bursar, but the last transactions (a few
    /// milliseconds) may be lost on power loss or an OS crash.
    Fast,
}

/// The columns of an input (an event, an action record or a wall tick) that queries use, and its raw
/// line.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRow {
    /// Input id (unique).
    pub id: String,
    /// Its time.
    pub time: Timestamp,
    /// Wire type name, e.g. `job.submitted`, `action.executed`, `bursar.tick`.
    pub kind: &'static str,
    /// The job it is about.
    pub job: Option<String>,
    /// The project, when the event names one.
    pub project: Option<String>,
    /// The user, when the event names one.
    pub user: Option<String>,
    /// The line as received.
    pub raw: String,
    /// Who sent it ([`bursar_model::Sender`] as JSON), when a server authenticated it.
    pub sender: Option<String>,
}

fn project_user(e: &Event) -> (Option<String>, Option<String>) {
    match &e.kind {
        EventKind::JobSubmitted(j) => (Some(j.project.clone()), Some(j.user.clone()).filter(|u| !u.is_empty())),
        EventKind::BillingCharge(c) => (c.project.clone(), None),
        EventKind::AssetRegistered { project, .. } => (Some(project.clone()), None),
        _ => (None, None),
    }
}

impl EventRow {
    /// The row for `input`, read from `raw`.
    pub fn new(raw: &str, input: &Input) -> EventRow {
        let (project, user) = match input {
            Input::Event(e) => project_user(e),
            Input::WallTick(_) | Input::Action(_) | Input::Run(_) | Input::Ledger(_) | Input::Inventory(_) => {
                (None, None)
            }
        };
        EventRow {
            id: input.id().into_owned(),
            time: input.time(),
            kind: input.type_name(),
            job: input.job_id().map(str::to_owned),
            project,
            user,
            raw: raw.to_owned(),
            sender: None,
        }
    }

    /// The row with who sent it.
    pub fn sent_by(mut self, sender: Option<&bursar_model::Sender>) -> EventRow {
        self.sender = sender.map(bursar_model::Sender::to_json);
        self
    }

    /// The row for a producer's event, read from `raw`.
    pub fn of_event(raw: &str, event: &Event) -> EventRow {
        let (project, user) = project_user(event);
        EventRow {
            id: event.id.clone(),
            time: event.time,
            kind: event.kind.type_name(),
            job: event.kind.job_id().map(str::to_owned),
            project,
            user,
            raw: raw.to_owned(),
            sender: None,
        }
    }
}

/// One unit of the log as stored: an applied input (absent for decisions recorded without one, as
/// older logs have), the decisions made while handling it, and the job steps the engine took, under
/// the policy set with digest `policy_set`. The session hands entries over as
/// [`bursar_session::Entry`]; this is the owned form the writer queues and [`AuditLog::append`] writes.
#[derive(Debug, Clone)]
pub struct Record {
    /// The input.
    pub event: Option<EventRow>,
    /// Its decisions, in order.
    pub decisions: Vec<Decision>,
    /// The job steps it caused, in order.
    pub steps: Vec<Transition>,
    /// Digest of the policy set that made them.
    pub policy_set: Arc<str>,
}

impl Record {
    /// A record for a producer's `event` (read from `raw`) and its decisions.
    pub fn new(raw: &str, event: &Event, decisions: Vec<Decision>, policy_set: Arc<str>) -> Record {
        Record { event: Some(EventRow::of_event(raw, event)), decisions, steps: Vec::new(), policy_set }
    }

    /// A record for decisions with no input of their own.
    pub fn without_event(decisions: Vec<Decision>, policy_set: Arc<str>) -> Record {
        Record { event: None, decisions, steps: Vec::new(), policy_set }
    }

    /// The record of what the session handed over.
    pub fn of(entry: bursar_session::Entry<'_>) -> Record {
        Record {
            event: Some(EventRow::new(entry.raw, entry.input).sent_by(entry.sender)),
            decisions: std::mem::take(entry.decisions),
            steps: entry.steps.to_vec(),
            policy_set: entry.policy_set.clone(),
        }
    }
}

/// A job step as stored in the `lifecycle` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredStep {
    /// The event (input) whose handling took the step.
    pub event_seq: i64,
    /// The job.
    pub job: String,
    /// What happened.
    pub step: Step,
    /// When, ms since the epoch.
    pub time: i64,
}

fn step_columns(step: Step) -> (&'static str, Option<&'static str>) {
    match step {
        Step::Finished(s) => ("finished", Some(s.as_str())),
        other => (other.as_str(), None),
    }
}

/// Feeds one `lifecycle` row into the sum a commit's anchor records (its `digest`): the columns in
/// table order. The writer feeds the values it inserts, `verify` the values it reads back.
pub(crate) fn feed_step(c: &mut Canon, event_seq: i64, n: i64, job: &str, step: &str, status: Option<&str>, time: i64) {
    c.int(event_seq).int(n).text(job).text(step).opt_text(status).int(time);
}

fn step_of(name: &str, status: Option<&str>) -> Option<Step> {
    Some(match name {
        "admitted" => Step::Admitted,
        "deferred" => Step::Deferred,
        "held" => Step::Held,
        "denied" => Step::Denied,
        "started" => Step::Started,
        "requeued" => Step::Requeued,
        "reclaimed" => Step::Reclaimed,
        "finished" => Step::Finished(match status? {
            "succeeded" => FinishStatus::Succeeded,
            "failed" => FinishStatus::Failed,
            "cancelled" => FinishStatus::Cancelled,
            _ => return None,
        }),
        _ => return None,
    })
}

/// What [`AuditLog::append`] did with one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    /// The event's sequence number (None for an entry without event, or a duplicate).
    pub event_seq: Option<i64>,
    /// The event id was already in the log: the event and its decisions were skipped.
    pub duplicate: bool,
    /// Sequence numbers given to the entry's decisions (empty when skipped).
    pub decisions: Range<i64>,
}

/// A decision as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredDecision {
    /// Decision sequence number (the stream cursor).
    pub seq: i64,
    /// The decision's id.
    pub decision_id: String,
    /// The event that produced it.
    pub event_id: String,
    /// That event's sequence number, if it is in the log.
    pub event_seq: Option<i64>,
    /// Event time, ms since the epoch.
    pub time: i64,
    /// Wall time it was recorded, ms since the epoch.
    pub recorded_at: i64,
    /// Job.
    pub job: Option<String>,
    /// Project.
    pub project: Option<String>,
    /// User.
    pub user: Option<String>,
    /// Kind, e.g. `deny`.
    pub decision: String,
    /// Made by dry-run policies.
    pub dry_run: bool,
    /// An admission decision.
    pub admission: bool,
    /// Policies that produced it.
    pub policies: Vec<String>,
    /// Why.
    pub reason: String,
    /// For `defer`, ms since the epoch.
    pub until: Option<i64>,
    /// GPUs concerned (stored as an INTEGER when whole, a share's TEXT such as `2/7` otherwise).
    pub gpus: Option<bursar_model::Gpus>,
    /// GPU-hours concerned.
    pub gpu_hours: Option<f64>,
    /// Digest of the policy set in force.
    pub policy_set: String,
    /// The `json` column as stored: the decision's wire JSON, or empty when the row's columns hold
    /// all of it (schema version 6, see [`stores_as_columns`]). Read the decision with
    /// [`StoredDecision::wire_json`] or [`StoredDecision::to_decision`], which handle both.
    pub stored_json: String,
}

impl StoredDecision {
    /// The decision's wire JSON, exactly as it was emitted: the stored text, or the decision
    /// rebuilt from the row's columns and serialised.
    pub fn wire_json(&self) -> Result<std::borrow::Cow<'_, str>> {
        if !self.stored_json.is_empty() {
            return Ok(std::borrow::Cow::Borrowed(&self.stored_json));
        }
        Ok(std::borrow::Cow::Owned(self.to_decision()?.to_json()))
    }

    /// The decision as it was emitted, from the row's columns (exact: SQLite gives back every value
    /// bit for bit, where parsing the JSON's text would round some GPU-hour figures), with the
    /// placement hints read from the stored JSON when there is one. A GPU-hour figure SQLite does
    /// not keep (NaN, `-0.0`) comes back as it reads it; [`StoredDecision::wire_json`] has the text.
    pub fn to_decision(&self) -> Result<Decision> {
        #[derive(serde::Deserialize)]
        struct HintsOf {
            hints: Option<Hints>,
        }
        let bad = |what: &str| AuditError::Invalid(format!("decisions row {}: {what}", self.seq));
        let hints = if self.stored_json.is_empty() {
            None
        } else {
            serde_json::from_str::<HintsOf>(&self.stored_json)
                .map_err(|e| bad(&format!("its JSON does not parse: {e}")))?
                .hints
        };
        let arc = |v: &Option<String>| v.as_deref().map(Arc::<str>::from);
        Ok(Decision {
            decision_id: self.decision_id.clone(),
            event_id: self.event_id.clone(),
            time: Timestamp(self.time),
            job_id: arc(&self.job),
            project: arc(&self.project),
            decision: DecisionKind::parse(&self.decision)
                .ok_or_else(|| bad(&format!("`{}` is not a decision kind", self.decision)))?,
            until: self.until.map(Timestamp),
            policies: self.policies.iter().map(|p| Arc::from(p.as_str())).collect(),
            reason: self.reason.clone(),
            dry_run: self.dry_run,
            admission: self.admission,
            user: arc(&self.user),
            gpus: self.gpus,
            gpu_hours: self.gpu_hours,
            hints,
        })
    }
}

/// True when `d`'s wire JSON is exactly the decision rebuilt from its row's columns, so the row
/// need not store it (schema version 6): every field has a column, except placement hints; and a
/// GPU-hour figure SQLite would not give back bit for bit (a NaN or an infinity, which JSON writes
/// as `null`, or `-0.0`, which SQLite reads back as `0.0`) keeps its JSON too. Tested against
/// `Decision::to_json` over arbitrary decisions (`tests/log.rs`).
pub fn stores_as_columns(d: &Decision) -> bool {
    d.hints.as_ref().is_none_or(|h| h.is_empty())
        && d.gpu_hours.is_none_or(|h| h.is_finite() && !(h == 0.0 && h.is_sign_negative()))
}

/// An event as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredEvent {
    /// Event sequence number.
    pub seq: i64,
    /// Event id.
    pub event_id: String,
    /// Event time, ms since the epoch.
    pub time: i64,
    /// Wire type.
    pub kind: String,
    /// Job.
    pub job: Option<String>,
    /// Project.
    pub project: Option<String>,
    /// User.
    pub user: Option<String>,
    /// The line as received.
    pub raw: String,
    /// Wall time it was recorded, ms since the epoch.
    pub recorded_at: i64,
    /// Who sent it ([`bursar_model::Sender`] as JSON), for inputs a server authenticated.
    pub sender: Option<String>,
}

impl StoredEvent {
    /// Who sent it, read back.
    pub fn sender(&self) -> Option<bursar_model::Sender> {
        self.sender.as_deref().and_then(|s| serde_json::from_str(s).ok())
    }
}

/// An input refused when applied, as stored in `refused` (schema 7).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredRefusal {
    /// Row number.
    pub id: i64,
    /// The input's id.
    pub event_id: String,
    /// Its time, ms since the epoch.
    pub time: i64,
    /// Its wire type.
    pub kind: String,
    /// The job it was about.
    pub job: Option<String>,
    /// The line as received.
    pub raw: String,
    /// Who sent it ([`bursar_model::Sender`] as JSON).
    pub sender: Option<String>,
    /// Why it was refused.
    pub reason: String,
    /// Wall time it was recorded, ms since the epoch.
    pub recorded_at: i64,
}

/// An engine snapshot as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredSnapshot {
    /// The last event sequence number the snapshot includes.
    pub event_seq: i64,
    /// Wall time it was stored, ms since the epoch.
    pub taken_at: i64,
    /// Digest of the policy set in force then.
    pub policy_set: Option<String>,
    /// The opaque blob.
    pub blob: Vec<u8>,
}

/// A policy-set load (or failed reload) as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicyLoad {
    /// Load sequence number.
    pub seq: i64,
    /// Wall time, ms since the epoch.
    pub at: i64,
    /// Last event sequence number applied before the load.
    pub event_seq: i64,
    /// Whether it succeeded.
    pub ok: bool,
    /// The set's digest (for a failure: the set still in force, if any).
    pub digest: Option<String>,
    /// The error of a failed load.
    pub error: Option<String>,
}

/// Wall-clock time in ms since the epoch.
pub fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Where a chain stands: the last sequence number and its hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Head {
    pub seq: i64,
    pub hash: Hash,
}

/// The three row chains (the fourth, `anchors`, binds them: [`crate::anchor`]).
pub(crate) const CHAINS: [&str; 3] = ["events", "decisions", "policy_loads"];

/// Why the newest engine snapshot was not restored ([`AuditLog::restore_point`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotRejected {
    /// No anchor records this snapshot: it was written by something other than bursar.
    #[error("the engine snapshot at event {event_seq} is not anchored in the log: it was not written by bursar")]
    Unanchored {
        /// The event seq the snapshot claims to cover.
        event_seq: i64,
    },
    /// The blob (or its seq, time or policy set) differs from what its anchor recorded.
    #[error(
        "the engine snapshot at event {event_seq} does not match its anchor (anchors row {anchor}): its blob has SHA-256 {found}, the anchor recorded {recorded}"
    )]
    Edited {
        /// The event seq the snapshot covers.
        event_seq: i64,
        /// The anchor that records it.
        anchor: i64,
        /// Hex SHA-256 of the blob as stored.
        found: String,
        /// Hex SHA-256 the anchor recorded.
        recorded: String,
    },
    /// The anchor itself no longer matches its hash.
    #[error("the anchor of the engine snapshot at event {event_seq} (anchors row {anchor}) was edited")]
    AnchorEdited {
        /// The event seq the snapshot covers.
        event_seq: i64,
        /// The anchor.
        anchor: i64,
    },
    /// With a witness: the snapshot's anchor is newer than the newest signed head the log still has,
    /// so nothing but the keyless chain (which anyone can recompute) vouches for it.
    #[error(
        "the engine snapshot at event {event_seq} (anchors row {anchor}) is not covered by a signed head: the newest the log still has covers anchors row {signed}"
    )]
    Unsigned {
        /// The event seq the snapshot covers.
        event_seq: i64,
        /// Its anchor.
        anchor: i64,
        /// The newest anchor a signed head covers (0: none).
        signed: i64,
    },
    /// With a witness: the anchors from the snapshot's to the first signed one at or after it no
    /// longer chain (or that one is not as signed), so no signature covers what the snapshot's
    /// anchor now says.
    #[error(
        "the engine snapshot at event {event_seq} (anchors row {anchor}) is not covered by a signed head: the witness signed anchors row {signed}, and the chain from the snapshot's anchor to it breaks at anchors row {broken} (an anchor was edited after it was signed)"
    )]
    ChainBroken {
        /// The event seq the snapshot covers.
        event_seq: i64,
        /// Its anchor.
        anchor: i64,
        /// The first signed anchor at or after the snapshot's.
        signed: i64,
        /// The first anchor that does not recompute (or the signed one, when the log holds it with
        /// another hash).
        broken: i64,
    },
    /// The events after the snapshot up to a prune are gone: restoring it and replaying what is
    /// left would skip them.
    #[error(
        "the engine snapshot at event {event_seq} is older than the prune of the events through event {pruned_through}: the events between them are gone"
    )]
    BeforePrune {
        /// The event seq the snapshot covers.
        event_seq: i64,
        /// The last event seq the newest prune removed.
        pruned_through: i64,
    },
    /// With a witness: the snapshot was among unsigned writes adopted with `--adopt-unsigned`;
    /// adopting vouches for the rows, so signing can go on, not for engine state.
    #[error(
        "the engine snapshot at event {event_seq} (anchors row {anchor}) was written unsigned and adopted unsigned (anchors row {adopted_by}): adopting does not vouch for engine state"
    )]
    Adopted {
        /// The event seq the snapshot covers.
        event_seq: i64,
        /// Its anchor.
        anchor: i64,
        /// The `adopt` anchor.
        adopted_by: i64,
    },
}

/// What to restore an engine from: the newest snapshot that matches its anchor, and those rejected.
#[derive(Debug, Clone, PartialEq)]
pub struct RestorePoint {
    /// The newest snapshot that matches its anchor (None: replay the whole log).
    pub snapshot: Option<StoredSnapshot>,
    /// Newer snapshots that were rejected, newest first, and why.
    pub rejected: Vec<SnapshotRejected>,
    /// The last event seq a prune removed (0: never pruned). Without a snapshot, a replay of such a
    /// log starts after it and knows nothing of the pruned events.
    pub pruned_through: i64,
}

const INSERT_EVENT: &str = "INSERT INTO events (seq, event_id, time, type, job, project, user, raw, recorded_at, sender, hash) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) ON CONFLICT(event_id) DO NOTHING";
const INSERT_DECISION: &str = "INSERT INTO decisions (seq, decision_id, event_id, event_seq, time, recorded_at, job, \
     project, user, decision, dry_run, admission, policies, reason, until, gpus, gpu_hours, policy_set, json, hash) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)";
/// Rows appended to a chain between two runs into its look-up tables (schema version 5): the most
/// a reader takes from the chain's own table, by sequence number.
pub const INDEX_RUN: i64 = 512;

/// A look-up table filled in runs (schema version 5).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lookup {
    /// The chain whose rows it covers.
    pub chain: &'static str,
    /// The table.
    pub table: &'static str,
    /// The column looked up.
    pub column: &'static str,
    /// Its key, in order: the column, then what orders the rows of one value.
    pub key: &'static [&'static str],
}

/// Every look-up table.
pub(crate) const LOOKUPS: [Lookup; 3] = [
    Lookup { chain: "decisions", table: "decisions_by_project", column: "project", key: &["project", "time", "seq"] },
    Lookup { chain: "decisions", table: "decisions_by_user", column: "user", key: &["user", "time", "seq"] },
    Lookup { chain: "events", table: "events_by_job", column: "job", key: &["job", "seq"] },
];

/// The look-up table of `chain` keyed by `column`.
pub(crate) fn lookup(chain: &str, column: &str) -> Option<&'static Lookup> {
    LOOKUPS.iter().find(|l| l.chain == chain && l.column == column)
}

/// `columns` (a `, `-separated list) each prefixed with `alias.`, for a join.
pub(crate) fn prefixed(columns: &str, alias: &str) -> String {
    columns.split(", ").map(|c| format!("{alias}.{}", c.trim())).collect::<Vec<_>>().join(", ")
}

/// Runs `read` in one read transaction (a savepoint, so it nests inside one already open): a look-up
/// table, its cursor and the rows after the cursor, as of one moment.
pub(crate) fn in_one_read<T>(conn: &Connection, read: impl FnOnce() -> Result<T>) -> Result<T> {
    conn.execute_batch("SAVEPOINT bursar_read").map_err(AuditError::sqlite("start a read"))?;
    let out = read();
    let released = conn.execute_batch("RELEASE bursar_read").map_err(AuditError::sqlite("end a read"));
    let out = out?;
    released?;
    Ok(out)
}

/// The last row of `chain` its look-up tables cover.
pub(crate) fn indexed_through(conn: &Connection, chain: &str) -> Result<i64> {
    conn.query_row("SELECT through_seq FROM lookup_cursors WHERE chain = ?1", [chain], |r| r.get(0))
        .optional()
        .map(|t| t.unwrap_or(0))
        .map_err(AuditError::sqlite("read how far the look-up tables reach"))
}

/// Adds the rows of `chain` after `from` through `to` to its look-up tables, in key order (one page
/// per key touched), and records that they now reach `to`.
fn index_run(tx: &Connection, chain: &str, from: i64, to: i64) -> Result<()> {
    for l in LOOKUPS.iter().filter(|l| l.chain == chain) {
        let key = l.key.join(", ");
        let sql = format!(
            "INSERT INTO {} ({key}) SELECT {key} FROM {chain} WHERE seq > ?1 AND seq <= ?2 AND {} IS NOT NULL ORDER BY {key}",
            l.table, l.column
        );
        tx.prepare_cached(&sql)
            .and_then(|mut st| st.execute(params![from, to]))
            .map_err(AuditError::sqlite(format!("add rows to `{}`", l.table)))?;
    }
    tx.prepare_cached("UPDATE lookup_cursors SET through_seq = ?2 WHERE chain = ?1")
        .and_then(|mut st| st.execute(params![chain, to]))
        .map_err(AuditError::sqlite("record how far the look-up tables reach"))?;
    Ok(())
}

const INSERT_STEP: &str =
    "INSERT INTO lifecycle (event_seq, n, job, step, status, time) VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
pub(crate) const DECISION_COLUMNS: &str = "seq, decision_id, event_id, event_seq, time, recorded_at, job, project, \
     user, decision, dry_run, admission, policies, reason, until, gpus, gpu_hours, policy_set, json";
/// The columns of an event row, in the order its hash covers them; the last, `sender` (schema 7),
/// only when it is not NULL ([`optional_trailing`]).
pub(crate) const EVENT_COLUMNS: &str = "seq, event_id, time, type, job, project, user, raw, recorded_at, sender";

/// How many of a chain's last hashed columns are fed to the hash only when not NULL: columns added
/// after rows were written, so those rows keep their hashes.
pub(crate) fn optional_trailing(chain: &str) -> usize {
    usize::from(chain == "events")
}
pub(crate) const LOAD_COLUMNS: &str = "seq, at, event_seq, ok, digest, error";

/// How much of the file a reading connection maps (`PRAGMA mmap_size`; SQLite caps it at the
/// compile-time `SQLITE_MAX_MMAP_SIZE`, raised to 1 TiB in `.cargo/config.toml`): all of it.
pub const READER_MMAP_BYTES: i64 = 1 << 40;

/// Page cache of a writing connection, as `PRAGMA cache_size` takes it (negative: KiB): 64 MiB.
pub const WRITER_CACHE_KIB: i64 = -65_536;

/// How far each chain's look-up tables reach.
#[derive(Debug, Clone, Copy)]
struct Indexed {
    events: i64,
    decisions: i64,
}

/// An open audit database.
#[derive(Debug)]
pub struct AuditLog {
    pub(crate) conn: Connection,
    path: String,
    events: Head,
    decisions: Head,
    loads: Head,
    anchors: Head,
    /// The last event and the last decision their look-up tables cover.
    indexed: Indexed,
    /// The log's identity once it has a first anchor.
    id: Option<String>,
    durability: Durability,
    witness: Option<Witness>,
    /// A writing handle's lock ([`crate::lock`]): held while this handle lives. `None` for readers.
    lock: Option<crate::lock::WriterLock>,
}

impl AuditLog {
    /// Opens (creating if needed) the audit database at `path` for writing, in WAL mode, migrating the
    /// schema forward.
    pub fn open(path: impl AsRef<Path>, durability: Durability) -> Result<AuditLog> {
        let path_ref = path.as_ref();
        let shown = path_ref.display().to_string();
        // One writer per log: taken before the file is touched, so a second writer changes nothing.
        let lock = crate::lock::WriterLock::acquire(path_ref)?;
        private_file(path_ref)
            .map_err(|e| AuditError::Invalid(format!("cannot open `{shown}` (creating it with mode 0640): {e}")))?;
        let mut conn = Connection::open(path_ref).map_err(AuditError::sqlite(format!("open `{shown}`")))?;
        conn.busy_timeout(std::time::Duration::from_secs(5)).map_err(AuditError::sqlite("set the busy timeout"))?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(AuditError::sqlite(format!("switch `{shown}` to WAL mode")))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(AuditError::Invalid(format!("`{shown}` cannot use WAL mode (got `{mode}`)")));
        }
        let sync = match durability {
            Durability::Durable => "FULL",
            Durability::Fast => "NORMAL",
        };
        conn.pragma_update(None, "synchronous", sync).map_err(AuditError::sqlite("set the synchronous mode"))?;
        // The writer's page cache: the indexes' pages that appends touch stay in memory instead of
        // being read back from the OS (SQLite's default is 2 MiB). Measured with `append_profile`:
        // +9 % at 200,000 entries, +14 % at 1,000,000 (docs/perf/audit.md). Readers keep the default.
        conn.pragma_update(None, "cache_size", WRITER_CACHE_KIB)
            .map_err(AuditError::sqlite("set the page cache size"))?;
        schema::migrate(&mut conn, &shown)?;
        let mut log = AuditLog::with_heads(conn, shown, durability)?;
        log.lock = Some(lock);
        Ok(log)
    }

    /// The mode of an audit database and of the WAL and shared-memory files SQLite makes beside it
    /// (they take the database's): the owner writes, its group reads, nobody else.
    pub const FILE_MODE: u32 = 0o640;

    /// Opens an existing audit database read-only (for queries, `verify`, and readers beside a writer).
    pub fn open_read(path: impl AsRef<Path>) -> Result<AuditLog> {
        AuditLog::open_reader(path.as_ref(), false)
    }

    /// Like [`AuditLog::open_read`], inside one read transaction held until the log is dropped:
    /// every query sees the file as it was at one instant, whatever a writer beside it (`serve`)
    /// commits meanwhile. What `bursar audit verify` reads a live log through: before, each of its
    /// queries saw another instant, and 38 of 40 verifies of a log two clients were admitting into
    /// reported rows "removed" or "not covered by any anchor" that were only newer than the rest.
    pub fn open_read_pinned(path: impl AsRef<Path>) -> Result<AuditLog> {
        AuditLog::open_reader(path.as_ref(), true)
    }

    fn open_reader(path_ref: &Path, pinned: bool) -> Result<AuditLog> {
        let shown = path_ref.display().to_string();
        if !path_ref.exists() {
            return Err(AuditError::Invalid(format!(
                "`{shown}` does not exist\n  help: create it with `bursar eval --audit {shown} …`"
            )));
        }
        let conn = Connection::open_with_flags(
            path_ref,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI,
        )
        .map_err(AuditError::sqlite(format!("open `{shown}`")))?;
        conn.busy_timeout(std::time::Duration::from_secs(5)).map_err(AuditError::sqlite("set the busy timeout"))?;
        if pinned {
            // Deferred: the snapshot is taken by the first read below, and every later one sees it.
            conn.execute_batch("BEGIN").map_err(AuditError::sqlite(format!("begin a read of `{shown}`")))?;
        }
        // Pages read through a memory map instead of copied from the OS into SQLite's cache: a query
        // through a look-up table lands on a page of its own for nearly every row (one project's
        // week is one row in fifty), and the map saves each a system call and a copy. Measured with
        // `cargo bench -p bursar-audit --bench audit -- query` (docs/performance.md). Readers only: in
        // the writer the map measured slower (writes go through `write` either way).
        conn.pragma_update(None, "mmap_size", READER_MMAP_BYTES).map_err(AuditError::sqlite("map the file"))?;
        let found: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(AuditError::sqlite(format!("read `{shown}`")))?;
        if found > schema::SCHEMA_VERSION {
            return Err(AuditError::SchemaTooNew { path: shown, found, supported: schema::SCHEMA_VERSION });
        }
        if found == 0 {
            return Err(AuditError::Invalid(format!(
                "`{shown}` is not a bursar audit log (an SQLite file without bursar's schema)"
            )));
        }
        if found < schema::SCHEMA_VERSION {
            return Err(AuditError::SchemaTooOld { path: shown, found, supported: schema::SCHEMA_VERSION });
        }
        AuditLog::with_heads(conn, shown, Durability::Durable)
    }

    /// Copies the audit log at `src`, as it is at one instant, to a new file at `dest` (mode 0640,
    /// refused if it exists): SQLite's online backup in one step, inside one read transaction, so a
    /// writer beside it (`serve`) goes on committing and the copy holds every commit up to that
    /// instant and none after. Any schema version is copied as it is (a copy taken before an upgrade
    /// is of the old schema). The copy is left in rollback-journal mode, one self-contained file
    /// (opening it for writing turns WAL on again), and synced to disk with its folder. Check it with
    /// [`crate::verify::verify`] before relying on it.
    pub fn backup(src: impl AsRef<Path>, dest: impl AsRef<Path>) -> Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        let (src, dest) = (src.as_ref(), dest.as_ref());
        let from = src.display().to_string();
        let shown = dest.display().to_string();
        if !src.exists() {
            return Err(AuditError::Invalid(format!("`{from}` does not exist")));
        }
        let source =
            Connection::open_with_flags(src, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
                .map_err(AuditError::sqlite(format!("open `{from}`")))?;
        source.busy_timeout(std::time::Duration::from_secs(5)).map_err(AuditError::sqlite("set the busy timeout"))?;
        let io = |what: &str, e: std::io::Error| AuditError::Invalid(format!("cannot {what} `{shown}`: {e}"));
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(AuditLog::FILE_MODE)
            .open(dest)
            .map_err(|e| io("create the backup", e))?;
        let mut copy = Connection::open(dest).map_err(AuditError::sqlite(format!("open the backup `{shown}`")))?;
        {
            let backup = rusqlite::backup::Backup::new(&source, &mut copy)
                .map_err(AuditError::sqlite(format!("start the backup to `{shown}`")))?;
            // -1: every page in one step, under one read lock of the source, so the copy is of one
            // instant (a copy made step by step starts over whenever another connection writes).
            match backup.step(-1).map_err(AuditError::sqlite(format!("copy `{from}` to `{shown}`")))? {
                rusqlite::backup::StepResult::Done => {}
                other => {
                    return Err(AuditError::Invalid(format!(
                        "the backup of `{from}` to `{shown}` did not finish in one step ({other:?}); run it again"
                    )));
                }
            }
        }
        let mode: String = copy
            .query_row("PRAGMA journal_mode=DELETE", [], |r| r.get(0))
            .map_err(AuditError::sqlite(format!("make the backup `{shown}` one file")))?;
        if !mode.eq_ignore_ascii_case("delete") {
            return Err(AuditError::Invalid(format!("the backup `{shown}` stayed in journal mode `{mode}`")));
        }
        drop(copy);
        std::fs::File::open(dest).and_then(|f| f.sync_all()).map_err(|e| io("sync", e))?;
        if let Some(dir) = dest.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::File::open(dir).and_then(|f| f.sync_all()).map_err(|e| io("sync the folder of", e))?;
        }
        Ok(())
    }

    fn with_heads(conn: Connection, path: String, durability: Durability) -> Result<AuditLog> {
        let events = load_head(&conn, "events")?;
        let decisions = load_head(&conn, "decisions")?;
        let loads = load_head(&conn, "policy_loads")?;
        let anchors = load_head(&conn, "anchors")?;
        let id = anchor::log_id(&conn)?;
        let indexed =
            Indexed { events: indexed_through(&conn, "events")?, decisions: indexed_through(&conn, "decisions")? };
        Ok(AuditLog {
            conn,
            path,
            events,
            decisions,
            loads,
            anchors,
            indexed,
            id,
            durability,
            witness: None,
            lock: None,
        })
    }

    /// Signs the log's head after every successful write from now on and appends it to a witness
    /// ([`crate::witness`]), without looking at what is already unsigned: a process that opens an
    /// existing log to sign it uses [`AuditLog::attach_witness`], which refuses writes no signed head
    /// covers; every writer on this `AuditLog` (the [`Writer`](crate::Writer) thread,
    /// `serve`'s engine thread) then gets signed heads with no other change. A failure to append to
    /// the witness is returned by the write that committed (the rows are in the log; the next
    /// successful write signs them).
    pub fn set_witness(&mut self, witness: Witness) {
        self.witness = Some(witness);
    }

    /// The witness attached with [`AuditLog::set_witness`].
    pub fn witness(&self) -> Option<&Witness> {
        self.witness.as_ref()
    }

    /// Signs the current head now if a witness is attached and a write since the last signature is
    /// not yet signed (a witness that signs at most every so often leaves the last writes pending);
    /// returns the line appended. Call it before stopping, or from a timer.
    pub fn sign_pending(&mut self) -> Result<Option<crate::witness::SignedHead>> {
        let Some(w) = self.witness.as_mut() else { return Ok(None) };
        if !w.pending() {
            return Ok(None);
        }
        let heads = crate::witness::CurrentHeads {
            log: self.id.clone(),
            anchors: self.anchors,
            events: self.events,
            decisions: self.decisions,
            loads: self.loads,
        };
        w.sign(&heads, self.durability == Durability::Durable).map(Some)
    }

    /// The heads to sign, as this connection knows them.
    pub(crate) fn current_heads(&self) -> crate::witness::CurrentHeads {
        crate::witness::CurrentHeads {
            log: self.id.clone(),
            anchors: self.anchors,
            events: self.events,
            decisions: self.decisions,
            loads: self.loads,
        }
    }

    /// After a committed write: sign the new head if a witness is attached and it is due.
    fn committed(&mut self) -> Result<()> {
        if self.id.is_none() {
            self.id = anchor::log_id(&self.conn)?;
        }
        if let Some(w) = self.witness.as_mut() {
            w.mark_pending();
            if w.due() {
                self.sign_pending()?;
            }
        }
        Ok(())
    }

    /// How hard its commits try to reach the disk.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// The heads as this connection knows them.
    fn heads(&self) -> Heads {
        Heads { events: self.events, decisions: self.decisions, loads: self.loads }
    }

    /// The log's identity (the hex hash of its first anchor); None before the first write.
    pub fn log_id(&self) -> Result<Option<String>> {
        anchor::log_id(&self.conn)
    }

    /// The newest anchor's sequence number and hex hash: the one value that covers the whole log.
    pub fn head(&self) -> (i64, String) {
        (self.anchors.seq, hex(&self.anchors.hash))
    }

    /// The database path, for messages.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The underlying connection, for ad-hoc reads.
    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// The sequence number of the newest event (0 when none).
    pub fn last_event_seq(&self) -> i64 {
        self.events.seq
    }

    /// The sequence number of the newest decision (0 when none).
    pub fn last_decision_seq(&self) -> i64 {
        self.decisions.seq
    }

    /// Appends `entries` in one transaction and returns what happened to each. An entry whose event id
    /// is already in the log is skipped whole (event and decisions): reruns are idempotent. Nothing is
    /// written if any statement or the commit fails (disk full, read-only file): the error says why.
    pub fn append(&mut self, entries: &[Record]) -> Result<Vec<Appended>> {
        let now = wall_ms();
        let mut ev = self.events;
        let mut de = self.decisions;
        let mut out = Vec::with_capacity(entries.len());
        // The job steps this commit writes, hashed in order: the commit's anchor records the sum, so
        // an edited, added or removed `lifecycle` row no longer matches (`verify` recomputes it).
        let mut steps_sum = Canon::after(&GENESIS);
        let tx = self.conn.transaction().map_err(AuditError::sqlite("start a transaction"))?;
        {
            let mut ins_ev = tx.prepare_cached(INSERT_EVENT).map_err(AuditError::sqlite("prepare the event insert"))?;
            let mut ins_de =
                tx.prepare_cached(INSERT_DECISION).map_err(AuditError::sqlite("prepare the decision insert"))?;
            let mut ins_step =
                tx.prepare_cached(INSERT_STEP).map_err(AuditError::sqlite("prepare the lifecycle insert"))?;
            // Reused for every decision: its JSON (when the columns do not hold it all) and its policies.
            let mut json = Vec::new();
            let mut policies = Vec::new();
            for entry in entries {
                let mut event_seq = None;
                if let Some(e) = &entry.event {
                    let seq = ev.seq + 1;
                    let time = e.time.millis();
                    let mut c = Canon::after(&ev.hash);
                    c.int(seq)
                        .text(&e.id)
                        .int(time)
                        .text(e.kind)
                        .opt_text(e.job.as_deref())
                        .opt_text(e.project.as_deref())
                        .opt_text(e.user.as_deref())
                        .text(&e.raw)
                        .int(now);
                    // Schema 7's `sender` is hashed when present only, so older rows keep their hashes.
                    if let Some(s) = &e.sender {
                        c.text(s);
                    }
                    let hash = c.finish();
                    let n = ins_ev
                        .execute(params![
                            seq,
                            e.id,
                            time,
                            e.kind,
                            e.job,
                            e.project,
                            e.user,
                            e.raw,
                            now,
                            e.sender,
                            &hash[..]
                        ])
                        .map_err(AuditError::sqlite(format!("insert event `{}`", e.id)))?;
                    if n == 0 {
                        out.push(Appended { event_seq: None, duplicate: true, decisions: de.seq + 1..de.seq + 1 });
                        continue;
                    }
                    ev = Head { seq, hash };
                    event_seq = Some(seq);
                    for (n, t) in entry.steps.iter().enumerate() {
                        let (step, status) = step_columns(t.step);
                        ins_step
                            .execute(params![seq, n as i64, &*t.job, step, status, t.at.millis()])
                            .map_err(AuditError::sqlite(format!("insert a lifecycle step of `{}`", t.job)))?;
                        feed_step(&mut steps_sum, seq, n as i64, &t.job, step, status, t.at.millis());
                    }
                }
                let first = de.seq + 1;
                for d in &entry.decisions {
                    let seq = de.seq + 1;
                    json.clear();
                    policies.clear();
                    // Serialising our own types into a Vec cannot fail; keep going regardless.
                    if !stores_as_columns(d) {
                        let _ = serde_json::to_writer(&mut json, d);
                    }
                    let _ = serde_json::to_writer(&mut policies, &d.policies);
                    let (json, policies) = (utf8(&json), utf8(&policies));
                    let time = d.time.millis();
                    let until = d.until.map(Timestamp::millis);
                    // A whole count is an INTEGER, as every row before shares were counted; a MIG
                    // share is its TEXT ("2/7"), exact (SQLite keeps the type per value; `verify`
                    // hashes each value by its type).
                    let gpus = d.gpus.map(|g| {
                        if g.is_whole() {
                            rusqlite::types::Value::Integer(i64::from(g.floor()))
                        } else {
                            rusqlite::types::Value::Text(g.to_string())
                        }
                    });
                    let mut c = Canon::after(&de.hash);
                    c.int(seq)
                        .text(&d.decision_id)
                        .text(&d.event_id)
                        .opt_int(event_seq)
                        .int(time)
                        .int(now)
                        .opt_text(d.job_id.as_deref())
                        .opt_text(d.project.as_deref())
                        .opt_text(d.user.as_deref())
                        .text(d.decision.as_str())
                        .int(i64::from(d.dry_run))
                        .int(i64::from(d.admission))
                        .text(policies)
                        .text(&d.reason)
                        .opt_int(until);
                    match &gpus {
                        Some(rusqlite::types::Value::Text(t)) => c.text(t),
                        Some(rusqlite::types::Value::Integer(n)) => c.int(*n),
                        _ => c.null(),
                    }
                    .opt_real(d.gpu_hours)
                    .text(&entry.policy_set)
                    .text(json);
                    let hash = c.finish();
                    ins_de
                        .execute(params![
                            seq,
                            d.decision_id,
                            d.event_id,
                            event_seq,
                            time,
                            now,
                            d.job_id.as_deref(),
                            d.project.as_deref(),
                            d.user.as_deref(),
                            d.decision.as_str(),
                            d.dry_run,
                            d.admission,
                            policies,
                            d.reason,
                            until,
                            gpus,
                            d.gpu_hours,
                            &*entry.policy_set,
                            json,
                            &hash[..]
                        ])
                        .map_err(AuditError::sqlite(format!("insert decision `{}`", d.decision_id)))?;
                    de = Head { seq, hash };
                }
                out.push(Appended { event_seq, duplicate: false, decisions: first..de.seq + 1 });
            }
            if ev.seq - self.indexed.events >= INDEX_RUN {
                index_run(&tx, "events", self.indexed.events, ev.seq)?;
            }
            if de.seq - self.indexed.decisions >= INDEX_RUN {
                index_run(&tx, "decisions", self.indexed.decisions, de.seq)?;
            }
            let mut head = tx.prepare_cached(UPSERT_HEAD).map_err(AuditError::sqlite("prepare the head update"))?;
            if ev != self.events {
                head.execute(params!["events", ev.seq, &ev.hash[..]])
                    .map_err(AuditError::sqlite("update a chain head"))?;
            }
            if de != self.decisions {
                head.execute(params!["decisions", de.seq, &de.hash[..]])
                    .map_err(AuditError::sqlite("update a chain head"))?;
            }
        }
        // Nothing new (every entry a duplicate): no anchor, nothing to sign.
        if ev == self.events && de == self.decisions {
            return Ok(out);
        }
        let heads = Heads { events: ev, decisions: de, loads: self.loads };
        let steps_sum = steps_sum.finish();
        let what = What { digest: Some(&steps_sum[..]), ..What::plain("commit") };
        let anchors = anchor::insert(&tx, self.anchors, now, &heads, &what)?;
        tx.commit().map_err(AuditError::sqlite(format!("commit to `{}`", self.path)))?;
        if ev.seq - self.indexed.events >= INDEX_RUN {
            self.indexed.events = ev.seq;
        }
        if de.seq - self.indexed.decisions >= INDEX_RUN {
            self.indexed.decisions = de.seq;
        }
        self.events = ev;
        self.decisions = de;
        self.anchors = anchors;
        self.committed()?;
        Ok(out)
    }

    /// Records an input refused when applied (schema 7's `refused`): it changed nothing, but the
    /// refusal is on record with who sent it and why.
    pub fn record_refusal(&mut self, row: &EventRow, reason: &str) -> Result<()> {
        self.conn
            .execute(
                "INSERT INTO refused (event_id, time, type, job, raw, sender, reason, recorded_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![row.id, row.time.millis(), row.kind, row.job, row.raw, row.sender, reason, wall_ms()],
            )
            .map_err(AuditError::sqlite(format!("record the refusal of `{}`", row.id)))?;
        Ok(())
    }

    /// The refused inputs after row `after`, oldest first, at most `limit`; only those about `job`
    /// when it is given.
    pub fn refusals(&self, after: i64, job: Option<&str>, limit: usize) -> Result<Vec<StoredRefusal>> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT id, event_id, time, type, job, raw, sender, reason, recorded_at FROM refused \
                 WHERE id > ?1 AND (?2 IS NULL OR job = ?2) ORDER BY id LIMIT ?3",
            )
            .map_err(AuditError::sqlite("read the refused inputs"))?;
        let rows = st
            .query_map(params![after, job, i64::try_from(limit).unwrap_or(i64::MAX)], |r| {
                Ok(StoredRefusal {
                    id: r.get(0)?,
                    event_id: r.get(1)?,
                    time: r.get(2)?,
                    kind: r.get(3)?,
                    job: r.get(4)?,
                    raw: r.get(5)?,
                    sender: r.get(6)?,
                    reason: r.get(7)?,
                    recorded_at: r.get(8)?,
                })
            })
            .map_err(AuditError::sqlite("read the refused inputs"))?;
        rows.collect::<rusqlite::Result<Vec<_>>>().map_err(AuditError::sqlite("read the refused inputs"))
    }

    /// Records that the policy set `digest` (made of `files`) was loaded; returns the load's sequence number.
    pub fn record_policy_set(&mut self, digest: &str, files: &[SourceFile]) -> Result<i64> {
        let files = serde_json::to_string(files).map_err(|e| AuditError::Invalid(e.to_string()))?;
        self.record_load(true, Some(digest), None, Some(&files))
    }

    /// Records a failed (re)load with its error; `in_force` is the digest of the set that stays in force.
    pub fn record_policy_failure(&mut self, error: &str, in_force: Option<&str>) -> Result<i64> {
        self.record_load(false, in_force, Some(error), None)
    }

    fn record_load(&mut self, ok: bool, digest: Option<&str>, error: Option<&str>, files: Option<&str>) -> Result<i64> {
        let now = wall_ms();
        let seq = self.loads.seq + 1;
        let event_seq = self.events.seq;
        let mut c = Canon::after(&self.loads.hash);
        c.int(seq).int(now).int(event_seq).int(i64::from(ok)).opt_text(digest).opt_text(error);
        let hash = c.finish();
        let tx = self.conn.transaction().map_err(AuditError::sqlite("start a transaction"))?;
        let mut new_set = false;
        if let (Some(d), Some(f)) = (digest, files) {
            new_set = tx
                .execute(
                    "INSERT INTO policy_sets (digest, files, first_loaded_at) VALUES (?1, ?2, ?3) ON CONFLICT(digest) DO NOTHING",
                    params![d, f, now],
                )
                .map_err(AuditError::sqlite("record a policy set"))?
                == 1;
        }
        tx.execute(
            "INSERT INTO policy_loads (seq, at, event_seq, ok, digest, error, hash) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![seq, now, event_seq, ok, digest, error, &hash[..]],
        )
        .map_err(AuditError::sqlite("record a policy load"))?;
        tx.execute(UPSERT_HEAD, params!["policy_loads", seq, &hash[..]])
            .map_err(AuditError::sqlite("update a chain head"))?;
        let loads = Head { seq, hash };
        let heads = Heads { events: self.events, decisions: self.decisions, loads };
        let files_sum = files.map(|f| anchor::sha256(f.as_bytes()));
        let what = match (new_set, files_sum.as_ref()) {
            (true, Some(sum)) => {
                What { kind: "policy_set", subject: digest, subject_seq: Some(now), digest: Some(&sum[..]), note: None }
            }
            _ => What::plain("load"),
        };
        let anchors = anchor::insert(&tx, self.anchors, now, &heads, &what)?;
        tx.commit().map_err(AuditError::sqlite(format!("commit to `{}`", self.path)))?;
        self.loads = loads;
        self.anchors = anchors;
        self.committed()?;
        Ok(seq)
    }

    /// Up to `limit` decisions with a sequence number above `after`, oldest first.
    pub fn decisions_since(&self, after: i64, limit: usize) -> Result<Vec<StoredDecision>> {
        let sql = format!("SELECT {DECISION_COLUMNS} FROM decisions WHERE seq > ?1 ORDER BY seq LIMIT ?2");
        let mut st = self.conn.prepare_cached(&sql).map_err(AuditError::sqlite("prepare a decision read"))?;
        let rows = st
            .query_map(params![after, limit_i64(limit)], decision_from_row)
            .map_err(AuditError::sqlite("read decisions"))?;
        rows.collect::<rusqlite::Result<Vec<_>>>().map_err(AuditError::sqlite("read decisions"))
    }

    /// Up to `limit` events with a sequence number above `after`, oldest first (for replay).
    pub fn events_since(&self, after: i64, limit: usize) -> Result<Vec<StoredEvent>> {
        let sql = format!("SELECT {EVENT_COLUMNS} FROM events WHERE seq > ?1 ORDER BY seq LIMIT ?2");
        let mut st = self.conn.prepare_cached(&sql).map_err(AuditError::sqlite("prepare an event read"))?;
        let rows = st
            .query_map(params![after, limit_i64(limit)], event_from_row)
            .map_err(AuditError::sqlite("read events"))?;
        rows.collect::<rusqlite::Result<Vec<_>>>().map_err(AuditError::sqlite("read events"))
    }

    /// The events of wire type `kind` dated in `[since_ms, until_ms)` (either bound open), in log
    /// order, passed to `each` one at a time (a scan of the events: for offline reads such as the
    /// pool's inventory over time, `bursar audit inventory`). Stops at the first error `each` returns.
    pub fn each_event_of_type(
        &self,
        kind: &str,
        since_ms: Option<i64>,
        until_ms: Option<i64>,
        mut each: impl FnMut(StoredEvent) -> std::result::Result<(), AuditError>,
    ) -> Result<u64> {
        let sql =
            format!("SELECT {EVENT_COLUMNS} FROM events WHERE type = ?1 AND time >= ?2 AND time < ?3 ORDER BY seq");
        let mut st = self.conn.prepare_cached(&sql).map_err(AuditError::sqlite("prepare an event read"))?;
        let mut rows = st
            .query(params![kind, since_ms.unwrap_or(i64::MIN), until_ms.unwrap_or(i64::MAX)])
            .map_err(AuditError::sqlite("read events"))?;
        let mut n = 0u64;
        while let Some(row) = rows.next().map_err(AuditError::sqlite("read events"))? {
            each(event_from_row(row).map_err(AuditError::sqlite("read events"))?)?;
            n += 1;
        }
        Ok(n)
    }

    /// The events a server authenticated (those with a sender) dated at or after `from_ms`, newest
    /// first, reading back from the newest row and stopping at the first older than `from_ms` or
    /// after `limit` rows: what a start needs of the last dedupe window without a scan of the log.
    pub fn recent_sent_events(&self, from_ms: i64, limit: usize) -> Result<Vec<StoredEvent>> {
        let sql = format!("SELECT {EVENT_COLUMNS} FROM events ORDER BY seq DESC LIMIT ?1");
        let mut st = self.conn.prepare_cached(&sql).map_err(AuditError::sqlite("prepare an event read"))?;
        let mut rows = st.query(params![limit_i64(limit)]).map_err(AuditError::sqlite("read events"))?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(AuditError::sqlite("read events"))? {
            let e = event_from_row(row).map_err(AuditError::sqlite("read events"))?;
            if e.time < from_ms {
                break;
            }
            if e.sender.is_some() {
                out.push(e);
            }
        }
        Ok(out)
    }

    /// Up to `limit` job steps of events with a sequence number above `after_event_seq`, in order.
    pub fn steps_since(&self, after_event_seq: i64, limit: usize) -> Result<Vec<StoredStep>> {
        self.read_steps(
            "SELECT event_seq, job, step, status, time FROM lifecycle WHERE event_seq > ?1 ORDER BY event_seq, n LIMIT ?2",
            params![after_event_seq, limit_i64(limit)],
        )
    }

    /// Every job step of the events with a sequence number in `(after_event_seq, through_event_seq]`,
    /// in order: the steps of a page of [`AuditLog::events_since`], which were committed with it.
    pub fn steps_between(&self, after_event_seq: i64, through_event_seq: i64) -> Result<Vec<StoredStep>> {
        self.read_steps(
            "SELECT event_seq, job, step, status, time FROM lifecycle WHERE event_seq > ?1 AND event_seq <= ?2 ORDER BY event_seq, n",
            params![after_event_seq, through_event_seq],
        )
    }

    fn read_steps(&self, sql: &str, args: impl rusqlite::Params) -> Result<Vec<StoredStep>> {
        let mut st = self.conn.prepare_cached(sql).map_err(AuditError::sqlite("prepare a lifecycle read"))?;
        let rows = st
            .query_map(args, |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, Option<String>>(3)?,
                    r.get::<_, i64>(4)?,
                ))
            })
            .map_err(AuditError::sqlite("read lifecycle steps"))?;
        let mut out = Vec::new();
        for row in rows {
            let (event_seq, job, step, status, time) = row.map_err(AuditError::sqlite("read a lifecycle step"))?;
            let step = step_of(&step, status.as_deref()).ok_or_else(|| {
                AuditError::Invalid(format!("lifecycle step `{step}` of event {event_seq} is not one bursar writes"))
            })?;
            out.push(StoredStep { event_seq, job, step, time });
        }
        Ok(out)
    }

    /// The admission decision logged for the event `event_id` about job `job` (the first one, with
    /// its seq): what a resent submission is answered with.
    pub fn admission_of(&self, job: &str, event_id: &str) -> Result<Option<StoredDecision>> {
        let sql = format!(
            "SELECT {DECISION_COLUMNS} FROM decisions WHERE job = ?1 AND event_id = ?2 AND admission = 1 ORDER BY seq LIMIT 1"
        );
        let mut st = self.conn.prepare_cached(&sql).map_err(AuditError::sqlite("prepare an admission look-up"))?;
        st.query_row(params![job, event_id], decision_from_row)
            .optional()
            .map_err(AuditError::sqlite("look up an admission"))
    }

    /// The event logged under `event_id`, if any.
    pub fn event_by_id(&self, event_id: &str) -> Result<Option<StoredEvent>> {
        let sql = format!("SELECT {EVENT_COLUMNS} FROM events WHERE event_id = ?1");
        let mut st = self.conn.prepare_cached(&sql).map_err(AuditError::sqlite("prepare an event look-up"))?;
        st.query_row([event_id], event_from_row).optional().map_err(AuditError::sqlite("look up an event"))
    }

    /// The inputs logged about job `job`, oldest first (an index look-up: what a restart needs to
    /// rebuild what it keeps per live job).
    pub fn events_of_job(&self, job: &str) -> Result<Vec<StoredEvent>> {
        // The look-up table up to its cursor, then the events after it, in one read transaction.
        in_one_read(&self.conn, || {
            let through = indexed_through(&self.conn, "events")?;
            let columns = prefixed(EVENT_COLUMNS, "e");
            let sql = format!(
                "SELECT {columns} FROM events_by_job x JOIN events e ON e.seq = x.seq \
                 WHERE x.job = ?1 AND x.seq <= ?2 ORDER BY x.seq"
            );
            let mut st = self.conn.prepare_cached(&sql).map_err(AuditError::sqlite("prepare a job's events read"))?;
            let rows = st
                .query_map(params![job, through], event_from_row)
                .map_err(AuditError::sqlite("read a job's events"))?;
            let mut out =
                rows.collect::<rusqlite::Result<Vec<_>>>().map_err(AuditError::sqlite("read a job's events"))?;
            let sql =
                format!("SELECT {EVENT_COLUMNS} FROM events NOT INDEXED WHERE seq > ?2 AND job = ?1 ORDER BY seq");
            let mut st = self.conn.prepare_cached(&sql).map_err(AuditError::sqlite("prepare a job's events read"))?;
            let rows = st
                .query_map(params![job, through], event_from_row)
                .map_err(AuditError::sqlite("read a job's events"))?;
            for r in rows {
                out.push(r.map_err(AuditError::sqlite("read a job's events"))?);
            }
            Ok(out)
        })
    }

    /// The newest `n` decisions of kind `kind` (`deny`, …) that dry-run policies did not make, newest
    /// first: the pool page's "last denies".
    pub fn latest_decisions(&self, kind: &str, n: usize) -> Result<Vec<StoredDecision>> {
        let sql = format!(
            "SELECT {DECISION_COLUMNS} FROM decisions WHERE decision = ?1 AND dry_run = 0 ORDER BY seq DESC LIMIT ?2"
        );
        let mut st = self.conn.prepare_cached(&sql).map_err(AuditError::sqlite("prepare a decision read"))?;
        let rows = st
            .query_map(params![kind, limit_i64(n)], decision_from_row)
            .map_err(AuditError::sqlite("read decisions"))?;
        rows.collect::<rusqlite::Result<Vec<_>>>().map_err(AuditError::sqlite("read decisions"))
    }

    /// The sequence numbers of the newest event and the newest decision now in the file (0 when none),
    /// read afresh: a reader beside the writer sees every commit made since it opened.
    pub fn newest_seqs(&self) -> Result<(i64, i64)> {
        self.conn
            .query_row(
                "SELECT (SELECT coalesce(max(seq), 0) FROM events), (SELECT coalesce(max(seq), 0) FROM decisions)",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map_err(AuditError::sqlite("read the newest sequence numbers"))
    }

    /// The time of the newest logged event, ms since the epoch.
    pub fn newest_event_time(&self) -> Result<Option<i64>> {
        self.conn
            .query_row("SELECT max(time) FROM events", [], |r| r.get(0))
            .map_err(AuditError::sqlite("read the newest event time"))
    }

    /// Every policy load, oldest first.
    pub fn policy_loads(&self) -> Result<Vec<PolicyLoad>> {
        let sql = format!("SELECT {LOAD_COLUMNS} FROM policy_loads ORDER BY seq");
        let mut st = self.conn.prepare(&sql).map_err(AuditError::sqlite("prepare a policy-load read"))?;
        let rows = st
            .query_map([], |r| {
                Ok(PolicyLoad {
                    seq: r.get(0)?,
                    at: r.get(1)?,
                    event_seq: r.get(2)?,
                    ok: r.get(3)?,
                    digest: r.get(4)?,
                    error: r.get(5)?,
                })
            })
            .map_err(AuditError::sqlite("read policy loads"))?;
        rows.collect::<rusqlite::Result<Vec<_>>>().map_err(AuditError::sqlite("read policy loads"))
    }

    /// The files of policy set `digest`, if it was recorded.
    pub fn policy_set_files(&self, digest: &str) -> Result<Option<(Vec<SourceFile>, i64)>> {
        let row: Option<(String, i64)> = self
            .conn
            .query_row("SELECT files, first_loaded_at FROM policy_sets WHERE digest = ?1", [digest], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()
            .map_err(AuditError::sqlite("read a policy set"))?;
        match row {
            None => Ok(None),
            Some((files, at)) => {
                let files = serde_json::from_str(&files)
                    .map_err(|e| AuditError::Invalid(format!("policy set `{digest}` has unreadable files: {e}")))?;
                Ok(Some((files, at)))
            }
        }
    }

    /// Stores an engine snapshot covering every event up to `event_seq` (replacing one at the same
    /// seq), and anchors its SHA-256 in the same transaction, so an edited blob is refused at restore
    /// ([`AuditLog::latest_snapshot`]) and reported by `verify`.
    pub fn save_snapshot(&mut self, event_seq: i64, policy_set: Option<&str>, blob: &[u8]) -> Result<()> {
        let now = wall_ms();
        let sum = anchor::sha256(blob);
        let heads = self.heads();
        let tx = self.conn.transaction().map_err(AuditError::sqlite("start a transaction"))?;
        tx.execute(
            "INSERT INTO engine_snapshots (event_seq, taken_at, policy_set, blob) VALUES (?1, ?2, ?3, ?4) \
             ON CONFLICT(event_seq) DO UPDATE SET taken_at = excluded.taken_at, policy_set = excluded.policy_set, blob = excluded.blob",
            params![event_seq, now, policy_set, blob],
        )
        .map_err(AuditError::sqlite("store an engine snapshot"))?;
        let what = What {
            kind: "snapshot",
            subject: policy_set,
            subject_seq: Some(event_seq),
            digest: Some(&sum[..]),
            note: None,
        };
        let anchors = anchor::insert(&tx, self.anchors, now, &heads, &what)?;
        tx.commit().map_err(AuditError::sqlite(format!("commit to `{}`", self.path)))?;
        self.anchors = anchors;
        self.committed()?;
        Ok(())
    }

    /// The newest engine snapshot that matches its anchor (and, with a witness attached, that a
    /// signed head covers: [`AuditLog::restore_point`]), if any: what `serve` restores from.
    ///
    /// A newer snapshot that does not match (its blob edited, or written outside bursar) is skipped
    /// and logged at error level (`tracing`), and the next older one is tried; with none left the
    /// answer is `None`, and the caller replays the whole log. [`AuditLog::restore_point`] gives the
    /// same answer with the rejections, for a caller that reports them itself.
    pub fn latest_snapshot(&self) -> Result<Option<StoredSnapshot>> {
        let point = self.restore_point()?;
        for r in &point.rejected {
            tracing::error!(
                log = %self.path,
                problem = %r,
                "audit log: an engine snapshot was refused; restoring from an older one or replaying the log"
            );
        }
        Ok(point.snapshot)
    }

    /// The newest engine snapshot that matches its anchor, and every newer one rejected with why.
    ///
    /// With a witness attached ([`AuditLog::attach_witness`]), a snapshot must also be covered by a
    /// signed head ([`crate::trust`]): one that signed an anchor at or after the snapshot's, which
    /// the log still holds as signed, every anchor between them recomputing; and it must not be among
    /// adopted unsigned writes. Without
    /// one, the snapshot's own anchor is all there is to check.
    pub fn restore_point(&self) -> Result<RestorePoint> {
        let trust = match &self.witness {
            Some(w) => {
                // The signed heads back to the oldest snapshot's anchor: no older one can cover any.
                let oldest: Option<i64> = self
                    .conn
                    .query_row(
                        "SELECT MIN(a.seq) FROM anchors a JOIN engine_snapshots s \
                         ON a.kind = 'snapshot' AND a.subject_seq = s.event_seq",
                        [],
                        |r| r.get(0),
                    )
                    .map_err(AuditError::sqlite("read the snapshot anchors"))?;
                let key = w.public_key();
                let signed = crate::trust::signed_since(self, w.path(), &key, oldest.unwrap_or(i64::MAX))?;
                let newest = crate::trust::standing(self, w.path(), &key)?.vouched.map_or(0, |v| v.anchor);
                Some((signed, newest, crate::trust::adoptions(&self.conn)?, key))
            }
            None => None,
        };
        let pruned_through: i64 = self
            .conn
            .query_row("SELECT COALESCE(MAX(through_seq), 0) FROM checkpoints WHERE chain = 'events'", [], |r| r.get(0))
            .map_err(AuditError::sqlite("read the prune checkpoints"))?;
        let mut st = self
            .conn
            .prepare("SELECT event_seq, taken_at, policy_set, blob FROM engine_snapshots ORDER BY event_seq DESC")
            .map_err(AuditError::sqlite("read the engine snapshots"))?;
        let mut rows = st.query([]).map_err(AuditError::sqlite("read the engine snapshots"))?;
        let mut rejected = Vec::new();
        while let Some(r) = rows.next().map_err(AuditError::sqlite("read the engine snapshots"))? {
            let snap = StoredSnapshot {
                event_seq: r.get(0).map_err(AuditError::sqlite("read an engine snapshot"))?,
                taken_at: r.get(1).map_err(AuditError::sqlite("read an engine snapshot"))?,
                policy_set: r.get(2).map_err(AuditError::sqlite("read an engine snapshot"))?,
                blob: r.get(3).map_err(AuditError::sqlite("read an engine snapshot"))?,
            };
            if snap.event_seq < pruned_through {
                rejected.push(SnapshotRejected::BeforePrune { event_seq: snap.event_seq, pruned_through });
                continue;
            }
            let anchor = match check_snapshot_anchor(&self.conn, &snap)? {
                Ok(anchor) => anchor,
                Err(why) => {
                    rejected.push(why);
                    continue;
                }
            };
            let event_seq = snap.event_seq;
            if let Some((signed, newest, adoptions, key)) = &trust {
                if let Some((_, _, by)) = adoptions.iter().find(|(from, to, _)| (*from..=*to).contains(&anchor)) {
                    rejected.push(SnapshotRejected::Adopted { event_seq, anchor, adopted_by: *by });
                    continue;
                }
                match crate::trust::uncovered(&self.conn, anchor, signed, key)? {
                    None => {}
                    Some(None) => {
                        rejected.push(SnapshotRejected::Unsigned { event_seq, anchor, signed: *newest });
                        continue;
                    }
                    Some(Some((signed, broken))) => {
                        rejected.push(SnapshotRejected::ChainBroken { event_seq, anchor, signed, broken });
                        continue;
                    }
                }
            }
            return Ok(RestorePoint { snapshot: Some(snap), rejected, pruned_through });
        }
        Ok(RestorePoint { snapshot: None, rejected, pruned_through })
    }

    /// Attaches `witness` to sign every write from now on (as [`AuditLog::set_witness`]), but only
    /// over signed ground: when the log holds anchors no signed head of this key covers (writes made
    /// by something else since the last signature, or by a bursar that stopped before signing them),
    /// or the witness signed anchors the log no longer has as signed, the first signature would vouch
    /// for them, so this refuses ([`AuditError::Unsigned`]) unless `adopt`. With `adopt`, it appends
    /// an `adopt` anchor naming what it adopts (subject `unsigned`, `subject_seq` the first adopted
    /// anchor) and signs it at once; `verify --witness` then names the adoption, and a snapshot among
    /// the adopted writes is never restored. Returns what was adopted.
    pub fn attach_witness(&mut self, witness: Witness, adopt: bool) -> Result<Option<crate::trust::Standing>> {
        let standing = crate::trust::standing(self, witness.path(), &witness.public_key())?;
        if standing.is_clean() {
            self.witness = Some(witness);
            return Ok(None);
        }
        let what = standing.describe(witness.path());
        if !adopt && standing.ahead.is_some() {
            return Err(AuditError::RolledBack { path: self.path.clone(), what: standing.why(witness.path()) });
        }
        if !adopt {
            let what = standing.why(witness.path());
            return Err(AuditError::Unsigned {
                path: self.path.clone(),
                range: standing
                    .unsigned()
                    .map(|(from, to)| crate::trust::anchors_range(from, to))
                    .unwrap_or_else(|| "this log".to_owned()),
                what,
            });
        }
        let (from, to) = standing.unsigned().unwrap_or((self.anchors.seq + 1, self.anchors.seq));
        tracing::warn!(log = %self.path, from, to, "audit log: adopting unsigned writes (--adopt-unsigned): {what}");
        let note = format!("adopted unsigned with --adopt-unsigned: {what}");
        let now = wall_ms();
        let heads = self.heads();
        let tx = self.conn.transaction().map_err(AuditError::sqlite("start a transaction"))?;
        let what = What {
            kind: "adopt",
            subject: Some(crate::trust::ADOPTED_UNSIGNED),
            subject_seq: Some(from),
            digest: None,
            note: Some(&note),
        };
        let anchors = anchor::insert(&tx, self.anchors, now, &heads, &what)?;
        tx.commit().map_err(AuditError::sqlite(format!("commit to `{}`", self.path)))?;
        self.anchors = anchors;
        self.witness = Some(witness);
        if self.id.is_none() {
            self.id = anchor::log_id(&self.conn)?;
        }
        // Signed now, whatever the witness's interval: the adoption is what the next reader checks.
        if let Some(w) = self.witness.as_mut() {
            w.mark_pending();
        }
        self.sign_pending()?;
        Ok(Some(standing))
    }

    /// Signs the current head now with the attached witness, pending or not; `audit head` uses it.
    pub fn sign_now(&mut self) -> Result<Option<crate::witness::SignedHead>> {
        if let Some(w) = self.witness.as_mut() {
            w.mark_pending();
        }
        self.sign_pending()
    }

    /// Deletes a prefix of the events and decisions chains (rows before the first one whose event
    /// time is at or after `before`), records a checkpoint per chain and anchors each checkpoint,
    /// all in one transaction. [`crate::verify::prune`] verifies first.
    pub(crate) fn prune_prefix(&mut self, before: i64) -> Result<crate::verify::PruneReport> {
        let now = wall_ms();
        let heads = self.heads();
        let mut anchors = self.anchors;
        let tx = self.conn.transaction().map_err(AuditError::sqlite("start a transaction"))?;
        let mut out = crate::verify::PruneReport { events: 0, decisions: 0, events_through: 0, decisions_through: 0 };
        for chain in ["events", "decisions"] {
            let first_kept: Option<i64> = tx
                .query_row(&format!("SELECT MIN(seq) FROM {chain} WHERE time >= ?1"), [before], |r| r.get(0))
                .map_err(AuditError::sqlite(format!("find what to prune in `{chain}`")))?;
            let last: Option<i64> = tx
                .query_row(&format!("SELECT MAX(seq) FROM {chain}"), [], |r| r.get(0))
                .map_err(AuditError::sqlite(format!("read `{chain}`")))?;
            let Some(last) = last else { continue };
            let through = match first_kept {
                Some(k) => k - 1,
                None => last,
            };
            let row: Option<Vec<u8>> = tx
                .query_row(&format!("SELECT hash FROM {chain} WHERE seq = ?1"), [through], |r| r.get(0))
                .optional()
                .map_err(AuditError::sqlite(format!("read `{chain}`")))?;
            let Some(hash) = row else { continue };
            let n = tx
                .execute(&format!("DELETE FROM {chain} WHERE seq <= ?1"), [through])
                .map_err(AuditError::sqlite(format!("delete old rows of `{chain}`")))?;
            let removed = i64::try_from(n).unwrap_or(i64::MAX);
            // The derived rows of the pruned rows go with them (the report facts stay: see the list).
            for t in crate::derived::DERIVED_TABLES {
                if let crate::derived::Prune::With { chain: of, column } = t.prune
                    && of == chain
                {
                    tx.execute(&format!("DELETE FROM {} WHERE {column} <= ?1", t.name), [through])
                        .map_err(AuditError::sqlite(format!("delete old rows of `{}`", t.name)))?;
                }
            }
            tx.execute(
                "INSERT INTO checkpoints (chain, through_seq, hash, removed, before, at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![chain, through, hash, removed, before, now],
            )
            .map_err(AuditError::sqlite("record a prune checkpoint"))?;
            let note = anchor::checkpoint_note(removed, before);
            let what = What {
                kind: "checkpoint",
                subject: Some(chain),
                subject_seq: Some(through),
                digest: Some(&hash),
                note: Some(&note),
            };
            anchors = anchor::insert(&tx, anchors, now, &heads, &what)?;
            if chain == "events" {
                out.events = n as u64;
                out.events_through = through;
            } else {
                out.decisions = n as u64;
                out.decisions_through = through;
            }
        }
        tx.commit().map_err(AuditError::sqlite("commit the prune"))?;
        if anchors != self.anchors {
            self.anchors = anchors;
            self.committed()?;
        }
        Ok(out)
    }

    /// Deletes every snapshot but the `keep` newest; returns how many went.
    pub fn prune_snapshots(&mut self, keep: usize) -> Result<usize> {
        self.conn
            .execute(
                "DELETE FROM engine_snapshots WHERE event_seq NOT IN \
                 (SELECT event_seq FROM engine_snapshots ORDER BY event_seq DESC LIMIT ?1)",
                [limit_i64(keep)],
            )
            .map_err(AuditError::sqlite("delete old engine snapshots"))
    }

    /// Limits the file to `pages` pages (`PRAGMA max_page_count`): appends past it fail as a full
    /// disk would. For tests of the disk-full path and for capping a log's size.
    pub fn set_max_pages(&self, pages: i64) -> Result<()> {
        self.conn.pragma_update(None, "max_page_count", pages).map_err(AuditError::sqlite("set max_page_count"))
    }
}

fn head0() -> Head {
    Head { seq: 0, hash: GENESIS }
}

/// Where the chain `chain` stands: the newest row, else the newest prune checkpoint, else genesis.
pub(crate) fn load_head(conn: &Connection, chain: &str) -> Result<Head> {
    let sql = format!("SELECT seq, hash FROM {chain} ORDER BY seq DESC LIMIT 1");
    let row: Option<(i64, Vec<u8>)> = conn
        .query_row(&sql, [], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()
        .map_err(AuditError::sqlite(format!("read the newest row of `{chain}`")))?;
    let row = match row {
        Some(r) => Some(r),
        None => conn
            .query_row(
                "SELECT through_seq, hash FROM checkpoints WHERE chain = ?1 ORDER BY id DESC LIMIT 1",
                [chain],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(AuditError::sqlite("read the prune checkpoints"))?,
    };
    match row {
        None => Ok(head0()),
        Some((seq, h)) => Ok(Head { seq, hash: to_hash(&h, chain, seq)? }),
    }
}

/// Checks `snap` against the newest anchor that records a snapshot at its event seq: None when it
/// matches, else why not.
pub(crate) fn check_snapshot(conn: &Connection, snap: &StoredSnapshot) -> Result<Option<SnapshotRejected>> {
    Ok(check_snapshot_anchor(conn, snap)?.err())
}

/// Like [`check_snapshot`], with the anchor's seq when it matches.
pub(crate) fn check_snapshot_anchor(
    conn: &Connection,
    snap: &StoredSnapshot,
) -> Result<std::result::Result<i64, SnapshotRejected>> {
    let seq: Option<i64> = conn
        .query_row("SELECT MAX(seq) FROM anchors WHERE kind = 'snapshot' AND subject_seq = ?1", [snap.event_seq], |r| {
            r.get(0)
        })
        .map_err(AuditError::sqlite("read the snapshot anchors"))?;
    let Some(a) = seq.map(|s| anchor::anchor_at(conn, s)).transpose()?.flatten() else {
        return Ok(Err(SnapshotRejected::Unanchored { event_seq: snap.event_seq }));
    };
    if anchor::rehash(conn, &a)?.as_slice() != a.hash.as_slice() {
        return Ok(Err(SnapshotRejected::AnchorEdited { event_seq: snap.event_seq, anchor: a.seq }));
    }
    let sum = anchor::sha256(&snap.blob);
    let recorded = a.digest.as_deref().unwrap_or_default();
    if sum.as_slice() != recorded || a.at != snap.taken_at || a.subject != snap.policy_set {
        return Ok(Err(SnapshotRejected::Edited {
            event_seq: snap.event_seq,
            anchor: a.seq,
            found: hex(&sum),
            recorded: hex(recorded),
        }));
    }
    Ok(Ok(a.seq))
}

pub(crate) fn to_hash(bytes: &[u8], chain: &str, seq: i64) -> Result<Hash> {
    let mut h = GENESIS;
    if bytes.len() != h.len() {
        return Err(AuditError::Invalid(format!("{chain} row {seq} has a malformed hash ({} bytes)", bytes.len())));
    }
    h.copy_from_slice(bytes);
    Ok(h)
}

pub(crate) fn limit_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// `serde_json`'s output as text (it writes only UTF-8; anything else would be a bug, stored as "").
fn utf8(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).unwrap_or_default()
}

/// Reads a row selected with [`DECISION_COLUMNS`].
pub(crate) fn decision_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<StoredDecision> {
    let policies: String = r.get(12)?;
    Ok(StoredDecision {
        seq: r.get(0)?,
        decision_id: r.get(1)?,
        event_id: r.get(2)?,
        event_seq: r.get(3)?,
        time: r.get(4)?,
        recorded_at: r.get(5)?,
        job: r.get(6)?,
        project: r.get(7)?,
        user: r.get(8)?,
        decision: r.get(9)?,
        dry_run: r.get(10)?,
        admission: r.get(11)?,
        policies: serde_json::from_str(&policies).unwrap_or_else(|_| vec![policies]),
        reason: r.get(13)?,
        until: r.get(14)?,
        gpus: gpus_column(r.get_ref(15)?)
            .map_err(|e| rusqlite::Error::FromSqlConversionFailure(15, rusqlite::types::Type::Text, e.into()))?,
        gpu_hours: r.get(16)?,
        policy_set: r.get(17)?,
        stored_json: r.get(18)?,
    })
}

/// Creates the database file `path` with [`AuditLog::FILE_MODE`] if it does not exist, and takes the
/// other users' bits off one that does (a log written under umask 022 by an older version): the log
/// holds every job's name, user and project, and was readable by every local user.
fn private_file(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    match std::fs::OpenOptions::new().write(true).create_new(true).mode(AuditLog::FILE_MODE).open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let mode = std::fs::metadata(path)?.permissions().mode();
            if mode & 0o007 != 0 {
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o770))?;
            }
            for side in ["-wal", "-shm"] {
                let mut p = path.as_os_str().to_owned();
                p.push(side);
                let p = std::path::PathBuf::from(p);
                if let Ok(m) = std::fs::metadata(&p)
                    && m.permissions().mode() & 0o007 != 0
                {
                    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(m.permissions().mode() & 0o770))?;
                }
            }
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Reads a row selected with [`EVENT_COLUMNS`].
pub(crate) fn event_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<StoredEvent> {
    Ok(StoredEvent {
        seq: r.get(0)?,
        event_id: r.get(1)?,
        time: r.get(2)?,
        kind: r.get(3)?,
        job: r.get(4)?,
        project: r.get(5)?,
        user: r.get(6)?,
        raw: r.get(7)?,
        recorded_at: r.get(8)?,
        sender: r.get(9)?,
    })
}

/// The `gpus` column: an INTEGER (whole GPUs), a TEXT share (`2/7`), or NULL.
fn gpus_column(v: rusqlite::types::ValueRef<'_>) -> std::result::Result<Option<bursar_model::Gpus>, String> {
    use rusqlite::types::ValueRef;
    match v {
        ValueRef::Null => Ok(None),
        ValueRef::Integer(n) => u32::try_from(n)
            .map(|n| Some(bursar_model::Gpus::whole(n)))
            .map_err(|_| format!("{n} GPUs is out of range")),
        ValueRef::Text(t) => std::str::from_utf8(t)
            .map_err(|e| e.to_string())
            .and_then(|t| bursar_model::Gpus::parse(t).map_err(|e| e.to_string()))
            .map(Some),
        other => Err(format!("a {:?} is not a GPU count", other.data_type())),
    }
}
