//! Conversions at the boundary: an engine [`Context`] becomes the WIT `event` record, and the guest's
//! WIT verdicts become engine [`Verdict`]s after validation. Anything out of range is a
//! [`Failure::BadOutput`], handled like a trap.

use bursar_engine::{Context, Verdict, VerdictKind};
use bursar_model::{BillingMode, Duration, EventKind, FinishStatus, Hints, JobSpec, Timestamp};

use crate::bindings::bursar::policy::types as t;
use crate::policy::Failure;

/// The most verdicts one call may return.
pub const MAX_VERDICTS: usize = 64;
/// The longest reason, in bytes.
pub const MAX_REASON: usize = 4096;

fn job_spec(j: &JobSpec) -> t::JobSpec {
    t::JobSpec {
        id: j.id.clone(),
        project: j.project.clone(),
        user: j.user.clone(),
        queue: j.queue.clone(),
        gpus: j.gpus,
        gpu_type: j.gpu_type.clone(),
        gpu_mem_gb: j.gpu_mem_gb,
        nodes: j.nodes,
        requested_hours: j.requested_hours,
        stage: j.stage.clone(),
        model_params_b: j.model_params_b,
        image: j.image.clone(),
        dataset: j.dataset.clone(),
        script_hash: j.script_hash.clone(),
        ready: t::Ready { image: j.ready.image, data: j.ready.data, script: j.ready.script },
        deferrable: j.deferrable,
        tags: j.tags.iter().map(|(k, v)| t::Tag { key: k.clone(), value: v.clone() }).collect(),
        mixed_precision: j.mixed_precision,
        batch_size: j.batch_size,
        dataloader_workers: j.dataloader_workers,
        interconnect: j.interconnect.clone(),
        region: j.region.clone(),
        config_key: j.config_key(),
    }
}

fn by(job_id: &str, by: &Option<String>) -> t::ByPerson {
    t::ByPerson { job_id: job_id.to_owned(), by: by.clone() }
}

/// The WIT record of the event in `cx`.
pub fn event(cx: &Context<'_>) -> t::Event {
    let e = cx.event;
    let kind = match &e.kind {
        EventKind::JobSubmitted(j) => t::EventKind::JobSubmitted(job_spec(j)),
        EventKind::JobStarted { job_id } => t::EventKind::JobStarted(job_id.clone()),
        EventKind::JobSample(s) => {
            t::EventKind::JobSample(t::Sample { job_id: s.job_id.clone(), gpu_util: s.gpu_util, mem_util: s.mem_util })
        }
        EventKind::JobFinished { job_id, status } => t::EventKind::JobFinished(t::Finished {
            job_id: job_id.clone(),
            status: match status {
                FinishStatus::Succeeded => t::FinishStatus::Succeeded,
                FinishStatus::Failed => t::FinishStatus::Failed,
                FinishStatus::Cancelled => t::FinishStatus::Cancelled,
            },
        }),
        EventKind::JobKeepalive { job_id, by: b } => t::EventKind::JobKeepalive(by(job_id, b)),
        EventKind::BillingCharge(c) => t::EventKind::BillingCharge(t::Charge {
            project: c.project.clone(),
            job_id: c.job_id.clone(),
            gpu_hours: c.gpu_hours,
            amount: c.amount,
            currency: c.currency.clone(),
            mode: c.mode.map(|m| {
                match m {
                    BillingMode::OnDemand => "on_demand",
                    BillingMode::Reserved => "reserved",
                    BillingMode::PerTask => "per_task",
                }
                .to_owned()
            }),
        }),
        EventKind::ApprovalGranted { job_id, by: b } => t::EventKind::ApprovalGranted(by(job_id, b)),
        EventKind::ApprovalRejected { job_id, by: b } => t::EventKind::ApprovalRejected(by(job_id, b)),
        EventKind::AssetRegistered { project, asset } => t::EventKind::AssetRegistered(t::Asset {
            project: project.clone(),
            kind: asset.kind.clone(),
            fingerprint: asset.fingerprint.clone(),
            uri: asset.uri.clone(),
        }),
        EventKind::ClockTick => t::EventKind::ClockTick,
    };
    t::Event {
        id: e.id.clone(),
        time: e.time.millis(),
        now: cx.now.millis(),
        kind,
        raw: cx.raw.unwrap_or_default().to_owned(),
    }
}

/// Bytes the host copies into the guest for `e`: every string of the record (the raw line above all)
/// and 16 bytes per list element, the sizes the canonical ABI lowers into the guest's memory. The
/// fixed-size fields are a few hundred bytes at most and not counted.
pub fn input_bytes(e: &t::Event) -> u64 {
    fn s(v: &str) -> u64 {
        v.len() as u64
    }
    fn o(v: &Option<String>) -> u64 {
        v.as_deref().map_or(0, s)
    }
    let kind = match &e.kind {
        t::EventKind::JobSubmitted(j) => {
            s(&j.id)
                + s(&j.project)
                + s(&j.user)
                + o(&j.queue)
                + o(&j.gpu_type)
                + o(&j.stage)
                + o(&j.image)
                + o(&j.dataset)
                + o(&j.script_hash)
                + j.tags.iter().map(|t| s(&t.key) + s(&t.value) + 16).sum::<u64>()
                + o(&j.interconnect)
                + o(&j.region)
                + s(&j.config_key)
        }
        t::EventKind::JobStarted(id) => s(id),
        t::EventKind::JobSample(x) => s(&x.job_id),
        t::EventKind::JobFinished(f) => s(&f.job_id),
        t::EventKind::JobKeepalive(b) | t::EventKind::ApprovalGranted(b) | t::EventKind::ApprovalRejected(b) => {
            s(&b.job_id) + o(&b.by)
        }
        t::EventKind::BillingCharge(c) => s(&c.project) + o(&c.job_id) + o(&c.currency) + o(&c.mode),
        t::EventKind::AssetRegistered(a) => s(&a.project) + s(&a.kind) + s(&a.fingerprint) + s(&a.uri),
        t::EventKind::ClockTick => 0,
    };
    s(&e.id) + s(&e.raw) + kind
}

/// Checks one guest verdict and turns it into an engine verdict.
pub fn verdict(v: t::Verdict, now: Timestamp) -> Result<Verdict, Failure> {
    let bad = |m: String| Err(Failure::BadOutput(m));
    // An allow may carry an empty note ("applies, no objection"); every other verdict needs a reason.
    if v.reason.trim().is_empty() && !matches!(v.kind, t::VerdictKind::Allow(_)) {
        return bad("a verdict other than allow has an empty reason".to_owned());
    }
    if v.reason.len() > MAX_REASON {
        return bad(format!("a verdict's reason is {} bytes, more than {MAX_REASON}", v.reason.len()));
    }
    if let Some(h) = v.gpu_hours
        && !(h.is_finite() && h >= 0.0)
    {
        return bad(format!("a verdict's gpu-hours is {h}, not a finite number of at least 0"));
    }
    let kind = match v.kind {
        t::VerdictKind::Allow(h) => {
            VerdictKind::Allow(Hints { queue: h.queue, priority: h.priority, region: h.region })
        }
        t::VerdictKind::Deny => VerdictKind::Deny,
        t::VerdictKind::RequireApproval(a) => {
            if a.expires_after < 1 {
                return bad(format!("require-approval expires after {} ms, must be at least 1", a.expires_after));
            }
            VerdictKind::RequireApproval { approvers: a.approvers, expires_after: Duration(a.expires_after) }
        }
        t::VerdictKind::Defer(until) => {
            if until <= now.millis() {
                return bad(format!("defer until {} is not after the event time {now}", Timestamp(until)));
            }
            VerdictKind::Defer { until: Timestamp(until) }
        }
        t::VerdictKind::Reclaim => VerdictKind::Reclaim,
        t::VerdictKind::Alert => VerdictKind::Alert,
    };
    Ok(Verdict { kind, job_id: None, reason: v.reason.into(), gpu_hours: v.gpu_hours, branch: None })
}

/// Checks and converts every verdict of one call.
pub fn verdicts(vs: Vec<t::Verdict>, now: Timestamp) -> Result<Vec<Verdict>, Failure> {
    if vs.len() > MAX_VERDICTS {
        return Err(Failure::BadOutput(format!("{} verdicts returned, at most {MAX_VERDICTS} allowed", vs.len())));
    }
    vs.into_iter().map(|v| verdict(v, now)).collect()
}
