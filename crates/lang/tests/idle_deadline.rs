//! The idle rule's deadline (`Policy::deadline`, read through `Engine::deadlines`): from its alert
//! until the reclaim it announces, and gone once a keepalive calls the reclaim off, the job is busy
//! again, or the reclaim happened. Notices and the pool page read it; real compiled TOML, the real
//! engine.

#![expect(clippy::expect_used, reason = "test fixtures that fail to build should stop the test loudly")]

use std::path::Path;
use std::sync::Arc;

use bursar_engine::{Engine, PolicySet};
use bursar_model::{Event, Timestamp, decode_event};

fn engine() -> Engine {
    let src = "[[policy]]\nid = \"reclaim/idle\"\ndescription = \"idle\"\nkind = \"reclaim\"\n\n[policy.idle]\nbelow = 0.1\nwindow = \"1h\"\ngrace = \"15m\"\n";
    let compiled = bursar_lang::compile_str("idle.toml", src, Path::new(".")).expect("policy compiles");
    Engine::new(Arc::new(PolicySet::new(compiled.policies, Vec::new(), "t".into()).expect("unique ids")))
}

fn ev(id: &str, time: &str, rest: &str) -> Event {
    decode_event(&format!(r#"{{"id":"{id}","time":"2026-11-02T{time}Z",{rest}}}"#)).expect("valid event")
}

fn apply(e: &mut Engine, events: &[Event]) {
    let mut out = Vec::new();
    for x in events {
        e.process(x, None, &mut out);
    }
}

fn at(t: &str) -> Timestamp {
    Timestamp::parse(&format!("2026-11-02T{t}Z")).expect("a time")
}

fn started(e: &mut Engine) {
    apply(
        e,
        &[
            ev(
                "sub",
                "09:00:00",
                r#""type":"job.submitted","job":{"id":"j1","project":"nlp","gpus":4,"requested_hours":8}"#,
            ),
            ev("start", "09:00:00", r#""type":"job.started","job_id":"j1""#),
            ev("s1", "09:10:00", r#""type":"job.sample","job_id":"j1","gpu_util":0.01"#),
        ],
    );
}

#[test]
fn the_deadline_runs_from_the_alert_to_the_announced_reclaim_and_a_keepalive_ends_it() {
    let mut e = engine();
    started(&mut e);
    assert!(e.deadlines("j1").is_empty(), "an open idle window is not yet a deadline");
    apply(&mut e, &[ev("t1", "10:20:00", r#""type":"clock.tick""#)]); // the window ended at 10:10
    let d = e.deadlines("j1");
    assert_eq!(d.len(), 1);
    assert_eq!((&*d[0].0, d[0].1.since, d[0].1.at), ("reclaim/idle", at("10:10:00"), at("10:25:00")));
    apply(&mut e, &[ev("k1", "10:21:00", r#""type":"job.keepalive","job_id":"j1","by":"alice""#)]);
    assert!(e.deadlines("j1").is_empty(), "the keepalive called the reclaim off");
    assert!(e.deadlines("unknown").is_empty());
}

#[test]
fn busy_again_or_reclaimed_there_is_no_deadline() {
    let mut busy = engine();
    started(&mut busy);
    apply(&mut busy, &[ev("t1", "10:20:00", r#""type":"clock.tick""#)]);
    apply(&mut busy, &[ev("s2", "10:21:00", r#""type":"job.sample","job_id":"j1","gpu_util":0.9"#)]);
    assert!(busy.deadlines("j1").is_empty());

    let mut lost = engine();
    started(&mut lost);
    apply(&mut lost, &[ev("t1", "10:20:00", r#""type":"clock.tick""#), ev("t2", "10:30:00", r#""type":"clock.tick""#)]);
    assert_eq!(lost.state().job("j1").map(|j| j.phase().as_str()), Some("reclaimed"));
    assert!(lost.deadlines("j1").is_empty());
    // The used-id read the action links rely on.
    assert!(lost.seen("t2") && !lost.seen("t3"));
}
