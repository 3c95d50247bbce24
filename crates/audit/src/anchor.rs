//! The `anchors` chain: one hash-chained row per write, binding everything else in the file together.
//!
//! The three row chains (`events`, `decisions`, `policy_loads`) each prove their own rows, but nothing
//! tied them to one another, nor covered the side data: a whole chain deleted with its head, a forged
//! prune checkpoint, an edited engine snapshot or policy set all verified. So every transaction that
//! writes the log also appends an anchor, in the same transaction, recording
//!
//! - the head (last sequence number and hash) of each of the three chains after the write, so a
//!   chain that lost rows at its end, or vanished, no longer matches the anchors;
//! - what the write was (`kind`): `commit` (events and decisions), `load` (a policy load),
//!   `policy_set` (a load that recorded a new policy set: `subject` is its digest, `subject_seq` when it
//!   was first loaded, `digest` the SHA-256 of its `files` JSON), `snapshot` (`subject` the policy set,
//!   `subject_seq` the event seq covered, `digest` the SHA-256 of the blob), `checkpoint` (a prune:
//!   `subject` the chain, `subject_seq` the last removed seq, `digest` its hash, `note` what was
//!   removed), or `adopt` (a file migrated from schema version 1: its side data is adopted as found);
//! - and its own hash, chained like every other row ([`crate::canon`]).
//!
//! The anchors chain is never pruned, so its first row's hash names the log ([`log_id`]) and its head
//! is the one value a signed head ([`crate::witness`]) has to cover.

use rusqlite::{Connection, OptionalExtension, params};
use sha2::{Digest, Sha256};

use crate::canon::{Canon, GENESIS, Hash, hex};
use crate::error::{AuditError, Result};
use crate::log::{Head, to_hash};

/// The columns of an anchor row, in hash order (the hash itself last, not included).
pub(crate) const ANCHOR_COLUMNS: &str = "seq, at, kind, events_seq, events_hash, decisions_seq, decisions_hash, \
     loads_seq, loads_hash, subject, subject_seq, digest, note";

const INSERT_ANCHOR: &str = "INSERT INTO anchors (seq, at, kind, events_seq, events_hash, decisions_seq, \
     decisions_hash, loads_seq, loads_hash, subject, subject_seq, digest, note, hash) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)";

pub(crate) const UPSERT_HEAD: &str = "INSERT INTO chain_heads (chain, seq, hash) VALUES (?1, ?2, ?3) \
     ON CONFLICT(chain) DO UPDATE SET seq = excluded.seq, hash = excluded.hash";

/// The heads of the three row chains at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Heads {
    pub events: Head,
    pub decisions: Head,
    pub loads: Head,
}

/// What an anchor says beyond the heads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct What<'a> {
    pub kind: &'a str,
    pub subject: Option<&'a str>,
    pub subject_seq: Option<i64>,
    pub digest: Option<&'a [u8]>,
    pub note: Option<&'a str>,
}

impl<'a> What<'a> {
    /// An anchor that records only the heads.
    pub fn plain(kind: &'a str) -> What<'a> {
        What { kind, subject: None, subject_seq: None, digest: None, note: None }
    }
}

/// Appends the anchor after `prev` (inside the caller's transaction) and moves the `anchors` head.
pub(crate) fn insert(conn: &Connection, prev: Head, at: i64, heads: &Heads, what: &What<'_>) -> Result<Head> {
    let seq = prev.seq + 1;
    let mut c = Canon::after(&prev.hash);
    c.int(seq)
        .int(at)
        .text(what.kind)
        .int(heads.events.seq)
        .blob(&heads.events.hash)
        .int(heads.decisions.seq)
        .blob(&heads.decisions.hash)
        .int(heads.loads.seq)
        .blob(&heads.loads.hash)
        .opt_text(what.subject)
        .opt_int(what.subject_seq);
    match what.digest {
        Some(d) => c.blob(d),
        None => c.null(),
    };
    c.opt_text(what.note);
    let hash = c.finish();
    let mut st = conn.prepare_cached(INSERT_ANCHOR).map_err(AuditError::sqlite("prepare the anchor insert"))?;
    st.execute(params![
        seq,
        at,
        what.kind,
        heads.events.seq,
        &heads.events.hash[..],
        heads.decisions.seq,
        &heads.decisions.hash[..],
        heads.loads.seq,
        &heads.loads.hash[..],
        what.subject,
        what.subject_seq,
        what.digest,
        what.note,
        &hash[..]
    ])
    .map_err(AuditError::sqlite("record an anchor"))?;
    let mut head = conn.prepare_cached(UPSERT_HEAD).map_err(AuditError::sqlite("prepare the head update"))?;
    head.execute(params!["anchors", seq, &hash[..]]).map_err(AuditError::sqlite("update a chain head"))?;
    Ok(Head { seq, hash })
}

/// SHA-256 of `bytes`.
pub(crate) fn sha256(bytes: &[u8]) -> Hash {
    let mut h = GENESIS;
    h.copy_from_slice(&Sha256::digest(bytes));
    h
}

/// The note a prune checkpoint's anchor carries.
pub(crate) fn checkpoint_note(removed: i64, before: i64) -> String {
    format!("removed={removed} before={before}")
}

/// The log's identity: the hex hash of its first anchor (None before the first write).
pub fn log_id(conn: &Connection) -> Result<Option<String>> {
    let h: Option<Vec<u8>> = conn
        .query_row("SELECT hash FROM anchors WHERE seq = 1", [], |r| r.get(0))
        .optional()
        .map_err(AuditError::sqlite("read the first anchor"))?;
    Ok(h.map(|h| hex(&h)))
}

/// One anchor row as stored.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AnchorRow {
    pub seq: i64,
    pub at: i64,
    pub kind: String,
    pub heads: Heads,
    pub subject: Option<String>,
    pub subject_seq: Option<i64>,
    pub digest: Option<Vec<u8>>,
    pub note: Option<String>,
    pub hash: Vec<u8>,
}

/// Reads a row selected as `ANCHOR_COLUMNS, hash`.
pub(crate) fn anchor_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<AnchorRow> {
    let head = |seq: i64, h: Vec<u8>| {
        let mut hash = GENESIS;
        if h.len() == hash.len() {
            hash.copy_from_slice(&h);
        } else {
            // A malformed hash never equals a real one: the comparison that follows reports it.
            hash = [0xff; 32];
        }
        Head { seq, hash }
    };
    Ok(AnchorRow {
        seq: r.get(0)?,
        at: r.get(1)?,
        kind: r.get(2)?,
        heads: Heads {
            events: head(r.get(3)?, r.get(4)?),
            decisions: head(r.get(5)?, r.get(6)?),
            loads: head(r.get(7)?, r.get(8)?),
        },
        subject: r.get(9)?,
        subject_seq: r.get(10)?,
        digest: r.get(11)?,
        note: r.get(12)?,
        hash: r.get(13)?,
    })
}

/// The anchor at `seq`, if any.
pub(crate) fn anchor_at(conn: &Connection, seq: i64) -> Result<Option<AnchorRow>> {
    conn.query_row(&format!("SELECT {ANCHOR_COLUMNS}, hash FROM anchors WHERE seq = ?1"), [seq], anchor_from_row)
        .optional()
        .map_err(AuditError::sqlite("read an anchor"))
}

/// Recomputes the hash of `a` from its predecessor's stored hash (genesis for the first).
pub(crate) fn rehash(conn: &Connection, a: &AnchorRow) -> Result<Hash> {
    let prev = if a.seq <= 1 {
        GENESIS
    } else {
        let h: Option<Vec<u8>> = conn
            .query_row("SELECT hash FROM anchors WHERE seq = ?1", [a.seq - 1], |r| r.get(0))
            .optional()
            .map_err(AuditError::sqlite("read an anchor"))?;
        match h {
            Some(h) => to_hash(&h, "anchors", a.seq - 1)?,
            None => return Err(AuditError::Invalid(format!("anchors row {} is missing", a.seq - 1))),
        }
    };
    Ok(rehash_after(&prev, a))
}

/// The hash of anchor `a` after an anchor whose hash is `prev`.
pub(crate) fn rehash_after(prev: &Hash, a: &AnchorRow) -> Hash {
    let mut c = Canon::after(prev);
    c.int(a.seq)
        .int(a.at)
        .text(&a.kind)
        .int(a.heads.events.seq)
        .blob(&a.heads.events.hash)
        .int(a.heads.decisions.seq)
        .blob(&a.heads.decisions.hash)
        .int(a.heads.loads.seq)
        .blob(&a.heads.loads.hash)
        .opt_text(a.subject.as_deref())
        .opt_int(a.subject_seq);
    match &a.digest {
        Some(d) => c.blob(d),
        None => c.null(),
    };
    c.opt_text(a.note.as_deref());
    c.finish()
}
