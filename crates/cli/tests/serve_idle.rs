//! Live time: with no further events, the wall-clock ticker fires the idle-reclaim timers, so an idle
//! job is first alerted and then reclaimed, and the decisions reach a live stream.

use crate::serve_support::*;

const IDLE: &str = r#"[[policy]]
id = "reclaim/idle"
description = "release GPUs idle under 10% for 2s, after a 1s grace"
kind = "reclaim"
[policy.idle]
below = 0.1
window = "2s"
grace = "1s"
"#;

#[test]
fn idle_job_is_alerted_then_reclaimed_by_the_wall_clock() {
    let s = Scratch::new("serve-idle");
    s.write_policy("reclaim.toml", IDLE);
    let server = Server::start(&s, &["--tick", "100ms"]);
    let mut stream = server.conn().stream("/v1/decisions?after=0", &[]).unwrap();

    assert_eq!(server.post("/v1/admit", &submit("e1", "j1", "nlp", 4, 2.0)).status, 200);
    let r = server.post(
        "/v1/events",
        &format!(
            "{}\n{}\n",
            job_event("e2", "job.started", "j1", ""),
            job_event("e3", "job.sample", "j1", r#","gpu_util":0.02"#)
        ),
    );
    assert_eq!(r.json().unwrap()["accepted"], 2);
    assert_eq!(next_json(&mut stream)["decision"], "allow");

    // No more events: only the ticker can make these.
    let alert = next_json(&mut stream);
    assert_eq!(alert["decision"], "alert", "{alert}");
    assert_eq!(alert["job_id"], "j1");
    assert_eq!(alert["policies"][0], "reclaim/idle");
    assert!(alert["event_id"].as_str().unwrap().starts_with("bursar-tick-"), "{alert}");
    let reclaim = next_json(&mut stream);
    assert_eq!(reclaim["decision"], "reclaim", "{reclaim}");
    assert_eq!(reclaim["job_id"], "j1");
    assert!(reclaim["event_id"].as_str().unwrap().starts_with("bursar-tick-"), "{reclaim}");
    assert!(reclaim["seq"].as_u64() > alert["seq"].as_u64());

    let job = server.get_json("/v1/jobs/j1");
    assert_eq!(job["phase"], "reclaimed", "{job}");
    assert_eq!(server.get_json("/v1/projects/nlp")["held_gpus"], 0);

    // The tick decisions are durable and survive a kill -9: after a restart the job is still
    // reclaimed and the reclaim is not made again.
    let logged = server.decisions(0).len();
    server.kill9();
    let server = Server::start(&s, &["--tick", "100ms"]);
    assert_eq!(server.get_json("/v1/jobs/j1")["phase"], "reclaimed");
    assert_eq!(server.get_json("/v1/projects/nlp")["held_gpus"], 0);
    // Give the ticker a few rounds; nothing new may be decided.
    let d = server.post("/v1/admit", &submit("e9", "j9", "other", 1, 1.0)).json().unwrap();
    assert_eq!(d["seq"].as_u64(), Some(logged as u64 + 1), "a decision was repeated after the restart");
}
