//! `bursar eval --audit` and `bursar audit …` end to end: the real binary on real SQLite files.
//!
//! What is pinned: the log holds exactly the decisions eval printed (same bytes); a rerun adds no row;
//! every query format answers; an SQL edit or delete makes `verify` exit 1 naming the row; `prune`
//! keeps the rest verifiable; an unwritable log stops eval with the reason.

#![expect(clippy::unwrap_used, reason = "test helpers: a failure is a test failure")]

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::serve_support::{Scratch, bursar, repo};
use bursar_audit::AuditLog;

/// The repository's TOML policies (WebAssembly ones need a build with wasm support: left out).
fn policies(dir: &Path) -> PathBuf {
    let out = dir.join("policies");
    std::fs::create_dir_all(&out).unwrap();
    if let Ok(rd) = std::fs::read_dir(repo().join("policies")) {
        for e in rd.flatten() {
            let p = e.path();
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            if p.extension().is_some_and(|x| x == "toml") && !text.contains("component =") {
                std::fs::copy(&p, out.join(e.file_name())).unwrap();
            }
        }
    }
    out
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn stored_json(db: &Path) -> Vec<String> {
    let log = AuditLog::open_read(db).unwrap();
    log.decisions_since(0, usize::MAX).unwrap().into_iter().map(|d| d.wire_json().unwrap().into_owned()).collect()
}

#[test]
fn the_log_holds_exactly_what_eval_printed_and_a_rerun_adds_nothing() {
    let dir = Scratch::new("exact");
    let pol = policies(&dir.0);
    let events = repo().join("examples/events.jsonl");
    let db = dir.0.join("a.db");
    let out = bursar(&["eval", "--policies", s(&pol), "--events", s(&events), "--audit", s(&db)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let printed: Vec<String> = String::from_utf8(out.stdout.clone()).unwrap().lines().map(str::to_owned).collect();
    assert!(!printed.is_empty());
    assert_eq!(stored_json(&db), printed);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("{} decisions logged", printed.len())), "{stderr}");

    // Without --audit the output is the same bytes.
    let plain = bursar(&["eval", "--policies", s(&pol), "--events", s(&events)]);
    assert_eq!(plain.stdout, out.stdout);

    // A rerun into the same file: same output, no new row, every event reported as already logged.
    let again =
        bursar(&["eval", "--policies", s(&pol), "--events", s(&events), "--audit", s(&db), "--durability", "fast"]);
    assert!(again.status.success());
    assert_eq!(again.stdout, out.stdout);
    assert_eq!(stored_json(&db), printed);
    let log = AuditLog::open_read(&db).unwrap();
    let events_logged = log.last_event_seq();
    assert!(String::from_utf8_lossy(&again.stderr).contains(&format!("({events_logged} events were already logged)")));
    // Two loads of the same policy set were recorded.
    let loads = log.policy_loads().unwrap();
    assert_eq!(loads.len(), 2);
    assert!(loads.iter().all(|l| l.ok));

    let v = bursar(&["audit", "--db", s(&db), "verify"]);
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stderr));
    assert!(String::from_utf8_lossy(&v.stdout).contains("verifies"));
}

#[test]
fn query_explain_and_stats_answer_in_every_format() {
    let dir = Scratch::new("query");
    let pol = policies(&dir.0);
    let events = repo().join("examples/events.jsonl");
    let db = dir.0.join("q.db");
    let out = bursar(&["eval", "--policies", s(&pol), "--events", s(&events), "--audit", s(&db)]);
    assert!(out.status.success());
    let printed: Vec<serde_json::Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let project = printed.iter().find_map(|d| d["project"].as_str()).unwrap().to_owned();
    let want: Vec<&serde_json::Value> = printed.iter().filter(|d| d["project"] == project.as_str()).collect();

    // JSON: one object per line, the printed decision plus the log's fields.
    let q = bursar(&["audit", "--db", s(&db), "query", "--project", &project, "--format", "json"]);
    assert!(q.status.success(), "{}", String::from_utf8_lossy(&q.stderr));
    let got: Vec<serde_json::Value> =
        String::from_utf8(q.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert!(g["seq"].as_i64().unwrap() > 0);
        assert!(g["policy_set"].as_str().unwrap().len() >= 12);
        for (k, v) in w.as_object().unwrap() {
            assert_eq!(&g[k], v, "field {k}");
        }
    }

    // CSV: a header and one row per decision.
    let c = bursar(&["audit", "--db", s(&db), "query", "--project", &project, "--format", "csv"]);
    let csv = String::from_utf8(c.stdout).unwrap();
    assert!(csv.starts_with("seq,time,decision,"));
    assert_eq!(csv.lines().count(), want.len() + 1);

    // Table: fits the terminal width given, ends with a count.
    let t = Command::new(env!("CARGO_BIN_EXE_bursar"))
        .args(["audit", "--db", s(&db), "query", "--project", &project])
        .env("COLUMNS", "100")
        .output()
        .unwrap();
    let table = String::from_utf8(t.stdout).unwrap();
    assert!(table.lines().all(|l| l.chars().count() <= 100), "{table}");
    assert!(table.trim_end().ends_with(&format!("({} decisions)", want.len())), "{table}");

    // Explain a job that has several steps.
    let job = printed
        .iter()
        .filter_map(|d| d["job_id"].as_str())
        .max_by_key(|j| printed.iter().filter(|d| d["job_id"] == *j).count())
        .unwrap()
        .to_owned();
    let x = bursar(&["audit", "--db", s(&db), "explain", &job]);
    assert!(x.status.success());
    let text = String::from_utf8(x.stdout).unwrap();
    assert!(text.starts_with(&format!("job {job} ")), "{text}");
    assert!(text.contains("job.submitted") && text.contains("reason: ") && text.contains("policy set "), "{text}");
    let xj = bursar(&["audit", "--db", s(&db), "explain", &job, "--format", "json"]);
    let story: serde_json::Value = serde_json::from_slice(&xj.stdout).unwrap();
    let decisions = story["steps"].as_array().unwrap().iter().filter(|s| s["kind"] == "decision").count();
    assert_eq!(decisions, printed.iter().filter(|d| d["job_id"] == job.as_str()).count());
    let missing = bursar(&["audit", "--db", s(&db), "explain", "no-such-job"]);
    assert_eq!(missing.status.code(), Some(1));

    // Stats: totals match what was printed.
    let st = bursar(&["audit", "--db", s(&db), "stats", "--format", "json"]);
    let st: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    let enforced = printed.iter().filter(|d| d["dry_run"] != true).count() as u64;
    assert_eq!(st["decisions"].as_u64().unwrap(), enforced);
    let by_kind: u64 = st["by_kind"].as_array().unwrap().iter().map(|c| c["count"].as_u64().unwrap()).sum();
    assert_eq!(by_kind, enforced);
    let text = bursar(&["audit", "--db", s(&db), "stats", "--since", "2026-11-01", "--until", "2026-12-01"]);
    assert!(String::from_utf8(text.stdout).unwrap().contains("by policy:"));
}

#[test]
fn sql_edits_fail_verify_naming_the_row_and_prune_keeps_the_chain() {
    let dir = Scratch::new("verify");
    let pol = policies(&dir.0);
    let events = repo().join("examples/events.jsonl");
    let db = dir.0.join("v.db");
    let out = bursar(&["eval", "--policies", s(&pol), "--events", s(&events), "--audit", s(&db)]);
    assert!(out.status.success());
    let n = stored_json(&db).len() as i64;
    assert!(n >= 4);
    for (i, (sql, names)) in [
        (format!("UPDATE decisions SET decision = 'allow' WHERE seq = {}", n / 2), format!("decisions row {}", n / 2)),
        ("DELETE FROM decisions WHERE seq = 2".to_owned(), "decisions row 2 was removed".to_owned()),
        (format!("DELETE FROM decisions WHERE seq = {n}"), format!("decisions row {n} (the newest) was removed")),
        ("UPDATE events SET raw = raw || ' ' WHERE seq = 3".to_owned(), "events row 3".to_owned()),
    ]
    .iter()
    .enumerate()
    {
        let copy = dir.0.join(format!("t{i}.db"));
        std::fs::copy(&db, &copy).unwrap();
        AuditLog::open(&copy, bursar_audit::Durability::Fast).unwrap().connection().execute_batch(sql).unwrap();
        let v = bursar(&["audit", "--db", s(&copy), "verify"]);
        assert_eq!(v.status.code(), Some(1), "{sql}");
        let err = String::from_utf8_lossy(&v.stderr);
        assert!(err.contains(names.as_str()), "{sql}: {err}");
    }
    let p = bursar(&["audit", "--db", s(&db), "prune", "--before", "2026-11-02T12:00:00Z"]);
    assert!(p.status.success(), "{}", String::from_utf8_lossy(&p.stderr));
    let remaining = stored_json(&db).len() as i64;
    assert!(remaining > 0 && remaining < n, "{remaining} of {n}");
    let v = bursar(&["audit", "--db", s(&db), "verify"]);
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stdout));
}

#[test]
fn an_unwritable_audit_log_stops_eval_with_the_reason() {
    let dir = Scratch::new("unwritable");
    let pol = policies(&dir.0);
    let events = repo().join("examples/events.jsonl");
    let db = dir.0.join("no/such/dir/a.db");
    let out = bursar(&["eval", "--policies", s(&pol), "--events", s(&events), "--audit", s(&db)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "nothing may be printed that is not logged");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot open") && err.contains("a.db"), "{err}");

    // A file that is not a database.
    let junk = dir.0.join("junk.db");
    std::fs::write(&junk, vec![b'x'; 8192]).unwrap();
    let out = bursar(&["eval", "--policies", s(&pol), "--events", s(&events), "--audit", s(&junk)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a database"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Issue 53, item 1 ("over time"): `bursar audit inventory` reads every `pool.inventory` row back
/// from the log, oldest first, filtered by region and GPU type, in each format.
#[test]
fn the_inventory_over_time_reads_back_from_the_log() {
    let dir = Scratch::new("inventory");
    let case = repo().join("tests/cases/placement-cross-region");
    let db = dir.path("inv.db");
    let out = bursar(&[
        "eval",
        "--policies",
        case.join("policies").to_str().unwrap(),
        "--events",
        case.join("events.jsonl").to_str().unwrap(),
        "--audit",
        db.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let run = |extra: &[&str]| {
        let mut args = vec!["audit", "inventory", "--db", db.to_str().unwrap()];
        args.extend_from_slice(extra);
        let o = bursar(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let table = run(&[]);
    assert!(table.contains("(5 rows)"), "{table}");
    let csv = run(&["--region", "cn-east", "--format", "csv"]);
    assert_eq!(
        csv,
        "time,region,gpu_type,queue,in_service,allocated,free,drained,source,event_id\n\
         2026-11-02T09:00:00Z,cn-east,H100,gpu,8,0,8,0,slurm:lab,i1\n\
         2026-11-02T09:05:30Z,cn-east,H100,gpu,8,8,0,0,slurm:lab,i2\n"
    );
    let later = run(&["--since", "2026-11-02T09:01:00Z", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(later.trim()).unwrap();
    assert_eq!((v["region"].as_str(), v["free"].as_u64()), (Some("cn-east"), Some(0)), "{later}");
    assert!(run(&["--gpu-type", "A100", "--format", "json"]).is_empty());
}
