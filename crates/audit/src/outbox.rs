//! [`Outbox`]: the notifier's durable state beside the audit log (schema version 4): how far it has
//! read the log ([`OutboxCursor`]) and the notices it raised ([`NoticeRow`]), with what its sink has
//! acknowledged.
//!
//! `bursar-notify` owns what a notice means; this module stores it. Its one rule is the one that
//! makes a notice neither lost nor repeated across a restart: the notices raised by a page of the log
//! and the cursor past that page are written in ONE transaction ([`Outbox::advance`]), and a notice's
//! delivery is recorded only after its sink acknowledged it ([`Outbox::delivered`]). The body is the
//! notifier's own JSON, kept as text.
//!
//! It uses its own connection to the audit file (WAL: the journal's writer and this one take turns
//! on short transactions, under the busy timeout), and never touches the hash-chained tables.

use std::path::Path;

use rusqlite::{Connection, OptionalExtension, params};

use crate::error::{AuditError, Result};
use crate::schema;

/// How far the notifier has read: every decision up to `decision_seq` and every job step of the
/// events up to `event_seq` has raised or resolved its notices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutboxCursor {
    /// The last decision seq read.
    pub decision_seq: i64,
    /// The last event seq whose job steps were read.
    pub event_seq: i64,
}

/// What a notice's sink has acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivered {
    /// Nothing yet.
    Nothing,
    /// The notice as firing.
    Firing,
    /// The notice as resolved: nothing is left to send.
    Resolved,
}

impl Delivered {
    fn as_str(self) -> &'static str {
        match self {
            Delivered::Nothing => "none",
            Delivered::Firing => "firing",
            Delivered::Resolved => "resolved",
        }
    }

    fn parse(s: &str) -> Option<Delivered> {
        Some(match s {
            "none" => Delivered::Nothing,
            "firing" => Delivered::Firing,
            "resolved" => Delivered::Resolved,
            _ => return None,
        })
    }
}

/// A notice to store: raised by the decision with seq `seq`.
#[derive(Debug, Clone, PartialEq)]
pub struct NewNotice {
    /// The decision seq that raised it (the notice's key).
    pub seq: i64,
    /// The job it is about.
    pub job: Option<String>,
    /// Its kind (the notifier's name).
    pub kind: String,
    /// The policy whose later decisions resolve it (the idle rule), if any.
    pub policy: Option<String>,
    /// Event time it was raised, ms.
    pub opened_at: i64,
    /// For a notice that only informs: when it resolves by itself, ms.
    pub expires_at: Option<i64>,
    /// The notifier's JSON.
    pub body: String,
}

/// A notice whose cause ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The notice (its decision seq).
    pub seq: i64,
    /// When its cause ended (event time, ms).
    pub at: i64,
    /// How, for people (`approved`, `kept alive`, …).
    pub resolution: String,
}

/// A stored notice.
#[derive(Debug, Clone, PartialEq)]
pub struct NoticeRow {
    /// The decision seq that raised it.
    pub seq: i64,
    /// The job.
    pub job: Option<String>,
    /// Its kind.
    pub kind: String,
    /// The policy whose later decisions resolve it.
    pub policy: Option<String>,
    /// Event time it was raised, ms.
    pub opened_at: i64,
    /// When it resolves by itself, ms.
    pub expires_at: Option<i64>,
    /// When its cause ended, ms.
    pub resolved_at: Option<i64>,
    /// How.
    pub resolution: Option<String>,
    /// The notifier's JSON.
    pub body: String,
    /// What the sink acknowledged.
    pub delivered: Delivered,
    /// Failed delivery attempts since the last acknowledged one.
    pub attempts: i64,
    /// Wall time of the last acknowledged delivery, ms.
    pub sent_at: Option<i64>,
}

const NOTICE_COLUMNS: &str =
    "seq, job, kind, policy, opened_at, expires_at, resolved_at, resolution, body, delivered, attempts, sent_at";

fn notice_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(NoticeRow, String)> {
    let delivered: String = r.get(9)?;
    Ok((
        NoticeRow {
            seq: r.get(0)?,
            job: r.get(1)?,
            kind: r.get(2)?,
            policy: r.get(3)?,
            opened_at: r.get(4)?,
            expires_at: r.get(5)?,
            resolved_at: r.get(6)?,
            resolution: r.get(7)?,
            body: r.get(8)?,
            delivered: Delivered::Nothing,
            attempts: r.get(10)?,
            sent_at: r.get(11)?,
        },
        delivered,
    ))
}

/// The notifier's connection to an audit file.
#[derive(Debug)]
pub struct Outbox {
    conn: Connection,
    path: String,
}

impl Outbox {
    /// Opens the outbox of the audit file at `path` (creating and migrating the file like
    /// [`crate::AuditLog::open`]).
    pub fn open(path: impl AsRef<Path>) -> Result<Outbox> {
        let path_ref = path.as_ref();
        let shown = path_ref.display().to_string();
        let mut conn = Connection::open(path_ref).map_err(AuditError::sqlite(format!("open `{shown}`")))?;
        conn.busy_timeout(std::time::Duration::from_secs(5)).map_err(AuditError::sqlite("set the busy timeout"))?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(AuditError::sqlite(format!("switch `{shown}` to WAL mode")))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(AuditError::Invalid(format!("`{shown}` cannot use WAL mode (got `{mode}`)")));
        }
        // The outbox follows a durable log: its own commits are as durable as the log's.
        conn.pragma_update(None, "synchronous", "FULL").map_err(AuditError::sqlite("set the synchronous mode"))?;
        schema::migrate(&mut conn, &shown)?;
        Ok(Outbox { conn, path: shown })
    }

    /// Where the notifier stands, `None` before its first start on this file.
    pub fn cursor(&self) -> Result<Option<OutboxCursor>> {
        self.conn
            .query_row("SELECT decision_seq, event_seq FROM notify_cursor WHERE id = 1", [], |r| {
                Ok(OutboxCursor { decision_seq: r.get(0)?, event_seq: r.get(1)? })
            })
            .optional()
            .map_err(AuditError::sqlite("read the notifier's cursor"))
    }

    /// Sets the cursor to `at` if the file has none yet (the first start of the notifier on a log:
    /// it notifies about what is decided from then on, not about the log's history). Returns the
    /// cursor in force.
    pub fn start_at(&mut self, at: OutboxCursor) -> Result<OutboxCursor> {
        self.conn
            .execute(
                "INSERT INTO notify_cursor (id, decision_seq, event_seq) VALUES (1, ?1, ?2) ON CONFLICT(id) DO NOTHING",
                params![at.decision_seq, at.event_seq],
            )
            .map_err(AuditError::sqlite("store the notifier's cursor"))?;
        self.cursor()?.ok_or_else(|| AuditError::Invalid("the notifier's cursor was not stored".into()))
    }

    /// In one transaction: stores `opened` (a notice already stored under the same seq is kept as it
    /// is), records `resolved`, and moves the cursor to `to`.
    pub fn advance(&mut self, to: OutboxCursor, opened: &[NewNotice], resolved: &[Resolved]) -> Result<()> {
        let tx = self.conn.transaction().map_err(AuditError::sqlite("start a transaction"))?;
        {
            let mut ins = tx
                .prepare_cached(
                    "INSERT INTO notices (seq, job, kind, policy, opened_at, expires_at, body, delivered, attempts) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'none', 0) ON CONFLICT(seq) DO NOTHING",
                )
                .map_err(AuditError::sqlite("prepare a notice insert"))?;
            for n in opened {
                ins.execute(params![n.seq, n.job, n.kind, n.policy, n.opened_at, n.expires_at, n.body])
                    .map_err(AuditError::sqlite(format!("store the notice of decision {}", n.seq)))?;
            }
            let mut res = tx
                .prepare_cached(
                    "UPDATE notices SET resolved_at = ?2, resolution = ?3 WHERE seq = ?1 AND resolved_at IS NULL",
                )
                .map_err(AuditError::sqlite("prepare a notice update"))?;
            for r in resolved {
                res.execute(params![r.seq, r.at, r.resolution])
                    .map_err(AuditError::sqlite(format!("resolve the notice of decision {}", r.seq)))?;
            }
            tx.execute(
                "INSERT INTO notify_cursor (id, decision_seq, event_seq) VALUES (1, ?1, ?2) \
                 ON CONFLICT(id) DO UPDATE SET decision_seq = excluded.decision_seq, event_seq = excluded.event_seq",
                params![to.decision_seq, to.event_seq],
            )
            .map_err(AuditError::sqlite("move the notifier's cursor"))?;
        }
        tx.commit().map_err(AuditError::sqlite(format!("commit to `{}`", self.path)))
    }

    fn read(&self, sql: &str, args: impl rusqlite::Params) -> Result<Vec<NoticeRow>> {
        let mut st = self.conn.prepare_cached(sql).map_err(AuditError::sqlite("prepare a notice read"))?;
        let rows = st.query_map(args, notice_from_row).map_err(AuditError::sqlite("read notices"))?;
        let mut out = Vec::new();
        for row in rows {
            let (mut n, delivered) = row.map_err(AuditError::sqlite("read a notice"))?;
            n.delivered = Delivered::parse(&delivered).ok_or_else(|| {
                AuditError::Invalid(format!("notice {} has delivery state `{delivered}`, not one bursar writes", n.seq))
            })?;
            out.push(n);
        }
        Ok(out)
    }

    /// Every notice whose cause has not ended, oldest first.
    pub fn open_notices(&self) -> Result<Vec<NoticeRow>> {
        self.read(&format!("SELECT {NOTICE_COLUMNS} FROM notices WHERE resolved_at IS NULL ORDER BY seq"), [])
    }

    /// Up to `limit` notices with something to send, oldest first: never delivered, or resolved and
    /// not yet delivered as resolved, or (with `resend_before`, wall ms) open, delivered as firing and
    /// last sent before then.
    pub fn to_send(&self, resend_before: Option<i64>, limit: usize) -> Result<Vec<NoticeRow>> {
        self.read(
            &format!(
                "SELECT {NOTICE_COLUMNS} FROM notices WHERE delivered = 'none' \
                 OR (resolved_at IS NOT NULL AND delivered <> 'resolved') \
                 OR (?1 IS NOT NULL AND resolved_at IS NULL AND delivered = 'firing' AND sent_at < ?1) \
                 ORDER BY seq LIMIT ?2"
            ),
            params![resend_before, i64::try_from(limit).unwrap_or(i64::MAX)],
        )
    }

    /// The notice raised by decision `seq`.
    pub fn notice(&self, seq: i64) -> Result<Option<NoticeRow>> {
        Ok(self.read(&format!("SELECT {NOTICE_COLUMNS} FROM notices WHERE seq = ?1"), [seq])?.pop())
    }

    /// Records that the sink acknowledged notice `seq` as `state` at wall time `at` (ms); resets its
    /// failed attempts.
    pub fn delivered(&mut self, seq: i64, state: Delivered, at: i64) -> Result<()> {
        self.conn
            .execute(
                "UPDATE notices SET delivered = ?2, sent_at = ?3, attempts = 0 WHERE seq = ?1",
                params![seq, state.as_str(), at],
            )
            .map_err(AuditError::sqlite(format!("record the delivery of notice {seq}")))?;
        Ok(())
    }

    /// Counts a failed delivery attempt of notice `seq`.
    pub fn failed(&mut self, seq: i64) -> Result<()> {
        self.conn
            .execute("UPDATE notices SET attempts = attempts + 1 WHERE seq = ?1", [seq])
            .map_err(AuditError::sqlite(format!("record a failed delivery of notice {seq}")))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch() -> std::path::PathBuf {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        std::env::temp_dir().join(format!("bursar-outbox-{}-{n}.db", std::process::id()))
    }

    fn notice(seq: i64) -> NewNotice {
        NewNotice {
            seq,
            job: Some("j1".into()),
            kind: "idle".into(),
            policy: Some("reclaim/idle".into()),
            opened_at: 1000,
            expires_at: None,
            body: "{}".into(),
        }
    }

    #[test]
    fn the_cursor_and_its_notices_move_together_and_a_restart_sees_both() {
        let path = scratch();
        {
            let mut o = Outbox::open(&path).unwrap();
            assert_eq!(o.cursor().unwrap(), None);
            let c = o.start_at(OutboxCursor { decision_seq: 4, event_seq: 9 }).unwrap();
            assert_eq!(c, OutboxCursor { decision_seq: 4, event_seq: 9 });
            // A second start keeps the stored cursor.
            assert_eq!(o.start_at(OutboxCursor { decision_seq: 0, event_seq: 0 }).unwrap(), c);
            o.advance(OutboxCursor { decision_seq: 6, event_seq: 11 }, &[notice(5), notice(6)], &[]).unwrap();
            // Raising the same notice again (a page read twice) keeps the first.
            let mut again = notice(5);
            again.body = "{\"x\":1}".into();
            o.advance(
                OutboxCursor { decision_seq: 7, event_seq: 12 },
                &[again],
                &[Resolved { seq: 5, at: 2000, resolution: "kept alive".into() }],
            )
            .unwrap();
            o.delivered(6, Delivered::Firing, 3000).unwrap();
        }
        let o = Outbox::open(&path).unwrap();
        assert_eq!(o.cursor().unwrap(), Some(OutboxCursor { decision_seq: 7, event_seq: 12 }));
        let open: Vec<i64> = o.open_notices().unwrap().iter().map(|n| n.seq).collect();
        assert_eq!(open, [6]);
        let five = o.notice(5).unwrap().unwrap();
        assert_eq!(
            (five.body.as_str(), five.resolved_at, five.resolution.as_deref()),
            ("{}", Some(2000), Some("kept alive"))
        );
        let six = o.notice(6).unwrap().unwrap();
        assert_eq!((six.delivered, six.sent_at), (Delivered::Firing, Some(3000)));
        // 5 was resolved before anything was sent: its resolution is due; 6 only once a re-send is.
        let due = |before| o.to_send(before, 10).unwrap().iter().map(|n| n.seq).collect::<Vec<_>>();
        assert_eq!(due(None), [5]);
        assert_eq!(due(Some(3000)), [5]);
        assert_eq!(due(Some(3001)), [5, 6]);
        drop(o);
        for suffix in ["", "-wal", "-shm"] {
            let mut p = path.as_os_str().to_owned();
            p.push(suffix);
            let _ = std::fs::remove_file(p);
        }
    }
}
