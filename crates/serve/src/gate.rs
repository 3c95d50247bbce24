//! The checks of who may send an input that need the engine's state, run on the engine thread just
//! before the input is applied: is the caller among the approvers of the job it answers for, is it
//! the job's own user (who may not answer their own job's approval unless every policy that asked
//! says `self_approval = true`), is the job it keeps alive its own. What the caller's roles and
//! jobs alone decide was checked before the request reached the engine
//! ([`bursar_auth::Caller::check_input`]).
//!
//! A refused input is not applied and not journaled: it is answered 403 with the reason and the
//! list of who may.

use bursar_auth::{Caller, Denied, Power};
use bursar_engine::{Engine, JobPhase};
use bursar_model::{EventKind, Input};

/// Ok when `caller` may send `input` given what `engine` knows now.
pub fn check(engine: &Engine, caller: &Caller, input: &Input) -> Result<(), Denied> {
    if caller.is_open() {
        return Ok(());
    }
    let Input::Event(e) = input else { return Ok(()) };
    match &e.kind {
        EventKind::ApprovalGranted { job_id, .. } | EventKind::ApprovalRejected { job_id, .. } => {
            let Some(job) = engine.state().job(job_id) else { return Ok(()) };
            let Some(pending) = job.pending().filter(|_| job.phase() == JobPhase::PendingApproval) else {
                return Ok(());
            };
            let me = caller.name();
            if !pending.approvers.is_empty() && !pending.approvers.iter().any(|a| &**a == me) {
                return Err(Denied {
                    power: Power::Answer,
                    message: format!(
                        "`{me}` is not an approver of job `{job_id}`: only {} may approve or reject it",
                        pending.approvers.iter().map(|a| format!("`{a}`")).collect::<Vec<_>>().join(", ")
                    ),
                });
            }
            if !pending.self_approval && job.user() == me {
                return Err(Denied {
                    power: Power::Answer,
                    message: format!(
                        "`{me}` submitted job `{job_id}` and may not answer its approval (its policies do not set `self_approval = true`){}",
                        if pending.approvers.is_empty() {
                            String::new()
                        } else {
                            format!(
                                "; ask {}",
                                pending.approvers.iter().map(|a| format!("`{a}`")).collect::<Vec<_>>().join(", ")
                            )
                        }
                    ),
                });
            }
            Ok(())
        }
        EventKind::JobKeepalive { job_id, .. } => match engine.state().job(job_id) {
            Some(job) => caller.may_keep_alive(job_id, job.user()),
            None => Ok(()),
        },
        _ => Ok(()),
    }
}
