//! The enforcer's loop, the same for every scheduler: follow `GET /v1/decisions?after=CURSOR`, find
//! what each decision asks of the scheduler ([`ask`]), hand that to the scheduler's [`Executor`], post
//! the action record it returns, and only then move the persisted cursor past the decision.
//!
//! What a decision asks is the same on every scheduler: a reclaim releases the job's GPUs; an
//! admission decision resolving a held job (an approval, a rejection, an expiry) lets it run or
//! refuses it. An admission decision made on the job's own submission event was applied at
//! admission already (by Slurm's hook, Kueue's admission check or the webhook) and asks nothing;
//! each executor names that event ([`Executor::submitted_id`]) and [`ask`] recognises it under any
//! sender ([`crate::ids`]).
//!
//! After a crash the agent therefore redoes at most the decisions whose record was not yet durable;
//! the executor looks at the job's current state first (so repeating an action does nothing twice)
//! and serve drops a record it already has (same id). Decisions that ask nothing are cheap to redo:
//! their cursor is persisted at most once a second. A broken stream is reopened with a back-off
//! (200 ms doubling to 10 s); only a state-file error stops the loop, since a retry would not fix it.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bursar_model::api::Sequenced;
use bursar_model::{Decision, DecisionKind, Input, Timestamp};
use serde::{Deserialize, Serialize};

use crate::record::Record;
use crate::server::Server;
use crate::state;
use crate::{Error, Result};

/// An enforcer's persisted state: the last decision handled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// Format version.
    #[serde(default)]
    pub version: u32,
    /// The `seq` of the last decision fully handled (action done and recorded).
    pub cursor: u64,
}

/// What a decision asks of the scheduler; each executor says what it means there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// Release the job's GPUs (a reclaim).
    Reclaim,
    /// Let a job held for approval run (an approval resolving it).
    Approve,
    /// Refuse a job held for approval (a rejection or an expiry resolving it).
    Reject,
}

/// What `decision` asks of the scheduler, and of which job; `None` when it asks nothing: no job, a
/// dry run, an alert, a deferral, a request for approval, or an admission decision made on the
/// job's own submission event, whose id (as the admission agent posts it) is `submitted_id(job)`.
/// Pure.
pub fn ask(decision: &Decision, submitted_id: impl FnOnce(&str) -> String) -> Option<(Ask, &str)> {
    let job = decision.job_id.as_deref().filter(|j| !j.is_empty())?;
    if decision.dry_run {
        return None;
    }
    let ask = match decision.decision {
        DecisionKind::Reclaim => return Some((Ask::Reclaim, job)),
        DecisionKind::Allow if decision.admission => Ask::Approve,
        DecisionKind::Deny if decision.admission => Ask::Reject,
        _ => return None,
    };
    let at_submission = crate::ids::posted_as(&decision.event_id, &submitted_id(job));
    (!at_submission).then_some((ask, job))
}

/// What a scheduler's enforcer does with the decisions that ask something of it.
pub trait Executor {
    /// The id the scheduler's admission agent gives job `job`'s submission event, as it posts it
    /// (before serve keeps it under the agent's principal).
    fn submitted_id(&self, job: &str) -> String;

    /// Carries out `ask` on job `job` for `decision` and returns the record of it (done, failed
    /// after retries, or skipped with the reason).
    fn execute(&mut self, decision: &Sequenced, ask: Ask, job: &str) -> Record;
}

/// Settings of the loop.
#[derive(Debug, Clone)]
pub struct FollowConfig {
    /// serve.
    pub server: Server,
    /// The state file (the cursor).
    pub state: PathBuf,
    /// Cursor to start from when there is no state file yet.
    pub start_after: u64,
    /// The prefix of the action records' ids (`enforce` for Slurm, `kube` for Kubernetes).
    pub id_prefix: String,
}

/// What a run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FollowReport {
    /// Decisions read.
    pub decisions: u64,
    /// Actions recorded (done, failed or skipped) for the first time.
    pub recorded: u64,
    /// Actions whose record serve already had (the decision was handled before a restart).
    pub already_recorded: u64,
    /// The cursor at the end.
    pub cursor: u64,
}

/// Handles the decisions of one connection to the stream; returns when the stream ends or breaks.
fn follow_once(
    cfg: &FollowConfig,
    exec: &mut dyn Executor,
    st: &mut Cursor,
    follow: bool,
    report: &mut FollowReport,
) -> Result<()> {
    let mut stream = cfg.server.decisions(st.cursor, follow)?;
    let mut saved = Instant::now();
    let mut dirty = false;
    let result = loop {
        let d = match stream.next_decision() {
            Ok(Some(d)) => d,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        };
        report.decisions += 1;
        if d.decision.decision == DecisionKind::Alert && !d.decision.dry_run {
            tracing::info!(job = d.decision.job_id.as_deref().unwrap_or("-"), reason = %d.decision.reason, "alert");
        }
        let asked = ask(&d.decision, |job| exec.submitted_id(job));
        if let Some(record) = asked.map(|(a, job)| exec.execute(&d, a, job)) {
            tracing::info!(
                job = %record.job_id,
                decision = %record.decision,
                action = %record.action,
                outcome = record.outcome.as_str(),
                detail = %record.detail,
                "enforced"
            );
            let action = record.to_action(&cfg.id_prefix, Timestamp::wall_clock());
            // Not recorded, not done: the cursor stays before this decision and it is redone.
            match cfg.server.post(&[Input::Action(action)]) {
                Ok(p) if p.duplicates > 0 => report.already_recorded += 1,
                Ok(_) => report.recorded += 1,
                Err(e) => break Err(e),
            }
            st.cursor = d.seq;
            state::save(&cfg.state, st)?;
            saved = Instant::now();
            dirty = false;
        } else {
            st.cursor = d.seq;
            dirty = true;
            if saved.elapsed() >= Duration::from_secs(1) {
                state::save(&cfg.state, st)?;
                saved = Instant::now();
                dirty = false;
            }
        }
        report.cursor = st.cursor;
    };
    if dirty {
        state::save(&cfg.state, st)?;
    }
    result
}

/// Follows the decision stream forever (reconnecting with a back-off), or with `once` until it has
/// caught up. Returns on a state-file error, or with `once` on any error.
pub fn run(cfg: &FollowConfig, exec: &mut dyn Executor, once: bool) -> Result<FollowReport> {
    let mut st: Cursor = state::load(&cfg.state)?;
    if st.version == 0 {
        st = Cursor { version: 1, cursor: st.cursor.max(cfg.start_after) };
    }
    let mut report = FollowReport { cursor: st.cursor, ..FollowReport::default() };
    tracing::info!(state = %cfg.state.display(), cursor = st.cursor, "enforcer starting");
    let mut backoff = Duration::from_millis(200);
    loop {
        match follow_once(cfg, exec, &mut st, !once, &mut report) {
            Ok(()) if once => return Ok(report),
            Ok(()) => backoff = Duration::from_millis(200),
            Err(e @ Error::State { .. }) => return Err(e),
            Err(e) if once => return Err(e),
            Err(e) => {
                tracing::warn!(error = %e, cursor = st.cursor, "decision stream broke; reconnecting");
                backoff = (backoff * 2).min(Duration::from_secs(10));
            }
        }
        std::thread::sleep(backoff);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(decision: &str, event_id: &str, admission: bool) -> Decision {
        Decision {
            decision_id: "x".into(),
            event_id: event_id.into(),
            time: Timestamp(0),
            job_id: Some("lab-1".into()),
            project: None,
            decision: DecisionKind::parse(decision).unwrap_or(DecisionKind::Alert),
            until: None,
            policies: vec![],
            reason: "r".into(),
            dry_run: false,
            admission,
            user: None,
            gpus: None,
            gpu_hours: None,
            hints: None,
        }
    }

    /// Slurm's hook posts `sub-<job>`, Kubernetes' admission check `<job>-submitted`.
    fn slurm(job: &str) -> String {
        format!("sub-{job}")
    }

    fn kube(job: &str) -> String {
        format!("{job}-submitted")
    }

    fn asks(decision: &Decision, submitted: fn(&str) -> String) -> Option<Ask> {
        ask(decision, submitted).map(|(a, job)| {
            assert_eq!(job, "lab-1");
            a
        })
    }

    #[test]
    fn which_decisions_ask_something_of_the_scheduler() {
        for submitted in [slurm, kube] {
            assert_eq!(asks(&d("reclaim", "tick-1", false), submitted), Some(Ask::Reclaim));
            assert_eq!(asks(&d("allow", "e-approve", true), submitted), Some(Ask::Approve));
            assert_eq!(asks(&d("allow", "bob:e-approve", true), submitted), Some(Ask::Approve));
            assert_eq!(asks(&d("deny", "expiry", true), submitted), Some(Ask::Reject));
            for k in ["alert", "defer", "require_approval"] {
                assert_eq!(asks(&d(k, "e", false), submitted), None, "{k}");
                assert_eq!(asks(&d(k, "e", true), submitted), None, "{k}");
            }
            let mut dry = d("reclaim", "e", false);
            dry.dry_run = true;
            assert_eq!(asks(&dry, submitted), None);
            let mut no_job = d("reclaim", "e", false);
            no_job.job_id = None;
            assert_eq!(asks(&no_job, submitted), None);
            no_job.job_id = Some("".into());
            assert_eq!(asks(&no_job, submitted), None);
        }
        // Applied at admission already, with or without the admission agent's principal.
        for (id, submitted) in [
            ("sub-lab-1", slurm as fn(&str) -> String),
            ("slurmctld:sub-lab-1", slurm),
            ("lab-1-submitted", kube),
            ("kube-checks:lab-1-submitted", kube),
        ] {
            assert_eq!(asks(&d("allow", id, true), submitted), None, "{id}");
            assert_eq!(asks(&d("deny", id, true), submitted), None, "{id}");
            assert_eq!(asks(&d("reclaim", id, false), submitted), Some(Ask::Reclaim), "{id}");
        }
        // Regression (Slurm): an approval whose id ends like a submission is an approval.
        assert_eq!(asks(&d("allow", "bob:cli-approve-sub-lab-1", true), slurm), Some(Ask::Approve));
        // Regression (Kubernetes): the principal is what precedes the first `:`, not the last.
        assert_eq!(asks(&d("allow", "bob:x:lab-1-submitted", true), kube), Some(Ask::Approve));
    }
}
