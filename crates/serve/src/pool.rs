//! The people-facing views of engine state, built on the engine thread (the only place the state
//! may be read, like [`crate::views`]) and answered after the batch they were queued in is durable:
//! the pool page and `GET /v1/pool`, `GET /v1/pending` (`bursar pending`), and what the notifier and
//! the action links need to know about a job ([`JobFacts`]).
//!
//! Numbers come from the engine's own definitions: a quota's line is
//! `QuotaLimit::counted(State::usage(..))` against `QuotaLimit::gpu_hours_for` (what the quota
//! family admits with), an idle deadline is the idle rule's own [`bursar_engine::Policy::deadline`].

use std::collections::{BTreeMap, BTreeSet};

use bursar_engine::policy::QuotaScope;
use bursar_engine::{Engine, JobPhase, JobRecord, ScopeKind};
use bursar_model::api::{ApprovalWait, DeferredWait, IdleWait, PendingReply, PoolView, ProjectLine, QuotaLine};
use bursar_model::{Duration, Period, Timestamp};
use bursar_notify::JobFacts;

/// A question for the engine thread ([`crate::core::Work::People`]).
#[derive(Debug)]
pub enum Ask {
    /// The pool page's view (without the denies, which the audit log holds), at wall time `now`.
    Pool {
        /// The wall clock of the request.
        now: Timestamp,
    },
    /// What waits for a person.
    Pending,
    /// What the engine knows about these jobs, and whether input `seen` was applied (a used link).
    Facts {
        /// The jobs.
        jobs: Vec<String>,
        /// An input id to look up.
        seen: Option<String>,
    },
}

/// The answer to an [`Ask`].
#[derive(Debug)]
pub enum Answer {
    /// For [`Ask::Pool`].
    Pool(Box<PoolView>),
    /// For [`Ask::Pending`].
    Pending(PendingReply),
    /// For [`Ask::Facts`]: one entry per job asked (`None`: unknown), and whether the id was seen.
    Facts(Vec<Option<JobFacts>>, bool),
}

/// Answers `ask` from `engine`.
pub fn answer(engine: &Engine, ask: Ask) -> Answer {
    match ask {
        Ask::Pool { now } => Answer::Pool(Box::new(pool(engine, now))),
        Ask::Pending => Answer::Pending(pending(engine)),
        Ask::Facts { jobs, seen } => {
            let facts = jobs.iter().map(|j| facts(engine, j)).collect();
            Answer::Facts(facts, seen.is_some_and(|id| engine.seen(&id)))
        }
    }
}

/// The ids of the enforced policies that are quotas (an approval they asked for is "over budget").
fn quota_policies(engine: &Engine) -> BTreeSet<String> {
    engine.policies().limits().quotas().map(|(p, _)| p.policy.clone()).collect()
}

fn approval_wait(id: &str, j: &JobRecord, quotas: &BTreeSet<String>) -> Option<ApprovalWait> {
    let p = j.pending().filter(|_| j.phase() == JobPhase::PendingApproval)?;
    Some(ApprovalWait {
        job_id: id.to_owned(),
        project: j.project().to_owned(),
        user: j.user().to_owned(),
        gpus: j.gpus(),
        requested_hours: j.requested_hours(),
        submitted: j.submitted().to_string(),
        expires: p.expires.to_string(),
        approvers: p.approvers.iter().map(|a| a.to_string()).collect(),
        policies: p.policies.iter().map(|a| a.to_string()).collect(),
        reason: p.reason.clone(),
        over_budget: p.policies.iter().any(|id| quotas.contains(&**id)),
        self_approval: p.self_approval,
    })
}

fn idle_waits(engine: &Engine, id: &str, j: &JobRecord) -> Vec<IdleWait> {
    engine
        .deadlines(id)
        .into_iter()
        .map(|(policy, d)| IdleWait {
            job_id: id.to_owned(),
            project: j.project().to_owned(),
            user: j.user().to_owned(),
            gpus: j.gpus(),
            alerted: d.since.to_string(),
            reclaim_at: d.at.to_string(),
            policy: policy.to_string(),
        })
        .collect()
}

/// What the notifier and the action links need to know about job `id`.
pub fn facts(engine: &Engine, id: &str) -> Option<JobFacts> {
    let j = engine.state().job(id)?;
    Some(JobFacts {
        phase: j.phase().as_str().to_owned(),
        live: j.phase().is_live(),
        user: j.user().to_owned(),
        project: j.project().to_owned(),
        approval: approval_wait(id, j, &quota_policies(engine)),
        idle: idle_waits(engine, id, j),
    })
}

/// Every job waiting for an approval and every job alerted as idle, oldest first.
pub fn pending(engine: &Engine) -> PendingReply {
    let quotas = quota_policies(engine);
    let st = engine.state();
    let mut approvals = Vec::new();
    let mut idle = Vec::new();
    for (id, j) in st.jobs() {
        match j.phase() {
            JobPhase::PendingApproval => approvals.extend(approval_wait(id, j, &quotas)),
            JobPhase::Running | JobPhase::Admitted => idle.extend(idle_waits(engine, id, j)),
            _ => {}
        }
    }
    approvals.sort_by(|a, b| (&a.submitted, &a.job_id).cmp(&(&b.submitted, &b.job_id)));
    idle.sort_by(|a, b| (&a.reclaim_at, &a.job_id).cmp(&(&b.reclaim_at, &b.job_id)));
    PendingReply { engine_time: st.now().to_string(), approvals, idle }
}

fn scope_name(scope: &QuotaScope) -> String {
    match scope {
        QuotaScope::Project => "project".to_owned(),
        QuotaScope::User => "user".to_owned(),
        QuotaScope::Tag(k) => format!("tag:{k}"),
    }
}

/// The day on which `left` GPU-hours run out at `per_day` a day from `now`, if that is before the
/// period (ending at day `end`) is over.
fn runs_out(now: Timestamp, left: f64, per_day: f64, end: i64) -> Option<String> {
    if left <= 0.0 || per_day <= 0.0 {
        return None;
    }
    let at = now.plus(Duration((left / per_day * 86_400_000.0).min(4e14) as i64));
    (at.day() < end).then(|| at.to_string().get(..10).unwrap_or_default().to_owned())
}

/// One line per enforced quota and ledger it governs in the current period.
fn quota_lines(engine: &Engine) -> Vec<QuotaLine> {
    let st = engine.state();
    let now = st.now();
    let mut lines = Vec::new();
    for (p, q) in engine.policies().limits().quotas() {
        let kind = q.scope.kind();
        let mut names: BTreeSet<String> =
            st.ledgers(kind).map(|(n, _)| n.to_owned()).filter(|n| q.scope.counts(kind, n)).collect();
        // Budgets written for a ledger that has counted nothing yet still show, at zero.
        for (value, _) in &q.limits {
            names.insert(match &q.scope {
                QuotaScope::Tag(key) => format!("{key}={value}"),
                _ => value.clone(),
            });
        }
        for name in names {
            if !p.applies_to(kind, &name) {
                continue;
            }
            let Some(limit) = q.gpu_hours_for(&name) else { continue };
            let usage = st.usage(kind, &name, q.period, now);
            let counted = q.counted(&usage);
            let left = limit - counted;
            let today = q.counted(&st.usage(kind, &name, Period::Day, now));
            lines.push(QuotaLine {
                policy: p.policy.clone(),
                scope: scope_name(&q.scope),
                ledger: name,
                period: q.period.label(now.day()),
                limit,
                used: counted - usage.reserved,
                reserved: usage.reserved,
                left,
                today,
                runs_out: runs_out(now, left, today, q.period.bounds(now.day()).1),
            });
        }
    }
    lines
}

/// The pool page's view at wall time `now` (the denies are left for the caller to read from the
/// audit log).
pub fn pool(engine: &Engine, now: Timestamp) -> PoolView {
    let st = engine.state();
    let pending = pending(engine);
    let mut live: BTreeMap<String, u64> = BTreeMap::new();
    let mut deferred = Vec::new();
    for (id, j) in st.jobs() {
        if j.phase().is_live() {
            *live.entry(j.project().to_owned()).or_default() += 1;
        }
        if j.phase() == JobPhase::Deferred {
            deferred.push(DeferredWait {
                job_id: id.to_owned(),
                project: j.project().to_owned(),
                user: j.user().to_owned(),
                gpus: j.gpus(),
                until: j.defer_until().map(|t| t.to_string()).unwrap_or_default(),
            });
        }
    }
    deferred.sort_by(|a, b| (&a.until, &a.job_id).cmp(&(&b.until, &b.job_id)));
    let mut projects: BTreeMap<String, ProjectLine> = BTreeMap::new();
    let line = |name: &str| -> ProjectLine {
        let ledger = st.ledger(ScopeKind::Project, name);
        ProjectLine {
            project: name.to_owned(),
            held_gpus: ledger.map_or(0, |l| l.held_gpus),
            running_gpus: ledger.map_or(0, |l| l.running_gpus),
            live_jobs: live.get(name).copied().unwrap_or(0),
            quotas: Vec::new(),
        }
    };
    for (name, _) in st.ledgers(ScopeKind::Project) {
        projects.insert(name.to_owned(), line(name));
    }
    let mut shared = Vec::new();
    for q in quota_lines(engine) {
        if q.scope == "project" {
            projects.entry(q.ledger.clone()).or_insert_with(|| line(&q.ledger)).quotas.push(q);
        } else {
            shared.push(q);
        }
    }
    PoolView {
        engine_time: st.now().to_string(),
        now: now.to_string(),
        projects: projects.into_values().collect(),
        shared_quotas: shared,
        approvals: pending.approvals,
        idle: pending.idle,
        deferred,
        denies: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_runs_out_inside_its_period_or_not_at_all() {
        let now = Timestamp::parse("2026-11-10T12:00:00Z").unwrap();
        let end = Period::Month.bounds(now.day()).1;
        assert_eq!(runs_out(now, 100.0, 25.0, end).as_deref(), Some("2026-11-14"));
        assert_eq!(runs_out(now, 1000.0, 25.0, end), None); // lasts past November
        assert_eq!(runs_out(now, 100.0, 0.0, end), None);
        assert_eq!(runs_out(now, -5.0, 25.0, end), None);
    }
}
