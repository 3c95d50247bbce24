//! The job steps (`lifecycle`, issue 36): derived data the report's accounting reads, so an edited step
//! (a failed job made to have succeeded) changed a report and nothing noticed. Every commit's anchor
//! now records the SHA-256 of the steps it wrote, and `verify` recomputes it; a prune takes the pruned
//! events' steps with them.

#![expect(clippy::unwrap_used, reason = "test helpers: a failure is a test failure")]

use std::sync::Arc;

use crate::common::{TempDir, entry, sql};
use bursar_audit::verify::{ProblemKind, prune, verify};
use bursar_audit::{AuditLog, Durability, Record};
use bursar_engine::{Step, Transition};
use bursar_model::{DecisionKind, FinishStatus, Timestamp};

fn with_steps(i: u64, steps: &[(Step, u32)]) -> Record {
    let mut r = entry(i, "nlp", "alice", i as u32, DecisionKind::Allow, "q", "set1");
    r.steps = steps
        .iter()
        .map(|(step, day)| Transition {
            job: Arc::from(format!("j{i}").as_str()),
            at: Timestamp::parse(&format!("2026-11-{day:02}T10:00:00Z")).unwrap(),
            step: *step,
        })
        .collect();
    r
}

#[test]
fn every_commit_anchors_its_job_steps_and_an_edited_step_fails_verify() {
    let dir = TempDir::new("trust-steps");
    let db = dir.path("a.db");
    let mut log = AuditLog::open(&db, Durability::Fast).unwrap();
    log.append(&[with_steps(1, &[(Step::Admitted, 1)]), with_steps(2, &[(Step::Admitted, 1), (Step::Started, 1)])])
        .unwrap();
    log.append(&[with_steps(3, &[(Step::Finished(FinishStatus::Failed), 5)])]).unwrap();
    log.append(&[with_steps(4, &[(Step::Admitted, 9)])]).unwrap();
    drop(log);
    let rep = verify(&AuditLog::open_read(&db).unwrap()).unwrap();
    assert!(rep.is_ok(), "{rep:?}");

    for edit in [
        "UPDATE lifecycle SET status = 'succeeded' WHERE status = 'failed'",
        "DELETE FROM lifecycle WHERE event_seq = 3",
        "INSERT INTO lifecycle (event_seq, n, job, step, status, time) VALUES (3, 1, 'j3', 'reclaimed', NULL, 0)",
    ] {
        let copy = dir.path("t.db");
        std::fs::copy(&db, &copy).unwrap();
        sql(&copy, edit);
        let rep = verify(&AuditLog::open_read(&copy).unwrap()).unwrap();
        let p = rep.problems.iter().find(|p| p.chain == "lifecycle").unwrap_or_else(|| panic!("{edit}: {rep:?}"));
        assert_eq!(p.kind, ProblemKind::Mismatch, "{edit}");
        assert_eq!(
            p.message,
            "the job steps (`lifecycle`) of events rows 3 to 3 do not match what anchors row 2 recorded when they were written: a step was edited, added or removed, and the report's accounting reads them",
            "{edit}"
        );
        std::fs::remove_file(&copy).unwrap();
    }

    // A dropped table is a problem, not a skip.
    let copy = dir.path("d.db");
    std::fs::copy(&db, &copy).unwrap();
    sql(&copy, "DROP TABLE lifecycle");
    let rep = verify(&AuditLog::open_read(&copy).unwrap()).unwrap();
    let p = rep.problems.iter().find(|p| p.chain == "lifecycle").unwrap();
    assert_eq!(p.kind, ProblemKind::Missing);

    // A prune removes the pruned events' steps with them; the rest still verifies.
    let mut log = AuditLog::open(&db, Durability::Fast).unwrap();
    prune(&mut log, Timestamp::parse("2026-11-03T00:00:00Z").unwrap().millis()).unwrap();
    let left: i64 = log.connection().query_row("SELECT MIN(event_seq) FROM lifecycle", [], |r| r.get(0)).unwrap();
    assert_eq!((left, log.events_since(0, 1).unwrap()[0].seq), (3, 3));
    let rep = verify(&log).unwrap();
    assert!(rep.is_ok(), "{rep:?}");
}
