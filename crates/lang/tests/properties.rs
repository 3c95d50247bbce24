//! Invariants checked over generated event streams, with real compiled TOML policies and the real
//! engine:
//!
//! - a quota never overshoots, whatever the order and interleaving of submissions, starts and ends;
//! - replay is deterministic: the same events give the same decisions;
//! - resending events (the same ids) changes nothing;
//! - snapshot and restore at any point (a restart) gives the same decisions as an uninterrupted run.

#![expect(clippy::expect_used, reason = "test fixtures that fail to build should stop the test loudly")]

use std::path::Path;
use std::sync::Arc;

use bursar_engine::{Engine, PolicySet, ScopeKind};
use bursar_model::{Decision, DecisionKind, Event, EventKind, FinishStatus, JobSpec, Period, Ready, Timestamp};
use proptest::prelude::*;

const LIMIT: f64 = 200.0;

const POLICIES: &str = r#"
[[policy]]
id = "quota/monthly"
description = "200 GPU-hours a month per project"
kind = "quota"
gpu_hours = 200
max_gpus = 24

[[policy]]
id = "approval/big"
description = "big jobs need approval"
kind = "approval"
gpus_over = 12
approvers = ["bob"]
expires = "3h"

[[policy]]
id = "reclaim/all"
description = "release on end, cap runtime, reclaim idle"
kind = "reclaim"
on_finish = true
max_runtime = "6h"

[policy.idle]
below = 0.1
window = "1h"
grace = "15m"

[[policy]]
id = "placement/night"
description = "deferrable work at night"
kind = "placement"

[policy.off_peak]
start = "22:00"
end = "06:00"
"#;

fn policy_set() -> Arc<PolicySet> {
    let compiled = bursar_lang::compile_str("props.toml", POLICIES, Path::new(".")).expect("test policies compile");
    Arc::new(PolicySet::new(compiled.policies, Vec::new(), "props".into()).expect("unique ids"))
}

/// One step of a generated stream.
#[derive(Debug, Clone)]
enum Step {
    Submit { project: u8, gpus: u32, hours: u8, deferrable: bool },
    Start(u8),
    Sample(u8, u8),
    Finish(u8, u8),
    Approve(u8),
    Tick,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u8..3, 1u32..16, 1u8..40, any::<bool>())
            .prop_map(|(project, gpus, hours, deferrable)| Step::Submit { project, gpus, hours, deferrable }),
        2 => (0u8..40).prop_map(Step::Start),
        2 => (0u8..40, 0u8..100).prop_map(|(j, u)| Step::Sample(j, u)),
        2 => (0u8..40, 0u8..3).prop_map(|(j, s)| Step::Finish(j, s)),
        1 => (0u8..40).prop_map(Step::Approve),
        1 => Just(Step::Tick),
    ]
}

/// Turns steps into events, 7 minutes apart; job ids are `j<n>` in submission order.
fn events(steps: &[Step]) -> Vec<Event> {
    let base = Timestamp::parse("2026-11-02T09:00:00Z").expect("valid time");
    let mut submitted = 0u32;
    let mut out = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        let time = Timestamp(base.millis() + i as i64 * 7 * 60_000);
        let job = |n: &u8| format!("j{}", u32::from(*n) % submitted.max(1));
        let kind = match s {
            Step::Submit { project, gpus, hours, deferrable } => {
                let id = format!("j{submitted}");
                submitted += 1;
                EventKind::JobSubmitted(Box::new(JobSpec {
                    id,
                    project: format!("p{project}"),
                    user: "u".into(),
                    gpus: (*gpus).into(),
                    nodes: 1,
                    requested_hours: f64::from(*hours),
                    ready: Ready::all(),
                    deferrable: *deferrable,
                    ..JobSpec::default()
                }))
            }
            Step::Start(n) => EventKind::JobStarted { job_id: job(n), info: Default::default() },
            Step::Sample(n, u) => EventKind::JobSample(bursar_model::Sample {
                job_id: job(n),
                gpu_util: f64::from(*u) / 100.0,
                ..Default::default()
            }),
            Step::Finish(n, s) => EventKind::JobFinished {
                job_id: job(n),
                status: [FinishStatus::Succeeded, FinishStatus::Failed, FinishStatus::Cancelled][usize::from(*s)],
            },
            Step::Approve(n) => EventKind::ApprovalGranted { job_id: job(n), by: Some("bob".into()) },
            Step::Tick => EventKind::ClockTick,
        };
        out.push(Event { id: format!("e{i}"), time, kind, extra: Vec::new() });
    }
    out
}

fn run(engine: &mut Engine, events: &[Event]) -> Vec<Decision> {
    let mut out = Vec::new();
    for e in events {
        engine.process(e, None, &mut out);
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// At every admission the quota policy allowed, reserved + settled usage of the project stays within
    /// the limit. (Approval grants are excluded: approving is how a person expands the budget.)
    #[test]
    fn quota_never_overshoots(steps in proptest::collection::vec(step(), 1..120)) {
        let set = policy_set();
        let mut engine = Engine::new(set);
        for e in events(&steps) {
            let mut out = Vec::new();
            engine.process(&e, None, &mut out);
            if let EventKind::JobSubmitted(job) = &e.kind {
                let admitted = out
                    .iter()
                    .any(|d| d.admission && matches!(d.decision, DecisionKind::Allow | DecisionKind::Defer));
                if admitted && job.gpus <= 12 {
                    let usage = engine.state().usage(ScopeKind::Project, &job.project, Period::Month, e.time);
                    prop_assert!(usage.reserved <= LIMIT + 1e-6, "reserved {} over {LIMIT}", usage.reserved);
                    let held = engine.state().ledger(ScopeKind::Project, &job.project).map_or(0, |l| l.held_gpus.floor());
                    prop_assert!(held <= 24 + 12, "held {held}");
                }
            }
        }
    }

    /// The same events give byte-identical decisions; resending every event changes nothing.
    #[test]
    fn replay_is_deterministic_and_resends_are_ignored(steps in proptest::collection::vec(step(), 1..120)) {
        let evs = events(&steps);
        let a = run(&mut Engine::new(policy_set()), &evs);
        let b = run(&mut Engine::new(policy_set()), &evs);
        let line = |ds: &[Decision]| ds.iter().map(Decision::to_json).collect::<Vec<_>>();
        prop_assert_eq!(line(&a), line(&b));
        let mut doubled = Vec::new();
        for e in &evs {
            doubled.push(e.clone());
            doubled.push(e.clone());
        }
        let c = run(&mut Engine::new(policy_set()), &doubled);
        prop_assert_eq!(line(&a), line(&c));
    }

    /// Stopping after any event, snapshotting through JSON and resuming gives the same decisions as an
    /// uninterrupted run (what `serve` relies on for restarts).
    #[test]
    fn restart_from_snapshot_changes_nothing(steps in proptest::collection::vec(step(), 2..100), cut in 0usize..100) {
        let evs = events(&steps);
        let cut = cut % evs.len();
        let whole = run(&mut Engine::new(policy_set()), &evs);
        let mut first = Engine::new(policy_set());
        let mut out = run(&mut first, &evs[..cut]);
        let saved = serde_json::to_string(&first.snapshot()).expect("snapshot serialises");
        let snapshot = serde_json::from_str(&saved).expect("snapshot deserialises");
        let mut second = Engine::restore(policy_set(), snapshot);
        out.extend(run(&mut second, &evs[cut..]));
        let line = |ds: &[Decision]| ds.iter().map(Decision::to_json).collect::<Vec<_>>();
        prop_assert_eq!(line(&whole), line(&out));
    }
}
