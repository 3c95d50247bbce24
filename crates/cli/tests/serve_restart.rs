//! Restarts without loss: after a `kill -9` the restarted server has the same live jobs and quota
//! usage, and the decision stream from cursor 0 holds every decision that was answered, once. After a
//! SIGTERM the server drains, snapshots and exits 0, and resumes from the snapshot.

use crate::serve_support::*;
use serde_json::Value;

fn project(server: &Server) -> Value {
    let mut p = server.get_json("/v1/projects/nlp");
    if let Some(o) = p.as_object_mut() {
        o.remove("engine_time");
    }
    p
}

#[test]
fn kill_9_and_restart_keeps_usage_and_live_jobs_and_loses_no_decision() {
    let s = Scratch::new("serve-kill9");
    let server = Server::start(&s, &["--snapshot-every", "1h"]);
    let mut answered = Vec::new();
    for i in 1..=6 {
        let d = server.post("/v1/admit", &submit(&format!("e{i}"), &format!("j{i}"), "nlp", 2, 3.0)).json().unwrap();
        assert_eq!(d["decision"], "allow");
        answered.push(d["seq"].as_u64().unwrap());
    }
    // Force a snapshot, then change state after it, so recovery needs snapshot + replay.
    assert_eq!(server.post("/v1/snapshot", "").status, 200);
    let r = server.post(
        "/v1/events",
        &format!(
            "{}\n{}\n{}\n",
            job_event("s1", "job.started", "j1", ""),
            job_event("s2", "job.started", "j2", ""),
            job_event("f3", "job.finished", "j3", r#","status":"cancelled""#),
        ),
    );
    assert_eq!(r.json().unwrap()["accepted"], 3);
    let d = server.post("/v1/admit", &submit("e7", "j7", "nlp", 4, 1.0)).json().unwrap();
    answered.push(d["seq"].as_u64().unwrap());

    let before = project(&server);
    let jobs_before: Vec<Value> =
        (1..=7).map(|i| server.get(&format!("/v1/jobs/j{i}")).unwrap().json().unwrap()).collect();
    assert_eq!(before["live_jobs"], 6, "{before}");
    assert_eq!(before["running_gpus"], 4, "{before}");

    server.kill9();
    let server = Server::start(&s, &[]);
    // Recovery read the snapshot and replayed the events logged after it.
    let log = server.log_text();
    let replayed: u64 = log
        .split("replayed=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no recovery line in\n{log}"));
    assert!(replayed >= 4, "replayed {replayed}\n{log}");
    assert_eq!(project(&server), before);
    for (i, j) in jobs_before.iter().enumerate() {
        let now = server.get(&format!("/v1/jobs/j{}", i + 1)).unwrap().json().unwrap();
        let strip = |v: &Value| {
            let mut v = v.clone();
            if let Some(o) = v.as_object_mut() {
                o.remove("engine_time");
                o.remove("runtime_gpu_hours");
            }
            v
        };
        assert_eq!(strip(&now), strip(j), "job j{}", i + 1);
    }
    let logged: Vec<u64> = server.decisions(0).iter().map(|d| d["seq"].as_u64().unwrap()).collect();
    for seq in &answered {
        assert!(logged.contains(seq), "decision {seq} was answered but is not in the log: {logged:?}");
    }
    let mut dedup = logged.clone();
    dedup.dedup();
    assert_eq!(dedup, logged, "a decision is logged twice");

    // Resent events after the crash are recognised, not decided again.
    let again = server.post("/v1/admit", &submit("e7", "j7", "nlp", 4, 1.0)).json().unwrap();
    assert_eq!(again["duplicate"], true);
    assert_eq!(again["seq"].as_u64(), Some(answered[6]));
    assert_eq!(server.decisions(0).len(), logged.len());

    // New work continues the sequence.
    let d = server.post("/v1/admit", &submit("e8", "j8", "nlp", 1, 1.0)).json().unwrap();
    assert!(d["seq"].as_u64().unwrap() > *logged.last().unwrap());

    // SIGTERM drains and snapshots; the next start resumes from that snapshot with nothing to replay.
    let after_term = project(&server);
    let (status, log) = server.terminate();
    assert!(status.success(), "{log}");
    let server = Server::start(&s, &[]);
    assert!(server.log_text().contains("replayed=0"), "{}", server.log_text());
    assert_eq!(project(&server), after_term);
}
