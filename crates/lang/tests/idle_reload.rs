//! Regression (issue 45): an idle window shortened by a reload applies to jobs already idle. The
//! window's timer was set with the old window when the job went idle; the next low sample past the
//! window in force now alerts, as the timer would have. Real compiled TOML, the real engine.

#![expect(clippy::expect_used, reason = "test fixtures that fail to build should stop the test loudly")]

use std::path::Path;
use std::sync::Arc;

use bursar_engine::{Engine, PolicySet};
use bursar_model::{Decision, DecisionKind, Event, decode_event};

fn set(window: &str) -> Arc<PolicySet> {
    let src = format!(
        "[[policy]]\nid = \"reclaim/idle\"\ndescription = \"idle\"\nkind = \"reclaim\"\n\n[policy.idle]\nbelow = 0.1\nwindow = \"{window}\"\ngrace = \"15m\"\n"
    );
    let compiled = bursar_lang::compile_str("idle.toml", &src, Path::new(".")).expect("policy compiles");
    Arc::new(PolicySet::new(compiled.policies, Vec::new(), format!("t-{window}")).expect("unique ids"))
}

fn ev(id: &str, time: &str, rest: &str) -> Event {
    decode_event(&format!(r#"{{"id":"{id}","time":"2026-11-02T{time}Z",{rest}}}"#)).expect("valid event")
}

fn apply(e: &mut Engine, events: &[Event]) -> Vec<Decision> {
    let mut out = Vec::new();
    for x in events {
        e.process(x, None, &mut out);
    }
    out
}

fn alerts(d: &[Decision]) -> Vec<&Decision> {
    d.iter().filter(|d| d.decision == DecisionKind::Alert).collect()
}

fn idle_since_0910(window: &str) -> Engine {
    let mut e = Engine::new(set(window));
    apply(
        &mut e,
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
    e
}

#[test]
fn a_window_shortened_by_reload_alerts_a_job_already_idle_at_its_next_low_sample() {
    let mut e = idle_since_0910("1h");
    e.set_policies(set("10m"));
    // 15 minutes idle: past the 10-minute window in force, long before the 1-hour timer (10:10).
    let out = apply(&mut e, &[ev("s2", "09:25:00", r#""type":"job.sample","job_id":"j1","gpu_util":0.02"#)]);
    let a = alerts(&out);
    assert_eq!(a.len(), 1, "{out:?}");
    assert_eq!(a[0].job_id.as_deref(), Some("j1"));
    // Once: the next low sample and the old timer add nothing.
    let out = apply(
        &mut e,
        &[
            ev("s3", "09:30:00", r#""type":"job.sample","job_id":"j1","gpu_util":0.02"#),
            ev("t1", "10:11:00", r#""type":"clock.tick""#),
        ],
    );
    assert!(alerts(&out).is_empty(), "alerted twice: {out:?}");
}

#[test]
fn without_a_reload_a_low_sample_inside_the_window_alerts_nothing() {
    let mut e = idle_since_0910("1h");
    let out = apply(&mut e, &[ev("s2", "09:25:00", r#""type":"job.sample","job_id":"j1","gpu_util":0.02"#)]);
    assert!(alerts(&out).is_empty(), "{out:?}");
}
