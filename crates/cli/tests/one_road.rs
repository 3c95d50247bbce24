//! One road: the same event stream — submissions, an approval, utilisation samples that open idle
//! windows, a keepalive, producer ticks, billing, a finish — through `bursar serve` over HTTP (with a
//! policy reload and a `kill -9` plus restart in the middle, and its wall-clock ticker running),
//! through `bursar eval`, and through `bursar replay` of serve's own audit log, gives identical
//! decisions from all three.
//!
//! The events are dated after the wall clock, so serve's wall ticks (journaled as `bursar.tick`) move
//! no timer: every decision is driven by event time, as in `eval`, and the replay must apply the
//! journaled wall ticks as wall ticks for the three to agree. (The configuration's `[clock]
//! max_skew` lets serve take a stream dated months ahead.)
//!
//! Authentication is on: every line is sent by the principal whose role it takes (the scheduler
//! submits, the producer reports, billing bills, bob approves, alice keeps her job alive), and serve
//! keeps each id in its sender's namespace (`sched:s1`); the decisions are compared with that
//! prefix taken off, which is the only difference the namespacing makes.

#![expect(clippy::unwrap_used, reason = "integration test")]

use crate::serve_support::bursar;
use crate::serve_support::{Conn, Scratch, Server};
use serde_json::Value;

/// Who sends which line, with the token each presents.
const PRINCIPALS: [(&str, &str, &str); 5] = [
    ("sched", "scheduler", "bursar_one-road-sched"),
    ("prod", "producer", "bursar_one-road-prod"),
    ("bill", "billing", "bursar_one-road-bill"),
    ("bob", "approver", "bursar_one-road-bob"),
    ("alice", "user", "bursar_one-road-alice"),
];

/// The configuration: the principals above, `reader` and `admin` for the test itself.
fn config(s: &Scratch) -> std::path::PathBuf {
    let mut text = String::from("[clock]\nmax_skew = \"3650d\"\n\n");
    for (name, role, token) in PRINCIPALS.iter().chain(&[("test", "reader", "bursar_one-road-test")]) {
        let roles = if *name == "test" { "[\"reader\", \"admin\"]".to_owned() } else { format!("[\"{role}\"]") };
        let hash = bursar_auth::TokenHash::of(token).to_text();
        text.push_str(&format!("[[principal]]\nname = \"{name}\"\nroles = {roles}\ntokens = [\"{hash}\"]\n\n"));
    }
    let path = s.0.join("bursar.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The token of whoever sends `line`.
fn sender_of(line: &str) -> &'static str {
    let name = if line.contains(r#""type":"job.submitted""#) {
        "sched"
    } else if line.contains(r#""type":"approval."#) {
        "bob"
    } else if line.contains(r#""type":"billing."#) {
        "bill"
    } else if line.contains(r#""type":"job.keepalive""#) {
        "alice"
    } else {
        "prod"
    };
    PRINCIPALS.iter().find(|p| p.0 == name).map(|p| p.2).unwrap()
}

/// A decision with its ids out of their sender's namespace (`sched:s1/0` → `s1/0`).
fn unspaced(mut v: Value) -> Value {
    for key in ["decision_id", "event_id"] {
        if let Some(id) = v[key].as_str().and_then(|s| s.split_once(':').map(|(_, rest)| rest.to_owned())) {
            v[key] = Value::from(id);
        }
    }
    v
}

const POLICIES: &str = r#"
[[policy]]
id = "quota/monthly"
description = "Each project has 400 GPU-hours a month."
kind = "quota"
gpu_hours = 400

[[policy]]
id = "approval/big"
description = "Jobs over 8 GPUs need bob."
kind = "approval"
gpus_over = 8
approvers = ["bob"]
expires = "6h"

[[policy]]
id = "reclaim/finished"
description = "Release GPUs at once when a job ends."
kind = "reclaim"
on_finish = true

[[policy]]
id = "reclaim/idle"
description = "Alert after 30 minutes under 10%, reclaim 15 minutes later without a keepalive."
kind = "reclaim"

[policy.idle]
below = 0.10
window = "30m"
grace = "15m"

[[policy]]
id = "rules/tick"
description = "Alerts on each producer tick, so a tick that is not a producer's would show."
kind = "rule"
on = ["clock.tick"]
when = "true"
decision = "alert"
reason = "producer tick"
"#;

/// Minutes after 2027-03-01T09:00:00Z, RFC 3339.
fn at(min: u32) -> String {
    format!("2027-03-01T{:02}:{:02}:00Z", 9 + min / 60, min % 60)
}

fn submit(n: u32, job: &str, project: &str, gpus: u32, hours: f64) -> String {
    format!(
        r#"{{"id":"s{n}","time":"{}","type":"job.submitted","job":{{"id":"{job}","project":"{project}","user":"alice","gpus":{gpus},"requested_hours":{hours},"ready":{{"image":true,"data":true,"script":true}}}}}}"#,
        at(n)
    )
}

fn ev(id: &str, min: u32, kind: &str, rest: &str) -> String {
    format!(r#"{{"id":"{id}","time":"{}","type":"{kind}"{rest}}}"#, at(min))
}

/// The stream, in two halves (the restart and the reload come between them).
fn stream() -> (Vec<String>, Vec<String>) {
    let mut first = vec![
        submit(1, "j1", "nlp", 4, 3.0),
        submit(2, "j2", "nlp", 16, 2.0), // needs bob
        submit(3, "j3", "cv", 2, 4.0),
        ev("a1", 4, "approval.granted", r#","job_id":"j2","by":"bob""#),
        ev("st1", 5, "job.started", r#","job_id":"j1""#),
        ev("st3", 5, "job.started", r#","job_id":"j3""#),
        ev("st2", 6, "job.started", r#","job_id":"j2""#),
    ];
    // Idle samples for j1 and j3, busy ones for j2.
    for m in (10..=40).step_by(5) {
        first.push(ev(&format!("u1-{m}"), m, "job.sample", r#","job_id":"j1","gpu_util":0.02"#));
        first.push(ev(&format!("u3-{m}"), m, "job.sample", r#","job_id":"j3","gpu_util":0.03"#));
        first.push(ev(&format!("u2-{m}"), m, "job.sample", r#","job_id":"j2","gpu_util":0.91"#));
    }
    first.push(ev("t1", 42, "clock.tick", ""));
    let mut second = vec![
        // j3's owner answers the idle alert; j1's does not.
        ev("k3", 45, "job.keepalive", r#","job_id":"j3","by":"alice""#),
        ev("t2", 50, "clock.tick", ""),
        ev("t3", 60, "clock.tick", ""),
        submit(61, "j4", "cv", 64, 10.0), // over the quota
        ev("f2", 70, "job.finished", r#","job_id":"j2","status":"succeeded""#),
        ev(
            "b2",
            71,
            "billing.charge",
            r#","project":"nlp","job_id":"j2","gpu_hours":17.5,"amount":120.0,"currency":"EUR","mode":"on_demand""#,
        ),
        ev("t4", 90, "clock.tick", ""),
    ];
    for m in (95..=125).step_by(10) {
        second.push(ev(&format!("u3b-{m}"), m, "job.sample", r#","job_id":"j3","gpu_util":0.01"#));
    }
    second.push(ev("t5", 150, "clock.tick", ""));
    (first, second)
}

/// A decision without its stream position, for comparing.
fn bare(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.remove("seq");
    }
    v
}

fn post_as(server: &Server, token: &str, path: &str, body: &str) -> crate::serve_support::Response {
    Conn::connect(server.addr, Some(token)).unwrap().request("POST", path, body.as_bytes()).unwrap()
}

fn post_all(server: &Server, lines: &[String]) {
    // Submissions through /v1/admit (as the scheduler's hook would), the rest in batches of up to 5
    // lines of one sender.
    let mut batch = String::new();
    let mut batch_token = "";
    let flush = |batch: &mut String, token: &str| {
        if !batch.is_empty() {
            let r = post_as(server, token, "/v1/events", batch);
            assert_eq!(r.status, 200, "{}", r.text());
            assert!(r.json().unwrap()["rejected"].as_array().unwrap().is_empty(), "{}", r.text());
            batch.clear();
        }
    };
    for l in lines {
        let token = sender_of(l);
        if l.contains(r#""type":"job.submitted""#) {
            flush(&mut batch, batch_token);
            let r = post_as(server, token, "/v1/admit", l);
            assert_eq!(r.status, 200, "{}", r.text());
            continue;
        }
        if token != batch_token || batch.lines().count() == 5 {
            flush(&mut batch, batch_token);
            batch_token = token;
        }
        batch.push_str(l);
        batch.push('\n');
    }
    flush(&mut batch, batch_token);
}

#[test]
fn serve_eval_and_replay_of_serves_log_decide_the_same() {
    let s = Scratch::new("one-road");
    s.write_policy("policies.toml", POLICIES);
    let (first, second) = stream();
    let all: Vec<String> = first.iter().chain(&second).cloned().collect();
    let events_file = s.0.join("events.jsonl");
    std::fs::write(&events_file, all.join("\n") + "\n").unwrap();

    // serve: the first half, a snapshot taken on its own, kill -9, restart, a reload, the second half.
    let cfg = config(&s);
    let flags = ["--tick", "100ms", "--snapshot-every", "200ms", "--config", cfg.to_str().unwrap()];
    let mut server = Server::start(&s, &flags);
    server.token = Some("bursar_one-road-test".into());
    post_all(&server, &first);
    std::thread::sleep(std::time::Duration::from_millis(400));
    server.kill9();
    let mut server = Server::start(&s, &flags);
    server.token = Some("bursar_one-road-test".into());
    let before = server.get_json("/v1/policies")["digest"].as_str().unwrap().to_owned();
    s.write_policy("policies.toml", &format!("# reloaded mid-stream: same rules\n{POLICIES}"));
    server.wait_for(20, "the reload", || {
        let d = server.get_json("/v1/policies")["digest"].as_str().unwrap().to_owned();
        (d != before).then_some(())
    });
    post_all(&server, &second);
    std::thread::sleep(std::time::Duration::from_millis(300)); // a few more wall ticks
    let served: Vec<Value> = server.decisions(0).into_iter().map(bare).map(unspaced).collect();
    let (status, log) = server.terminate();
    assert!(status.success(), "{log}");
    let log_of_serve = log;

    // eval on the same stream.
    let out =
        bursar(&["eval", "--policies", s.policies().to_str().unwrap(), "--events", events_file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let evaluated: Vec<Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();

    // The stream exercises what it is meant to.
    let kinds = |ds: &[Value], k: &str| ds.iter().filter(|d| d["decision"] == k).count();
    assert!(kinds(&evaluated, "reclaim") >= 2, "{evaluated:#?}");
    assert!(evaluated.iter().any(|d| d["reason"].as_str().unwrap().contains("approved by bob")), "{evaluated:#?}");
    assert!(evaluated.iter().any(|d| d["reason"] == "producer tick"));
    assert!(kinds(&evaluated, "deny") >= 1);
    assert!(log_of_serve.contains("policies reloaded"), "{log_of_serve}");

    if served != evaluated {
        let n = served.len().max(evaluated.len());
        for i in 0..n {
            let (a, b) = (served.get(i), evaluated.get(i));
            if a != b {
                panic!(
                    "serve and eval disagree at decision {i} of {}/{}:\nserve: {a:?}\neval:  {b:?}",
                    served.len(),
                    evaluated.len()
                );
            }
        }
    }

    // replay of serve's own log, under the same policies: every decision as recorded.
    let out = bursar(&[
        "replay",
        "--policies",
        s.policies().to_str().unwrap(),
        "--audit",
        s.audit().to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["events"].as_u64().unwrap() as usize, all.len() + count_wall_ticks(&s), "{r:#}");
    assert_eq!(r["compared"].as_u64().unwrap() as usize, evaluated.len(), "{r:#}");
    assert_eq!(r["unchanged"], r["compared"], "{r:#}");
    for k in ["reworded", "different", "added", "removed", "malformed"] {
        assert_eq!(r[k], 0, "{k}: {r:#}");
    }
}

/// Wall ticks serve journaled (`bursar.tick`): replay applies them as inputs too.
fn count_wall_ticks(s: &Scratch) -> usize {
    let log = bursar_audit::AuditLog::open_read(s.audit()).unwrap();
    let ticks = log.events_since(0, 100_000).unwrap().into_iter().filter(|e| e.kind == "bursar.tick").count();
    assert!(ticks > 0, "serve journaled no wall tick: the test would not cover them");
    ticks
}
