//! Tampering that the row chains alone did not catch (issue 14, items 9 and 10), each done with plain
//! SQL (or with the public hashing rules, as an attacker with write access could) on a real file:
//!
//! - an edited engine snapshot reset the quota after a restart and still verified (item 9);
//! - a deleted decisions chain with its head verified ("0 rows … ok") while events remained;
//! - a forged `checkpoints` row hid a deleted prefix;
//! - `policy_sets` was not chained;
//! - rows re-hashed into a consistent chain could leave decisions without events (item 10).

#![expect(clippy::unwrap_used, clippy::panic, reason = "test helpers: a failure is a test failure")]

use crate::common::{TempDir, entry, rehash, sql};
use bursar_audit::verify::{ProblemKind, Report, prune, verify};
use bursar_audit::{AuditLog, Durability, Record, SnapshotRejected, SourceFile};
use bursar_model::DecisionKind;

/// 40 events/decisions over days 1..=20 of Nov 2026, two policy loads, two engine snapshots.
fn build(dir: &TempDir, name: &str) -> std::path::PathBuf {
    let db = dir.path(name);
    let mut log = AuditLog::open(&db, Durability::Fast).unwrap();
    log.record_policy_set("set1", &[SourceFile { path: "q.toml".into(), digest: "ab".into() }]).unwrap();
    let batch: Vec<Record> = (1..=40)
        .map(|i| {
            let kind = if i % 3 == 0 { DecisionKind::Deny } else { DecisionKind::Allow };
            entry(i, if i % 2 == 0 { "nlp" } else { "cv" }, "alice", (i as u32).div_ceil(2), kind, "quota/m", "set1")
        })
        .collect();
    log.append(&batch[..25]).unwrap();
    log.save_snapshot(25, Some("set1"), br#"{"ledgers":{"nlp":{"reserved":96.0}}}"#).unwrap();
    log.record_policy_failure("q.toml:2: bad", Some("set1")).unwrap();
    log.append(&batch[25..]).unwrap();
    log.save_snapshot(40, Some("set1"), br#"{"ledgers":{"nlp":{"reserved":160.0}}}"#).unwrap();
    db
}

fn check(db: &std::path::Path) -> Report {
    verify(&AuditLog::open_read(db).unwrap()).unwrap()
}

fn only(rep: &Report, chain: &str, kind: ProblemKind) -> String {
    let p = rep.problems.iter().find(|p| p.chain == chain).unwrap_or_else(|| panic!("no {chain} problem: {rep:?}"));
    assert_eq!(p.kind, kind, "{}", p.message);
    p.message.clone()
}

#[test]
fn an_untouched_log_with_snapshots_verifies_and_restores_from_the_newest() {
    let dir = TempDir::new("t-ok");
    let db = build(&dir, "a.db");
    let rep = check(&db);
    assert!(rep.is_ok(), "{rep:?}");
    let chains: Vec<(&str, u64)> = rep.chains.iter().map(|c| (c.chain.as_str(), c.rows)).collect();
    assert_eq!(chains, vec![("events", 40), ("decisions", 40), ("policy_loads", 2), ("anchors", 6)]);
    let log = AuditLog::open_read(&db).unwrap();
    assert_eq!(log.latest_snapshot().unwrap().unwrap().event_seq, 40);
    assert!(log.restore_point().unwrap().rejected.is_empty());
}

#[test]
fn an_edited_engine_snapshot_is_refused_at_restore_and_fails_verify() {
    // Item 9: a ledger's reserved GPU-hours set to 0 in the newest snapshot blob.
    let dir = TempDir::new("t-snap");
    let db = build(&dir, "a.db");
    sql(
        &db,
        r#"UPDATE engine_snapshots SET blob = CAST('{"ledgers":{"nlp":{"reserved":0.0}}}' AS BLOB) WHERE event_seq = 40"#,
    );
    let log = AuditLog::open_read(&db).unwrap();
    // Restore falls back to the older snapshot that still matches its anchor (serve then replays
    // the events after it), and says why the newest one was refused.
    let point = log.restore_point().unwrap();
    assert_eq!(point.snapshot.as_ref().map(|s| s.event_seq), Some(25));
    assert!(matches!(&point.rejected[..], [SnapshotRejected::Edited { event_seq: 40, .. }]), "{:?}", point.rejected);
    assert_eq!(log.latest_snapshot().unwrap().unwrap().event_seq, 25);
    let msg = only(&check(&db), "engine_snapshots", ProblemKind::Mismatch);
    assert!(msg.starts_with("the engine snapshot at event 40 does not match its anchor"), "{msg}");

    // Both edited: nothing to restore from, so the whole log is replayed.
    sql(&db, "UPDATE engine_snapshots SET blob = CAST('{}' AS BLOB) WHERE event_seq = 25");
    let log = AuditLog::open_read(&db).unwrap();
    assert_eq!(log.latest_snapshot().unwrap(), None);
    assert_eq!(log.restore_point().unwrap().rejected.len(), 2);
}

#[test]
fn a_snapshot_written_outside_bursar_is_refused() {
    let dir = TempDir::new("t-snap2");
    let db = build(&dir, "a.db");
    sql(&db, "INSERT INTO engine_snapshots (event_seq, taken_at, policy_set, blob) VALUES (41, 0, 'set1', x'7b7d')");
    let log = AuditLog::open_read(&db).unwrap();
    assert_eq!(log.latest_snapshot().unwrap().unwrap().event_seq, 40);
    let msg = only(&check(&db), "engine_snapshots", ProblemKind::Unanchored);
    assert!(msg.contains("at event 41 is not anchored"), "{msg}");
    // Editing the anchor's digest too (without re-hashing it) is caught as an edited anchor.
    let db = build(&dir, "b.db");
    sql(
        &db,
        "UPDATE engine_snapshots SET blob = x'7b7d' WHERE event_seq = 40; \
         UPDATE anchors SET digest = x'44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a' WHERE kind = 'snapshot' AND subject_seq = 40",
    );
    let point = AuditLog::open_read(&db).unwrap().restore_point().unwrap();
    assert!(
        matches!(&point.rejected[..], [SnapshotRejected::AnchorEdited { event_seq: 40, .. }]),
        "{:?}",
        point.rejected
    );
    only(&check(&db), "anchors", ProblemKind::Edited);
}

#[test]
fn a_deleted_decisions_chain_with_its_head_does_not_verify() {
    // Item 10: it used to say "decisions 0 rows … ok" while 40 events remained.
    let dir = TempDir::new("t-chain");
    let db = build(&dir, "a.db");
    sql(&db, "DELETE FROM decisions; DELETE FROM chain_heads WHERE chain = 'decisions'");
    let rep = check(&db);
    let msg = only(&rep, "decisions", ProblemKind::Truncated);
    assert!(msg.starts_with("decisions is empty, but anchors row"), "{msg}");
    assert!(msg.ends_with("rows 1 to 25 were removed, with the chain's head"), "{msg}");
    assert_eq!(rep.problems.len(), 1, "{rep:?}");
}

#[test]
fn truncating_one_chain_and_its_head_does_not_verify() {
    let dir = TempDir::new("t-trunc");
    let db = build(&dir, "a.db");
    sql(
        &db,
        "DELETE FROM events WHERE seq > 30; UPDATE chain_heads SET seq = 30, hash = (SELECT hash FROM events WHERE seq = 30) WHERE chain = 'events'",
    );
    let msg = only(&check(&db), "events", ProblemKind::Truncated);
    assert!(msg.contains("but events ends at row 30: rows 31 to 40 were removed"), "{msg}");
}

#[test]
fn a_forged_checkpoint_does_not_hide_a_deleted_prefix() {
    let dir = TempDir::new("t-cp");
    let db = build(&dir, "a.db");
    sql(
        &db,
        "INSERT INTO checkpoints (chain, through_seq, hash, removed, before, at) \
           SELECT 'decisions', 10, hash, 10, 0, 0 FROM decisions WHERE seq = 10; \
         DELETE FROM decisions WHERE seq <= 10",
    );
    let rep = check(&db);
    let msg = only(&rep, "checkpoints", ProblemKind::Unanchored);
    assert!(msg.starts_with("the prune checkpoint of decisions through row 10 is not anchored"), "{msg}");
    // And the walk does not start from it: the prefix is reported missing.
    let msg = only(&rep, "decisions", ProblemKind::Removed);
    assert_eq!(msg, "decisions rows 1 to 10 were removed");
    // A real prune still verifies, and its checkpoint cannot be removed unnoticed.
    let db = build(&dir, "b.db");
    let mut log = AuditLog::open(&db, Durability::Fast).unwrap();
    prune(&mut log, bursar_model::Timestamp::parse("2026-11-06T00:00:00Z").unwrap().millis()).unwrap();
    drop(log);
    assert!(check(&db).is_ok(), "{:?}", check(&db));
    sql(&db, "DELETE FROM checkpoints WHERE chain = 'decisions'");
    only(&check(&db), "checkpoints", ProblemKind::Mismatch);
}

#[test]
fn edited_or_removed_policy_sets_do_not_verify() {
    let dir = TempDir::new("t-sets");
    for (i, (edit, kind, says)) in [
        (r#"UPDATE policy_sets SET files = '[]'"#, ProblemKind::Mismatch, "policy set `set1` was edited"),
        ("DELETE FROM policy_sets", ProblemKind::Mismatch, "was removed from `policy_sets`"),
        (
            "INSERT INTO policy_sets (digest, files, first_loaded_at) VALUES ('set2', '[]', 0)",
            ProblemKind::Unanchored,
            "policy set `set2` is not anchored",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let db = build(&dir, &format!("p{i}.db"));
        sql(&db, edit);
        let msg = only(&check(&db), "policy_sets", kind);
        assert!(msg.contains(says), "{edit}: {msg}");
    }
}

#[test]
fn rows_appended_outside_bursar_are_not_anchored() {
    // A decision appended with a correct chain hash and head, but no anchor.
    let dir = TempDir::new("t-tail");
    let db = build(&dir, "a.db");
    sql(
        &db,
        "INSERT INTO decisions SELECT 41, decision_id || 'x', event_id, event_seq, time, recorded_at, job, project, user, 'allow', dry_run, 0, policies, reason, until, gpus, gpu_hours, policy_set, json, hash FROM decisions WHERE seq = 40",
    );
    // Make the decisions chain itself consistent again, as an attacker would: re-hash everything but
    // leave the anchors as they were (re-hashing them too is the case only a witness catches).
    let conn = rusqlite::Connection::open(&db).unwrap();
    let anchors: Vec<(i64, Vec<u8>)> = conn
        .prepare("SELECT seq, hash FROM anchors")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    drop(conn);
    rehash(&db);
    let conn = rusqlite::Connection::open(&db).unwrap();
    // Put back the anchors' recorded decisions head (40) and their hashes: only the new row is unanchored.
    conn.execute_batch("UPDATE anchors SET decisions_seq = 40 WHERE decisions_seq = 41").unwrap();
    for (seq, h) in anchors {
        conn.execute("UPDATE anchors SET hash = ?1 WHERE seq = ?2", rusqlite::params![h, seq]).unwrap();
    }
    conn.execute_batch(
        "UPDATE chain_heads SET hash = (SELECT hash FROM anchors WHERE seq = 6) WHERE chain = 'anchors'",
    )
    .unwrap();
    drop(conn);
    let msg = only(&check(&db), "decisions", ProblemKind::Unanchored);
    assert_eq!(msg, "decisions rows 41 to 41 are not covered by any anchor: they were not written by bursar");
}

#[test]
fn a_consistently_rehashed_log_still_needs_every_decision_to_name_an_event() {
    // The attacker removes the newest event and re-hashes every chain and anchor: each chain verifies
    // on its own, but decision 40 still names event e40.
    let dir = TempDir::new("t-orphan");
    let db = build(&dir, "a.db");
    sql(&db, "DELETE FROM events WHERE seq = 40");
    rehash(&db);
    let rep = check(&db);
    let msg = only(&rep, "decisions", ProblemKind::Orphan);
    assert_eq!(
        msg,
        "decisions row 40 names event `e40` (events row 40), which is not in the log: the event was removed or replaced"
    );
    assert_eq!(rep.problems.len(), 1, "{rep:?}");

    // And removing a submission's admission decision leaves the submission without one.
    let db = build(&dir, "b.db");
    sql(&db, "DELETE FROM decisions WHERE seq = 40");
    rehash(&db);
    let msg = only(&check(&db), "decisions", ProblemKind::Orphan);
    assert_eq!(msg, "events row 40 (`e40`, a job.submitted) has no admission decision: its decisions were removed");
}

#[test]
fn a_consistent_rehash_of_an_edit_passes_without_a_witness() {
    // The limit of a keyless chain, pinned so the docs stay true: an edit followed by a full re-hash
    // verifies. tests/witness.rs shows the signed head catching exactly this.
    let dir = TempDir::new("t-rehash");
    let db = build(&dir, "a.db");
    sql(&db, "UPDATE decisions SET reason = 'fine' WHERE seq = 17");
    assert!(!check(&db).is_ok());
    rehash(&db);
    assert!(check(&db).is_ok(), "{:?}", check(&db));
}

#[test]
fn a_version_1_file_is_migrated_with_its_side_data_adopted() {
    let dir = TempDir::new("t-v1");
    let db = build(&dir, "a.db");
    // Make it what bursar 0.1 wrote: no anchors, schema version 1.
    sql(&db, "DROP TABLE anchors; DELETE FROM chain_heads WHERE chain = 'anchors'; PRAGMA user_version = 1");
    let log = AuditLog::open(&db, Durability::Fast).unwrap();
    drop(log);
    let rep = check(&db);
    assert!(rep.is_ok(), "{rep:?}");
    // One anchor per policy set and snapshot found, then one with the heads.
    assert_eq!(rep.chains[3].rows, 4);
    assert_eq!(AuditLog::open_read(&db).unwrap().latest_snapshot().unwrap().unwrap().event_seq, 40);
}
