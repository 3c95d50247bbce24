//! Issue 36, attack 2, through the real `bursar` binary: `verify --deep` compared five of the seven
//! report-facts tables (`facts_prevented` was left out), took a missing `facts_meta` for "nothing to
//! compare", and never checked `lifecycle`. So editing a failed job's step to succeeded and running
//! `report --rebuild` turned vision's failure hours from 644.3 to 0, zeroing `facts_prevented` turned
//! "prevented" to 0.0, and `verify --deep --witness` said ok. Each edit below is now a problem.

#![expect(clippy::unwrap_used, reason = "test helpers: a failure is a test failure")]

use std::path::{Path, PathBuf};

use crate::serve_support::{Scratch, bursar, repo};
use bursar_audit::AuditLog;
use serde_json::Value;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The example events logged by a signed `eval --audit` (with its report facts), and the key pair.
struct Logged {
    dir: Scratch,
    db: PathBuf,
    witness: PathBuf,
    public: PathBuf,
}

fn logged(tag: &str) -> Logged {
    let dir = Scratch::new(tag);
    let pol = dir.path("policies");
    std::fs::create_dir_all(&pol).unwrap();
    for e in std::fs::read_dir(repo().join("policies")).unwrap().flatten() {
        let p = e.path();
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        if p.extension().is_some_and(|x| x == "toml") && !text.contains("component =") {
            std::fs::copy(&p, pol.join(e.file_name())).unwrap();
        }
    }
    let out = bursar(&["audit", "keygen", "--out", s(&dir.path("audit"))]);
    assert!(out.status.success());
    let (db, witness) = (dir.path("a.db"), dir.path("witness.jsonl"));
    let events = repo().join("examples/events.jsonl");
    let key = dir.path("audit.key");
    let out = bursar(&[
        "eval",
        "--policies",
        s(&pol),
        "--events",
        s(&events),
        "--audit",
        s(&db),
        "--signing-key",
        s(&key),
        "--witness",
        s(&witness),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let public = dir.path("audit.pub");
    Logged { dir, db, witness, public }
}

impl Logged {
    /// A copy of the log with `sql` applied.
    fn edited(&self, name: &str, sql: &str) -> PathBuf {
        let copy = self.dir.path(name);
        std::fs::copy(&self.db, &copy).unwrap();
        AuditLog::open(&copy, bursar_audit::Durability::Fast).unwrap().connection().execute_batch(sql).unwrap();
        copy
    }

    /// `verify --deep --witness --public-key` on `db`: exit code and stderr.
    fn deep(&self, db: &Path) -> (Option<i32>, String) {
        let out = bursar(&[
            "audit",
            "--db",
            s(db),
            "verify",
            "--deep",
            "--witness",
            s(&self.witness),
            "--public-key",
            s(&self.public),
        ]);
        (out.status.code(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
    }
}

/// `bursar report --db DB [--rebuild] --format json`, as JSON.
fn report(db: &Path, rebuild: bool) -> Value {
    let mut args = vec!["report", "--db", s(db), "--format", "json"];
    if rebuild {
        args.push("--rebuild");
    }
    let out = bursar(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn group<'a>(r: &'a Value, key: &str) -> &'a Value {
    r["groups"].as_array().unwrap().iter().find(|g| g["key"] == key).unwrap()
}

#[test]
fn the_untouched_log_passes_deep_with_every_derived_table() {
    let l = logged("ok");
    let (code, out) = l.deep(&l.db);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("facts_prevented") && out.contains("facts_meta"), "{out}");
}

#[test]
fn editing_failed_steps_to_succeeded_and_rebuilding_the_report_is_caught_by_deep() {
    let l = logged("lifecycle");
    let before = report(&l.db, false);
    let failure = group(&before, "vision")["gpu_hours"]["failure"].as_f64().unwrap();
    assert!((failure - 644.27).abs() < 0.01, "{failure}");

    let db =
        l.edited("t.db", "UPDATE lifecycle SET status = 'succeeded' WHERE step = 'finished' AND status = 'failed'");
    // The attack works on the report: rebuilt from the edited steps, the failure hours are gone ...
    let after = report(&db, true);
    assert_eq!(group(&after, "vision")["gpu_hours"]["failure"].as_f64(), Some(0.0), "{after}");
    // ... and the facts agree with the steps they were rebuilt from, so only the steps can tell.
    let (code, out) = l.deep(&db);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("does not verify: the job steps (`lifecycle`) of events rows")
            && out.contains("do not match what anchors row"),
        "{out}"
    );
}

#[test]
fn editing_what_policies_prevented_is_caught_by_deep() {
    let l = logged("prevented");
    let db = l.edited("t.db", "UPDATE facts_prevented SET gpu_hours = 0");
    let r = report(&db, false);
    assert_eq!(group(&r, "vision")["prevented"]["denied"].as_f64(), Some(0.0), "{r}");
    let (code, out) = l.deep(&db);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("facts_prevented does not match a rebuild from the log"), "{out}");
}

#[test]
fn dropping_facts_meta_over_edited_facts_is_caught_by_deep() {
    let l = logged("meta");
    let db = l.edited(
        "t.db",
        "UPDATE facts_job_day SET productive = productive + failure, failure = 0; DROP TABLE facts_meta",
    );
    let (code, out) = l.deep(&db);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("the derived table `facts_meta` is missing") && out.contains("help: `bursar report --db"),
        "{out}"
    );
}

#[test]
fn deleting_a_job_from_the_report_facts_is_caught_by_deep() {
    let l = logged("jobs");
    let db = l.edited("t.db", "DELETE FROM facts_jobs WHERE rowid = (SELECT MIN(rowid) FROM facts_jobs)");
    let (code, out) = l.deep(&db);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("facts_jobs does not match a rebuild from the log"), "{out}");
}

#[test]
fn dropping_the_job_steps_is_caught_by_verify() {
    let l = logged("no-lifecycle");
    let db = l.edited("t.db", "DROP TABLE lifecycle");
    let (code, out) = l.deep(&db);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("the derived table `lifecycle` is missing"), "{out}");
}

/// Issue 46: after a job was rejected and submitted again under its id, `facts_jobs` kept the first
/// submission's 12 GPUs when the two fell in two catch-ups (a rebuild, in one, had 4), so `verify
/// --deep` reported an edit nobody made, and the report kept the stale facts. The facts follow the
/// resubmission now, however the catch-ups fall.
#[test]
fn verify_deep_and_the_report_agree_after_a_rejected_job_is_resubmitted() {
    let dir = Scratch::new("resubmit");
    let pol = dir.path("policies");
    std::fs::create_dir_all(&pol).unwrap();
    std::fs::write(
        pol.join("approval.toml"),
        "[[policy]]\nid = \"approval/big\"\ndescription = \"big jobs\"\nkind = \"approval\"\ngpus_over = 8\napprovers = [\"bob\"]\n",
    )
    .unwrap();
    let sub = |id: &str, t: &str, gpus: u32| {
        format!(
            r#"{{"id":"{id}","time":"2026-11-02T{t}:00Z","type":"job.submitted","job":{{"id":"j1","project":"nlp","user":"alice","gpus":{gpus},"requested_hours":2.0,"ready":{{"image":true,"data":true,"script":true}}}}}}"#
        )
    };
    let first = format!(
        "{}\n{}\n",
        sub("e1", "09:00", 12),
        r#"{"id":"e2","time":"2026-11-02T09:05:00Z","type":"approval.rejected","job_id":"j1","by":"bob","reason":"use 4"}"#
    );
    let second = format!(
        "{}\n{}\n{}\n",
        sub("e3", "09:10", 4),
        r#"{"id":"e4","time":"2026-11-02T09:11:00Z","type":"job.started","job_id":"j1"}"#,
        r#"{"id":"e5","time":"2026-11-02T10:11:00Z","type":"job.finished","job_id":"j1","status":"succeeded"}"#
    );
    let db = dir.path("a.db");
    // Two runs, so the facts are caught up twice: once after the rejection, once after the rerun.
    for (n, events) in [first, second].iter().enumerate() {
        let file = dir.path(&format!("events-{n}.jsonl"));
        std::fs::write(&file, events).unwrap();
        let out = bursar(&["eval", "--policies", s(&pol), "--events", s(&file), "--audit", s(&db)]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let _ = report(&db, false);
    }
    let gpus: i64 = AuditLog::open_read(&db)
        .unwrap()
        .connection()
        .query_row("SELECT gpus FROM facts_jobs WHERE job = 'j1'", [], |r| r.get(0))
        .unwrap();
    assert_eq!(gpus, 4, "the facts follow the resubmission");
    let out = bursar(&["audit", "--db", s(&db), "verify", "--deep"]);
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{said}");
    // The report built incrementally and the one rebuilt from the log say the same.
    let (kept, rebuilt) = (report(&db, false), report(&db, true));
    assert_eq!(group(&kept, "nlp"), group(&rebuilt, "nlp"));
}
