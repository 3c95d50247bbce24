//! `verify`: re-walk the hash chains and name the first row edited, removed or reordered; `prune`:
//! delete old rows and record a checkpoint the remaining chain starts from.
//!
//! A chain is walked in `seq` order from its newest prune checkpoint (or from 32 zero bytes). Each row
//! must carry the next sequence number (a gap means rows were removed) and its stored hash must equal
//! `SHA-256(previous hash ‖ canonical content)` (a mismatch means the row was edited, or moved by
//! renumbering). The walk ends against `chain_heads`, which catches rows removed from the end.
//!
//! What this proves: the log is the one bursar wrote, unless someone recomputed every hash after the
//! edited row and the head too. Anchoring the head elsewhere (printing `verify`'s final hashes into
//! another system) closes that gap; see docs/audit.md.

use rusqlite::OptionalExtension;
use rusqlite::params;
use serde::Serialize;

use crate::canon::{Canon, GENESIS, Hash, hex};
use crate::error::{AuditError, Result};
use crate::log::{AuditLog, CHAINS, DECISION_COLUMNS, EVENT_COLUMNS, LOAD_COLUMNS, to_hash, wall_ms};

/// What was found wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProblemKind {
    /// The row's content no longer matches its hash (edited, or renumbered into another place).
    Edited,
    /// Rows are missing before this one.
    Removed,
    /// Rows are missing at the end of the chain.
    Truncated,
    /// A row's sequence number goes backwards.
    Reordered,
    /// The chain head does not match the last row (the head was edited).
    HeadMismatch,
}

/// The first problem in a chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// The chain (table): `events`, `decisions` or `policy_loads`.
    pub chain: String,
    /// The sequence number of the row named.
    pub seq: i64,
    /// What is wrong.
    pub kind: ProblemKind,
    /// A sentence for people.
    pub message: String,
}

/// The state of one chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChainReport {
    /// The chain (table).
    pub chain: String,
    /// Rows checked.
    pub rows: u64,
    /// The checkpoint the walk started from (0 when none).
    pub from_seq: i64,
    /// The last sequence number reached.
    pub last_seq: i64,
    /// The hash at `last_seq`, hex.
    pub head: String,
}

/// The outcome of [`verify`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Each chain walked.
    pub chains: Vec<ChainReport>,
    /// The first problem of each broken chain.
    pub problems: Vec<Problem>,
}

impl Report {
    /// True when every chain verified.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

fn columns(chain: &str) -> &'static str {
    match chain {
        "events" => EVENT_COLUMNS,
        "decisions" => DECISION_COLUMNS,
        _ => LOAD_COLUMNS,
    }
}

fn checkpoint(log: &AuditLog, chain: &str) -> Result<(i64, Hash)> {
    let row: Option<(i64, Vec<u8>)> = log
        .conn
        .query_row(
            "SELECT through_seq, hash FROM checkpoints WHERE chain = ?1 ORDER BY id DESC LIMIT 1",
            [chain],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(AuditError::sqlite("read the prune checkpoints"))?;
    match row {
        None => Ok((0, GENESIS)),
        Some((seq, h)) => Ok((seq, to_hash(&h, "checkpoints", seq)?)),
    }
}

/// Walks every chain; returns a report naming the first problem of each broken chain.
pub fn verify(log: &AuditLog) -> Result<Report> {
    let mut report = Report { chains: Vec::new(), problems: Vec::new() };
    for chain in CHAINS {
        let (from, start) = checkpoint(log, chain)?;
        let (chain_report, problem) = walk(log, chain, from, start)?;
        report.chains.push(chain_report);
        if let Some(p) = problem {
            report.problems.push(p);
        }
    }
    Ok(report)
}

fn walk(log: &AuditLog, chain: &str, from: i64, start: Hash) -> Result<(ChainReport, Option<Problem>)> {
    let cols = columns(chain);
    let ncols = cols.split(',').count();
    let sql = format!("SELECT {cols}, hash FROM {chain} WHERE seq > ?1 ORDER BY seq");
    let mut st = log.conn.prepare(&sql).map_err(AuditError::sqlite(format!("read `{chain}`")))?;
    let mut rows = st.query([from]).map_err(AuditError::sqlite(format!("read `{chain}`")))?;
    let mut prev = Head0 { seq: from, hash: start };
    let mut count = 0u64;
    let mut problem = None;
    let p = |seq: i64, kind: ProblemKind, message: String| Problem { chain: chain.to_owned(), seq, kind, message };
    while let Some(r) = rows.next().map_err(AuditError::sqlite(format!("read `{chain}`")))? {
        let seq: i64 = r.get(0).map_err(AuditError::sqlite(format!("read `{chain}`")))?;
        let stored: Vec<u8> = r.get(ncols).map_err(AuditError::sqlite(format!("read `{chain}`")))?;
        count += 1;
        if seq != prev.seq + 1 {
            let (kind, message) = if seq > prev.seq + 1 {
                let gap = if seq == prev.seq + 2 {
                    format!("{chain} row {} was removed", prev.seq + 1)
                } else {
                    format!("{chain} rows {} to {} were removed", prev.seq + 1, seq - 1)
                };
                (ProblemKind::Removed, gap)
            } else {
                (ProblemKind::Reordered, format!("{chain} row {seq} is out of order"))
            };
            problem = Some(p(prev.seq + 1, kind, message));
            break;
        }
        let mut c = Canon::after(&prev.hash);
        for i in 0..ncols {
            let v = r.get_ref(i).map_err(AuditError::sqlite(format!("read `{chain}`")))?;
            c.value(v);
        }
        let h = c.finish();
        if stored.as_slice() != h.as_slice() {
            problem = Some(p(
                seq,
                ProblemKind::Edited,
                format!("{chain} row {seq} was edited (or moved): its content does not match its hash"),
            ));
            break;
        }
        prev = Head0 { seq, hash: h };
    }
    drop(rows);
    if problem.is_none() {
        let head: Option<(i64, Vec<u8>)> = log
            .conn
            .query_row("SELECT seq, hash FROM chain_heads WHERE chain = ?1", [chain], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()
            .map_err(AuditError::sqlite("read the chain heads"))?;
        let (head_seq, head_hash) = head.unwrap_or((0, GENESIS.to_vec()));
        if head_seq > prev.seq {
            let message = if head_seq == prev.seq + 1 {
                format!("{chain} row {head_seq} (the newest) was removed")
            } else {
                format!("{chain} rows {} to {head_seq} (the newest) were removed", prev.seq + 1)
            };
            problem = Some(p(prev.seq + 1, ProblemKind::Truncated, message));
        } else if head_seq < prev.seq || head_hash.as_slice() != prev.hash.as_slice() {
            problem = Some(p(
                prev.seq,
                ProblemKind::HeadMismatch,
                format!("the recorded head of {chain} (row {head_seq}) does not match row {}", prev.seq),
            ));
        }
    }
    let rep =
        ChainReport { chain: chain.to_owned(), rows: count, from_seq: from, last_seq: prev.seq, head: hex(&prev.hash) };
    Ok((rep, problem))
}

struct Head0 {
    seq: i64,
    hash: Hash,
}

/// What [`prune`] removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PruneReport {
    /// Events removed.
    pub events: u64,
    /// Decisions removed.
    pub decisions: u64,
    /// Last event sequence number removed (0 if none).
    pub events_through: i64,
    /// Last decision sequence number removed (0 if none).
    pub decisions_through: i64,
}

/// Deletes the oldest events and decisions, those before `before` (ms since the epoch, event time),
/// and records a checkpoint for each chain so the rest still verifies. Only a prefix of each chain
/// can go: rows are removed up to (not including) the first row whose time is at or after `before`.
/// Refuses to prune a log that does not verify (that would launder the edit).
pub fn prune(log: &mut AuditLog, before: i64) -> Result<PruneReport> {
    let rep = verify(log)?;
    if let Some(p) = rep.problems.first() {
        return Err(AuditError::Invalid(format!(
            "refusing to prune a log that does not verify: {}\n  help: run `bursar audit verify` and investigate first",
            p.message
        )));
    }
    let now = wall_ms();
    let tx = log.conn.transaction().map_err(AuditError::sqlite("start a transaction"))?;
    let mut out = PruneReport { events: 0, decisions: 0, events_through: 0, decisions_through: 0 };
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
        tx.execute(
            "INSERT INTO checkpoints (chain, through_seq, hash, removed, before, at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![chain, through, hash, n as i64, before, now],
        )
        .map_err(AuditError::sqlite("record a prune checkpoint"))?;
        if chain == "events" {
            out.events = n as u64;
            out.events_through = through;
        } else {
            out.decisions = n as u64;
            out.decisions_through = through;
        }
    }
    tx.commit().map_err(AuditError::sqlite("commit the prune"))?;
    Ok(out)
}
