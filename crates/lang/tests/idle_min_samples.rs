//! `min_samples` in the reclaim family's `[policy.idle]`: an idle window alerts only once it holds
//! that many samples under `below`, so a utilisation source that goes quiet (bad data, Prometheus
//! down: no samples) is never taken for a job that stayed idle. Real compiled TOML, the real engine.

#![expect(clippy::expect_used, reason = "test fixtures that fail to build should stop the test loudly")]

use std::path::Path;
use std::sync::Arc;

use bursar_engine::{Engine, PolicySet};
use bursar_model::{Decision, DecisionKind, Event, decode_event};

fn engine(idle: &str) -> Engine {
    let src = format!(
        "[[policy]]\nid = \"reclaim/idle\"\ndescription = \"idle\"\nkind = \"reclaim\"\n\n[policy.idle]\nbelow = 0.1\nwindow = \"1h\"\ngrace = \"15m\"\n{idle}"
    );
    let compiled = bursar_lang::compile_str("idle.toml", &src, Path::new(".")).expect("policy compiles");
    Engine::new(Arc::new(PolicySet::new(compiled.policies, Vec::new(), "t".into()).expect("unique ids")))
}

fn ev(id: &str, time: &str, rest: &str) -> Event {
    decode_event(&format!(r#"{{"id":"{id}","time":"2026-11-02T{time}Z",{rest}}}"#)).expect("valid event")
}

fn start() -> Vec<Event> {
    vec![
        ev(
            "sub",
            "09:00:00",
            r#""type":"job.submitted","job":{"id":"j1","project":"nlp","gpus":4,"requested_hours":8}"#,
        ),
        ev("start", "09:00:00", r#""type":"job.started","job_id":"j1""#),
    ]
}

fn low(id: &str, time: &str) -> Event {
    ev(id, time, r#""type":"job.sample","job_id":"j1","gpu_util":0.01"#)
}

fn tick(id: &str, time: &str) -> Event {
    ev(id, time, r#""type":"clock.tick""#)
}

fn run(e: &mut Engine, events: &[Event]) -> Vec<Decision> {
    let mut out = Vec::new();
    for x in events {
        e.process(x, None, &mut out);
    }
    out.retain(|d| d.decision != DecisionKind::Allow);
    out
}

#[test]
fn one_sample_then_silence_alerts_by_default_but_not_with_min_samples() {
    let mut events = start();
    events.push(low("s1", "09:10:00"));
    events.push(tick("t1", "10:20:00"));
    let default = run(&mut engine(""), &events);
    assert_eq!(default.len(), 1, "the default (1) keeps today's behaviour: {default:?}");
    assert_eq!(default[0].decision, DecisionKind::Alert);
    assert!(default[0].reason.contains("since 2026-11-02T09:10:00Z (1h);"), "{}", default[0].reason);

    let strict = run(&mut engine("min_samples = 3\n"), &events);
    assert!(strict.is_empty(), "one sample and an hour of silence is no evidence: {strict:?}");
}

#[test]
fn the_sample_that_completes_the_evidence_alerts_and_the_reclaim_follows() {
    let mut events = start();
    events.extend([low("s1", "09:10:00"), low("s2", "09:40:00")]);
    events.push(tick("t1", "10:15:00")); // window over at 10:10, only 2 of 3 samples
    events.push(low("s3", "10:30:00"));
    events.push(tick("t2", "10:46:00"));
    let d = run(&mut engine("min_samples = 3\n"), &events);
    assert_eq!(d.len(), 2, "{d:?}");
    assert_eq!((d[0].decision, d[0].event_id.as_str()), (DecisionKind::Alert, "s3"));
    assert!(d[0].reason.contains("since 2026-11-02T09:10:00Z (1h, 3 samples)"), "{}", d[0].reason);
    assert!(d[0].reason.contains("reclaimed at 2026-11-02T10:45:00Z"), "{}", d[0].reason);
    assert_eq!(d[1].decision, DecisionKind::Reclaim);
}

#[test]
fn enough_samples_within_the_window_alert_on_time() {
    let mut events = start();
    events.extend([low("s1", "09:10:00"), low("s2", "09:30:00"), low("s3", "09:50:00")]);
    events.push(tick("t1", "10:11:00"));
    let d = run(&mut engine("min_samples = 3\n"), &events);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].decision, DecisionKind::Alert);
    assert_eq!(d[0].time.to_string(), "2026-11-02T10:10:00Z", "the window's own end");
}

#[test]
fn a_busy_sample_or_a_keepalive_starts_the_count_again() {
    let mut events = start();
    events.extend([low("s1", "09:10:00"), low("s2", "09:20:00")]);
    events.push(ev("busy", "09:30:00", r#""type":"job.sample","job_id":"j1","gpu_util":0.8"#));
    events.extend([low("s3", "09:40:00"), low("s4", "10:50:00")]);
    events.push(tick("t1", "10:55:00"));
    let d = run(&mut engine("min_samples = 3\n"), &events);
    assert!(d.is_empty(), "only 2 low samples since the busy one: {d:?}");

    let mut events = start();
    events.extend([low("s1", "09:10:00"), low("s2", "09:20:00"), low("s3", "09:30:00")]);
    events.push(ev("ka", "09:35:00", r#""type":"job.keepalive","job_id":"j1","by":"alice""#));
    events.extend([low("s4", "09:40:00"), low("s5", "10:50:00")]);
    events.push(tick("t1", "10:55:00"));
    let d = run(&mut engine("min_samples = 3\n"), &events);
    assert!(d.is_empty(), "the keepalive opened a new window with 2 samples: {d:?}");
}

#[test]
fn bad_values_are_reported_at_their_place() {
    for (value, found) in [("0", "0"), ("2.5", "2.5"), ("-1", "-1")] {
        let src = format!(
            "[[policy]]\nid = \"reclaim/idle\"\ndescription = \"idle\"\nkind = \"reclaim\"\n\n[policy.idle]\nbelow = 0.1\nwindow = \"1h\"\nmin_samples = {value}\n"
        );
        let errs = bursar_lang::compile_str("idle.toml", &src, Path::new(".")).expect_err("rejected");
        let text = errs.iter().map(ToString::to_string).collect::<String>();
        assert!(
            text.starts_with(&format!(
                "idle.toml:9:15: error: `min_samples` must be a whole number of at least 1, found {found}\n"
            )),
            "{text}"
        );
        assert!(text.contains("= help: it is how many samples under `below`"), "{text}");
    }
    let src = "[[policy]]\nid = \"r\"\ndescription = \"d\"\nkind = \"reclaim\"\n[policy.idle]\nbelow = 0.1\nwindow = \"1h\"\nmin_samples = \"three\"\n";
    let errs = bursar_lang::compile_str("idle.toml", src, Path::new(".")).expect_err("rejected");
    assert_eq!(errs[0].headline(), "idle.toml:8:15: `min_samples` must be a number, found a string");
}
