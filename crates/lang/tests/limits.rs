//! What the TOML families say they limit (`Policy::limits`), and how a `PolicySet` folds it: the
//! numbers the report draws its budgets and idle threshold from must be the ones admission checks.

#![expect(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test fixtures that fail to build stop the test"
)]

use std::path::Path;
use std::sync::Arc;

use bursar_engine::policy::{Limits, QuotaLimit, QuotaScope, Settle};
use bursar_engine::{Engine, Mode, Policy, PolicySet, ScopeKind};
use bursar_model::{Decision, DecisionKind, Event, EventKind, JobSpec, Period, Timestamp};

fn policies(toml: &str) -> Vec<Arc<dyn Policy>> {
    match bursar_lang::compile_str("t.toml", toml, Path::new(".")) {
        Ok(c) => c.policies,
        Err(d) => panic!("{}", d.iter().map(ToString::to_string).collect::<String>()),
    }
}

fn set(toml: &str) -> PolicySet {
    PolicySet::new(policies(toml), Vec::new(), "test".into()).expect("a valid set")
}

fn one(toml: &str) -> Limits {
    let p = policies(toml);
    assert_eq!(p.len(), 1);
    p[0].limits()
}

#[test]
fn a_quota_describes_its_default_its_limits_and_its_caps() {
    let l = one(r#"
[[policy]]
id = "q"
description = "d"
kind = "quota"
gpu_hours = 1_000
limits = { nlp = 400, vision = 2_500.5 }
max_gpus = 64
queues = { short = 16 }
settle = "billing"
"#);
    assert_eq!(l.idle_below, None);
    assert_eq!(
        l.quotas,
        vec![QuotaLimit {
            scope: QuotaScope::Project,
            period: Period::Month,
            gpu_hours: Some(1_000.0),
            limits: vec![("nlp".into(), 400.0), ("vision".into(), 2_500.5)],
            max_gpus: Some(64.into()),
            queues: vec![("short".into(), 16.into())],
            settle: Settle::Billing,
        }]
    );
    let q = &l.quotas[0];
    assert_eq!(q.gpu_hours_for("nlp"), Some(400.0));
    assert_eq!(q.gpu_hours_for("speech"), Some(1_000.0), "a name without its own limit gets the default");
}

#[test]
fn a_quota_with_only_limits_has_no_default() {
    let l = one("[[policy]]\nid = \"q\"\ndescription = \"d\"\nkind = \"quota\"\nlimits = { nlp = 5 }\n");
    assert_eq!(l.quotas[0].gpu_hours_for("nlp"), Some(5.0));
    assert_eq!(l.quotas[0].gpu_hours_for("other"), None);
    assert_eq!(l.quotas[0].settle, Settle::Runtime, "runtime settlement is the default");
}

#[test]
fn periods_and_scopes_are_described_as_written() {
    for (period, want) in [("day", Period::Day), ("week", Period::Week), ("month", Period::Month)] {
        for (scope, scope_want) in
            [("project", QuotaScope::Project), ("user", QuotaScope::User), ("tag:team", QuotaScope::Tag("team".into()))]
        {
            let l = one(&format!(
                "[[policy]]\nid = \"q\"\ndescription = \"d\"\nkind = \"quota\"\nscope = \"{scope}\"\nperiod = \"{period}\"\ngpu_hours = 7\n"
            ));
            assert_eq!(l.quotas[0].period, want, "{period}");
            assert_eq!(l.quotas[0].scope, scope_want, "{scope}");
        }
    }
}

#[test]
fn a_tag_quota_limits_by_tag_value_as_documented() {
    // `limits = { search = 200 }` under `scope = "tag:team"` is the budget of ledger `team=search`
    // (it used to be looked up under `team=search`, so the documented form never matched).
    let toml = "[[policy]]\nid = \"q\"\ndescription = \"d\"\nkind = \"quota\"\nscope = \"tag:team\"\ngpu_hours = 1_000\nlimits = { search = 200 }\n";
    let q = &one(toml).quotas[0];
    assert_eq!(q.gpu_hours_for("team=search"), Some(200.0));
    assert_eq!(q.gpu_hours_for("team=infra"), Some(1_000.0));
    let s = Arc::new(set(toml));
    let mut engine = Engine::new(s);
    let mut out = Vec::new();
    let mut e = submit("j1", "p", 1, 201.0);
    if let EventKind::JobSubmitted(spec) = &mut e.kind {
        spec.tags = vec![("team".into(), "search".into())];
    }
    engine.process(&e, None, &mut out);
    assert_eq!(out[0].decision, DecisionKind::Deny, "{}", out[0].reason);
    assert!(out[0].reason.contains("of its 200 GPU-hours"), "{}", out[0].reason);
}

#[test]
fn reclaim_describes_its_idle_threshold_and_other_families_nothing() {
    let l = one(
        "[[policy]]\nid = \"r\"\ndescription = \"d\"\nkind = \"reclaim\"\non_finish = true\n[policy.idle]\nbelow = 0.12\nwindow = \"1h\"\n",
    );
    assert_eq!(l, Limits { quotas: vec![], idle_below: Some(0.12) });
    let no_idle = one("[[policy]]\nid = \"r\"\ndescription = \"d\"\nkind = \"reclaim\"\nmax_runtime = \"7d\"\n");
    assert!(no_idle.is_empty(), "a reclaim policy without [policy.idle] defines no threshold");
    let approval = one("[[policy]]\nid = \"a\"\ndescription = \"d\"\nkind = \"approval\"\ngpus_over = 8\n");
    assert!(approval.is_empty());
    let rule = one(
        "[[policy]]\nid = \"x\"\ndescription = \"d\"\nkind = \"rule\"\non = [\"job.sample\"]\nwhen = \"event.gpu_util < 0.5\"\ndecision = \"reclaim\"\nreason = \"low\"\n",
    );
    assert!(rule.is_empty(), "a rule's condition is not a number a reader could draw");
}

const SEVERAL: &str = r#"
[[policy]]
id = "q/wide"
description = "d"
kind = "quota"
gpu_hours = 10_000
limits = { nlp = 20_000, vision = 3_000 }

[[policy]]
id = "q/tighter"
description = "d"
kind = "quota"
gpu_hours = 5_000

[[policy]]
id = "q/ee"
description = "only ee"
kind = "quota"
select = { projects = ["ee"] }
gpu_hours = 1_000

[[policy]]
id = "q/dry"
description = "tried out"
kind = "quota"
mode = "dry_run"
gpu_hours = 10

[[policy]]
id = "q/week"
description = "weekly"
kind = "quota"
period = "week"
gpu_hours = 700

[[policy]]
id = "q/team"
description = "team"
kind = "quota"
scope = "tag:team"
gpu_hours = 300
limits = { search = 200 }

[[policy]]
id = "r/idle"
description = "d"
kind = "reclaim"
[policy.idle]
below = 0.05
window = "2h"

[[policy]]
id = "r/idle-higher"
description = "d"
kind = "reclaim"
[policy.idle]
below = 0.10
window = "6h"

[[policy]]
id = "r/idle-dry"
description = "d"
kind = "reclaim"
mode = "dry_run"
[policy.idle]
below = 0.50
window = "1h"

[[policy]]
id = "r/idle-nlp"
description = "only nlp"
kind = "reclaim"
select = { projects = ["nlp"] }
[policy.idle]
below = 0.30
window = "1h"
"#;

#[test]
fn a_set_folds_budgets_lowest_first_and_ignores_dry_run() {
    let s = set(SEVERAL);
    let l = s.limits();
    assert_eq!(l.policies.len(), 10, "every quota and idle rule is described, dry-run ones too");
    assert!(l.policies.iter().any(|p| p.policy == "q/dry" && p.mode == Mode::DryRun));
    let month = |name: &str| l.gpu_hours(ScopeKind::Project, name, Period::Month);
    // Every job must pass every enforced quota: its own 20,000 does not lift nlp over q/tighter's 5,000.
    assert_eq!(month("nlp"), Some(5_000.0));
    assert_eq!(month("vision"), Some(3_000.0));
    assert_eq!(month("speech"), Some(5_000.0), "the dry-run 10 defines nothing");
    assert_eq!(month("ee"), Some(1_000.0), "q/ee applies to the projects it selects");
    assert_eq!(l.gpu_hours(ScopeKind::Project, "nlp", Period::Week), Some(700.0));
    assert_eq!(l.gpu_hours(ScopeKind::Project, "nlp", Period::Day), None);
    assert_eq!(l.gpu_hours(ScopeKind::User, "alice", Period::Month), None);
    assert_eq!(l.gpu_hours(ScopeKind::Tag, "team=search", Period::Month), Some(200.0));
    assert_eq!(l.gpu_hours(ScopeKind::Tag, "team=infra", Period::Month), Some(300.0));
    assert_eq!(l.gpu_hours(ScopeKind::Tag, "tier=gold", Period::Month), None, "another tag's ledger");
    assert_eq!(l.quotas().count(), 5, "the enforced quotas");
}

#[test]
fn a_set_takes_the_highest_idle_threshold_of_the_rules_for_every_job() {
    let s = set(SEVERAL);
    // A job under 10% is reclaimed by r/idle-higher even though r/idle would let it run; the dry-run
    // 0.50 and the nlp-only 0.30 do not decide what is idle for the whole pool.
    assert_eq!(s.limits().idle_below(), Some(0.10));
    assert_eq!(
        set("[[policy]]\nid = \"a\"\ndescription = \"d\"\nkind = \"approval\"\ngpus_over = 8\n").limits().idle_below(),
        None
    );
    assert!(PolicySet::empty().limits().policies.is_empty());
}

#[test]
fn the_limits_survive_a_round_trip_through_json() {
    let s = set(SEVERAL);
    let json = serde_json::to_string(s.limits()).unwrap();
    let back: bursar_engine::set::PoolLimits = serde_json::from_str(&json).unwrap();
    assert_eq!(&back, s.limits());
}

fn submit(id: &str, project: &str, gpus: u32, hours: f64) -> Event {
    Event {
        id: format!("e-{id}"),
        time: Timestamp::parse("2026-11-02T09:00:00Z").unwrap(),
        kind: EventKind::JobSubmitted(Box::new(JobSpec {
            id: id.into(),
            project: project.into(),
            user: "u".into(),
            gpus: gpus.into(),
            requested_hours: hours,
            ..JobSpec::default()
        })),
        extra: Default::default(),
    }
}

#[test]
fn admission_stops_exactly_at_the_described_budget() {
    // The budget a reader sees is the budget the engine enforces: up to it, allowed; past it, denied.
    // Whole budgets in one job would cross the weekly 700, so lift it for this test.
    let monthly_only = Arc::new(set(
        &SEVERAL.replace("period = \"week\"\ngpu_hours = 700", "period = \"week\"\ngpu_hours = 1_000_000")
    ));
    for project in ["nlp", "vision", "ee"] {
        let budget = monthly_only.limits().gpu_hours(ScopeKind::Project, project, Period::Month).unwrap();
        let mut engine = Engine::new(monthly_only.clone());
        let mut out: Vec<Decision> = Vec::new();
        engine.process(&submit(&format!("{project}-fill"), project, 1, budget), None, &mut out);
        assert_eq!(out[0].decision, DecisionKind::Allow, "{project}: exactly the budget is allowed: {}", out[0].reason);
        out.clear();
        engine.process(&submit(&format!("{project}-over"), project, 1, 1.0), None, &mut out);
        assert_eq!(out[0].decision, DecisionKind::Deny, "{project}: one GPU-hour more is denied: {}", out[0].reason);
    }
}

#[test]
fn the_repository_policies_give_every_project_10_000_gpu_hours_a_month() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies");
    let mut all = Vec::new();
    for f in ["quota.toml", "reclaim.toml"] {
        let text = std::fs::read_to_string(dir.join(f)).unwrap();
        all.extend(bursar_lang::compile_str(f, &text, &dir).expect("the example policies compile").policies);
    }
    let s = PolicySet::new(all, Vec::new(), "repo".into()).unwrap();
    let month = |p: &str| s.limits().gpu_hours(ScopeKind::Project, p, Period::Month);
    assert_eq!(month("ee9e8c"), Some(10_000.0), "a Philly virtual cluster has the default budget");
    assert_eq!(month("vision"), Some(4_000.0));
    assert_eq!(s.limits().gpu_hours(ScopeKind::Tag, "team=search", Period::Week), Some(3_000.0));
    assert_eq!(s.limits().idle_below(), Some(0.05));
}
