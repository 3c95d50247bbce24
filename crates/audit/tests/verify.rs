//! Tamper evidence on real files: every kind of edit made with plain SQL is found and the row named;
//! pruning keeps the rest verifiable; a tampered log is not pruned.

#![expect(clippy::unwrap_used, reason = "test helpers: a failure is a test failure")]

use crate::common::{TempDir, entry};
use bursar_audit::verify::{ProblemKind, prune, verify};
use bursar_audit::{AuditLog, Durability, Record, SourceFile};
use bursar_model::DecisionKind;

/// A log with 40 events/decisions over days 1..=20 of Nov 2026 and two policy loads.
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
    log.record_policy_failure("q.toml:2: bad", Some("set1")).unwrap();
    log.append(&batch[25..]).unwrap();
    db
}

fn tamper(db: &std::path::Path, sql: &str) -> bursar_audit::verify::Report {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.execute_batch(sql).unwrap();
    drop(conn);
    verify(&AuditLog::open_read(db).unwrap()).unwrap()
}

#[test]
fn an_untouched_log_verifies() {
    let dir = TempDir::new("ok");
    let db = build(&dir, "a.db");
    let rep = verify(&AuditLog::open_read(&db).unwrap()).unwrap();
    assert!(rep.is_ok(), "{rep:?}");
    // Four writes (a policy set, a commit, a failed load, a commit): four anchors.
    assert_eq!(rep.chains.iter().map(|c| c.rows).collect::<Vec<_>>(), vec![40, 40, 2, 4]);
}

#[test]
fn every_edit_is_found_and_named() {
    let dir = TempDir::new("edit");
    let cases: &[(&str, &str, i64, ProblemKind)] = &[
        ("UPDATE decisions SET reason = 'fine' WHERE seq = 17", "decisions", 17, ProblemKind::Edited),
        ("UPDATE decisions SET decision = 'allow' WHERE seq = 3", "decisions", 3, ProblemKind::Edited),
        ("UPDATE decisions SET gpu_hours = 1.5 WHERE seq = 30", "decisions", 30, ProblemKind::Edited),
        ("UPDATE decisions SET project = NULL WHERE seq = 8", "decisions", 8, ProblemKind::Edited),
        ("UPDATE decisions SET dry_run = 1 WHERE seq = 40", "decisions", 40, ProblemKind::Edited),
        (
            // A row whose columns hold the decision stores no JSON (schema 6): forging one is an edit.
            "UPDATE decisions SET json = '{\"decision\":\"allow\"}' WHERE seq = 9",
            "decisions",
            9,
            ProblemKind::Edited,
        ),
        ("UPDATE decisions SET time = time + 1 WHERE seq = 1", "decisions", 1, ProblemKind::Edited),
        ("UPDATE decisions SET hash = zeroblob(32) WHERE seq = 12", "decisions", 12, ProblemKind::Edited),
        ("DELETE FROM decisions WHERE seq = 21", "decisions", 21, ProblemKind::Removed),
        ("DELETE FROM decisions WHERE seq BETWEEN 5 AND 7", "decisions", 5, ProblemKind::Removed),
        ("DELETE FROM decisions WHERE seq = 40", "decisions", 40, ProblemKind::Truncated),
        ("DELETE FROM decisions WHERE seq = 1", "decisions", 1, ProblemKind::Removed),
        (
            "UPDATE decisions SET seq = 1000 WHERE seq = 10; UPDATE decisions SET seq = 10 WHERE seq = 11; \
             UPDATE decisions SET seq = 11 WHERE seq = 1000",
            "decisions",
            10,
            ProblemKind::Edited,
        ),
        (
            "UPDATE events SET raw = replace(raw, '\"gpus\":8', '\"gpus\":1') WHERE seq = 33",
            "events",
            33,
            ProblemKind::Edited,
        ),
        ("DELETE FROM events WHERE seq = 2", "events", 2, ProblemKind::Removed),
        ("UPDATE policy_loads SET error = NULL WHERE seq = 2", "policy_loads", 2, ProblemKind::Edited),
        ("UPDATE chain_heads SET seq = 39 WHERE chain = 'decisions'", "decisions", 40, ProblemKind::HeadMismatch),
    ];
    for (i, (sql, chain, seq, kind)) in cases.iter().enumerate() {
        let db = build(&dir, &format!("t{i}.db"));
        let rep = tamper(&db, sql);
        assert_eq!(rep.problems.len(), 1, "{sql}: {rep:?}");
        let p = &rep.problems[0];
        assert_eq!((p.chain.as_str(), p.seq, &p.kind), (*chain, *seq, kind), "{sql}: {}", p.message);
        assert!(p.message.contains(&seq.to_string()), "{sql}: {}", p.message);
    }
}

#[test]
fn prune_keeps_the_rest_verifiable_and_refuses_a_tampered_log() {
    let dir = TempDir::new("prune");
    let db = build(&dir, "p.db");
    let mut log = AuditLog::open(&db, Durability::Durable).unwrap();
    // Days 1..=5 hold events 1..=10.
    let before = bursar_model::Timestamp::parse("2026-11-06T00:00:00Z").unwrap().millis();
    let rep = prune(&mut log, before).unwrap();
    assert_eq!((rep.events, rep.decisions, rep.events_through, rep.decisions_through), (10, 10, 10, 10));
    let v = verify(&log).unwrap();
    assert!(v.is_ok(), "{v:?}");
    assert_eq!(v.chains[1].from_seq, 10);
    assert_eq!(v.chains[1].rows, 30);
    // Appending after a prune continues the chain.
    log.append(&[entry(41, "nlp", "a", 25, DecisionKind::Allow, "q", "set1")]).unwrap();
    assert!(verify(&log).unwrap().is_ok());
    // Pruning everything, then reopening: the head comes from the checkpoint.
    prune(&mut log, i64::MAX).unwrap();
    drop(log);
    let mut log = AuditLog::open(&db, Durability::Durable).unwrap();
    assert_eq!(log.last_decision_seq(), 41);
    log.append(&[entry(42, "nlp", "a", 26, DecisionKind::Allow, "q", "set1")]).unwrap();
    assert!(verify(&log).unwrap().is_ok());
    assert_eq!(log.decisions_since(0, 10).unwrap()[0].seq, 42);
    drop(log);

    // An edit after the checkpoint is still caught.
    let rep = tamper(&db, "UPDATE decisions SET reason = 'x' WHERE seq = 42");
    assert_eq!(rep.problems[0].seq, 42);
    // And a tampered log is not pruned.
    let mut log = AuditLog::open(&db, Durability::Durable).unwrap();
    let err = prune(&mut log, i64::MAX).unwrap_err();
    assert!(err.to_string().contains("refusing to prune"), "{err}");
}

/// The look-up tables (schema version 5: decisions by project and by user, events by job) are
/// derived, not chained, so `verify` checks them against the rows: an entry removed would hide a row
/// from a query, one moved or added would show it under another key, and a cursor moved would hide
/// the rows after it or list them twice. A prune removes the pruned rows' entries too.
#[test]
fn edited_project_and_user_lookups_do_not_verify() {
    let dir = TempDir::new("lookups");
    let build = |name: &str| {
        let db = dir.path(name);
        let mut log = AuditLog::open(&db, Durability::Fast).unwrap();
        let batch: Vec<Record> = (1..=600)
            .map(|i| {
                let p = if i % 2 == 0 { "nlp" } else { "cv" };
                entry(
                    i,
                    p,
                    if i % 3 == 0 { "bob" } else { "alice" },
                    1 + (i % 28) as u32,
                    DecisionKind::Allow,
                    "q",
                    "s",
                )
            })
            .collect();
        log.append(&batch).unwrap();
        assert!(verify(&log).unwrap().is_ok());
        db
    };
    let cases: &[(&str, &str, i64)] = &[
        ("DELETE FROM decisions_by_project WHERE seq = 100", "decisions_by_project", 100),
        ("UPDATE decisions_by_user SET user = 'mallory' WHERE seq = 200", "decisions_by_user", 200),
        (
            "INSERT INTO decisions_by_project SELECT 'cv', time, seq FROM decisions WHERE seq = 300",
            "decisions_by_project",
            300,
        ),
        ("UPDATE lookup_cursors SET through_seq = 100000 WHERE chain = 'decisions'", "lookup_cursors", 100000),
        ("UPDATE lookup_cursors SET through_seq = 99 WHERE chain = 'decisions'", "decisions_by_project", 100),
        ("DELETE FROM events_by_job WHERE seq = 250", "events_by_job", 250),
        ("UPDATE events_by_job SET job = 'j1' WHERE seq = 260", "events_by_job", 260),
        ("UPDATE lookup_cursors SET through_seq = 700 WHERE chain = 'events'", "lookup_cursors", 700),
    ];
    for (i, (sql, table, seq)) in cases.iter().enumerate() {
        let db = build(&format!("l{i}.db"));
        let rep = tamper(&db, sql);
        assert!(!rep.problems.is_empty(), "{sql}: {rep:?}");
        let p = &rep.problems[0];
        assert_eq!((p.chain.as_str(), p.seq, &p.kind), (*table, *seq, &ProblemKind::Mismatch), "{sql}: {}", p.message);
    }
    // A prune takes the pruned decisions' entries with it.
    let db = build("prune.db");
    let mut log = AuditLog::open(&db, Durability::Fast).unwrap();
    let rep = prune(&mut log, bursar_model::Timestamp::parse("2026-11-10T00:00:00Z").unwrap().millis()).unwrap();
    assert!(rep.decisions > 0);
    let v = verify(&log).unwrap();
    assert!(v.is_ok(), "{v:?}");
}
