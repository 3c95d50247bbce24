//! What a witness vouches for in a log, for a process that is about to sign it or restore from it.
//!
//! The keyless chains let whoever writes the file make it consistent again after any change, so
//! the only rows that are known to be bursar's are those a signed head covers: the anchors up to the
//! newest signed head the log still has (its hash as signed), and everything they bind. Two things
//! follow from that, and both live here so `eval`, `serve`, `prune` and `audit head` share them:
//!
//! - **Signing starts only over signed ground.** [`standing`] finds the newest signed head (by this
//!   key, of this log) that the log still matches, and the anchors after it. A process that attaches
//!   a witness ([`crate::AuditLog::attach_witness`]) refuses when there are any, since its first
//!   signature would vouch for them; told to adopt them (`--adopt-unsigned`), it first appends an
//!   `adopt` anchor naming the range (subject `unsigned`), so the adoption is in the log for good and
//!   `verify --witness` names it.
//! - **A snapshot is restored only if a signature covers it.** With a witness attached, an engine
//!   snapshot is a restore point only when a signed head covers an anchor at or after its own that the
//!   log still holds as signed, the chain from the snapshot's anchor to it still recomputing
//!   ([`covers`]), and when it is not inside an adopted range (adopting vouches for the rows, so signing can go on, not for engine state: a
//!   replay from an older point is always correct). Otherwise the caller replays.
//!
//! The witness is read from its end ([`crate::witness::newest_first`]): a witness grows by a line a
//! second under `serve`, and only its newest heads matter here.

use std::path::Path;

use rusqlite::{Connection, OptionalExtension};

use crate::anchor::{self, AnchorRow};
use crate::canon::{GENESIS, hex};
use crate::error::{AuditError, Result};
use crate::log::{AuditLog, to_hash};
use crate::witness::{PublicKey, SignedHead};

/// The subject of an `adopt` anchor that adopted unsigned writes (the migration's `adopt` has none).
pub const ADOPTED_UNSIGNED: &str = "unsigned";

/// A signed head the log still has: the anchor it covers, and when it was signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vouched {
    /// The anchor the head covers.
    pub anchor: i64,
    /// When it was signed, ms since the epoch.
    pub at: i64,
}

/// Where a log stands against its witness.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standing {
    /// The newest signed head the log still matches (None: no signed head of this log matches).
    pub vouched: Option<Vouched>,
    /// A newer signed head the log lacks, or holds with another hash (a rollback or a rewrite):
    /// the anchor it covers and when it was signed.
    pub ahead: Option<Vouched>,
    /// The log's newest anchor.
    pub last_anchor: i64,
}

impl Standing {
    /// The anchors no signed head covers, first and last (None when every anchor is covered).
    pub fn unsigned(&self) -> Option<(i64, i64)> {
        let from = self.vouched.map_or(0, |v| v.anchor) + 1;
        (from <= self.last_anchor).then_some((from, self.last_anchor))
    }

    /// Whether a process may sign from here without adopting anything.
    pub fn is_clean(&self) -> bool {
        self.unsigned().is_none() && self.ahead.is_none()
    }

    /// A sentence on what is not covered, for the log and the adoption's note.
    pub fn describe(&self, witness: &Path) -> String {
        match self.unsigned() {
            Some((from, to)) => format!(
                "{} {} not signed: {}",
                anchors_range(from, to),
                if from == to { "is" } else { "are" },
                self.why(witness)
            ),
            None => self.why(witness),
        }
    }

    /// [`Standing::describe`] without the range: since when nothing is signed, and a signed head the
    /// log lacks (the refusal names the range itself).
    pub fn why(&self, witness: &Path) -> String {
        let mut parts = Vec::new();
        if self.unsigned().is_some() {
            parts.push(match self.vouched {
                Some(v) => format!(
                    "the newest signed head in `{}` covers anchors row {} (signed {})",
                    witness.display(),
                    v.anchor,
                    bursar_model::Timestamp(v.at)
                ),
                None => format!("`{}` holds no signed head of this log", witness.display()),
            });
        }
        if let Some(a) = self.ahead {
            parts.push(format!(
                "the witness signed anchors row {} on {}, which this log {}: it was rolled back or rewritten",
                a.anchor,
                bursar_model::Timestamp(a.at),
                if a.anchor > self.last_anchor { "does not have" } else { "holds with another hash" }
            ));
        }
        parts.join("; ")
    }
}

/// `anchors row N` or `anchors rows N to M`.
pub fn anchors_range(from: i64, to: i64) -> String {
    if from == to { format!("anchors row {from}") } else { format!("anchors rows {from} to {to}") }
}

/// Where `log` stands against the witness file `witness`, counting only heads signed by `key`:
/// the newest signed head it still matches and anything after it. A missing witness file is an
/// empty one.
pub fn standing(log: &AuditLog, witness: &Path, key: &PublicKey) -> Result<Standing> {
    let conn = log.connection();
    let last_anchor = log.head().0;
    let id = log.log_id()?.unwrap_or_default();
    let key_hex = key.to_hex();
    let mut vouched = None;
    let mut ahead: Option<Vouched> = None;
    crate::witness::newest_first(witness, |line| {
        let Some(Ok(head)) = SignedHead::parse_line(line) else { return Ok(true) };
        // Only heads this key signed, of this log: anything else proves nothing about it.
        if head.key != key_hex || head.log != id || head.check(Some(key)).is_err() {
            return Ok(true);
        }
        let here = Vouched { anchor: head.anchors.seq, at: head.at };
        match anchor::anchor_at(conn, head.anchors.seq)? {
            Some(a) if hex(&a.hash) == head.anchors.hash => {
                vouched = Some(here);
                Ok(false)
            }
            _ => {
                if ahead.is_none_or(|a| a.anchor < here.anchor) {
                    ahead = Some(here);
                }
                Ok(true)
            }
        }
    })?;
    // A head the log lacks but that is older than what it matches says nothing new.
    let ahead = ahead.filter(|a| vouched.is_none_or(|v: Vouched| a.anchor > v.anchor));
    Ok(Standing { vouched, ahead, last_anchor })
}

/// The signed heads of the witness file `witness` that name this log and `key` and cover anchors
/// row `from` or later, oldest first, read from the end and stopping before the first older one:
/// what a restore checks its snapshots against. Their signatures are not checked here but by
/// [`uncovered`], for the few it uses: a witness of a day holds 86,400 of `serve`'s heads.
pub(crate) fn signed_since(log: &AuditLog, witness: &Path, key: &PublicKey, from: i64) -> Result<Vec<SignedHead>> {
    let id = log.log_id()?.unwrap_or_default();
    let key_hex = key.to_hex();
    let mut out = Vec::new();
    crate::witness::newest_first(witness, |line| {
        let Some(Ok(head)) = SignedHead::parse_line(line) else { return Ok(true) };
        if head.key != key_hex || head.log != id {
            return Ok(true);
        }
        if head.anchors.seq < from {
            return Ok(false);
        }
        out.push(head);
        Ok(true)
    })?;
    out.sort_by_key(|h| h.anchors.seq);
    Ok(out)
}

/// Whether a snapshot whose anchor is `anchor` is covered by one of `signed` (from
/// [`signed_since`]), validly signed by `key`: `Ok(None)` when one covers it, else the first signed
/// anchor at or after it and the anchor where the chain to it breaks (`Some(None)`: no valid head is
/// that recent).
pub(crate) fn uncovered(
    conn: &Connection,
    anchor: i64,
    signed: &[SignedHead],
    key: &PublicKey,
) -> Result<Option<Option<(i64, i64)>>> {
    let mut first_failure = None;
    for head in signed.iter().filter(|h| h.anchors.seq >= anchor) {
        if head.check(Some(key)).is_err() {
            continue;
        }
        let seq = head.anchors.seq;
        // The signed anchor as the log holds it must be the one signed ...
        let held = anchor::anchor_at(conn, seq)?.is_some_and(|a| hex(&a.hash) == head.anchors.hash);
        // ... and the chain from the snapshot's anchor to it must recompute.
        let broken = if held { covers(conn, anchor, seq)? } else { Some(seq) };
        match broken {
            None => return Ok(None),
            Some(b) => {
                first_failure.get_or_insert((seq, b));
            }
        }
    }
    Ok(Some(first_failure))
}

/// Whether the signed anchor `vouched` covers anchors row `from`: every anchor from `from` to it
/// must recompute from its predecessor's stored hash, so the signed hash binds `from`'s content.
/// `Ok(None)` when it does, `Ok(Some(row))` with the first anchor that does not recompute.
pub(crate) fn covers(conn: &Connection, from: i64, vouched: i64) -> Result<Option<i64>> {
    if from > vouched {
        return Ok(Some(from));
    }
    let mut prev = if from <= 1 {
        GENESIS
    } else {
        let h: Option<Vec<u8>> = conn
            .query_row("SELECT hash FROM anchors WHERE seq = ?1", [from - 1], |r| r.get(0))
            .optional()
            .map_err(AuditError::sqlite("read an anchor"))?;
        match h {
            Some(h) => to_hash(&h, "anchors", from - 1)?,
            None => return Ok(Some(from - 1)),
        }
    };
    let mut st = conn
        .prepare(&format!(
            "SELECT {}, hash FROM anchors WHERE seq >= ?1 AND seq <= ?2 ORDER BY seq",
            anchor::ANCHOR_COLUMNS
        ))
        .map_err(AuditError::sqlite("read the anchors"))?;
    let rows =
        st.query_map([from, vouched], anchor::anchor_from_row).map_err(AuditError::sqlite("read the anchors"))?;
    let mut next = from;
    for row in rows {
        let a: AnchorRow = row.map_err(AuditError::sqlite("read an anchor"))?;
        if a.seq != next {
            return Ok(Some(next));
        }
        let h = anchor::rehash_after(&prev, &a);
        if h.as_slice() != a.hash.as_slice() {
            return Ok(Some(a.seq));
        }
        prev = h;
        next += 1;
    }
    Ok(if next == vouched + 1 { None } else { Some(next) })
}

/// Every adoption of unsigned writes: (first adopted anchor, last adopted anchor, the `adopt` anchor).
pub fn adoptions(conn: &Connection) -> Result<Vec<(i64, i64, i64)>> {
    let mut st = conn
        .prepare("SELECT subject_seq, seq FROM anchors WHERE kind = 'adopt' AND subject = ?1 ORDER BY seq")
        .map_err(AuditError::sqlite("read the adoptions"))?;
    let rows = st
        .query_map([ADOPTED_UNSIGNED], |r| Ok((r.get::<_, Option<i64>>(0)?.unwrap_or(0), r.get::<_, i64>(1)?)))
        .map_err(AuditError::sqlite("read the adoptions"))?;
    let mut out = Vec::new();
    for row in rows {
        let (from, seq) = row.map_err(AuditError::sqlite("read the adoptions"))?;
        out.push((from, seq - 1, seq));
    }
    Ok(out)
}
