//! The people-facing views of engine state: the pool page and `GET /v1/pool`, `GET /v1/pending`
//! (`bursar pending`) — each with the pool's capacity and queue ([`crate::estimate::queue`]) — and
//! what the notifier and the action links need to know about a job ([`JobFacts`]). Each is computed
//! on the engine thread as a read ([`crate::core::Work::Read`]).
//!
//! The engine thread is the only place the state may be read, and it is on the scheduler's critical
//! path: three `GET /v1/pool` on a busy pool once took admission latency from 22 ms to 2.6 s while
//! it formatted every job. So the pool and pending views are built in two steps: on the engine
//! thread, [`PoolInput`] copies what they need (the records of the jobs that wait or hold GPUs,
//! the project ledgers, the quota lines, the estimator's inputs) and nothing more; off it, [`PoolInput::pool`] and
//! [`PoolInput::pending`] compute the idle deadlines, the texts and the orders.
//!
//! Numbers come from the engine's own definitions: a quota's line is
//! `QuotaLimit::counted(State::usage(..))` against `QuotaLimit::gpu_hours_for` (what the quota
//! family admits with), an idle deadline is the idle rule's own [`bursar_engine::Policy::deadline`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bursar_engine::policy::QuotaScope;
use bursar_engine::{Engine, JobPhase, JobRecord, PolicySet, ScopeKind};
use bursar_model::api::{
    ApprovalWait, DeferredWait, IdleWait, JobLine, PendingReply, PoolView, ProjectLine, QuotaLine,
};
use bursar_model::{Duration, Period, Timestamp};
use bursar_notify::JobFacts;

use crate::utilisation::Skips;

/// The jobs that wait for a person: held for an approval, or alerted as idle (the notifier's first
/// start on an audit log).
pub fn open_jobs(engine: &Engine) -> Vec<String> {
    engine
        .state()
        .jobs()
        .filter(|(id, j)| match j.phase() {
            JobPhase::PendingApproval => true,
            JobPhase::Running | JobPhase::Admitted => !idle_waits(engine, id, j).is_empty(),
            _ => false,
        })
        .map(|(id, _)| id.to_owned())
        .collect()
}

/// The ids of the enforced policies that are quotas (an approval they asked for is "over budget").
fn quota_policies(engine: &Engine) -> BTreeSet<String> {
    engine.policies().limits().quotas().map(|(p, _)| p.policy.clone()).collect()
}

fn approval_wait(id: &str, j: &JobRecord, quotas: &BTreeSet<String>) -> Option<ApprovalWait> {
    let p = j.pending().filter(|_| j.phase() == JobPhase::PendingApproval)?;
    // Which limit held it: a concurrent-GPU or queue cap is not a budget (issue 52). A quota whose
    // words are not in the reason (an older log) keeps the old label.
    let quota = p.policies.iter().any(|id| quotas.contains(&**id));
    let held_by: Vec<String> = if quota {
        bursar_lang::families::quota_held_by(&p.reason).into_iter().map(str::to_owned).collect()
    } else {
        Vec::new()
    };
    let over_budget = quota && (held_by.is_empty() || held_by.iter().any(|l| l == "over budget"));
    Some(ApprovalWait {
        job_id: id.to_owned(),
        project: j.project().to_owned(),
        user: j.user().to_owned(),
        gpus: j.gpus(),
        requested_hours: j.requested_hours(),
        submitted: j.submitted().to_string(),
        expires: p.expires.to_string(),
        // Who may still answer: the approvers of the policies whose request still waits.
        approvers: p.waiting_approvers().iter().map(|a| a.to_string()).collect(),
        policies: p.policies.iter().map(|a| a.to_string()).collect(),
        reason: p.reason.clone(),
        over_budget,
        held_by,
        self_approval: p.waiting_self_approval(),
    })
}

fn idle_waits(engine: &Engine, id: &str, j: &JobRecord) -> Vec<IdleWait> {
    idle_waits_under(engine.policies(), id, j)
}

/// The idle deadlines of `j` under `policies` (the engine's own [`Engine::deadlines`], for a copied
/// record).
fn idle_waits_under(policies: &PolicySet, id: &str, j: &JobRecord) -> Vec<IdleWait> {
    policies
        .policies()
        .iter()
        .filter(|p| p.meta().mode == bursar_engine::Mode::Enforce && p.meta().selector.matches(j))
        .filter_map(|p| p.deadline(j).map(|d| (p.meta().id.clone(), d)))
        .map(|(policy, d)| {
            let u = j.util();
            let sampled = u.samples > 0;
            IdleWait {
                job_id: id.to_owned(),
                project: j.project().to_owned(),
                user: j.user().to_owned(),
                gpus: j.gpus(),
                alerted: d.since.to_string(),
                reclaim_at: d.at.to_string(),
                policy: policy.to_string(),
                idle_since: d.idle_since.map(|t| t.to_string()),
                gpu_util: sampled.then_some(u.gpu_util),
                mem_util: (sampled && u.mem_util >= 0.0).then_some(u.mem_util),
                last_sample: u.last_sample.get().map(|t| t.to_string()),
                no_sample: None,
            }
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

fn scope_name(scope: &QuotaScope) -> String {
    match scope {
        QuotaScope::Project => "project".to_owned(),
        QuotaScope::User => "user".to_owned(),
        QuotaScope::Tag(k) => format!("tag:{k}"),
    }
}

/// The day on which `left` GPU-hours (the budget less what was used) run out at `per_day` a day from `now`, if that is before the
/// period (ending at day `end`) is over.
fn runs_out(now: Timestamp, left: f64, per_day: f64, end: i64) -> Option<String> {
    if left <= 0.0 || per_day <= 0.0 {
        return None;
    }
    let at = now.plus(Duration((left / per_day * 86_400_000.0).min(4e14) as i64));
    (at.day() < end).then(|| at.to_string().get(..10).unwrap_or_default().to_owned())
}

/// Days of the period starting on day `from` gone by at `now`: at least an hour's worth, so a
/// period a minute old does not extrapolate a minute's use into a rate.
fn days_gone(now: Timestamp, from: i64) -> f64 {
    ((now.millis() as f64 - from as f64 * 86_400_000.0) / 86_400_000.0).max(1.0 / 24.0)
}

/// A quota line with what finishing it off the engine thread needs: the ledger's scope kind and tag
/// key, and the period's first and end day.
#[derive(Debug, Clone)]
struct Line {
    line: QuotaLine,
    kind: ScopeKind,
    bounds: (i64, i64),
}

/// One line per enforced quota and ledger it governs in the current period (`running`, `per_day`
/// and `runs_out` are filled by [`PoolInput::pool`], off the engine thread).
fn quota_lines(engine: &Engine) -> Vec<Line> {
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
        let bounds = q.period.bounds(now.day());
        for name in names {
            if !p.applies_to(kind, &name) {
                continue;
            }
            let Some(limit) = q.gpu_hours_for(&name) else { continue };
            let usage = st.usage(kind, &name, q.period, now);
            let counted = q.counted(&usage);
            let today = st.usage(kind, &name, Period::Day, now);
            lines.push(Line {
                line: QuotaLine {
                    policy: p.policy.clone(),
                    scope: scope_name(&q.scope),
                    ledger: name,
                    period: q.period.label(now.day()),
                    limit,
                    used: counted - usage.reserved,
                    reserved: usage.reserved,
                    running: 0.0,
                    left: limit - counted,
                    used_today: q.counted(&today) - today.reserved,
                    days: days_gone(now, bounds.0),
                    per_day: 0.0,
                    runs_out: None,
                },
                kind,
                bounds,
            });
        }
    }
    lines
}

/// What running jobs have run so far, by ledger, for the jobs submitted in `bounds` (usage counts on
/// the submission day): one pass over the running jobs, however many quota lines there are.
fn running_by_ledger(
    jobs: &[(String, JobRecord)],
    at: Timestamp,
    lines: &[Line],
) -> std::collections::HashMap<(ScopeKind, String, (i64, i64)), f64> {
    let wanted: BTreeSet<(i64, i64)> = lines.iter().map(|l| l.bounds).collect();
    let mut out = std::collections::HashMap::new();
    for (_, j) in jobs.iter().filter(|(_, j)| j.phase() == JobPhase::Running) {
        let ran = j.runtime_gpu_hours(at);
        if ran <= 0.0 {
            continue;
        }
        let day = j.submitted().day();
        for &b in wanted.iter().filter(|b| b.0 <= day && day < b.1) {
            *out.entry((ScopeKind::Project, j.project().to_owned(), b)).or_default() += ran;
            *out.entry((ScopeKind::User, j.user().to_owned(), b)).or_default() += ran;
            for t in j.tags() {
                *out.entry((ScopeKind::Tag, t.ledger.to_string(), b)).or_default() += ran;
            }
        }
    }
    out
}

/// How many live jobs a project's section lists.
pub const PROJECT_JOBS_SHOWN: usize = 50;

/// The last [`PoolInput`] and when it was taken, shared by the handlers.
pub type PoolInputCache = Arc<tokio::sync::Mutex<Option<(std::time::Instant, Arc<PoolInput>)>>>;

/// What the pool and pending views need from the engine, copied on the engine thread.
#[derive(Debug)]
pub struct PoolInput {
    engine_time: Timestamp,
    policies: Arc<PolicySet>,
    quotas: BTreeSet<String>,
    /// The jobs that wait for an approval, are deferred, admitted or running.
    jobs: Vec<(String, JobRecord)>,
    /// Every project ledger: name, held GPUs, running GPUs.
    ledgers: Vec<(String, bursar_model::Gpus, bursar_model::Gpus)>,
    quota_lines: Vec<Line>,
    /// The capacity and the queue's inputs (the inventory, the live jobs, the recent runs).
    estimate: crate::estimate::EstimateInput,
}

impl PoolInput {
    /// Copies what the views need (on the engine thread).
    pub fn of(engine: &Engine) -> PoolInput {
        let st = engine.state();
        let jobs = st
            .jobs()
            .filter(|(_, j)| j.phase().is_live() || j.phase() == JobPhase::PendingApproval)
            .map(|(id, j)| (id.to_owned(), j.clone()))
            .collect();
        let ledgers =
            st.ledgers(ScopeKind::Project).map(|(name, l)| (name.to_owned(), l.held_gpus, l.running_gpus)).collect();
        PoolInput {
            engine_time: st.now(),
            policies: engine.policies().clone(),
            quotas: quota_policies(engine),
            jobs,
            ledgers,
            quota_lines: quota_lines(engine),
            estimate: crate::estimate::gather(engine),
        }
    }

    /// The estimator's inputs in this copy.
    pub fn estimate_input(&self) -> &crate::estimate::EstimateInput {
        &self.estimate
    }

    /// With the site's `[[capacity]]` rows for the partitions no inventory names
    /// ([`crate::estimate::EstimateInput::configured`]).
    pub fn configured(mut self, rows: &[bursar_model::CapacityRow]) -> PoolInput {
        self.estimate = self.estimate.configured(rows);
        self
    }

    /// Every job waiting for an approval and every job alerted as idle, oldest first, with the
    /// pool's capacity and queue ([`crate::estimate::queue`]); `skips` (the utilisation source's, if
    /// serve runs one) says why an idle job has no fresh sample.
    pub fn pending(&self, skips: Option<&Skips>) -> PendingReply {
        let mut approvals = Vec::new();
        let mut idle = Vec::new();
        for (id, j) in &self.jobs {
            match j.phase() {
                JobPhase::PendingApproval => approvals.extend(approval_wait(id, j, &self.quotas)),
                JobPhase::Running | JobPhase::Admitted => idle.extend(idle_waits_under(&self.policies, id, j)),
                _ => {}
            }
        }
        approvals.sort_by(|a, b| (&a.submitted, &a.job_id).cmp(&(&b.submitted, &b.job_id)));
        idle.sort_by(|a, b| (&a.reclaim_at, &a.job_id).cmp(&(&b.reclaim_at, &b.job_id)));
        if let Some(board) = skips {
            for w in &mut idle {
                w.no_sample = board.by_job.get(&w.job_id).cloned();
            }
        }
        let (capacity, queue) = crate::estimate::queue(&self.estimate);
        PendingReply { engine_time: self.engine_time.to_string(), approvals, idle, capacity, queue, for_user: None }
    }

    /// The pool page's view at wall time `now` (the denies are left for the caller to read from the
    /// audit log); `skips` as for [`PoolInput::pending`].
    pub fn pool(&self, now: Timestamp, skips: Option<&Skips>) -> PoolView {
        let pending = self.pending(skips);
        let mut live: BTreeMap<&str, Vec<(&str, &JobRecord)>> = BTreeMap::new();
        let mut deferred = Vec::new();
        for (id, j) in &self.jobs {
            if j.phase().is_live() {
                live.entry(j.project()).or_default().push((id, j));
            }
            if j.phase() == JobPhase::Deferred {
                deferred.push(DeferredWait {
                    job_id: id.clone(),
                    project: j.project().to_owned(),
                    user: j.user().to_owned(),
                    gpus: j.gpus(),
                    until: j.defer_until().map(|t| t.to_string()).unwrap_or_default(),
                });
            }
        }
        deferred.sort_by(|a, b| (&a.until, &a.job_id).cmp(&(&b.until, &b.job_id)));
        let ledger: BTreeMap<&str, (bursar_model::Gpus, bursar_model::Gpus)> =
            self.ledgers.iter().map(|(n, held, running)| (n.as_str(), (*held, *running))).collect();
        let job_line = |id: &str, j: &JobRecord| {
            let u = j.util();
            JobLine {
                job_id: id.to_owned(),
                user: j.user().to_owned(),
                gpus: j.gpus(),
                phase: j.phase().as_str().to_owned(),
                started: j.started().map(|t| t.to_string()),
                gpu_util: (u.samples > 0).then_some(u.gpu_util),
                last_sample: u.last_sample.get().map(|t| t.to_string()),
                no_sample: skips.and_then(|b| b.by_job.get(id)).cloned(),
                runs: crate::views::runs(j),
            }
        };
        let line = |name: &str| -> ProjectLine {
            let (held, running) = ledger.get(name).copied().unwrap_or_default();
            let mut jobs: Vec<(&str, &JobRecord)> = live.get(name).cloned().unwrap_or_default();
            // Running first, the longest-running first; then the rest by submission.
            jobs.sort_by_key(|(id, j)| (j.started().is_none(), j.started(), j.submitted(), *id));
            ProjectLine {
                project: name.to_owned(),
                held_gpus: held,
                running_gpus: running,
                live_jobs: jobs.len() as u64,
                jobs: jobs.iter().take(PROJECT_JOBS_SHOWN).map(|(id, j)| job_line(id, j)).collect(),
                quotas: Vec::new(),
            }
        };
        let mut projects: BTreeMap<String, ProjectLine> = BTreeMap::new();
        for (name, _, _) in &self.ledgers {
            projects.insert(name.clone(), line(name));
        }
        let ran = running_by_ledger(&self.jobs, self.engine_time, &self.quota_lines);
        let mut shared = Vec::new();
        for l in &self.quota_lines {
            let mut q = l.line.clone();
            q.running = ran.get(&(l.kind, q.ledger.clone(), l.bounds)).copied().unwrap_or(0.0);
            q.per_day = (q.used + q.running) / q.days;
            // From use alone: what the budget has left once what ran is counted, not what is reserved.
            q.runs_out = runs_out(self.engine_time, q.limit - q.used - q.running, q.per_day, l.bounds.1);
            if q.scope == "project" {
                projects.entry(q.ledger.clone()).or_insert_with(|| line(&q.ledger)).quotas.push(q);
            } else {
                shared.push(q);
            }
        }
        PoolView {
            engine_time: self.engine_time.to_string(),
            now: now.to_string(),
            projects: projects.into_values().collect(),
            shared_quotas: shared,
            approvals: pending.approvals,
            idle: pending.idle,
            deferred,
            denies: Vec::new(),
            capacity: pending.capacity,
            queue: pending.queue,
        }
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

    /// Issue 52: a hold by a concurrent-GPU cap said "over budget". Now the label names the limit.
    #[test]
    fn the_hold_says_which_limit_held_it() {
        let dir = std::env::temp_dir().join(format!("bursar-serve-hold-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("q.toml"),
            r#"
[[policy]]
id = "quota/cap"
description = "8 GPUs at once, 100 GPU-hours a month; over either, a person decides."
kind = "quota"
max_gpus = 8
gpu_hours = 100
on_exhaust = "require_approval"
"#,
        )
        .unwrap();
        let set = bursar_loader::load_dir(&dir, &bursar_loader::NoComponents).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let mut e = Engine::new(std::sync::Arc::new(set));
        let mut out = Vec::new();
        for line in [
            // 8 GPUs for 2 hours: 16 of 100 GPU-hours, 8 GPUs held.
            r#"{"id":"s1","time":"2026-11-02T00:00:00Z","type":"job.submitted","job":{"id":"a","project":"p","user":"u","gpus":8,"requested_hours":2}}"#,
            // 1 GPU for 1 hour: within the budget, over the cap.
            r#"{"id":"s2","time":"2026-11-02T00:01:00Z","type":"job.submitted","job":{"id":"b","project":"p","user":"u","gpus":1,"requested_hours":1}}"#,
            // 8 GPUs for 20 hours: over both.
            r#"{"id":"s3","time":"2026-11-02T00:02:00Z","type":"job.submitted","job":{"id":"c","project":"p","user":"u","gpus":8,"requested_hours":20}}"#,
        ] {
            e.apply(&bursar_model::decode_input(line).unwrap(), Some(line), &mut out);
        }
        let pending = PoolInput::of(&e).pending(None);
        let by = |job: &str| pending.approvals.iter().find(|a| a.job_id == job).unwrap();
        assert_eq!(by("b").held_by, ["over the concurrent-GPU cap"]);
        assert!(!by("b").over_budget, "a cap is not a budget");
        assert_eq!(by("b").hold_label().as_deref(), Some("over the concurrent-GPU cap"));
        assert_eq!(by("c").held_by, ["over budget", "over the concurrent-GPU cap"]);
        assert!(by("c").over_budget);
        assert_eq!(by("c").hold_label().as_deref(), Some("over budget and over the concurrent-GPU cap"));
    }
}
