//! `bursar audit backup` (docs/operations.md, "Back up" and "Restore"): an online copy of the audit
//! log taken while a real `serve` keeps committing is one self-contained file (no `-wal` beside it),
//! of mode 0640, holds every commit up to one instant and none half-done (it verifies), and serve
//! restored onto it starts with the state it records. A copy of an older schema is copied as it is.
//! An existing file is never overwritten. And what a rollback without a backup meets: a bursar older
//! than the file refuses it, saying to restore the copy taken before the upgrade.

#![expect(clippy::unwrap_used, reason = "test: a failure stops the test with its message")]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::serve_support::bursar;
use crate::serve_support::{Scratch, Server, submit};

fn show(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The example quota policies and the tag table their `team` budget needs.
fn quota_policies(s: &Scratch) {
    for f in ["quota.toml", "tags.toml"] {
        let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies").join(f);
        std::fs::copy(from, s.policies().join(f)).unwrap();
    }
}

/// Issue 46: `audit verify` on a live log reported tampering that did not happen (with two clients
/// admitting, 38 of 40 plain verifies exited 1: "events row N (the newest) was removed",
/// "decisions rows … are not covered by any anchor"), because each of its queries saw another
/// instant. It reads one instant now (one read transaction): every verify of a log a real serve is
/// writing passes, as does `--deep` and a verify against the witness with `--allow-unsigned-tail`.
#[test]
fn verify_of_a_live_log_never_reports_false_tampering() {
    let s = Scratch::new("verify-live");
    quota_policies(&s);
    let keys = s.0.join("audit");
    let o = bursar(&["audit", "keygen", "--out", keys.to_str().unwrap()]);
    assert!(o.status.success(), "{}", show(&o));
    let witness = s.0.join("witness.jsonl");
    let (key, public) = (s.0.join("audit.key"), s.0.join("audit.pub"));
    let server = Server::start(
        &s,
        &["--no-watch", "--signing-key", key.to_str().unwrap(), "--witness", witness.to_str().unwrap()],
    );
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    // Two clients admitting as fast as they are answered, the review's load.
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let (stop, sent, http) = (stop.clone(), sent.clone(), server.http());
            std::thread::spawn(move || {
                let mut conn = crate::serve_support::Conn::over(http);
                while !stop.load(Ordering::Relaxed) {
                    let n = sent.fetch_add(1, Ordering::Relaxed);
                    let line = submit(&format!("v{w}-{n}"), &format!("v{w}-{n}"), "nlp", 1, 0.01);
                    let r = conn.request("POST", "/v1/admit", line.as_bytes()).unwrap();
                    assert_eq!(r.status, 200, "{}", r.text());
                }
            })
        })
        .collect();
    while sent.load(Ordering::Relaxed) < 50 {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // The report facts `--deep` compares, built as serve builds them.
    assert_eq!(server.get("/v1/report").unwrap().status, 200);
    let db = s.audit().display().to_string();
    let mut checked = 0;
    for round in 0..40 {
        let o = match round % 8 {
            7 => bursar(&["audit", "--db", &db, "verify", "--deep"]),
            6 => bursar(&[
                "audit",
                "--db",
                &db,
                "verify",
                "--witness",
                witness.to_str().unwrap(),
                "--public-key",
                public.to_str().unwrap(),
                "--allow-unsigned-tail",
            ]),
            _ => bursar(&["audit", "--db", &db, "verify"]),
        };
        assert!(o.status.success(), "verify {round} of a live log failed:\n{}", show(&o));
        checked += 1;
    }
    let before = sent.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    assert!(before > 100 && checked == 40, "{before} admissions while {checked} verifies ran");
    drop(server);
    let o = bursar(&["audit", "--db", &db, "verify", "--deep"]);
    assert!(o.status.success(), "{}", show(&o));
}

#[test]
fn an_online_backup_under_a_writing_serve_verifies_and_restores() {
    let s = Scratch::new("backup");
    quota_policies(&s);
    let server = Server::start(&s, &["--no-watch"]);
    // A producer that keeps committing admissions while the backup runs.
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let writer = {
        let (stop, sent, http) = (stop.clone(), sent.clone(), server.http());
        std::thread::spawn(move || {
            let mut conn = crate::serve_support::Conn::over(http);
            while !stop.load(Ordering::Relaxed) {
                let n = sent.fetch_add(1, Ordering::Relaxed);
                let r = conn
                    .request(
                        "POST",
                        "/v1/admit",
                        submit(&format!("b-sub-{n}"), &format!("b-{n}"), "nlp", 1, 0.5).as_bytes(),
                    )
                    .unwrap();
                assert_eq!(r.status, 200, "{}", r.text());
            }
        })
    };
    while sent.load(Ordering::Relaxed) < 20 {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let copy = s.0.join("backup.db");
    let (db, c) = (s.audit().display().to_string(), copy.display().to_string());
    let o = bursar(&["audit", "backup", "--db", &db, "--out", &c]);
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    assert!(o.status.success(), "{}", show(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains(&format!("backed up `{db}` to `{c}`")) && out.contains("schema version 7"), "{out}");
    assert!(out.contains(&format!("ok: `{c}` verifies")), "{out}");
    assert_eq!(std::fs::metadata(&copy).unwrap().permissions().mode() & 0o777, 0o640);
    for side in ["-wal", "-shm"] {
        assert!(!s.0.join(format!("backup.db{side}")).exists(), "backup.db{side} left beside the copy");
    }
    // The copy holds some of the admissions and the live log more: the copy is of one instant.
    let count = |p: &Path| -> i64 {
        let c = rusqlite::Connection::open_with_flags(p, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        c.query_row("SELECT count(*) FROM events WHERE type = 'job.submitted'", [], |r| r.get(0)).unwrap()
    };
    let (copied, live) = (count(&copy), count(&s.audit()));
    assert!(copied >= 20 && copied <= live, "copied {copied} of {live}");

    // An existing file is not overwritten.
    let again = bursar(&["audit", "backup", "--db", &db, "--out", &c]);
    assert!(!again.status.success(), "{}", show(&again));
    assert!(String::from_utf8_lossy(&again.stderr).contains("create the backup"), "{}", show(&again));
    let (st, log) = server.terminate();
    assert!(st.success(), "{log}");

    // Restore: serve on the copy starts with what it holds (its jobs are known) and takes new writes.
    let r = Scratch::new("restore");
    quota_policies(&r);
    std::fs::copy(&copy, r.audit()).unwrap();
    let restored = Server::start(&r, &["--no-watch"]);
    let job = restored.get_json("/v1/jobs/b-0");
    assert_eq!(job["project"], "nlp", "{job}");
    let a = restored.post("/v1/admit", &submit("after-restore", "after-1", "nlp", 1, 0.5));
    assert_eq!(a.status, 200, "{}", a.text());
    let (st, log) = restored.terminate();
    assert!(st.success(), "{log}");
    let v = bursar(&["audit", "verify", "--db", &r.audit().display().to_string()]);
    assert!(v.status.success(), "{}", show(&v));
}

#[test]
fn a_log_of_an_older_schema_is_copied_as_it_is() {
    let s = Scratch::new("backup-old");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/audit-schemas/v4.db");
    let old = s.0.join("v4.db");
    std::fs::copy(fixture, &old).unwrap();
    let copy = s.0.join("v4-backup.db");
    let o = bursar(&["audit", "backup", "--db", &old.display().to_string(), "--out", &copy.display().to_string()]);
    assert!(o.status.success(), "{}", show(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("schema version 4") && out.contains("note: not verified"), "{out}");
    // Still version 4, and the copy migrates like the original.
    let m = bursar(&["audit", "migrate", "--db", &copy.display().to_string()]);
    assert!(m.status.success(), "{}", show(&m));
    assert!(String::from_utf8_lossy(&m.stdout).contains("from schema version 4 to 7"), "{}", show(&m));
}

#[test]
fn a_bursar_older_than_the_file_refuses_it_and_says_to_restore_the_copy() {
    let s = Scratch::new("too-new");
    quota_policies(&s);
    let db = s.audit();
    let events = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/events.jsonl");
    let e = bursar(&[
        "eval",
        "--policies",
        &s.policies().display().to_string(),
        "--events",
        &events.display().to_string(),
        "--audit",
        &db.display().to_string(),
    ]);
    assert!(e.status.success(), "{}", show(&e));
    // As a newer bursar would leave it.
    let newer = bursar_audit::schema::SCHEMA_VERSION + 1;
    rusqlite::Connection::open(&db).unwrap().pragma_update(None, "user_version", newer).unwrap();
    for args in [vec!["audit", "verify"], vec!["audit", "migrate"]] {
        let mut a = args.clone();
        let d = db.display().to_string();
        a.extend(["--db", d.as_str()]);
        let o = bursar(&a);
        assert!(!o.status.success(), "{}", show(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(&format!("has schema version {newer}, newer than this bursar understands")), "{err}");
        assert!(err.contains("restore the copy taken before the upgrade"), "{err}");
    }
    let r = Scratch::new("too-new-serve");
    quota_policies(&r);
    let fail = Server::try_start_with_audit(&r, &db, &["--no-watch"]).err().expect("serve started on a newer file");
    assert!(fail.contains(&format!("has schema version {newer}")), "{fail}");
}
