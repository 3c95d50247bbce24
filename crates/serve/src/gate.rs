//! The checks of who may send an input that need the engine's state, run on the engine thread just
//! before the input is applied: does the job it answers for or keeps alive exist, may the caller
//! answer one of the job's approval requests still waiting (each policy's by the approvers it
//! names, the job's own user only where the policy says `self_approval = true`:
//! [`bursar_engine::approval`]), is the job it keeps alive its own. What the caller's roles and
//! jobs alone decide was checked before the request reached the engine
//! ([`bursar_auth::Caller::check_input`]).
//!
//! A refused input is not applied and not journaled: it is answered 403 with the reason and the
//! list of who may, or 404 when the job is unknown. A keepalive or an answer for a job bursar does
//! not know is refused rather than journaled (from every caller, a server without principals too):
//! it could change nothing, and journaling it let whoever may keep a job alive grow the audit log
//! with ids of their choosing (docs/security.md).

use bursar_auth::Caller;
use bursar_engine::{Engine, JobPhase};
use bursar_model::{EventKind, Input};

use crate::respond::Refusal;

/// Ok when `caller` may send `input` given what `engine` knows now.
pub fn check(engine: &Engine, caller: &Caller, input: &Input) -> Result<(), Refusal> {
    let Input::Event(e) = input else { return Ok(()) };
    let (job_id, what) = match &e.kind {
        EventKind::ApprovalGranted { job_id, .. } => (job_id, "an approval"),
        EventKind::ApprovalRejected { job_id, .. } => (job_id, "a rejection"),
        EventKind::JobKeepalive { job_id, .. } => (job_id, "a keepalive"),
        _ => return Ok(()),
    };
    let Some(job) = engine.state().job(job_id) else {
        return Err(Refusal::UnknownJob(format!(
            "bursar knows no job `{job_id}` (never submitted, denied, or forgotten after it ended): {what} for it would change nothing, and is not kept"
        )));
    };
    if caller.is_open() {
        return Ok(());
    }
    match &e.kind {
        EventKind::ApprovalGranted { .. } | EventKind::ApprovalRejected { .. } => {
            let Some(pending) = job.pending().filter(|_| job.phase() == JobPhase::PendingApproval) else {
                return Ok(());
            };
            let me = caller.name();
            let granting = matches!(e.kind, EventKind::ApprovalGranted { .. });
            let asks = pending.asks();
            // A policy that names no approvers is answered by the approvers and admins the
            // configuration names, not by every person the `[auth] people` roles make an approver
            // (issue 56): such a caller must be named by a request still waiting.
            let named_by_one = asks.iter().any(|a| {
                (!granting || a.granted_by.is_none())
                    && a.approvers.iter().any(|x| &**x == me)
                    && (job.user() != me || a.self_approval)
            });
            if pending.answers(me, job.user(), granting).is_ok() && (named_by_one || caller.answers_unnamed()) {
                return Ok(());
            }
            let named =
                |list: &[std::sync::Arc<str>]| list.iter().map(|a| format!("`{a}`")).collect::<Vec<_>>().join(", ");
            let waiting = pending.waiting_approvers();
            let may_answer_some = asks.iter().any(|a| {
                (!granting || a.granted_by.is_none())
                    && (a.approvers.is_empty() || a.approvers.iter().any(|x| &**x == me))
            });
            if may_answer_some && job.user() == me {
                return Err(Refusal::Forbidden(format!(
                    "`{me}` submitted job `{job_id}` and may not answer its approval (its policies do not set `self_approval = true`){}",
                    if waiting.is_empty() { String::new() } else { format!("; ask {}", named(&waiting)) }
                )));
            }
            if asks.iter().all(|a| a.approvers.is_empty()) {
                return Err(Refusal::Forbidden(format!(
                    "`{me}` may not answer job `{job_id}`: its policies name no approvers, so only an approver or admin the configuration names (a `[[principal]]` or `[[person]]` with the role) may answer, not every person the `[auth] people` roles make an approver"
                )));
            }
            Err(Refusal::Forbidden(if asks.len() == 1 {
                format!(
                    "`{me}` is not an approver of job `{job_id}`: only {} may approve or reject it",
                    named(&asks[0].approvers)
                )
            } else {
                format!(
                    "`{me}` is not an approver of job `{job_id}`'s requests still waiting: {} (each policy's request is answered by the approvers it names)",
                    pending.waiting()
                )
            }))
        }
        EventKind::JobKeepalive { .. } => {
            caller.may_keep_alive(job_id, job.user()).map_err(|d| Refusal::Forbidden(d.message))
        }
        _ => Ok(()),
    }
}
