//! Conversions at the boundary: an engine [`Context`] becomes the WIT `event` record, and the guest's
//! WIT verdicts become engine [`Verdict`]s after validation. Anything out of range is a
//! [`Failure::BadOutput`], handled like a trap.

use std::sync::Arc;

use bursar_engine::{Context, Verdict, VerdictKind};
use bursar_model::{BillingMode, Duration, EventKind, FinishStatus, Hints, JobSpec, Timestamp};

use crate::bindings::bursar::policy::types as t;
use crate::policy::Failure;

/// The most verdicts one call may return.
pub const MAX_VERDICTS: usize = 64;
/// The longest reason, in bytes.
pub const MAX_REASON: usize = 4096;

/// What the WIT event borrows that the engine's event does not hold as such: the submitted job's
/// configuration key and its tags as WIT records. Built first ([`Extras::of`]), then lent to
/// [`event`].
#[derive(Debug, Default)]
pub struct Extras<'a> {
    config_key: String,
    tags: Vec<t::Tag<'a>>,
}

impl<'a> Extras<'a> {
    /// The extras of the event in `cx` (empty for anything but a `job.submitted`).
    pub fn of(cx: &Context<'a>) -> Extras<'a> {
        match &cx.event.kind {
            EventKind::JobSubmitted(j) => Extras {
                config_key: j.config_key(),
                tags: j.tags.iter().map(|(k, v)| t::Tag { key: k, value: v }).collect(),
            },
            _ => Extras::default(),
        }
    }
}

fn job_spec<'a>(j: &'a JobSpec, x: &'a Extras<'a>) -> t::JobSpec<'a> {
    t::JobSpec {
        id: &j.id,
        project: &j.project,
        user: &j.user,
        queue: j.queue.as_deref(),
        gpus: j.gpus.ceil(),
        gpu_type: j.gpu_type.as_deref(),
        gpu_mem_gb: j.gpu_mem_gb,
        nodes: j.nodes,
        requested_hours: j.requested_hours,
        stage: j.stage.as_deref(),
        model_params_b: j.model_params_b,
        image: j.image.as_deref(),
        dataset: j.dataset.as_deref(),
        script_hash: j.script_hash.as_deref(),
        ready: t::Ready { image: j.ready.image, data: j.ready.data, script: j.ready.script },
        deferrable: j.deferrable,
        tags: &x.tags,
        mixed_precision: j.mixed_precision,
        batch_size: j.batch_size,
        dataloader_workers: j.dataloader_workers,
        interconnect: j.interconnect.as_deref(),
        region: j.region.as_deref(),
        config_key: &x.config_key,
    }
}

fn by<'a>(job_id: &'a str, by: &'a Option<String>) -> t::ByPerson<'a> {
    t::ByPerson { job_id, by: by.as_deref() }
}

/// The WIT record of the event in `cx`, borrowing its strings (and `x`, from [`Extras::of`] of the
/// same `cx`): nothing is copied until the call lowers it into the guest's memory. `None` for the
/// v1.x types the WIT interface has no case for (`job.queued`, `job.requeued`), which a WebAssembly
/// policy cannot ask for (the loader refuses them in `events`).
pub fn event<'a>(cx: &Context<'a>, x: &'a Extras<'a>) -> Option<t::Event<'a>> {
    let e: &'a bursar_model::Event = cx.event;
    let kind = match &e.kind {
        EventKind::JobSubmitted(j) => t::EventKind::JobSubmitted(job_spec(j, x)),
        EventKind::JobStarted { job_id, .. } => t::EventKind::JobStarted(job_id),
        EventKind::JobQueued { .. } | EventKind::JobRequeued { .. } => return None,
        EventKind::JobSample(s) => {
            t::EventKind::JobSample(t::Sample { job_id: &s.job_id, gpu_util: s.gpu_util, mem_util: s.mem_util })
        }
        EventKind::JobFinished { job_id, status } => t::EventKind::JobFinished(t::Finished {
            job_id,
            status: match status {
                FinishStatus::Succeeded => t::FinishStatus::Succeeded,
                FinishStatus::Failed => t::FinishStatus::Failed,
                FinishStatus::Cancelled => t::FinishStatus::Cancelled,
            },
        }),
        EventKind::JobKeepalive { job_id, by: b } => t::EventKind::JobKeepalive(by(job_id, b)),
        EventKind::BillingCharge(c) => t::EventKind::BillingCharge(t::Charge {
            // A charge that names only its job (v1.x) has no project of its own: "".
            project: c.project.as_deref().unwrap_or(""),
            job_id: c.job_id.as_deref(),
            gpu_hours: c.gpu_hours,
            amount: c.amount,
            currency: c.currency.as_deref(),
            mode: c.mode.map(|m| match m {
                BillingMode::OnDemand => "on_demand",
                BillingMode::Reserved => "reserved",
                BillingMode::PerTask => "per_task",
            }),
        }),
        EventKind::ApprovalGranted { job_id, by: b } => t::EventKind::ApprovalGranted(by(job_id, b)),
        EventKind::ApprovalRejected { job_id, by: b } => t::EventKind::ApprovalRejected(by(job_id, b)),
        EventKind::AssetRegistered { project, asset } => t::EventKind::AssetRegistered(t::Asset {
            project,
            kind: &asset.kind,
            fingerprint: &asset.fingerprint,
            uri: &asset.uri,
        }),
        EventKind::ClockTick => t::EventKind::ClockTick,
    };
    Some(t::Event { id: &e.id, time: e.time.millis(), now: cx.now.millis(), kind, raw: cx.raw.unwrap_or_default() })
}

/// Bytes the host copies into the guest for `e`: every string of the record (the raw line above all)
/// and 16 bytes per list element, the sizes the canonical ABI lowers into the guest's memory. The
/// fixed-size fields are a few hundred bytes at most and not counted.
pub fn input_bytes(e: &t::Event<'_>) -> u64 {
    fn s(v: &str) -> u64 {
        v.len() as u64
    }
    fn o(v: &Option<&str>) -> u64 {
        v.map_or(0, s)
    }
    let kind = match &e.kind {
        t::EventKind::JobSubmitted(j) => {
            s(j.id)
                + s(j.project)
                + s(j.user)
                + o(&j.queue)
                + o(&j.gpu_type)
                + o(&j.stage)
                + o(&j.image)
                + o(&j.dataset)
                + o(&j.script_hash)
                + j.tags.iter().map(|t| s(t.key) + s(t.value) + 16).sum::<u64>()
                + o(&j.interconnect)
                + o(&j.region)
                + s(j.config_key)
        }
        t::EventKind::JobStarted(id) => s(id),
        t::EventKind::JobSample(x) => s(x.job_id),
        t::EventKind::JobFinished(f) => s(f.job_id),
        t::EventKind::JobKeepalive(b) | t::EventKind::ApprovalGranted(b) | t::EventKind::ApprovalRejected(b) => {
            s(b.job_id) + o(&b.by)
        }
        t::EventKind::BillingCharge(c) => s(c.project) + o(&c.job_id) + o(&c.currency) + o(&c.mode),
        t::EventKind::AssetRegistered(a) => s(a.project) + s(a.kind) + s(a.fingerprint) + s(a.uri),
        t::EventKind::ClockTick => 0,
    };
    s(e.id) + s(e.raw) + kind
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
        t::VerdictKind::Allow(h) => VerdictKind::Allow(Hints {
            queue: h.queue.map(Arc::from),
            priority: h.priority,
            region: h.region.map(Arc::from),
        }),
        t::VerdictKind::Deny => VerdictKind::Deny,
        t::VerdictKind::RequireApproval(a) => {
            if a.expires_after < 1 {
                return bad(format!("require-approval expires after {} ms, must be at least 1", a.expires_after));
            }
            VerdictKind::RequireApproval { approvers: a.approvers.into(), expires_after: Duration(a.expires_after) }
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
