//! The SQLite schema, versioned with `PRAGMA user_version` and migrated forward on open.
//!
//! Version 1 (the first) holds:
//! - `events`: every applied event, its raw line and the columns queries filter on. `event_id` is
//!   UNIQUE: appending an event already present is skipped, and so are its decisions (idempotent reruns).
//! - `decisions`: every decision; `seq` is the decision sequence number (a stream cursor for `serve`).
//! - `policy_sets` (one row per digest: the files and their digests, when first loaded) and
//!   `policy_loads` (every load and reload, successful or not, with the error text).
//! - `chain_heads`: the last sequence number and hash of each hash chain, so removing the newest rows
//!   is detected; `checkpoints`: where `prune` cut each chain.
//! - `engine_snapshots`: opaque engine state blobs and the event `seq` they cover (for `serve`).
//!
//! Version 2 adds `anchors` ([`crate::anchor`]): one chained row per write, recording the heads of the
//! three row chains and binding prune checkpoints, policy sets and engine snapshots into a chain. A
//! version-1 file is migrated by anchoring what it holds as found (one `adopt` anchor per checkpoint,
//! policy set and snapshot, then one with the heads): edits made before the migration are not
//! detectable through the anchors, edits after it are.
//!
//! Version 3 adds `lifecycle` (the engine's job steps) and version 4 the notifier's outbox,
//! `notify_cursor` and `notices` ([`crate::outbox`]). Version 5 replaces the decisions' `(project,
//! time)` and `(user, time)` indexes and the events' `(job, seq)` with tables filled in sorted runs
//! (see `V5`).
//!
//! Version 6 changes no table: a decision row's `json` may be empty, which means the decision's wire
//! JSON is the decision rebuilt from the row's own columns (`crate::log::stores_as_columns`: every
//! decision without placement hints). The row then holds each value once, and the writer neither
//! serialises nor hashes the JSON a second time. The row's hash covers the empty text like any other
//! value, so `verify` is unchanged; an older build would read the empty text as the decision, so it
//! refuses the file (it is newer than the build).
//!
//! Version 7 adds who sent each input: `events.sender`, the principal and how their credential
//! proved it, as `bursar serve` authenticated the request (a JSON object, [`bursar_model::Sender`];
//! NULL for inputs read from a file). The row's hash covers it when it is set and not otherwise, so
//! every row written before keeps its hash, and setting or clearing it on a row is an edit `verify`
//! reports. It also adds `refused`: the inputs refused when applied (an event dated beyond the clock
//! bound, a second submission of a known job), with the reason; they changed nothing, so they are
//! not chained (they are on record, not evidence of state).
//!
//! A migration is a step from version N to N+1 run in one transaction; [`migrate`] runs every
//! step the file lacks. A file newer than this build is refused rather than guessed at.
//!
//! Two layouts have carried the number 2: main wrote version 1 + `lifecycle` as version 2 until the
//! anchors branch was merged (commit `1582aec`), which made `anchors` version 2 and `lifecycle`
//! version 3. [`migrate`] tells them apart by the `anchors` table; `tests/data/audit-schemas/v2.db`
//! is a file of main's, which `crates/cli/tests/audit_upgrade.rs` migrates.

use rusqlite::{Connection, Transaction};

use crate::anchor::{self, Heads, What};
use crate::error::{AuditError, Result};
use crate::log::{Head, load_head, wall_ms};

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = 7;

const V1: &str = r#"
CREATE TABLE events (
    seq         INTEGER PRIMARY KEY,
    event_id    TEXT NOT NULL UNIQUE,
    time        INTEGER NOT NULL,
    type        TEXT NOT NULL,
    job         TEXT,
    project     TEXT,
    user        TEXT,
    raw         TEXT NOT NULL,
    recorded_at INTEGER NOT NULL,
    hash        BLOB NOT NULL
);
CREATE INDEX events_job ON events(job, seq) WHERE job IS NOT NULL;

CREATE TABLE decisions (
    seq         INTEGER PRIMARY KEY,
    decision_id TEXT NOT NULL,
    event_id    TEXT NOT NULL,
    event_seq   INTEGER,
    time        INTEGER NOT NULL,
    recorded_at INTEGER NOT NULL,
    job         TEXT,
    project     TEXT,
    user        TEXT,
    decision    TEXT NOT NULL,
    dry_run     INTEGER NOT NULL,
    admission   INTEGER NOT NULL,
    policies    TEXT NOT NULL,
    reason      TEXT NOT NULL,
    until       INTEGER,
    gpus        INTEGER,
    gpu_hours   REAL,
    policy_set  TEXT NOT NULL,
    json        TEXT NOT NULL,
    hash        BLOB NOT NULL
);
CREATE INDEX decisions_project_time ON decisions(project, time);
CREATE INDEX decisions_time ON decisions(time);
CREATE INDEX decisions_job ON decisions(job, seq) WHERE job IS NOT NULL;
CREATE INDEX decisions_user_time ON decisions(user, time) WHERE user IS NOT NULL;

CREATE TABLE policy_sets (
    digest          TEXT PRIMARY KEY,
    files           TEXT NOT NULL,
    first_loaded_at INTEGER NOT NULL
);

CREATE TABLE policy_loads (
    seq       INTEGER PRIMARY KEY,
    at        INTEGER NOT NULL,
    event_seq INTEGER NOT NULL,
    ok        INTEGER NOT NULL,
    digest    TEXT,
    error     TEXT,
    hash      BLOB NOT NULL
);

CREATE TABLE chain_heads (
    chain TEXT PRIMARY KEY,
    seq   INTEGER NOT NULL,
    hash  BLOB NOT NULL
);

CREATE TABLE checkpoints (
    id          INTEGER PRIMARY KEY,
    chain       TEXT NOT NULL,
    through_seq INTEGER NOT NULL,
    hash        BLOB NOT NULL,
    removed     INTEGER NOT NULL,
    before      INTEGER NOT NULL,
    at          INTEGER NOT NULL
);

CREATE TABLE engine_snapshots (
    event_seq  INTEGER PRIMARY KEY,
    taken_at   INTEGER NOT NULL,
    policy_set TEXT,
    blob       BLOB NOT NULL
);
"#;

/// Version 3: the job steps the engine took for each event (`bursar_engine::Transition`), the one
/// definition of the job lifecycle that the report's accounting reads. Derived data: replaying the
/// events through the engine with the same policies gives the same rows (the policy files are not in
/// the log, so `verify` checks them against each commit's anchor instead, which records their SHA-256).
const V3: &str = r#"
CREATE TABLE IF NOT EXISTS lifecycle (
    event_seq INTEGER NOT NULL,
    n         INTEGER NOT NULL,
    job       TEXT NOT NULL,
    step      TEXT NOT NULL,
    status    TEXT,
    time      INTEGER NOT NULL,
    PRIMARY KEY (event_seq, n)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS lifecycle_job ON lifecycle(job, event_seq);
"#;

const V2: &str = r#"
CREATE TABLE anchors (
    seq            INTEGER PRIMARY KEY,
    at             INTEGER NOT NULL,
    kind           TEXT NOT NULL,
    events_seq     INTEGER NOT NULL,
    events_hash    BLOB NOT NULL,
    decisions_seq  INTEGER NOT NULL,
    decisions_hash BLOB NOT NULL,
    loads_seq      INTEGER NOT NULL,
    loads_hash     BLOB NOT NULL,
    subject        TEXT,
    subject_seq    INTEGER,
    digest         BLOB,
    note           TEXT,
    hash           BLOB NOT NULL
);
CREATE INDEX anchors_kind ON anchors(kind, subject_seq);
"#;

/// One migration step.
enum Step {
    /// Plain SQL.
    Sql(&'static str),
    /// SQL, then code (anchoring what the file already holds).
    Then(&'static str, fn(&Transaction<'_>) -> Result<()>),
}

/// Version 4: the notifier's outbox (`bursar-notify`, run by `serve --notify`; [`crate::outbox`]).
/// `notify_cursor` is how far the notifier has read the log (the last decision and event seq whose
/// notices are in `notices`); `notices` holds one row per decision that raised a notice, its
/// resolution once its cause ended, and what the sink has acknowledged (`delivered`: `none`,
/// `firing`, `resolved`). The cursor and the notices it covers are written in one transaction, so a
/// restart neither skips nor repeats a decision. Not chained: the notifier's working state, derived
/// from the chained decisions and lifecycle rows.
const V4: &str = r#"
CREATE TABLE IF NOT EXISTS notify_cursor (
    id           INTEGER PRIMARY KEY CHECK (id = 1),
    decision_seq INTEGER NOT NULL,
    event_seq    INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS notices (
    seq         INTEGER PRIMARY KEY,
    job         TEXT,
    kind        TEXT NOT NULL,
    policy      TEXT,
    opened_at   INTEGER NOT NULL,
    expires_at  INTEGER,
    resolved_at INTEGER,
    resolution  TEXT,
    body        TEXT NOT NULL,
    delivered   TEXT NOT NULL,
    attempts    INTEGER NOT NULL,
    sent_at     INTEGER
);
CREATE INDEX IF NOT EXISTS notices_open ON notices(job) WHERE resolved_at IS NULL;
CREATE INDEX IF NOT EXISTS notices_to_send ON notices(seq) WHERE delivered <> 'resolved';
"#;

/// Version 5: three look-ups become tables that the writer fills in sorted runs
/// ([`crate::log::INDEX_RUN`] rows at a time) instead of SQLite indexes updated by every insert:
/// the decisions' `(project, time)` and `(user, time)` and the events' `(job, seq)`. Their keys are
/// scattered (a dozen projects and users in one small `serve` transaction; the samples of thousands
/// of running jobs in an `eval` stream), so each index entry dirtied a page of its own; a sorted run
/// shares one page per key. `lookup_cursors.through_seq` is, per chain, the last row the tables
/// cover; readers take the rows after it from the chain's table itself, and `verify` checks that the
/// tables hold exactly the rows up to it. Derived data, not chained: built from the rows by this
/// migration (from scratch, so running it again rebuilds the same tables). It also drops
/// `lifecycle_job`, an index of version 3 that no query reads (the report reads the steps by event).
const V5: &str = r#"
CREATE TABLE IF NOT EXISTS decisions_by_project (
    project TEXT NOT NULL,
    time    INTEGER NOT NULL,
    seq     INTEGER NOT NULL,
    PRIMARY KEY (project, time, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS decisions_by_user (
    user TEXT NOT NULL,
    time INTEGER NOT NULL,
    seq  INTEGER NOT NULL,
    PRIMARY KEY (user, time, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS events_by_job (
    job TEXT NOT NULL,
    seq INTEGER NOT NULL,
    PRIMARY KEY (job, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS lookup_cursors (
    chain       TEXT PRIMARY KEY,
    through_seq INTEGER NOT NULL
);
DELETE FROM decisions_by_project;
DELETE FROM decisions_by_user;
DELETE FROM events_by_job;
INSERT INTO decisions_by_project SELECT project, time, seq FROM decisions WHERE project IS NOT NULL ORDER BY 1, 2, 3;
INSERT INTO decisions_by_user SELECT user, time, seq FROM decisions WHERE user IS NOT NULL ORDER BY 1, 2, 3;
INSERT INTO events_by_job SELECT job, seq FROM events WHERE job IS NOT NULL ORDER BY 1, 2;
INSERT OR REPLACE INTO lookup_cursors VALUES ('decisions', COALESCE((SELECT MAX(seq) FROM decisions), 0));
INSERT OR REPLACE INTO lookup_cursors VALUES ('events', COALESCE((SELECT MAX(seq) FROM events), 0));
DROP INDEX IF EXISTS decisions_project_time;
DROP INDEX IF EXISTS decisions_user_time;
DROP INDEX IF EXISTS events_job;
DROP INDEX IF EXISTS lifecycle_job;
"#;

/// Version 6: no table changes (see the module's documentation); the version says that a decision's
/// `json` may be empty, to be rebuilt from its columns.
const V6: &str = "";

/// Version 7: who sent each input, and the refused inputs (see the module's documentation).
const V7: &str = r#"
CREATE TABLE IF NOT EXISTS refused (
    id          INTEGER PRIMARY KEY,
    event_id    TEXT NOT NULL,
    time        INTEGER NOT NULL,
    type        TEXT NOT NULL,
    job         TEXT,
    raw         TEXT NOT NULL,
    sender      TEXT,
    reason      TEXT NOT NULL,
    recorded_at INTEGER NOT NULL
);
"#;

/// The migration steps: `MIGRATIONS[n]` takes a file from version n to n+1.
const MIGRATIONS: &[Step] = &[
    Step::Sql(V1),
    Step::Then(V2, adopt),
    Step::Sql(V3),
    Step::Sql(V4),
    Step::Sql(V5),
    Step::Sql(V6),
    Step::Then(V7, add_sender),
];

/// Version 6 to 7: `events.sender`, unless the file has it already (a file whose version number was
/// set back by hand, as a test does).
fn add_sender(tx: &Transaction<'_>) -> Result<()> {
    let has: bool = tx
        .query_row("SELECT count(*) FROM pragma_table_info('events') WHERE name = 'sender'", [], |r| r.get::<_, i64>(0))
        .map_err(crate::error::AuditError::sqlite("read the events table's columns"))?
        > 0;
    if !has {
        tx.execute_batch("ALTER TABLE events ADD COLUMN sender TEXT")
            .map_err(crate::error::AuditError::sqlite("add events.sender"))?;
    }
    Ok(())
}

/// Version 1 to 2: anchors what a version-1 file holds, as found.
fn adopt(tx: &Transaction<'_>) -> Result<()> {
    let heads = Heads {
        events: load_head(tx, "events")?,
        decisions: load_head(tx, "decisions")?,
        loads: load_head(tx, "policy_loads")?,
    };
    let now = wall_ms();
    let mut prev = Head { seq: 0, hash: crate::canon::GENESIS };
    let mut any = heads.events.seq > 0 || heads.decisions.seq > 0 || heads.loads.seq > 0;
    let read = |e| AuditError::sqlite("read a version-1 file to migrate it")(e);
    {
        let mut st = tx
            .prepare("SELECT chain, through_seq, hash, removed, before FROM checkpoints ORDER BY id")
            .map_err(read)?;
        let rows = st
            .query_map([], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, Vec<u8>>(2)?, r.get(3)?, r.get(4)?))
            })
            .map_err(read)?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(read)?;
        for (chain, through, hash, removed, before) in rows {
            let note = anchor::checkpoint_note(removed, before);
            let what = What {
                kind: "checkpoint",
                subject: Some(&chain),
                subject_seq: Some(through),
                digest: Some(&hash),
                note: Some(&note),
            };
            prev = anchor::insert(tx, prev, now, &heads, &what)?;
            any = true;
        }
    }
    {
        let mut st = tx
            .prepare("SELECT digest, files, first_loaded_at FROM policy_sets ORDER BY first_loaded_at, digest")
            .map_err(read)?;
        let rows = st
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, i64>(2)?)))
            .map_err(read)?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(read)?;
        for (digest, files, at) in rows {
            let sum = anchor::sha256(files.as_bytes());
            let what = What {
                kind: "policy_set",
                subject: Some(&digest),
                subject_seq: Some(at),
                digest: Some(&sum),
                note: Some("adopted"),
            };
            prev = anchor::insert(tx, prev, now, &heads, &what)?;
            any = true;
        }
    }
    {
        let mut st = tx
            .prepare("SELECT event_seq, taken_at, policy_set, blob FROM engine_snapshots ORDER BY event_seq")
            .map_err(read)?;
        let rows = st
            .query_map([], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, Option<String>>(2)?, r.get::<_, Vec<u8>>(3)?))
            })
            .map_err(read)?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(read)?;
        for (event_seq, taken_at, set, blob) in rows {
            let sum = anchor::sha256(&blob);
            let what = What {
                kind: "snapshot",
                subject: set.as_deref(),
                subject_seq: Some(event_seq),
                digest: Some(&sum),
                note: Some("adopted"),
            };
            prev = anchor::insert(tx, prev, taken_at, &heads, &what)?;
            any = true;
        }
    }
    if any {
        anchor::insert(tx, prev, now, &heads, &What::plain("adopt"))?;
    }
    Ok(())
}

/// The schema version of the file at `path`, read without changing it (0: not a bursar audit log,
/// or an empty file). What `bursar audit migrate` reports before it migrates.
pub fn file_version(path: &std::path::Path) -> Result<i64> {
    let shown = path.display().to_string();
    if !path.exists() {
        return Err(AuditError::Invalid(format!("`{shown}` does not exist")));
    }
    let conn = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(AuditError::sqlite(format!("open `{shown}`")))?;
    conn.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(AuditError::sqlite(format!("read `{shown}`")))
}

/// Brings the database to [`SCHEMA_VERSION`], refusing a newer one. Returns the version found.
pub fn migrate(conn: &mut Connection, path: &str) -> Result<i64> {
    let found: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(AuditError::sqlite("read the schema version"))?;
    if found > SCHEMA_VERSION {
        return Err(AuditError::SchemaTooNew { path: path.to_owned(), found, supported: SCHEMA_VERSION });
    }
    // Main's own version 2 (before the anchors branch was merged, which renumbered it to 3) was
    // version 1 plus `lifecycle`, with no `anchors`: such a file takes the version-2 step too (its
    // `lifecycle` is kept: version 3 creates it only if missing). Only at version 2: a later file
    // without `anchors` had it removed, which `verify` must report, never adopt.
    let mut start = found;
    if found == 2 {
        let has_anchors: i64 = conn
            .query_row("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'anchors'", [], |r| r.get(0))
            .map_err(AuditError::sqlite("read the tables of a version-2 file"))?;
        if has_anchors == 0 {
            start = 1;
        }
    }
    for (from, step) in MIGRATIONS.iter().enumerate().skip(usize::try_from(start).unwrap_or(0)) {
        let to = from as i64 + 1;
        let tx = conn.transaction().map_err(AuditError::sqlite("start a migration"))?;
        let (sql, then) = match step {
            Step::Sql(sql) => (*sql, None),
            Step::Then(sql, f) => (*sql, Some(f)),
        };
        tx.execute_batch(sql).map_err(AuditError::sqlite(format!("migrate the schema to version {to}")))?;
        if let Some(f) = then {
            f(&tx)?;
        }
        tx.pragma_update(None, "user_version", to).map_err(AuditError::sqlite("record the schema version"))?;
        tx.commit().map_err(AuditError::sqlite(format!("commit the migration to version {to}")))?;
    }
    Ok(found)
}
