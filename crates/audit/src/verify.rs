//! `verify`: re-walk the hash chains, check them against one another and against their anchors, and
//! name the first problem of each; with a witness, check the log against every signed head too.
//! `prune`: delete old rows and record an anchored checkpoint the remaining chain starts from.
//!
//! What is checked, in order (docs/audit.md says the same for operators):
//!
//! 1. **Each chain on its own** (`events`, `decisions`, `policy_loads`, `anchors`): walked in `seq`
//!    order from its newest *anchored* prune checkpoint (or from 32 zero bytes). Each row must carry
//!    the next sequence number (a gap means rows were removed) and its stored hash must equal
//!    `SHA-256(previous hash ‖ canonical content)` (else it was edited, or moved by renumbering); the
//!    walk ends against `chain_heads`, which catches rows removed from the end.
//! 2. **The checkpoints**: every `checkpoints` row must be one a prune anchored, in the same order; a
//!    forged checkpoint (which would hide a deleted prefix) is not.
//! 3. **The anchors against the chains**: each chain position an anchor records must be a row of that
//!    chain with that hash, and the newest anchor must record each chain's newest row: a chain deleted
//!    with its head, or rows appended by something other than bursar, no longer match.
//! 4. **Side data**: each engine snapshot and each policy set must match the digest its anchor recorded.
//! 5. **Cross-chain**: every decision must name an event that is in the log (the one its `event_seq`
//!    points at), and every `job.submitted` must have exactly one admission decision about its job.
//! 6. **Derived tables this crate writes** ([`crate::derived::DERIVED_TABLES`]): each must exist; the
//!    job steps of each commit must hash to what its anchor recorded; the look-up tables must hold
//!    exactly the rows through their cursors. (The report's facts are `verify --deep`'s, in the CLI.)
//!
//! What this proves without a witness: the file is internally consistent, so an edit needs every hash
//! after it recomputed (or all chains cut back to an earlier anchor together). With a witness
//! ([`verify_with_witness`]): the log extends every head that was signed, so truncation, rollback and
//! a full re-hash are caught too, up to the last signed head.

use std::collections::HashMap;

use rusqlite::OptionalExtension;
use serde::Serialize;

use crate::anchor::{self, AnchorRow};
use crate::canon::{Canon, GENESIS, Hash, hex};
use crate::derived::{Check, DERIVED_TABLES, Owner};
use crate::error::{AuditError, Result};
use crate::log::{
    AuditLog, CHAINS, DECISION_COLUMNS, EVENT_COLUMNS, Head, LOAD_COLUMNS, LOOKUPS, StoredSnapshot, check_snapshot,
};
use crate::witness::{PublicKey, WitnessLine};

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
    /// Rows or side data that no anchor covers: not written by bursar.
    Unanchored,
    /// Side data (a snapshot, a policy set, a checkpoint, derived facts) that differs from what its
    /// anchor recorded, or from what the log rebuilds.
    Mismatch,
    /// A broken reference between chains: a decision naming an event not in the log, a submission
    /// without its admission decision.
    Orphan,
    /// The log lacks what a signed head covers: it was truncated or rolled back.
    BehindWitness,
    /// The log differs from a signed head: it was rewritten (re-hashed).
    DiffersFromWitness,
    /// A witness line that cannot be trusted (unreadable, badly signed, out of order), or none at all.
    BadWitness,
    /// A prune checkpoint newer than the last signed head: it could hide removed rows. Also, from
    /// [`unsigned_tail`], any write after it (`verify --witness` without `--allow-unsigned-tail`).
    Unwitnessed,
    /// A derived table that is gone.
    Missing,
}

/// The first problem in a chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// What it is about: a chain (`events`, `decisions`, `policy_loads`, `anchors`), or `checkpoints`,
    /// `engine_snapshots`, `policy_sets`, `witness`, a `facts_*` table, or a look-up table
    /// (`decisions_by_project`, `decisions_by_user`, `events_by_job`) or their `lookup_cursors`.
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

/// What checking against a witness found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WitnessReport {
    /// Signed heads read.
    pub lines: usize,
    /// The public keys they were signed with, hex.
    pub keys: Vec<String>,
    /// The anchor the newest signed head covers (0 when none).
    pub signed_anchor: i64,
    /// When it was signed, ms since the epoch.
    pub signed_at: i64,
    /// Anchors (writes) after it: not covered by the witness (the writes since the last signature).
    pub unwitnessed_anchors: i64,
}

/// The outcome of [`verify`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Each chain walked: `events`, `decisions`, `policy_loads`, `anchors`.
    pub chains: Vec<ChainReport>,
    /// The first problem of each broken chain (or side table).
    pub problems: Vec<Problem>,
    /// With a witness: what it covers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub witness: Option<WitnessReport>,
    /// Remarks that are not problems (what was not checked, and why).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Report {
    /// True when every chain verified.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }

    /// Whether `chain` already has its problem.
    fn has(&self, chain: &str) -> bool {
        self.problems.iter().any(|p| p.chain == chain)
    }

    /// Records `p` unless its chain already has a problem (the first one is the one to read).
    pub fn push(&mut self, p: Problem) {
        if !self.has(&p.chain) {
            self.problems.push(p);
        }
    }
}

fn problem(chain: &str, seq: i64, kind: ProblemKind, message: String) -> Problem {
    Problem { chain: chain.to_owned(), seq, kind, message }
}

fn columns(chain: &str) -> &'static str {
    match chain {
        "events" => EVENT_COLUMNS,
        "decisions" => DECISION_COLUMNS,
        "anchors" => anchor::ANCHOR_COLUMNS,
        _ => LOAD_COLUMNS,
    }
}

fn ts(ms: i64) -> String {
    bursar_model::Timestamp(ms).to_string()
}

fn sql(what: &str) -> impl FnOnce(rusqlite::Error) -> AuditError {
    AuditError::sqlite(format!("verify: read {what}"))
}

/// A checkpoint a prune anchored.
#[derive(Debug, Clone)]
struct Cut {
    anchor: i64,
    chain: String,
    through: i64,
    hash: Vec<u8>,
    note: Option<String>,
}

/// Walks every chain and checks them against one another and their anchors; returns a report naming
/// the first problem of each broken chain or side table.
pub fn verify(log: &AuditLog) -> Result<Report> {
    let conn = log.connection();
    let mut report = Report { chains: Vec::new(), problems: Vec::new(), witness: None, notes: Vec::new() };

    // 1. The anchors first: everything else is checked against the part of it that verifies.
    let (anchors_rep, p) = walk(log, "anchors", 0, GENESIS)?;
    let good = anchors_rep.last_seq;
    if let Some(p) = p {
        report.push(p);
    }

    // 2. Checkpoints: the table must hold exactly the anchored ones, in order.
    let cuts = anchored_cuts(log, good)?;
    check_checkpoints(log, &cuts, &mut report)?;
    let mut start: HashMap<&str, Head> = HashMap::new();
    for c in &cuts {
        if let Some(chain) = CHAINS.iter().find(|x| **x == c.chain) {
            start.insert(chain, Head { seq: c.through, hash: crate::log::to_hash(&c.hash, "checkpoints", c.through)? });
        }
    }

    // 3. Each row chain from its anchored checkpoint.
    let mut ends: HashMap<&str, (i64, Hash)> = HashMap::new();
    for chain in CHAINS {
        let from = start.get(chain).copied().unwrap_or(Head { seq: 0, hash: GENESIS });
        let (rep, p) = walk(log, chain, from.seq, from.hash)?;
        ends.insert(chain, (rep.last_seq, crate::log::to_hash(&unhex32(&rep.head), chain, rep.last_seq)?));
        report.chains.push(rep);
        if let Some(p) = p {
            report.push(p);
        }
    }
    report.chains.push(anchors_rep);

    // 4. The anchors against the chains.
    check_positions(log, good, &start, &ends, &mut report)?;

    // 5. Side data.
    check_snapshots(log, &mut report)?;
    check_policy_sets(log, good, &mut report)?;

    // 6. Across chains.
    if !report.has("events") && !report.has("decisions") {
        let efrom = start.get("events").map_or(0, |h| h.seq);
        let dfrom = start.get("decisions").map_or(0, |h| h.seq);
        check_references(conn, efrom, dfrom, &mut report)?;
    }

    // 7. The derived tables this crate writes: each must exist; the job steps must be what each
    // commit anchored, the look-up tables exactly the rows up to their cursors.
    let mut missing = Vec::new();
    for t in DERIVED_TABLES.iter().filter(|t| t.owner == Owner::Audit) {
        if !has_table(conn, t.name)? {
            missing.push(t.name);
            report.push(missing_table(t.name, log.path()));
        }
    }
    if !missing.contains(&"lifecycle") {
        let efrom = start.get("events").map_or(0, |h| h.seq);
        check_lifecycle(log, good, efrom, &mut report)?;
    }
    let lookups_there = DERIVED_TABLES.iter().filter(|t| t.check == Check::Lookup).all(|t| !missing.contains(&t.name));
    if lookups_there && !report.has("events") && !report.has("decisions") {
        check_lookups(log, &mut report)?;
    }
    Ok(report)
}

/// Whether the database has a table `name`.
fn has_table(conn: &rusqlite::Connection, name: &str) -> Result<bool> {
    conn.query_row("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1", [name], |r| {
        r.get::<_, i64>(0)
    })
    .map(|n| n > 0)
    .map_err(sql("the table list"))
}

/// The writes after the newest signed head of a report from [`verify_with_witness`], as a problem:
/// nothing but the keyless chain vouches for them, and the next signing run would cover them, so
/// `verify --witness` fails on them unless told the tail is expected (`--allow-unsigned-tail`: a
/// log `serve` is writing, which signs at most once a second). None without a witness report, with
/// no such writes, or when the witness check found a problem already (that one is the one to read).
pub fn unsigned_tail(report: &Report) -> Option<Problem> {
    let w = report.witness.as_ref()?;
    if w.unwitnessed_anchors <= 0 || report.has("witness") {
        return None;
    }
    let (from, to) = (w.signed_anchor + 1, w.signed_anchor + w.unwitnessed_anchors);
    let signed = if w.signed_anchor > 0 {
        format!("the newest signed head covers anchors row {} (signed {})", w.signed_anchor, ts(w.signed_at))
    } else {
        "no signed head covers any".to_owned()
    };
    Some(problem(
        "witness",
        from,
        ProblemKind::Unwitnessed,
        format!(
            "{n} unsigned write{s} ({range}): {signed}, so nothing but the keyless chain vouches for {them}, and the next signing run would\n  help: if bursar is still writing (`serve` signs at most once a second) or stopped before signing, pass `--allow-unsigned-tail` (and sign again with `--adopt-unsigned`); otherwise something else wrote to the log: investigate first",
            n = w.unwitnessed_anchors,
            s = if w.unwitnessed_anchors == 1 { "" } else { "s" },
            range = crate::trust::anchors_range(from, to),
            them = if w.unwitnessed_anchors == 1 { "it" } else { "them" },
        ),
    ))
}

/// The problem of a derived table that is gone: whatever reads it would rebuild it from scratch, or
/// read nothing, so its absence is reported rather than skipped (rows edited before the drop would
/// otherwise leave no trace).
pub fn missing_table(table: &str, db: &str) -> Problem {
    let help = if table.starts_with("facts_") {
        format!("help: `bursar report --db {db} --rebuild` builds the report facts from the log; verify again after it")
    } else {
        "help: bursar creates it with the schema: the file was edited, restore it from a copy".to_owned()
    };
    problem(
        table,
        0,
        ProblemKind::Missing,
        format!(
            "the derived table `{table}` is missing: it was dropped (or never built), so it cannot be compared with the log\n  {help}"
        ),
    )
}

/// The job steps (`lifecycle`, derived data the report's accounting reads) against what each commit
/// recorded: the anchor of every commit holds the SHA-256 of the steps it wrote
/// ([`crate::log::feed_step`]), so one merged pass over the anchors and the steps, both in order,
/// recomputes each commit's sum. Commits anchored by an older bursar (no sum) and commits a prune cut
/// into are not checked (a note says which); steps past the newest anchored event are noted.
fn check_lifecycle(log: &AuditLog, good: i64, events_from: i64, report: &mut Report) -> Result<()> {
    let conn = log.connection();
    let mut anchors = conn
        .prepare("SELECT seq, kind, events_seq, digest FROM anchors WHERE seq <= ?1 ORDER BY seq")
        .map_err(sql("the anchors"))?;
    let anchors = anchors
        .query_map([good], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?, r.get::<_, i64>(2)?, r.get::<_, Option<Vec<u8>>>(3)?))
        })
        .map_err(sql("the anchors"))?;
    let mut steps = conn
        .prepare("SELECT event_seq, n, job, step, status, time FROM lifecycle ORDER BY event_seq, n")
        .map_err(sql("the lifecycle"))?;
    let mut steps = steps
        .query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, Option<String>>(4)?,
                r.get::<_, i64>(5)?,
            ))
        })
        .map_err(sql("the lifecycle"))?
        .peekable();
    let mut prev = 0i64;
    let mut unchecked: Option<(i64, i64)> = None;
    for a in anchors {
        let (seq, kind, events_seq, digest) = a.map_err(sql("the anchors"))?;
        if events_seq <= prev {
            continue;
        }
        let checked = kind == "commit" && prev >= events_from;
        let mut c = crate::canon::Canon::after(&GENESIS);
        while let Some(Ok((e, ..))) = steps.peek() {
            if *e > events_seq {
                break;
            }
            if let Some(row) = steps.next() {
                let (e, n, job, step, status, time) = row.map_err(sql("the lifecycle"))?;
                crate::log::feed_step(&mut c, e, n, &job, &step, status.as_deref(), time);
            }
        }
        if let Some(Err(_)) = steps.peek()
            && let Some(Err(e)) = steps.next()
        {
            return Err(sql("the lifecycle")(e));
        }
        let sum = c.finish();
        match (&digest, checked) {
            (Some(d), true) if sum.as_slice() != d.as_slice() => {
                report.push(problem(
                    "lifecycle",
                    prev + 1,
                    ProblemKind::Mismatch,
                    format!(
                        "the job steps (`lifecycle`) of events rows {} to {events_seq} do not match what anchors row {seq} recorded when they were written: a step was edited, added or removed, and the report's accounting reads them",
                        prev + 1
                    ),
                ));
                return Ok(());
            }
            (Some(_), true) => {}
            _ if prev < events_from => {}
            _ => unchecked = Some((unchecked.map_or(prev + 1, |(from, _)| from), events_seq)),
        }
        prev = events_seq;
    }
    // Steps past the newest anchored event belong to no event a reader would take (the events after
    // it are reported as unanchored themselves; steps of events that are gone are leftovers of a cut):
    // said, not counted as a problem, since no report reads them.
    if let Some(row) = steps.next() {
        let (e, ..) = row.map_err(sql("the lifecycle"))?;
        report.notes.push(format!(
            "`lifecycle` holds job steps of events row {e} and after, past the newest anchored event (row {prev}): no anchor covers them, and no report reads them while those events are not in the log"
        ));
    }
    if let Some((from, to)) = unchecked {
        report.notes.push(format!(
            "the job steps (`lifecycle`) of events rows {from} to {to} were written by an older bursar, which did not anchor them: they are not checked"
        ));
    }
    Ok(())
}

/// The look-up tables (derived, not chained) against their chains' rows: an entry missing would
/// hide a row from a query (`audit query --project/--user`, a job's events), a wrong or extra one
/// would show it under another key, and a cursor past the last row would hide the next ones.
fn check_lookups(log: &AuditLog, report: &mut Report) -> Result<()> {
    let conn = log.connection();
    for chain in ["events", "decisions"] {
        let through = crate::log::indexed_through(conn, chain)?;
        let last = if chain == "events" { log.last_event_seq() } else { log.last_decision_seq() };
        if through > last {
            report.push(problem(
                "lookup_cursors",
                through,
                ProblemKind::Mismatch,
                format!("the look-up tables claim to cover {chain} through row {through}, but the last of them is row {last}"),
            ));
            continue;
        }
        for l in LOOKUPS.iter().filter(|l| l.chain == chain) {
            let (table, column) = (l.table, l.column);
            let same = l.key.iter().map(|k| format!("x.{k} = d.{k}")).collect::<Vec<_>>().join(" AND ");
            let missing: Option<(i64, String)> = conn
                .query_row(
                    &format!(
                        "SELECT d.seq, d.{column} FROM {chain} d WHERE d.seq <= ?1 AND d.{column} IS NOT NULL \
                         AND NOT EXISTS (SELECT 1 FROM {table} x WHERE {same}) ORDER BY d.seq LIMIT 1"
                    ),
                    [through],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()
                .map_err(sql("the look-up tables"))?;
            if let Some((seq, key)) = missing {
                report.push(problem(
                    table,
                    seq,
                    ProblemKind::Mismatch,
                    format!("{chain} row {seq} ({column} `{key}`) is missing from `{table}`: a look-up by {column} would not show it"),
                ));
                continue;
            }
            let differs = l.key.iter().map(|k| format!("d.{k} IS NOT x.{k}")).collect::<Vec<_>>().join(" OR ");
            let extra: Option<(i64, String)> = conn
                .query_row(
                    &format!(
                        "SELECT x.seq, x.{column} FROM {table} x LEFT JOIN {chain} d ON d.seq = x.seq \
                         WHERE x.seq > ?1 OR d.seq IS NULL OR {differs} ORDER BY x.seq LIMIT 1"
                    ),
                    [through],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()
                .map_err(sql("the look-up tables"))?;
            if let Some((seq, key)) = extra {
                report.push(problem(
                    table,
                    seq,
                    ProblemKind::Mismatch,
                    format!("`{table}` lists {chain} row {seq} under {column} `{key}`, which the row does not say: a look-up would show it under the wrong {column}, or twice"),
                ));
            }
        }
    }
    Ok(())
}

fn unhex32(h: &str) -> Vec<u8> {
    crate::witness::unhex(h).unwrap_or_default()
}

fn anchored_cuts(log: &AuditLog, good: i64) -> Result<Vec<Cut>> {
    let mut st = log
        .connection()
        .prepare(
            "SELECT seq, subject, subject_seq, digest, note FROM anchors WHERE kind = 'checkpoint' AND seq <= ?1 ORDER BY seq",
        )
        .map_err(sql("the checkpoint anchors"))?;
    let rows = st
        .query_map([good], |r| {
            Ok(Cut {
                anchor: r.get(0)?,
                chain: r.get::<_, Option<String>>(1)?.unwrap_or_default(),
                through: r.get::<_, Option<i64>>(2)?.unwrap_or(0),
                hash: r.get::<_, Option<Vec<u8>>>(3)?.unwrap_or_default(),
                note: r.get(4)?,
            })
        })
        .map_err(sql("the checkpoint anchors"))?;
    rows.collect::<rusqlite::Result<Vec<_>>>().map_err(sql("the checkpoint anchors"))
}

fn check_checkpoints(log: &AuditLog, cuts: &[Cut], report: &mut Report) -> Result<()> {
    let mut st = log
        .connection()
        .prepare("SELECT chain, through_seq, hash, removed, before FROM checkpoints ORDER BY id")
        .map_err(sql("the prune checkpoints"))?;
    let rows = st
        .query_map([], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, Vec<u8>>(2)?, r.get::<_, i64>(3)?, r.get(4)?))
        })
        .map_err(sql("the prune checkpoints"))?
        .collect::<rusqlite::Result<Vec<(String, i64, Vec<u8>, i64, i64)>>>()
        .map_err(sql("the prune checkpoints"))?;
    for (i, row) in rows.iter().enumerate() {
        let (chain, through, hash, removed, before) = row;
        let note = anchor::checkpoint_note(*removed, *before);
        let matches = cuts.get(i).is_some_and(|c| {
            c.chain == *chain && c.through == *through && c.hash == *hash && c.note.as_deref() == Some(note.as_str())
        });
        if !matches {
            report.push(problem(
                "checkpoints",
                *through,
                ProblemKind::Unanchored,
                format!(
                    "the prune checkpoint of {chain} through row {through} is not anchored: it was not made by `bursar audit prune`, and it would hide the rows before it (verify starts {chain} from its anchored checkpoint instead)"
                ),
            ));
            return Ok(());
        }
    }
    if let Some(c) = cuts.get(rows.len()) {
        report.push(problem(
            "checkpoints",
            c.through,
            ProblemKind::Mismatch,
            format!(
                "the prune checkpoint of {} through row {} (anchors row {}) was removed from `checkpoints`",
                c.chain, c.through, c.anchor
            ),
        ));
    }
    Ok(())
}

fn check_positions(
    log: &AuditLog,
    good: i64,
    start: &HashMap<&str, Head>,
    ends: &HashMap<&str, (i64, Hash)>,
    report: &mut Report,
) -> Result<()> {
    let conn = log.connection();
    let mut st = conn
        .prepare(&format!("SELECT {}, hash FROM anchors WHERE seq <= ?1 ORDER BY seq", anchor::ANCHOR_COLUMNS))
        .map_err(sql("the anchors"))?;
    let mut rows = st.query([good]).map_err(sql("the anchors"))?;
    let mut last: HashMap<&str, Head> = HashMap::new();
    let mut lookups: HashMap<&str, rusqlite::CachedStatement<'_>> = HashMap::new();
    for chain in CHAINS {
        let st = conn
            .prepare_cached(&format!("SELECT hash FROM {chain} WHERE seq = ?1"))
            .map_err(sql(&format!("`{chain}`")))?;
        lookups.insert(chain, st);
    }
    while let Some(r) = rows.next().map_err(sql("the anchors"))? {
        let a: AnchorRow = anchor::anchor_from_row(r).map_err(sql("the anchors"))?;
        for (chain, head) in
            [("events", a.heads.events), ("decisions", a.heads.decisions), ("policy_loads", a.heads.loads)]
        {
            if report.has(chain) || last.get(chain) == Some(&head) {
                continue;
            }
            if let Some(prev) = last.get(chain)
                && head.seq < prev.seq
            {
                report.push(problem(
                    chain,
                    head.seq,
                    ProblemKind::Mismatch,
                    format!(
                        "anchors row {} records {chain} at row {}, behind row {} that an earlier anchor recorded",
                        a.seq, head.seq, prev.seq
                    ),
                ));
                continue;
            }
            last.insert(chain, head);
            let from = start.get(chain).copied().unwrap_or(Head { seq: 0, hash: GENESIS });
            if head.seq < from.seq {
                continue; // pruned
            }
            let (end, _) = ends.get(chain).copied().unwrap_or((0, GENESIS));
            let stored: Option<Vec<u8>> = if head.seq == from.seq {
                Some(from.hash.to_vec())
            } else if let Some(st) = lookups.get_mut(chain) {
                st.query_row([head.seq], |r| r.get(0)).optional().map_err(sql(&format!("`{chain}`")))?
            } else {
                None
            };
            match stored {
                None => report.push(problem(
                    chain,
                    end + 1,
                    ProblemKind::Truncated,
                    if end == 0 {
                        format!(
                            "{chain} is empty, but anchors row {} records it at row {}: rows 1 to {} were removed, with the chain's head",
                            a.seq, head.seq, head.seq
                        )
                    } else {
                        format!(
                            "anchors row {} records {chain} at row {}, but {chain} ends at row {end}: rows {} to {} were removed",
                            a.seq,
                            head.seq,
                            end + 1,
                            head.seq
                        )
                    },
                )),
                Some(h) if h.as_slice() != head.hash.as_slice() => report.push(problem(
                    chain,
                    head.seq,
                    ProblemKind::Edited,
                    format!(
                        "{chain} row {} does not have the hash anchors row {} recorded for it: the chain was rewritten from there on",
                        head.seq, a.seq
                    ),
                )),
                Some(_) => {}
            }
        }
    }
    drop(rows);
    // The newest anchor must record each chain's newest row (when the anchors verify to the end).
    if report.has("anchors") {
        return Ok(());
    }
    for chain in CHAINS {
        if report.has(chain) {
            continue;
        }
        let recorded = last.get(chain).copied().unwrap_or(Head { seq: 0, hash: GENESIS });
        let (end, _) = ends.get(chain).copied().unwrap_or((0, GENESIS));
        if end > recorded.seq {
            report.push(problem(
                chain,
                recorded.seq + 1,
                ProblemKind::Unanchored,
                format!(
                    "{chain} rows {} to {end} are not covered by any anchor: they were not written by bursar",
                    recorded.seq + 1
                ),
            ));
        }
    }
    Ok(())
}

fn check_snapshots(log: &AuditLog, report: &mut Report) -> Result<()> {
    let conn = log.connection();
    let mut st = conn
        .prepare("SELECT event_seq, taken_at, policy_set, blob FROM engine_snapshots ORDER BY event_seq DESC")
        .map_err(sql("the engine snapshots"))?;
    let mut rows = st.query([]).map_err(sql("the engine snapshots"))?;
    while let Some(r) = rows.next().map_err(sql("the engine snapshots"))? {
        let snap = StoredSnapshot {
            event_seq: r.get(0).map_err(sql("an engine snapshot"))?,
            taken_at: r.get(1).map_err(sql("an engine snapshot"))?,
            policy_set: r.get(2).map_err(sql("an engine snapshot"))?,
            blob: r.get(3).map_err(sql("an engine snapshot"))?,
        };
        let why = check_snapshot(conn, &snap)?;
        if let Some(why) = why {
            let kind = match why {
                crate::log::SnapshotRejected::Unanchored { .. } => ProblemKind::Unanchored,
                _ => ProblemKind::Mismatch,
            };
            report.push(problem(
                "engine_snapshots",
                snap.event_seq,
                kind,
                format!("{why}; `serve` would not restore from it (it replays the log instead)"),
            ));
            return Ok(());
        }
    }
    Ok(())
}

fn check_policy_sets(log: &AuditLog, good: i64, report: &mut Report) -> Result<()> {
    let conn = log.connection();
    let mut anchored: HashMap<String, (i64, Option<i64>, Vec<u8>)> = HashMap::new();
    {
        let mut st = conn
            .prepare(
                "SELECT seq, subject, subject_seq, digest FROM anchors WHERE kind = 'policy_set' AND seq <= ?1 ORDER BY seq",
            )
            .map_err(sql("the policy-set anchors"))?;
        let rows = st
            .query_map([good], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, Option<String>>(1)?.unwrap_or_default(),
                    r.get::<_, Option<i64>>(2)?,
                    r.get::<_, Option<Vec<u8>>>(3)?.unwrap_or_default(),
                ))
            })
            .map_err(sql("the policy-set anchors"))?;
        for row in rows {
            let (seq, digest, at, sum) = row.map_err(sql("the policy-set anchors"))?;
            anchored.entry(digest).or_insert((seq, at, sum));
        }
    }
    let mut st = conn
        .prepare("SELECT digest, files, first_loaded_at FROM policy_sets ORDER BY first_loaded_at, digest")
        .map_err(sql("the policy sets"))?;
    let rows = st
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, i64>(2)?)))
        .map_err(sql("the policy sets"))?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(sql("the policy sets"))?;
    for (digest, files, at) in &rows {
        let short = digest.get(..12).unwrap_or(digest);
        match anchored.remove(digest) {
            None => {
                report.push(problem(
                    "policy_sets",
                    0,
                    ProblemKind::Unanchored,
                    format!("policy set `{short}` is not anchored: it was not recorded by bursar"),
                ));
                return Ok(());
            }
            Some((seq, recorded_at, sum)) => {
                if anchor::sha256(files.as_bytes()).as_slice() != sum.as_slice() || recorded_at != Some(*at) {
                    report.push(problem(
                        "policy_sets",
                        seq,
                        ProblemKind::Mismatch,
                        format!(
                            "policy set `{short}` was edited: its files (or first-load time) no longer match what anchors row {seq} recorded when it was loaded"
                        ),
                    ));
                    return Ok(());
                }
            }
        }
    }
    if let Some((digest, (seq, _, _))) = anchored.iter().min_by_key(|(_, (seq, _, _))| *seq) {
        let short = digest.get(..12).unwrap_or(digest);
        report.push(problem(
            "policy_sets",
            *seq,
            ProblemKind::Mismatch,
            format!("policy set `{short}` (anchors row {seq}) was removed from `policy_sets`"),
        ));
    }
    Ok(())
}

fn check_references(conn: &rusqlite::Connection, efrom: i64, dfrom: i64, report: &mut Report) -> Result<()> {
    // Every decision names the event its event_seq points at (unless that event was pruned).
    let orphan: Option<(i64, String, i64)> = conn
        .query_row(
            "SELECT d.seq, d.event_id, d.event_seq FROM decisions d LEFT JOIN events e ON e.seq = d.event_seq \
             WHERE d.seq > ?1 AND d.event_seq IS NOT NULL AND d.event_seq > ?2 \
               AND (e.seq IS NULL OR e.event_id IS NOT d.event_id) \
             ORDER BY d.seq LIMIT 1",
            [dfrom, efrom],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()
        .map_err(sql("decisions and their events"))?;
    if let Some((seq, id, eseq)) = orphan {
        report.push(problem(
            "decisions",
            seq,
            ProblemKind::Orphan,
            format!("decisions row {seq} names event `{id}` (events row {eseq}), which is not in the log: the event was removed or replaced"),
        ));
        return Ok(());
    }
    // Every submission has exactly one admission decision about its job. After a prune of the
    // decisions, only events at or after the first remaining decision's event are checked.
    let floor: i64 = if dfrom > 0 {
        conn.query_row("SELECT COALESCE(MIN(event_seq), 0) FROM decisions WHERE seq > ?1", [dfrom], |r| r.get(0))
            .map_err(sql("the decisions"))?
    } else {
        0
    };
    let missing: Option<(i64, String, i64)> = conn
        .query_row(
            "SELECT e.seq, e.event_id, (SELECT count(*) FROM decisions d WHERE d.job = e.job AND d.event_seq = e.seq AND d.admission = 1) AS n \
             FROM events e WHERE e.seq > ?1 AND e.seq >= ?2 AND e.type = 'job.submitted' AND n != 1 \
             ORDER BY e.seq LIMIT 1",
            [efrom, floor],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()
        .map_err(sql("submissions and their admissions"))?;
    if let Some((seq, id, n)) = missing {
        let what = if n == 0 {
            "has no admission decision: its decisions were removed".to_owned()
        } else {
            format!("has {n} admission decisions instead of one")
        };
        report.push(problem(
            "decisions",
            seq,
            ProblemKind::Orphan,
            format!("events row {seq} (`{id}`, a job.submitted) {what}"),
        ));
    }
    Ok(())
}

/// Like [`verify`], and checks the log against every signed head in `witness` (read with
/// [`crate::witness::read`]): each must be validly signed (by `pinned` when given), name this log,
/// and cover an anchor the log still has with the same hash. A log that lacks a signed anchor was
/// truncated or rolled back; one whose anchor differs was rewritten. A prune checkpoint newer than
/// the newest signed head is a problem too (an unsigned prune could hide rows); other writes after it
/// are reported in [`WitnessReport::unwitnessed_anchors`].
pub fn verify_with_witness(log: &AuditLog, witness: &[WitnessLine], pinned: Option<&PublicKey>) -> Result<Report> {
    let mut report = verify(log)?;
    check_witness(log, witness, pinned, &mut report)?;
    Ok(report)
}

fn check_witness(log: &AuditLog, lines: &[WitnessLine], pinned: Option<&PublicKey>, report: &mut Report) -> Result<()> {
    let conn = log.connection();
    let (last_anchor, _) = log.head();
    let id = log.log_id()?.unwrap_or_default();
    let mut keys: Vec<String> = Vec::new();
    let mut signed: Option<(i64, i64)> = None;
    let w = |kind: ProblemKind, seq: i64, message: String| problem("witness", seq, kind, message);
    for (n, line) in lines {
        let head = match line {
            Ok(h) => h,
            Err(m) => {
                report.push(w(ProblemKind::BadWitness, 0, format!("witness line {n}: {m}")));
                break;
            }
        };
        if let Err(m) = head.check(pinned) {
            report.push(w(
                ProblemKind::BadWitness,
                head.anchors.seq,
                format!("witness line {n} cannot be trusted: {m}"),
            ));
            break;
        }
        if !keys.contains(&head.key) {
            keys.push(head.key.clone());
        }
        let when = ts(head.at);
        if head.log != id {
            report.push(w(
                ProblemKind::DiffersFromWitness,
                head.anchors.seq,
                format!(
                    "witness line {n} (signed {when}) is for log {}…, but this file is log {}…: the whole log was rewritten (re-hashed), or the witness belongs to another log",
                    head.log.get(..16).unwrap_or(&head.log),
                    id.get(..16).unwrap_or(&id)
                ),
            ));
            break;
        }
        if let Some((prev, _)) = signed
            && head.anchors.seq < prev
        {
            report.push(w(
                ProblemKind::BadWitness,
                head.anchors.seq,
                format!("witness line {n} goes back from anchors row {prev} to row {}", head.anchors.seq),
            ));
            break;
        }
        match anchor::anchor_at(conn, head.anchors.seq)? {
            None => {
                report.push(w(
                    ProblemKind::BehindWitness,
                    head.anchors.seq,
                    format!(
                        "the witness signed anchors row {} on {when} (line {n}), but the log ends at anchors row {last_anchor}: it was truncated, or rolled back to an older copy",
                        head.anchors.seq
                    ),
                ));
                break;
            }
            Some(a) if hex(&a.hash) != head.anchors.hash => {
                report.push(w(
                    ProblemKind::DiffersFromWitness,
                    head.anchors.seq,
                    format!(
                        "anchors row {} is not the one signed on {when} (witness line {n}): the log was rewritten from there on",
                        head.anchors.seq
                    ),
                ));
                break;
            }
            Some(_) => {}
        }
        signed = Some((head.anchors.seq, head.at));
    }
    if lines.is_empty() && last_anchor > 0 {
        report.push(w(
            ProblemKind::BadWitness,
            0,
            "the witness holds no signed head\n  help: pass the file bursar appends signed heads to (`--witness` of `eval`), or sign one with `bursar audit head`".to_owned(),
        ));
    }
    let (signed_anchor, signed_at) = signed.unwrap_or((0, 0));
    if !report.has("witness") {
        let cut: Option<(i64, String, i64)> = conn
            .query_row(
                "SELECT seq, subject, subject_seq FROM anchors WHERE kind = 'checkpoint' AND seq > ?1 ORDER BY seq LIMIT 1",
                [signed_anchor],
                |r| Ok((r.get(0)?, r.get::<_, Option<String>>(1)?.unwrap_or_default(), r.get::<_, Option<i64>>(2)?.unwrap_or(0))),
            )
            .optional()
            .map_err(sql("the checkpoint anchors"))?;
        if let Some((seq, chain, through)) = cut {
            report.push(w(
                ProblemKind::Unwitnessed,
                seq,
                format!(
                    "the prune of {chain} through row {through} (anchors row {seq}) is newer than the last signed head (anchors row {signed_anchor}): an unsigned prune could hide removed rows\n  help: prune with `--signing-key` and `--witness`, so the checkpoint is signed"
                ),
            ));
        }
    }
    // Adoptions of unsigned writes are legitimate (an operator asked for them) but never silent.
    for (from, to, seq) in crate::trust::adoptions(conn)? {
        if from > to {
            report.notes.push(format!(
                "anchors row {seq} adopted a log that was behind (or differed from) its witness, with `--adopt-unsigned`"
            ));
            continue;
        }
        report.notes.push(format!(
            "{} {} adopted unsigned at anchors row {seq}, with `--adopt-unsigned`: the signed heads after it vouch for {} because an operator said so, not because bursar signed {} when {} written",
            crate::trust::anchors_range(from, to),
            if from == to { "was" } else { "were" },
            if from == to { "it" } else { "them" },
            if from == to { "it" } else { "them" },
            if from == to { "it was" } else { "they were" },
        ));
    }
    report.witness = Some(WitnessReport {
        lines: lines.len(),
        keys,
        signed_anchor,
        signed_at,
        unwitnessed_anchors: (last_anchor - signed_anchor).max(0),
    });
    Ok(())
}

fn walk(log: &AuditLog, chain: &str, from: i64, start: Hash) -> Result<(ChainReport, Option<Problem>)> {
    let conn = log.connection();
    let cols = columns(chain);
    let ncols = cols.split(',').count();
    let sql_text = format!("SELECT {cols}, hash FROM {chain} WHERE seq > ?1 ORDER BY seq");
    let mut st = conn.prepare(&sql_text).map_err(AuditError::sqlite(format!("read `{chain}`")))?;
    let mut rows = st.query([from]).map_err(AuditError::sqlite(format!("read `{chain}`")))?;
    let mut prev = Head { seq: from, hash: start };
    let mut count = 0u64;
    let mut found = None;
    let p = |seq: i64, kind: ProblemKind, message: String| problem(chain, seq, kind, message);
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
            found = Some(p(prev.seq + 1, kind, message));
            break;
        }
        let mut c = Canon::after(&prev.hash);
        let optional_from = ncols - crate::log::optional_trailing(chain);
        for i in 0..ncols {
            let v = r.get_ref(i).map_err(AuditError::sqlite(format!("read `{chain}`")))?;
            if i >= optional_from && v == rusqlite::types::ValueRef::Null {
                continue;
            }
            c.value(v);
        }
        let h = c.finish();
        if stored.as_slice() != h.as_slice() {
            found = Some(p(
                seq,
                ProblemKind::Edited,
                format!("{chain} row {seq} was edited (or moved): its content does not match its hash"),
            ));
            break;
        }
        prev = Head { seq, hash: h };
    }
    drop(rows);
    if found.is_none() {
        let head: Option<(i64, Vec<u8>)> = conn
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
            found = Some(p(prev.seq + 1, ProblemKind::Truncated, message));
        } else if head_seq < prev.seq || head_hash.as_slice() != prev.hash.as_slice() {
            found = Some(p(
                prev.seq,
                ProblemKind::HeadMismatch,
                format!("the recorded head of {chain} (row {head_seq}) does not match row {}", prev.seq),
            ));
        }
    }
    let rep =
        ChainReport { chain: chain.to_owned(), rows: count, from_seq: from, last_seq: prev.seq, head: hex(&prev.hash) };
    Ok((rep, found))
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
/// and records a checkpoint for each chain so the rest still verifies, each checkpoint anchored (and
/// signed, when the log has a witness attached). Only a prefix of each chain can go: rows are removed
/// up to (not including) the first row whose time is at or after `before`. Refuses to prune a log that
/// does not verify (that would launder the edit).
pub fn prune(log: &mut AuditLog, before: i64) -> Result<PruneReport> {
    let rep = verify(log)?;
    if let Some(p) = rep.problems.first() {
        return Err(AuditError::Invalid(format!(
            "refusing to prune a log that does not verify: {}\n  help: run `bursar audit verify` and investigate first",
            p.message
        )));
    }
    log.prune_prefix(before)
}
