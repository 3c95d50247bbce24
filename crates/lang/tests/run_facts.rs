//! Trial history across partitions (`serve --cluster`): a run one engine saw finish, sent as a
//! `run.recorded` fact to another engine, lets that engine's trial-before-scale policy find the trial,
//! exactly as if the run had been its own; a fact applied twice changes nothing.

#![expect(clippy::unwrap_used, clippy::panic, reason = "test fixtures that fail to build stop the test")]

use std::path::Path;
use std::sync::Arc;

use bursar_engine::{Engine, Outcome, PolicySet};
use bursar_model::{Decision, DecisionKind, FinishStatus, Input, decode_input};

const TRIAL: &str = r#"
[[policy]]
id = "trial/before-scale"
description = "Big runs need a recent small trial of the same configuration."
kind = "trial"
above_gpus = 16
trial_max_gpus = 8
within = "14d"
action = "deny"
"#;

fn engine() -> Engine {
    let c = match bursar_lang::compile_str("trial.toml", TRIAL, Path::new(".")) {
        Ok(c) => c,
        Err(d) => panic!("{}", d.iter().map(ToString::to_string).collect::<String>()),
    };
    Engine::new(Arc::new(PolicySet::new(c.policies, Vec::new(), "test".into()).unwrap()))
}

fn apply(e: &mut Engine, line: &str) -> (Outcome, Vec<Decision>) {
    let input = decode_input(line).unwrap();
    let mut out = Vec::new();
    let o = e.apply(&input, Some(line), &mut out);
    (o, out)
}

fn submit(id: &str, job: &str, project: &str, gpus: u32, minute: u32) -> String {
    format!(
        r#"{{"id":"{id}","time":"2026-11-02T09:{minute:02}:00Z","type":"job.submitted","job":{{"id":"{job}","project":"{project}","user":"u","gpus":{gpus},"requested_hours":1.0,"image":"img:1","dataset":"ds-1","script_hash":"abc"}}}}"#
    )
}

fn admission(out: &[Decision]) -> DecisionKind {
    out.iter().find(|d| d.admission).map(|d| d.decision).unwrap()
}

#[test]
fn a_trial_seen_in_one_partition_lets_another_admit_the_scale_up() {
    // Partition A runs the small trial of the configuration in project nlp.
    let mut a = engine();
    apply(&mut a, &submit("a1", "small", "nlp", 8, 0));
    apply(&mut a, r#"{"id":"a2","time":"2026-11-02T09:01:00Z","type":"job.started","job_id":"small"}"#);
    assert!(a.recorded_runs().is_empty());
    apply(
        &mut a,
        r#"{"id":"a3","time":"2026-11-02T09:30:00Z","type":"job.finished","job_id":"small","status":"succeeded"}"#,
    );
    let runs: Vec<_> = a.recorded_runs().iter().map(|r| r.fact("a3")).collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!((runs[0].id.as_str(), runs[0].gpus, runs[0].status), ("run-a3", 8.into(), FinishStatus::Succeeded));

    // Partition B, which never saw the trial, denies the same configuration at 32 GPUs in project vision…
    let mut alone = engine();
    let (_, out) = apply(&mut alone, &submit("b1", "big", "vision", 32, 40));
    assert_eq!(admission(&out), DecisionKind::Deny, "{out:?}");

    // …and admits it once the fact arrives, as a line from the wire.
    let mut b = engine();
    let fact = Input::Run(runs[0].for_partition(1)).to_json();
    let (o, out) = apply(&mut b, &fact);
    assert_eq!((o, out.len()), (Outcome::Applied, 0), "a fact makes no decision");
    let (o, _) = apply(&mut b, &fact);
    assert_eq!(o, Outcome::Duplicate);
    let (_, out) = apply(&mut b, &submit("b1", "big", "vision", 32, 40));
    assert_eq!(admission(&out), DecisionKind::Allow, "{out:?}");
    assert!(out[0].reason.contains("trial of this configuration on 8 GPUs succeeded"), "{}", out[0].reason);
    // The history is the one A holds.
    let Ok(Input::Event(ev)) = decode_input(&submit("x", "x", "x", 1, 0)) else { panic!("not an event") };
    let bursar_model::EventKind::JobSubmitted(spec) = &ev.kind else { panic!("not a submission") };
    let key = spec.config_key();
    assert!(a.state().trial(&key).is_some());
    assert_eq!(b.state().trial(&key).map(|h| &h.successes), a.state().trial(&key).map(|h| &h.successes));
    assert_eq!(b.stats().runs_from_elsewhere, 1);
}
