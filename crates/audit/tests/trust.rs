//! What a witness vouches for (issue 36), on the library: a log with a witness attached restores only
//! a snapshot a signed head covers, and refuses to start signing over writes no signed head covers
//! unless told to adopt them (and then records the adoption).

#![expect(clippy::unwrap_used, reason = "test helpers: a failure is a test failure")]

use std::path::{Path, PathBuf};

use crate::common::{TempDir, entry};
use bursar_audit::{AuditError, AuditLog, Durability, Record, SigningKey, SnapshotRejected, Witness};
use bursar_model::DecisionKind;

fn key_file(dir: &TempDir) -> PathBuf {
    let k = dir.path("audit.key");
    if !k.exists() {
        SigningKey::generate().unwrap().write_pair(&k, &dir.path("audit.pub")).unwrap();
    }
    k
}

fn witness(dir: &TempDir) -> Witness {
    Witness::open(SigningKey::from_file(key_file(dir)).unwrap(), dir.path("w.jsonl")).unwrap()
}

fn records(from: u64, to: u64) -> Vec<Record> {
    (from..=to)
        .map(|i| entry(i, "nlp", "alice", (i as u32).div_ceil(4).max(1), DecisionKind::Allow, "q", "set1"))
        .collect()
}

/// Signed: events 1..=10, a snapshot at 10, events 11..=20, a snapshot at 20, events 21..=22.
fn signed_log(dir: &TempDir) -> PathBuf {
    let db = dir.path("a.db");
    let mut log = AuditLog::open(&db, Durability::Fast).unwrap();
    log.attach_witness(witness(dir), false).unwrap();
    log.append(&records(1, 10)).unwrap();
    log.save_snapshot(10, Some("set1"), br#"{"reserved":40}"#).unwrap();
    log.append(&records(11, 20)).unwrap();
    log.save_snapshot(20, Some("set1"), br#"{"reserved":80}"#).unwrap();
    log.append(&records(21, 22)).unwrap();
    db
}

fn with_witness(dir: &TempDir, db: &Path, adopt: bool) -> bursar_audit::Result<AuditLog> {
    let mut log = AuditLog::open(db, Durability::Fast)?;
    log.attach_witness(witness(dir), adopt)?;
    Ok(log)
}

#[test]
fn a_witnessed_log_restores_from_the_newest_snapshot_a_signed_head_covers() {
    let dir = TempDir::new("trust-ok");
    let db = signed_log(&dir);
    let log = with_witness(&dir, &db, false).unwrap();
    let point = log.restore_point().unwrap();
    assert_eq!(point.snapshot.map(|s| s.event_seq), Some(20));
    assert!(point.rejected.is_empty(), "{:?}", point.rejected);
}

#[test]
fn an_edited_snapshot_whose_anchor_was_rehashed_is_not_covered_by_the_signed_head() {
    let dir = TempDir::new("trust-rehashed");
    let db = signed_log(&dir);
    // Blob and digest edited, the snapshot's anchor re-hashed over them; the anchors after it are not.
    let forged = br#"{"reserved":0}"#;
    let sum = <sha2::Sha256 as sha2::Digest>::digest(forged).to_vec();
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute("UPDATE engine_snapshots SET blob = ?1 WHERE event_seq = 20", [&forged[..]]).unwrap();
    let anchor: i64 = conn
        .query_row("SELECT seq FROM anchors WHERE kind = 'snapshot' AND subject_seq = 20", [], |r| r.get(0))
        .unwrap();
    conn.execute("UPDATE anchors SET digest = ?1 WHERE seq = ?2", rusqlite::params![&sum[..], anchor]).unwrap();
    let prev: Vec<u8> = conn.query_row("SELECT hash FROM anchors WHERE seq = ?1", [anchor - 1], |r| r.get(0)).unwrap();
    let hash = conn
        .query_row(
            "SELECT seq, at, kind, events_seq, events_hash, decisions_seq, decisions_hash, loads_seq, loads_hash, subject, subject_seq, digest, note FROM anchors WHERE seq = ?1",
            [anchor],
            |r| {
                let mut c = bursar_audit::canon::Canon::after(&prev.clone().try_into().unwrap());
                for i in 0..13 {
                    c.value(r.get_ref(i)?);
                }
                Ok(c.finish())
            },
        )
        .unwrap();
    conn.execute("UPDATE anchors SET hash = ?1 WHERE seq = ?2", rusqlite::params![&hash[..], anchor]).unwrap();
    drop(conn);
    // Without a witness the snapshot's own anchor is all there is: it is taken (today's limit) ...
    let plain = AuditLog::open_read(&db).unwrap().restore_point().unwrap();
    assert_eq!(plain.snapshot.map(|s| s.event_seq), Some(20));
    // ... with one, no signed head covers it as it is now: the older one is restored.
    let log = with_witness(&dir, &db, false).unwrap();
    let point = log.restore_point().unwrap();
    assert_eq!(point.snapshot.map(|s| s.event_seq), Some(10));
    assert!(
        // The head signed right after the snapshot was written covers its anchor as it was then.
        matches!(point.rejected[..], [SnapshotRejected::ChainBroken { event_seq: 20, signed, broken, .. }] if signed == anchor && broken == anchor),
        "{:?}",
        point.rejected
    );
}

#[test]
fn writes_no_signed_head_covers_are_refused_until_adopted_and_an_adopted_snapshot_is_not_restored() {
    let dir = TempDir::new("trust-adopt");
    let db = signed_log(&dir);
    // Written without the key: a commit and a newer snapshot.
    let mut log = AuditLog::open(&db, Durability::Fast).unwrap();
    log.append(&records(23, 24)).unwrap();
    log.save_snapshot(24, Some("set1"), br#"{"reserved":0}"#).unwrap();
    let last = log.head().0;
    drop(log);

    let e = with_witness(&dir, &db, false).unwrap_err();
    assert!(matches!(e, AuditError::Unsigned { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("refusing to sign over anchors rows {} to {last}", last - 1))
            && msg.contains("help: ")
            && msg.contains("--adopt-unsigned"),
        "{msg}"
    );

    let log = with_witness(&dir, &db, true).unwrap();
    // The adoption is an anchor of its own, signed at once.
    assert_eq!(log.head().0, last + 1);
    assert_eq!(log.witness().unwrap().signed(), 1);
    let point = log.restore_point().unwrap();
    assert_eq!(point.snapshot.map(|s| s.event_seq), Some(20));
    assert!(
        matches!(point.rejected[..], [SnapshotRejected::Adopted { event_seq: 24, adopted_by, .. }] if adopted_by == last + 1),
        "{:?}",
        point.rejected
    );
    drop(log);
    // From then on the log is on signed ground again.
    let lines = bursar_audit::witness::read(dir.path("w.jsonl")).unwrap();
    let rep = bursar_audit::verify::verify_with_witness(&AuditLog::open_read(&db).unwrap(), &lines, None).unwrap();
    assert!(rep.is_ok(), "{rep:?}");
    assert!(rep.notes.iter().any(|n| n.contains("were adopted unsigned")), "{:?}", rep.notes);
    with_witness(&dir, &db, false).unwrap();
}

/// Issue 46: the refusal for a log its witness signed further than it goes ("rolled back or
/// rewritten") offered `--adopt-unsigned` "if bursar stopped before signing them": a crash cannot
/// roll a log back. Its help now says so, and points at restoring a covered copy or starting a new
/// witness, not at adopting.
#[test]
fn a_rolled_back_log_is_not_offered_adoption_as_if_bursar_had_crashed() {
    let dir = TempDir::new("trust-rollback");
    let db = dir.path("a.db");
    {
        let mut log = with_witness_at(&dir, &db);
        log.append(&records(1, 10)).unwrap();
    }
    let old = dir.path("old.db");
    AuditLog::backup(&db, &old).unwrap();
    {
        let mut log = with_witness_at(&dir, &db);
        log.append(&records(11, 20)).unwrap();
    }
    let err = match with_witness(&dir, &old, false) {
        Err(e) => e,
        Ok(_) => panic!("a log behind its witness was signed over"),
    };
    assert!(matches!(err, AuditError::RolledBack { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("rolled back or rewritten") && text.contains("a crash or a kill never rolls a log back"),
        "{text}"
    );
    assert!(!text.contains("--adopt-unsigned") && !text.contains("stopped before signing"), "{text}");
    // Unsigned writes after the newest signed head are still what adoption is for.
    {
        let mut log = AuditLog::open(&db, Durability::Fast).unwrap();
        log.append(&records(21, 22)).unwrap();
    }
    let text = match with_witness(&dir, &db, false) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("unsigned writes were signed over"),
    };
    assert!(text.contains("--adopt-unsigned") && text.contains("stopped before signing"), "{text}");
}

fn with_witness_at(dir: &TempDir, db: &Path) -> AuditLog {
    with_witness(dir, db, false).unwrap()
}
