//! Enforcement records are inputs of their own (`action.executed`, `action.failed`), not `clock.tick`s:
//! a `clock.tick` rule never sees one, and one survives a restart and is queryable with `bursar audit`.

use crate::serve_support::{Scratch, Server, job_event, now, submit};

/// A rule that alerts on every `clock.tick` it sees.
const TICK_RULE: &str = r#"
[[policy]]
id = "rules/every-tick"
description = "Alerts on every clock.tick, to show which inputs reach clock.tick rules."
kind = "rule"
on = ["clock.tick"]
when = "true"
decision = "alert"
reason = "a tick"
"#;

fn action(id: &str, decision_id: &str, job: &str) -> String {
    format!(
        r#"{{"id":"{id}","time":"{}","type":"action.executed","decision_id":"{decision_id}","job_id":"{job}","action":"scancel","detail":"cancelled Slurm job 17","attempts":1,"slurm_job_id":"17"}}"#,
        now()
    )
}

#[test]
fn a_clock_tick_rule_never_sees_an_action_record_and_the_record_survives_a_restart() {
    let s = Scratch::new("serve-actions");
    s.write_policy("ticks.toml", TICK_RULE);
    // No wall-clock ticks during the test (they are not clock.ticks either, but keep the log small).
    let server = Server::start(&s, &["--tick", "1h"]);
    assert_eq!(server.post("/v1/admit", &submit("e1", "j1", "nlp", 2, 1.0)).status, 200);

    let r = server.post("/v1/events", &format!("{}\n", action("enforce-e1/0", "e1/0", "j1")));
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json().unwrap();
    assert_eq!(v["accepted"], 1, "{v}");
    assert_eq!(v["decisions"].as_array().unwrap().len(), 0, "a clock.tick rule saw an action record: {v}");

    // A producer's tick does reach the rule.
    let tick = format!(r#"{{"id":"t1","time":"{}","type":"clock.tick"}}"#, now());
    let v = server.post("/v1/events", &format!("{tick}\n")).json().unwrap();
    assert_eq!(v["decisions"][0]["reason"], "a tick", "{v}");

    // A resent record is a duplicate; a producer cannot pass off bursar's own wall tick.
    let v = server.post("/v1/events", &format!("{}\n", action("enforce-e1/0", "e1/0", "j1"))).json().unwrap();
    assert_eq!(v["duplicates"][0]["id"], "enforce-e1/0", "{v}");
    let wall = format!(r#"{{"id":"x","time":"{}","type":"bursar.tick"}}"#, now());
    let r = server.post("/v1/events", &format!("{wall}\n"));
    assert_eq!(r.status, 400);
    assert!(r.json().unwrap()["rejected"][0]["error"].as_str().unwrap().contains("bursar's own wall clock"));

    // Killed and restarted, the record is still there, and still not a tick.
    server.kill9();
    let server = Server::start(&s, &["--tick", "1h"]);
    let v = server.post("/v1/events", &format!("{}\n", job_event("e9", "job.started", "j1", ""))).json().unwrap();
    assert_eq!(v["accepted"], 1, "{v}");
    drop(server);

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_bursar"))
        .args(["audit", "--db"])
        .arg(s.audit())
        .args(["explain", "j1", "--format", "json"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("enforce-e1/0") && text.contains("action.executed"), "{text}");
}
