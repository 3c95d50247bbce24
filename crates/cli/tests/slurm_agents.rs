//! `bursar slurm enforce` and `bursar slurm watch` against the real `bursar serve` binary, on a machine
//! without Slurm: the paths that need no cluster. A reclaim whose Slurm command cannot run is retried,
//! then recorded in the audit log as failed with the reason; the cursor is persisted so a second run
//! does nothing twice; and `watch` reports an unusable squeue instead of sending anything.
//! The paths that need a cluster are tested end to end by integrations/slurm/e2e.sh.

#![expect(clippy::unwrap_used, reason = "test helpers: a failed unwrap is the test failing, with its message")]

mod serve_support;

use std::process::Command;

use bursar_audit::AuditLog;
use serde_json::Value;
use serve_support::*;

const RECLAIM: &str = r#"[[policy]]
id = "reclaim/finished"
description = "release GPUs when the job ends"
kind = "reclaim"
on_finish = true
"#;

fn bursar(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_bursar")).args(args).output().unwrap()
}

fn enforcement_records(s: &Scratch) -> Vec<Value> {
    let log = AuditLog::open_read(s.audit()).unwrap();
    log.events_since(0, 10_000)
        .unwrap()
        .into_iter()
        .filter(|e| e.event_id.starts_with("enforce-"))
        .map(|e| serde_json::from_str(&e.raw).unwrap())
        .collect()
}

#[test]
fn a_reclaim_that_cannot_be_executed_is_recorded_as_failed_once() {
    let s = Scratch::new("slurm-enforce");
    s.write_policy("reclaim.toml", RECLAIM);
    let server = Server::start(&s, &[]);
    // The hook's submission (event id `sub-<job>`): its allow asks nothing of the enforcer.
    assert_eq!(server.post("/v1/admit", &submit("sub-lab-1", "lab-1", "nlp", 2, 1.0)).status, 200);
    let r = server.post(
        "/v1/events",
        &format!(
            "{}\n{}\n",
            job_event("slurm-lab-7-started", "job.started", "lab-1", r#","slurm_job_id":"7""#),
            job_event("slurm-lab-7-finished", "job.finished", "lab-1", r#","status":"succeeded","slurm_job_id":"7""#)
        ),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let reclaim = server
        .decisions(0)
        .into_iter()
        .find(|d| d["decision"] == "reclaim")
        .unwrap_or_else(|| panic!("no reclaim decision; log:\n{}", server.log_text()));
    let state = s.0.join("enforce.json");
    let addr = server.addr.to_string();
    let args = [
        "slurm",
        "enforce",
        "--once",
        "--server",
        &addr,
        "--cluster",
        "lab",
        "--state",
        state.to_str().unwrap(),
        "--squeue",
        "/nonexistent/squeue",
        "--max-attempts",
        "2",
        "--retry-delay",
        "10ms",
    ];
    let out = bursar(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("1 actions recorded (0 recorded before)"), "{stderr}");

    let records = enforcement_records(&s);
    assert_eq!(records.len(), 1, "{records:?}");
    let r = &records[0];
    // An enforcement is an action record of its own type (it used to ride on a `clock.tick` with an
    // `enforcement` field, which every `clock.tick` rule then saw).
    assert_eq!(r["type"], "action.failed");
    assert_eq!(r["id"], format!("enforce-{}", reclaim["decision_id"].as_str().unwrap()));
    assert_eq!(r["job_id"], "lab-1");
    assert_eq!(r["decision_id"], reclaim["decision_id"]);
    let e = r;
    assert_eq!(e["decision"], "reclaim");
    assert_eq!(e["action"], "scancel");
    assert_eq!(e["attempts"], 2);
    assert_eq!(e["decision_seq"], reclaim["seq"]);
    let detail = e["detail"].as_str().unwrap();
    assert!(detail.contains("gave up after 2 attempts") && detail.contains("/nonexistent/squeue"), "{detail}");

    // The cursor is past the reclaim: a second run reads nothing and records nothing.
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    assert!(saved["cursor"].as_u64().unwrap() >= reclaim["seq"].as_u64().unwrap(), "{saved}");
    let again = bursar(&args);
    assert!(again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("0 decisions read, 0 actions recorded (0 recorded before)")
    );
    assert_eq!(enforcement_records(&s).len(), 1);

    // A lost state file means the decision is handled again: the record keeps its id, serve drops it.
    std::fs::remove_file(&state).unwrap();
    let redo = bursar(&args);
    assert!(redo.status.success());
    let stderr = String::from_utf8_lossy(&redo.stderr);
    assert!(stderr.contains("0 actions recorded (1 recorded before)"), "{stderr}");
    assert_eq!(enforcement_records(&s).len(), 1);
}

#[test]
fn watch_reports_an_unusable_squeue_and_sends_nothing() {
    let s = Scratch::new("slurm-watch");
    let server = Server::start(&s, &[]);
    let state = s.0.join("watch.json");
    let addr = server.addr.to_string();
    let out = bursar(&[
        "slurm",
        "watch",
        "--once",
        "--server",
        &addr,
        "--state",
        state.to_str().unwrap(),
        "--squeue",
        "/nonexistent/squeue",
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("/nonexistent/squeue --json --states=all"), "{stderr}");
    assert!(!state.exists(), "nothing was sent, so nothing is remembered");
    assert!(server.decisions(0).is_empty());
}
