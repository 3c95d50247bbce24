//! Upgrades that are tested (issue 32, item 4): an audit log written by each earlier schema version
//! is kept in `tests/data/audit-schemas/vN.db`, made once by the bursar of the last commit on main
//! that wrote that version (`make-fixtures.sh` there; its README names each commit and command).
//! This bursar must take each over: `bursar audit migrate` brings it to the current schema and
//! verifies it, `audit verify`, `explain`, `query` and `report` read it, and `serve` starts on it from
//! its engine snapshot (every earlier snapshot layout is one this engine reads; one it could not read
//! would be replayed instead, and `/healthz` would say so, which this test would report).
//!
//! What a failure here means: a site's upgrade breaks. A migration step that assumes a layout an
//! older bursar never wrote, a reader that trips over a column an old row lacks, or a snapshot that
//! no longer restores and is not replayed instead, each fails one version's case by name.

#![expect(clippy::unwrap_used, reason = "test: a failure stops the test with its message")]

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::serve_support::bursar;
use crate::serve_support::{Scratch, Server};

/// Every schema version before the one this bursar writes.
fn earlier() -> std::ops::Range<i64> {
    1..bursar_audit::schema::SCHEMA_VERSION
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/audit-schemas")
}

fn fixture(n: i64) -> PathBuf {
    fixtures().join(format!("v{n}.db"))
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn ok(args: &[&str]) -> String {
    let o = bursar(args);
    assert!(o.status.success(), "bursar {}: {}", args.join(" "), text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn user_version(db: &Path) -> i64 {
    let c = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    c.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap()
}

/// A copy of fixture `n` in a scratch folder (the fixture itself is never written), with the
/// example policies that need no WebAssembly guest (those the fixtures were written with, in
/// today's syntax).
fn scratch_with(n: i64) -> (Scratch, PathBuf) {
    let s = Scratch::new(&format!("upgrade-v{n}"));
    let db = s.0.join(format!("v{n}.db"));
    std::fs::copy(fixture(n), &db).unwrap();
    let policies = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies");
    for e in std::fs::read_dir(policies).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let wasm = ["fair-share.toml", "trial-before-scale.toml"].contains(&name.as_str());
        if name.ends_with(".toml") && !name.ends_with(".test.toml") && !wasm {
            std::fs::copy(&p, s.policies().join(&name)).unwrap();
        }
    }
    (s, db)
}

/// `PRAGMA user_version` read from the file's header (4 bytes big-endian at offset 60), without
/// opening it with SQLite: the fixtures are WAL files, and a read-only connection to one leaves a
/// `-wal` and `-shm` beside it.
fn header_user_version(db: &Path) -> i64 {
    let bytes = std::fs::read(db).unwrap();
    assert!(bytes.starts_with(b"SQLite format 3\0"), "{} is not an SQLite file", db.display());
    i64::from(i32::from_be_bytes(bytes[60..64].try_into().unwrap()))
}

#[test]
fn every_earlier_schema_has_a_small_fixture_that_the_readme_accounts_for() {
    let readme = std::fs::read_to_string(fixtures().join("README.md")).unwrap();
    for n in earlier() {
        let f = fixture(n);
        assert!(f.is_file(), "no fixture for schema version {n}: run tests/data/audit-schemas/make-fixtures.sh {n}");
        assert_eq!(header_user_version(&f), n, "{} is not of schema version {n}", f.display());
        let size = std::fs::metadata(&f).unwrap().len();
        assert!(size < 512 * 1024, "{} is {size} bytes; keep fixtures small", f.display());
        assert!(readme.contains(&format!("`v{n}.db`")), "README.md does not say how v{n}.db was made");
        for side in ["-wal", "-shm"] {
            assert!(!fixtures().join(format!("v{n}.db{side}")).exists(), "v{n}.db{side} beside the fixture");
        }
    }
}

#[test]
fn a_reader_refuses_an_unmigrated_log_and_says_how_to_migrate_it() {
    let (_s, db) = scratch_with(3);
    let db = db.display().to_string();
    let o = bursar(&["audit", "verify", "--db", &db]);
    assert!(!o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("schema version 3, older than this bursar's"), "{err}");
    assert!(err.contains(&format!("bursar audit migrate --db {db}")), "{err}");
    // Reading did not migrate it.
    assert_eq!(user_version(Path::new(&db)), 3);
}

#[test]
fn a_log_of_each_earlier_schema_migrates_verifies_explains_and_reports() {
    let current = bursar_audit::schema::SCHEMA_VERSION;
    for n in earlier() {
        let (_s, db) = scratch_with(n);
        let d = db.display().to_string();
        let out = ok(&["audit", "migrate", "--db", &d]);
        assert!(out.contains(&format!("migrated `{d}` from schema version {n} to {current}")), "v{n}: {out}");
        assert!(out.contains(&format!("ok: `{d}` verifies")), "v{n}: {out}");
        assert_eq!(user_version(&db), current, "v{n}");
        // A second run has nothing to do.
        let again = ok(&["audit", "migrate", "--db", &d]);
        assert!(again.contains("nothing to migrate"), "v{n}: {again}");

        ok(&["audit", "verify", "--db", &d]);
        // The first job of examples/events.jsonl, written by eval, and the job serve admitted.
        let j1 = ok(&["audit", "explain", "--db", &d, "j1"]);
        assert!(j1.contains("e1") && j1.contains("job.submitted"), "v{n}: {j1}");
        let fx = ok(&["audit", "explain", "--db", &d, "fx-1"]);
        assert!(fx.contains("fx-sub-1") && fx.contains("fx-start-1"), "v{n}: {fx}");
        let q = ok(&["audit", "query", "--db", &d, "--project", "nlp", "--format", "json"]);
        assert!(q.lines().count() >= 2, "v{n}: {q}");
        let report = ok(&["report", "--db", &d, "--period", "all"]);
        // vision's two admitted jobs (j3 and j5 of examples/events.jsonl). A version-1 log holds no
        // job steps (`lifecycle` came with main's version 2), and the report counts jobs from them:
        // it reads such a log, with no GPU-hours but those the decisions give (`prevented`).
        let vision: Vec<&str> =
            report.lines().find(|l| l.starts_with("vision")).expect("no vision row").split_whitespace().collect();
        let jobs = if n == 1 { "0" } else { "2" };
        assert_eq!(vision.get(1), Some(&jobs), "v{n}: {report}");
        // j3's deny (640 GPU-hours). Not j4's release when it succeeded (the 6.1 unused GPU-hours of
        // its reservation, which it gave back by ending, issue 45); a version-1 log has no job
        // steps to tell such a release from a reclaim that ended a job, and counts it as it says.
        // Since issue 52 a deny whose job (or the same user's same request) ran within a week after
        // all is *delayed*, not prevented: vision's j5 ran, so j3's 640 GPU-hours are delayed where
        // job steps say so (a version-1 log has none: it counts them prevented, as before).
        let (prevented, delayed) = if n == 1 { ("646.1", "0.0") } else { ("0.0", "640.0") };
        // The columns end with prevented, delayed and what dry-run policies would save.
        assert_eq!(vision.iter().rev().nth(2), Some(&prevented), "v{n}: prevented GPU-hours: {report}");
        assert_eq!(vision.iter().rev().nth(1), Some(&delayed), "v{n}: delayed GPU-hours: {report}");
        // The report's facts, built just now, agree with the log.
        ok(&["audit", "verify", "--db", &d, "--deep"]);
    }
}

/// The newest engine snapshot's event seq and the last event seq of a fixture.
fn snapshot_and_last(db: &Path) -> (i64, i64) {
    let c = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let snap = c.query_row("SELECT max(event_seq) FROM engine_snapshots", [], |r| r.get(0)).unwrap();
    let last = c.query_row("SELECT max(seq) FROM events", [], |r| r.get(0)).unwrap();
    (snap, last)
}

#[test]
fn serve_restores_a_log_of_each_earlier_schema_from_its_snapshot() {
    for n in earlier() {
        let (s, db) = scratch_with(n);
        let (snap, last) = snapshot_and_last(&db);
        assert!(snap < last, "v{n}: the fixture should hold an input after its snapshot");
        let server = Server::start_with_audit(&s, &db, &["--no-watch"]);
        // No snapshot refused: every earlier layout's engine snapshot is one this engine reads (had
        // one not been, serve would have replayed the whole log and said so here).
        let health = server.get("/healthz").unwrap();
        assert_eq!((health.status, health.text()), (200, "ok\n".to_owned()), "v{n}:\n{}", server.log_text());
        // Restored from the snapshot, then the inputs after it replayed: not the whole log.
        let log = server.log_text();
        let line =
            log.lines().find(|l| l.contains("engine state recovered from the audit log")).expect("no recovery line");
        assert!(line.contains(&format!("event_seq={last} replayed={}", last - snap)), "v{n}: {line}");
        // fx-1 was admitted before the snapshot and started after it.
        let job = server.get_json("/v1/jobs/fx-1");
        assert_eq!((job["project"].as_str(), job["gpus"].as_u64()), (Some("nlp"), Some(2)), "v{n}: {job}");
        assert!(["running", "reclaimed"].contains(&job["phase"].as_str().unwrap()), "v{n}: {job}");
        // The log takes new writes, and they verify.
        let r = server.post("/v1/admit", &crate::serve_support::submit("up-sub-1", "up-1", "nlp", 1, 1.0));
        assert_eq!(r.status, 200, "v{n}: {}", r.text());
        let (st, log) = server.terminate();
        assert!(st.success(), "v{n}: {log}");
        ok(&["audit", "verify", "--db", &db.display().to_string()]);
    }
}
