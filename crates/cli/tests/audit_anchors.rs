//! What the anchors and `verify --deep` catch through the real `bursar` binary (issue 14, items 9 and
//! 10), on logs written by `bursar eval --audit` and edited with plain SQL: a decisions chain deleted
//! with its head, a forged prune checkpoint, an edited policy set, edited report facts.

#![expect(clippy::unwrap_used, reason = "test helpers: a failure is a test failure")]

use std::path::{Path, PathBuf};

use crate::serve_support::{Scratch, bursar, repo};
use bursar_audit::AuditLog;

fn policies(dir: &Path) -> PathBuf {
    let out = dir.join("policies");
    std::fs::create_dir_all(&out).unwrap();
    for e in std::fs::read_dir(repo().join("policies")).unwrap().flatten() {
        let p = e.path();
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        if p.extension().is_some_and(|x| x == "toml") && !text.contains("component =") {
            std::fs::copy(&p, out.join(e.file_name())).unwrap();
        }
    }
    out
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A log of the example events, with its report facts (eval --audit computes them).
fn logged(dir: &Scratch) -> PathBuf {
    let pol = policies(&dir.0);
    let db = dir.0.join("a.db");
    let out = bursar(&[
        "eval",
        "--policies",
        s(&pol),
        "--events",
        s(&repo().join("examples/events.jsonl")),
        "--audit",
        s(&db),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    db
}

/// A copy of `db` with `sql` applied; `verify` (with `extra`) on it: exit code, stdout, stderr.
fn tampered(dir: &Scratch, db: &Path, name: &str, sql: &str, extra: &[&str]) -> (Option<i32>, String, String) {
    let copy = dir.0.join(name);
    std::fs::copy(db, &copy).unwrap();
    if !sql.is_empty() {
        AuditLog::open(&copy, bursar_audit::Durability::Fast).unwrap().connection().execute_batch(sql).unwrap();
    }
    let mut args = vec!["audit", "--db", s(&copy), "verify"];
    args.extend_from_slice(extra);
    let out = bursar(&args);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn deleting_the_decisions_chain_with_its_head_fails_verify() {
    let dir = Scratch::new("chain");
    let db = logged(&dir);
    let (code, out, err) =
        tampered(&dir, &db, "t.db", "DELETE FROM decisions; DELETE FROM chain_heads WHERE chain = 'decisions'", &[]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("decisions              0 rows"), "{out}");
    assert!(err.contains("does not verify: decisions is empty, but anchors row"), "{err}");
    assert!(!out.contains("ok:"), "{out}");
}

#[test]
fn a_forged_checkpoint_and_an_edited_policy_set_fail_verify() {
    let dir = Scratch::new("forge");
    let db = logged(&dir);
    let (code, _, err) = tampered(
        &dir,
        &db,
        "cp.db",
        "INSERT INTO checkpoints (chain, through_seq, hash, removed, before, at) SELECT 'decisions', 5, hash, 5, 0, 0 FROM decisions WHERE seq = 5;
         DELETE FROM decisions WHERE seq <= 5",
        &[],
    );
    assert_eq!(code, Some(1));
    assert!(err.contains("the prune checkpoint of decisions through row 5 is not anchored"), "{err}");
    assert!(err.contains("decisions rows 1 to 5 were removed"), "{err}");

    let (code, _, err) = tampered(&dir, &db, "ps.db", "UPDATE policy_sets SET files = '[]'", &[]);
    assert_eq!(code, Some(1));
    assert!(err.contains("policy set `") && err.contains("was edited"), "{err}");
}

#[test]
fn verify_deep_rebuilds_the_report_facts_and_finds_an_edit() {
    let dir = Scratch::new("deep");
    let db = logged(&dir);
    // Untouched: the stored facts match a rebuild.
    let (code, out, err) = tampered(&dir, &db, "ok.db", "", &["--deep"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("note: report facts: the 7 facts_* tables match a rebuild from the log"), "{out}");
    // Idle hours turned productive in the facts a report reads: the chains do not cover them ...
    let edit = "UPDATE facts_job_day SET productive = productive + idle, idle = 0";
    let (code, out, _) = tampered(&dir, &db, "f.db", edit, &[]);
    assert_eq!(code, Some(0), "plain verify does not read derived data: {out}");
    // ... but --deep does.
    let (code, _, err) = tampered(&dir, &db, "g.db", edit, &["--deep"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("facts_job_day does not match a rebuild from the log"), "{err}");
    assert!(err.contains("help: `bursar report --db"), "{err}");
}
