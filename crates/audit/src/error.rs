//! Errors of the audit log: typed, lowercase, with what was being done and what to try.

/// What went wrong in the audit log.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// SQLite refused an operation (disk full, file unwritable, locked, corrupt).
    #[error("audit log: cannot {context}: {source}{}", help_for(source))]
    Sqlite {
        /// What was being done.
        context: String,
        /// The SQLite error.
        source: rusqlite::Error,
    },
    /// The file was written by a newer bursar.
    #[error(
        "audit log `{path}` has schema version {found}, newer than this bursar understands (up to {supported})\n  help: use the bursar that wrote it, or a newer one; to go back to this version, restore the copy taken before the upgrade (docs/operations.md, \"Upgrade and rollback\")"
    )]
    SchemaTooNew {
        /// The database file.
        path: String,
        /// Version in the file.
        found: i64,
        /// Newest version this build knows.
        supported: i64,
    },
    /// The file was written by an older bursar and not migrated yet: a reader does not migrate (it
    /// opens the file read-only), a writer (`eval --audit`, `serve`, `bursar audit migrate`) does.
    #[error(
        "audit log `{path}` has schema version {found}, older than this bursar's ({supported}); reading it needs the migration a writer makes\n  help: back it up, then migrate it once: `bursar audit backup --db {path} --out COPY && bursar audit migrate --db {path}` (serve and eval --audit migrate it too when they open it)"
    )]
    SchemaTooOld {
        /// The database file.
        path: String,
        /// Version in the file.
        found: i64,
        /// The version this build writes.
        supported: i64,
    },
    /// Another process writes this log ([`crate::lock`]): one writer per log.
    #[error(
        "audit log `{path}` is being written by another process: {holder}\n  help: one process writes a log at a time; stop that one first, or, when it is `bursar serve`, do it through serve: `bursar audit prune --server ADDR` prunes, `bursar audit backup` copies beside it (docs/audit.md, \"Maintenance while serving\")"
    )]
    Locked {
        /// The database file.
        path: String,
        /// Who holds the lock: `pid N (`command`)`.
        holder: String,
    },
    /// A value in the database could not be read back (hand-edited JSON, say).
    #[error("audit log: {0}")]
    Invalid(String),
    /// The writer thread stopped (after an error it already reported, or a panic).
    #[error("audit log: the writer thread stopped{}", .0.as_deref().map(|e| format!(": {e}")).unwrap_or_default())]
    WriterStopped(Option<String>),
    /// Handing committed decisions on (to stdout, say) failed.
    #[error("cannot write decisions: {0}")]
    Output(#[source] std::io::Error),
    /// A signing or public key file cannot be used.
    #[error("audit log: key `{path}`: {message}")]
    Key {
        /// The key file.
        path: String,
        /// What is wrong, with a `help:` line.
        message: String,
    },
    /// A signing process found writes no signed head covers (or a log behind its witness): its first
    /// signature would vouch for them, so it does not start ([`crate::AuditLog::attach_witness`]).
    #[error(
        "audit log `{path}`: refusing to sign over {range}: {what}\n  help: if bursar stopped before signing them (it was killed, or crashed: `serve` signs at most once a second), check the log with `bursar audit verify --db {path}` and run again with `--adopt-unsigned`, which records the adoption in the log; otherwise something else wrote to the database: investigate first, signing would vouch for it"
    )]
    Unsigned {
        /// The database file.
        path: String,
        /// The anchors not covered, e.g. `anchors rows 58 to 60`.
        range: String,
        /// What is not covered, and since when.
        what: String,
    },
    /// The witness signed anchors this log no longer holds as signed: the log was rolled back (an
    /// older copy restored) or rewritten. A crash or a kill cannot do that, so the help does not offer
    /// adopting it as if bursar had only stopped before signing.
    #[error(
        "audit log `{path}`: refusing to sign: {what}\n  help: a crash or a kill never rolls a log back: if the copy was not restored on purpose, investigate (`bursar audit verify --db {path} --witness …` names what is missing) and restore a copy the witness covers; if you restored an older copy on purpose, keep this witness for the record and start a new one (docs/operations.md, \"Rotate keys\", the signing key)"
    )]
    RolledBack {
        /// The database file.
        path: String,
        /// What the witness signed that the log does not hold.
        what: String,
    },
    /// The witness file cannot be read or appended to. When appending failed, the write it was
    /// signing is committed: the next write that succeeds signs it too.
    #[error(
        "audit log: cannot {action} witness `{path}`: {source}\n  help: the witness must be a file this process can append to (a disk of its own, or a file only bursar's user may write)"
    )]
    Witness {
        /// What was being done (`append to`, `read`).
        action: &'static str,
        /// The witness file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
}

fn help_for(e: &rusqlite::Error) -> &'static str {
    match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::DiskFull) => {
            "\n  help: the disk holding the audit log is full; free space (or prune old rows with `bursar audit prune`) and rerun: events already logged are skipped"
        }
        Some(
            rusqlite::ErrorCode::ReadOnly | rusqlite::ErrorCode::PermissionDenied | rusqlite::ErrorCode::CannotOpen,
        ) => "\n  help: check that the audit log's file and directory exist and are writable",
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => {
            "\n  help: another bursar process is writing this audit log; use one writer per file"
        }
        Some(rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt) => {
            "\n  help: the file is not a bursar audit log or is damaged"
        }
        _ => "",
    }
}

impl AuditError {
    /// Wraps a SQLite error with what was being done.
    pub fn sqlite(context: impl Into<String>) -> impl FnOnce(rusqlite::Error) -> AuditError {
        let context = context.into();
        move |source| AuditError::Sqlite { context, source }
    }

    /// True when the error means the disk (or the page limit) is full.
    pub fn is_disk_full(&self) -> bool {
        matches!(self, AuditError::Sqlite { source, .. } if source.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull))
    }
}

/// Results of the audit log.
pub type Result<T, E = AuditError> = std::result::Result<T, E>;
