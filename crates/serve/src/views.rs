//! Read-only JSON views of engine state for `GET /v1/jobs/{id}` and `GET /v1/projects/{name}`,
//! built on the engine thread (the only place the state may be read) and answered after the batch
//! they were queued in is durable.

use bursar_engine::{Engine, JobRecord, ScopeKind};
use bursar_model::Period;
use serde_json::{Value, json};

fn ts(t: impl Into<Option<bursar_model::Timestamp>>) -> Value {
    t.into().map_or(Value::Null, |t| Value::String(t.to_string()))
}

/// What bursar knows about job `id`, or `None`.
pub fn job(engine: &Engine, id: &str) -> Option<Value> {
    let j: &JobRecord = engine.state().job(id)?;
    let now = engine.state().now;
    Some(json!({
        "job_id": id,
        "phase": j.phase.as_str(),
        "live": j.phase.is_live(),
        "project": &*j.project,
        "user": &*j.user,
        "queue": j.queue.as_deref(),
        "stage": j.stage.as_deref(),
        "gpu_type": j.gpu_type.as_deref(),
        "gpus": j.gpus,
        "nodes": j.nodes,
        "requested_hours": j.requested_hours,
        "submitted": j.submitted.to_string(),
        "started": ts(j.started),
        "ended": ts(j.ended),
        "status": j.status,
        "deferred_until": ts(j.defer_until),
        "reserved_gpu_hours": j.reserved,
        "runtime_gpu_hours": j.runtime_gpu_hours(now),
        "pending_approval": j.pending.as_ref().map(|p| json!({
            "expires": p.expires.to_string(),
            "approvers": p.approvers.iter().map(|a| &**a).collect::<Vec<_>>(),
            "policies": p.policies.iter().map(|a| &**a).collect::<Vec<_>>(),
            "reason": p.reason,
        })),
        "utilisation": {
            "last_sample": ts(j.util.last_sample),
            "gpu_util": j.util.gpu_util,
            "mem_util": j.util.mem_util,
            "avg_gpu_util": j.util.avg_gpu_util,
            "samples": j.util.samples,
            "keepalive": ts(j.util.keepalive),
        },
        "tags": j.tags.iter().map(|t| (t.key.to_string(), Value::String(t.value.to_string()))).collect::<serde_json::Map<_, _>>(),
        "engine_time": now.to_string(),
    }))
}

/// A project's usage over the day, week and month containing the engine's current time, and the GPUs
/// it holds.
pub fn project(engine: &Engine, name: &str) -> Value {
    let st = engine.state();
    let now = st.now;
    let usage = |p: Period| {
        let u = st.usage(ScopeKind::Project, name, p, now);
        json!({
            "period": p.label(now.day()),
            "reserved": u.reserved,
            "used": u.used,
            "charged": u.charged,
            "unbilled": u.unbilled,
            "by_runtime": u.by_runtime(),
            "by_billing": u.by_billing(),
        })
    };
    let ledger = st.ledger(ScopeKind::Project, name);
    let live = st.jobs.iter().filter(|(_, j)| &*j.project == name && j.phase.is_live()).count();
    json!({
        "project": name,
        "known": ledger.is_some(),
        "held_gpus": ledger.map_or(0, |l| l.held_gpus),
        "running_gpus": ledger.map_or(0, |l| l.running_gpus),
        "live_jobs": live,
        "day": usage(Period::Day),
        "week": usage(Period::Week),
        "month": usage(Period::Month),
        "engine_time": now.to_string(),
    })
}
