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
//! A migration is a function from version N to N+1 run in one transaction; [`migrate`] runs every
//! step the file lacks. A file newer than this build is refused rather than guessed at.

use rusqlite::Connection;

use crate::error::{AuditError, Result};

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = 3;

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

/// Version 2: the job steps the engine took for each event (`bursar_engine::Transition`), the one
/// definition of the job lifecycle that the report's accounting reads. Derived data: replaying the
/// events through the engine gives the same rows.
const V2: &str = r#"
CREATE TABLE lifecycle (
    event_seq INTEGER NOT NULL,
    n         INTEGER NOT NULL,
    job       TEXT NOT NULL,
    step      TEXT NOT NULL,
    status    TEXT,
    time      INTEGER NOT NULL,
    PRIMARY KEY (event_seq, n)
) WITHOUT ROWID;
CREATE INDEX lifecycle_job ON lifecycle(job, event_seq);
"#;

/// Version 3: the notifier's outbox (`bursar-notify`, run by `serve --notify`). `notify_cursor` is
/// how far the notifier has read the log (the last decision and event seq whose notices are in
/// `notices`); `notices` holds one row per decision that raised a notice, its resolution once its
/// cause ended, and what the sink has acknowledged (`delivered`: `none`, `firing`, `resolved`). The
/// cursor and the notices it covers are written in one transaction, so a restart neither skips nor
/// repeats a decision. Not chained: derived from the chained decisions and lifecycle rows.
const V3: &str = r#"
CREATE TABLE notify_cursor (
    id           INTEGER PRIMARY KEY CHECK (id = 1),
    decision_seq INTEGER NOT NULL,
    event_seq    INTEGER NOT NULL
);
CREATE TABLE notices (
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
CREATE INDEX notices_open ON notices(job) WHERE resolved_at IS NULL;
CREATE INDEX notices_to_send ON notices(seq) WHERE delivered <> 'resolved';
"#;

/// The migration steps: `MIGRATIONS[n]` takes a file from version n to n+1.
const MIGRATIONS: &[&str] = &[V1, V2, V3];

/// Brings the database to [`SCHEMA_VERSION`], refusing a newer one. Returns the version found.
pub fn migrate(conn: &mut Connection, path: &str) -> Result<i64> {
    let found: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(AuditError::sqlite("read the schema version"))?;
    if found > SCHEMA_VERSION {
        return Err(AuditError::SchemaTooNew { path: path.to_owned(), found, supported: SCHEMA_VERSION });
    }
    for (from, sql) in MIGRATIONS.iter().enumerate().skip(usize::try_from(found).unwrap_or(0)) {
        let to = from as i64 + 1;
        let tx = conn.transaction().map_err(AuditError::sqlite("start a migration"))?;
        tx.execute_batch(sql).map_err(AuditError::sqlite(format!("migrate the schema to version {to}")))?;
        tx.pragma_update(None, "user_version", to).map_err(AuditError::sqlite("record the schema version"))?;
        tx.commit().map_err(AuditError::sqlite(format!("commit the migration to version {to}")))?;
    }
    Ok(found)
}
