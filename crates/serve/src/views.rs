//! Read-only views of engine state for `GET /v1/jobs/{id}` and `GET /v1/projects/{name}`, built on
//! the engine thread (the only place the state may be read) as `bursar-model` API types and answered
//! after the batch they were queued in is durable.

use bursar_engine::{Engine, JobRecord, ScopeKind};
use bursar_model::api::{JobView, PendingView, ProjectView, UsageView, UtilisationView};
use bursar_model::{Period, Timestamp};

fn ts(t: impl Into<Option<Timestamp>>) -> Option<String> {
    t.into().map(|t| t.to_string())
}

/// A job's [`bursar_model::api::RunsView`]: what the scheduler reported about its runs beyond a plain start and end.
pub fn runs(j: &JobRecord) -> Option<bursar_model::api::RunsView> {
    let r = j.runs()?;
    let view = bursar_model::api::RunsView {
        admitted_gpus: r.admitted_gpus,
        reruns: r.reruns,
        array: r.array.as_deref().map(|a| bursar_model::api::ArrayView {
            tasks: a.tasks,
            slots: a.slots,
            started: a.created,
            live: u32::try_from(a.live.len()).unwrap_or(u32::MAX),
        }),
        parent: r.parent.as_deref().map(str::to_owned),
        released_by: r.released_by.as_deref().map(str::to_owned),
        confirm_by: r.confirm_by.get().map(|t| t.to_string()),
        reclaim_failed: r.reclaim_failed.get().map(|t| t.to_string()),
        requeued: r.requeued,
    };
    Some(view).filter(|v| *v != bursar_model::api::RunsView::default())
}

/// What bursar knows about job `id`, or `None`.
pub fn job(engine: &Engine, id: &str) -> Option<JobView> {
    let j: &JobRecord = engine.state().job(id)?;
    let now = engine.state().now();
    Some(JobView {
        job_id: id.to_owned(),
        phase: j.phase().as_str().to_owned(),
        live: j.phase().is_live(),
        project: j.project().to_string(),
        user: j.user().to_string(),
        queue: j.queue().map(str::to_owned),
        stage: j.stage().map(str::to_owned),
        gpu_type: j.gpu_type().map(str::to_owned),
        gpus: j.gpus(),
        nodes: j.nodes(),
        requested_hours: j.requested_hours(),
        submitted: j.submitted().to_string(),
        started: ts(j.started()),
        ended: ts(j.ended()),
        status: j.status(),
        deferred_until: ts(j.defer_until()),
        reserved_gpu_hours: j.reserved(),
        runtime_gpu_hours: j.total_runtime_gpu_hours(now),
        pending_approval: j.pending().as_ref().map(|p| PendingView {
            expires: p.expires.to_string(),
            approvers: p.approvers.iter().map(|a| a.to_string()).collect(),
            policies: p.policies.iter().map(|a| a.to_string()).collect(),
            reason: p.reason.clone(),
        }),
        utilisation: {
            let u = j.util();
            let sampled = u.samples > 0;
            UtilisationView {
                last_sample: ts(u.last_sample),
                gpu_util: sampled.then_some(u.gpu_util),
                mem_util: (sampled && u.mem_util >= 0.0).then_some(u.mem_util),
                avg_gpu_util: sampled.then_some(u.avg_gpu_util),
                samples: u.samples,
                keepalive: ts(u.keepalive),
                // Filled by the handler from the utilisation source's skips.
                no_sample: None,
            }
        },
        tags: j.tags().iter().map(|t| (t.key.to_string(), t.value.to_string())).collect(),
        engine_time: now.to_string(),
        runs: runs(j),
    })
}

/// A project's usage over the day, week and month containing the engine's current time, and the GPUs
/// it holds.
pub fn project(engine: &Engine, name: &str) -> ProjectView {
    let st = engine.state();
    let now = st.now();
    let usage = |p: Period| {
        let u = st.usage(ScopeKind::Project, name, p, now);
        UsageView {
            period: p.label(now.day()),
            reserved: u.reserved,
            used: u.used,
            charged: u.charged,
            unbilled: u.unbilled,
            by_runtime: u.by_runtime(),
            by_billing: u.by_billing(),
        }
    };
    let ledger = st.ledger(ScopeKind::Project, name);
    let live = st.jobs().filter(|(_, j)| j.project() == name && j.phase().is_live()).count();
    ProjectView {
        project: name.to_owned(),
        known: ledger.is_some(),
        held_gpus: ledger.map_or(bursar_model::Gpus::ZERO, |l| l.held_gpus),
        running_gpus: ledger.map_or(bursar_model::Gpus::ZERO, |l| l.running_gpus),
        live_jobs: live as u64,
        day: usage(Period::Day),
        week: usage(Period::Week),
        month: usage(Period::Month),
        engine_time: now.to_string(),
    }
}

/// The admissions of jobs whose id starts with `prefix` that the scheduler has yet to confirm
/// (`GET /v1/unconfirmed`), oldest first.
pub fn unconfirmed(engine: &Engine, prefix: &str) -> bursar_model::api::UnconfirmedView {
    let mut jobs: Vec<(bursar_model::Timestamp, bursar_model::api::UnconfirmedJob)> = engine
        .state()
        .jobs()
        .filter(|(id, _)| id.starts_with(prefix))
        .filter_map(|(id, j)| {
            let by = j.runs()?.confirm_by.get()?;
            Some((
                j.submitted(),
                bursar_model::api::UnconfirmedJob {
                    job_id: id.to_owned(),
                    admitted: j.submitted().to_string(),
                    confirm_by: by.to_string(),
                },
            ))
        })
        .collect();
    jobs.sort_by(|a, b| (a.0, &a.1.job_id).cmp(&(b.0, &b.1.job_id)));
    bursar_model::api::UnconfirmedView {
        engine_time: engine.state().now().to_string(),
        jobs: jobs.into_iter().map(|(_, j)| j).collect(),
    }
}
