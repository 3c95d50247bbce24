//! `bursar slurm enforce`: executes bursar's decisions on Slurm.
//!
//! It follows `GET /v1/decisions?after=CURSOR` and, for each decision that asks something of Slurm:
//!
//! | decision                                   | action                                         |
//! |--------------------------------------------|------------------------------------------------|
//! | `reclaim`                                  | `scancel` the job                              |
//! | `allow` resolving a held job (approval)    | clear `bursar_hold=1`, `scontrol release`      |
//! | `deny` resolving a held job (rejection,    | `scancel` the job                              |
//! | expiry)                                    |                                                |
//!
//! Admission decisions made at submission (event id `sub-<job id>`, written by `job_submit.lua`) were
//! already applied by the hook; `alert`, `defer`, `require_approval` and dry-run decisions ask nothing of
//! Slurm (alerts are logged). Each action starts by looking the job up (by bursar's id in its
//! AdminComment): a job that already ended is not touched, which makes every action idempotent.
//!
//! Every action is recorded in the audit log (an `enforce-<decision id>` action record, see
//! [`bursar_agent::record::Record`]): `action.executed` when done or when nothing needed doing (and why),
//! `action.failed` after `max_attempts` tries, with Slurm's error. The cursor advances only after the record was accepted, so
//! after a crash the agent redoes at most the decisions whose record was not yet durable; serve drops a
//! record it already has (same id).

use std::path::PathBuf;
use std::time::Duration;

use bursar_agent::follow::{self, Executor, FollowConfig, FollowReport};
use bursar_agent::record::{Outcome, Record, Seen};
use bursar_agent::server::Server;
use bursar_model::api::Sequenced;
use bursar_model::{Decision, DecisionKind};

use crate::Result;
use crate::slurm::{Phase, Slurm, SlurmJob};

/// What a decision asks of Slurm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// Cancel the job.
    Cancel,
    /// Release a job held for approval.
    Release,
}

/// What `decision` asks of Slurm, if anything. Pure.
pub fn ask(decision: &Decision) -> Option<Ask> {
    let job = decision.job_id.as_deref().filter(|j| !j.is_empty())?;
    if decision.dry_run {
        return None;
    }
    let at_submission = decision.event_id.strip_prefix("sub-") == Some(job);
    match decision.decision {
        DecisionKind::Reclaim => Some(Ask::Cancel),
        DecisionKind::Allow if decision.admission && !at_submission => Some(Ask::Release),
        DecisionKind::Deny if decision.admission && !at_submission => Some(Ask::Cancel),
        _ => None,
    }
}

/// The action to take on `job` (as Slurm lists it now, or `None` if it does not) for `ask`: `Ok` to act,
/// `Err` with the reason nothing needs doing. Pure.
pub fn action(ask: Ask, job: Option<&SlurmJob>) -> Result<(), String> {
    let Some(job) = job else {
        return Err(
            "Slurm lists no job for it (ended more than MinJobAge ago, or never submitted through job_submit.lua)"
                .into(),
        );
    };
    match (ask, job.phase()) {
        (_, Phase::Ended { .. }) => Err(format!("Slurm job {} already ended ({})", job.job_id, job.job_state)),
        (Ask::Cancel, _) => Ok(()),
        (Ask::Release, _) if job.held_by_bursar() => Ok(()),
        (Ask::Release, _) => Err(format!("Slurm job {} is not held by bursar ({})", job.job_id, job.job_state)),
    }
}

/// Settings of `bursar slurm enforce`.
#[derive(Debug, Clone)]
pub struct EnforceConfig {
    /// serve.
    pub server: Server,
    /// The Slurm commands.
    pub slurm: Slurm,
    /// Cluster name, recorded with each action.
    pub cluster: String,
    /// The state file (the cursor).
    pub state: PathBuf,
    /// Cursor to start from when there is no state file yet.
    pub start_after: u64,
    /// Tries of a failing Slurm command before the failure is recorded.
    pub max_attempts: u32,
    /// Wait after the first failed try (doubles each time).
    pub retry_delay: Duration,
}

/// Carries out `ask` for job `job_id`, retrying failed Slurm commands; returns the record to log.
pub fn execute(cfg: &EnforceConfig, seen: &Seen, ask: Ask, job_id: &str) -> Record {
    let action_name = match ask {
        Ask::Cancel => "scancel",
        Ask::Release => "scontrol release",
    };
    let mut record = Record::new(seen, job_id, action_name);
    record.set_field("slurm_cluster", &cfg.cluster);
    let mut delay = cfg.retry_delay;
    let max = cfg.max_attempts.max(1);
    loop {
        record.attempts += 1;
        let step = cfg.slurm.find(job_id).and_then(|job| {
            if let Some(j) = &job {
                record.set_field("slurm_job_id", j.job_id.to_string());
            }
            match (action(ask, job.as_ref()), job) {
                (Err(why), _) => Ok((Outcome::Skipped, format!("nothing to do: {why}"))),
                (Ok(()), Some(job)) => {
                    match ask {
                        Ask::Cancel => cfg.slurm.cancel(job.job_id)?,
                        Ask::Release => cfg.slurm.release(&job)?,
                    }
                    let what = match ask {
                        Ask::Cancel => "cancelled",
                        Ask::Release => "released",
                    };
                    Ok((Outcome::Done, format!("{what} Slurm job {} ({} before)", job.job_id, job.job_state)))
                }
                (Ok(()), None) => Ok((Outcome::Skipped, "nothing to do: the job is gone".into())),
            }
        });
        match step {
            Ok((outcome, detail)) => {
                record.outcome = outcome;
                record.detail = detail;
                return record;
            }
            Err(e) if record.attempts >= max => {
                record.outcome = Outcome::Failed;
                record.detail = format!("gave up after {} attempts: {e}", record.attempts);
                return record;
            }
            Err(e) => {
                tracing::warn!(job = job_id, attempt = record.attempts, error = %e, "action failed; retrying");
                std::thread::sleep(delay);
                delay = delay.saturating_mul(2);
            }
        }
    }
}

/// The Slurm enforcer as the shared follower's [`Executor`].
struct SlurmExecutor<'a> {
    cfg: &'a EnforceConfig,
}

impl Executor for SlurmExecutor<'_> {
    fn handle(&mut self, d: &Sequenced) -> Option<Record> {
        let ask = ask(&d.decision)?;
        let job_id = d.decision.job_id.as_deref()?;
        Some(execute(self.cfg, &Seen::of(d), ask, job_id))
    }
}

/// Follows the decision stream forever (reconnecting with a back-off), or with `once` until it has
/// caught up. Returns on a state-file error, or with `once` on any error.
pub fn run(cfg: &EnforceConfig, once: bool) -> Result<FollowReport> {
    let follow_cfg = FollowConfig {
        server: cfg.server.clone(),
        state: cfg.state.clone(),
        start_after: cfg.start_after,
        id_prefix: "enforce".into(),
    };
    Ok(follow::run(&follow_cfg, &mut SlurmExecutor { cfg }, once)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurm::parse_squeue;
    use bursar_model::Timestamp;

    const REAL: &str = include_str!("../tests/data/squeue-22.05.json");

    fn d(decision: &str, event_id: &str, admission: bool) -> Decision {
        Decision {
            decision_id: "x".into(),
            event_id: event_id.into(),
            time: Timestamp(0),
            job_id: Some("lab-1".into()),
            project: None,
            decision: DecisionKind::parse(decision).unwrap(),
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

    #[test]
    fn which_decisions_ask_something_of_slurm() {
        assert_eq!(ask(&d("reclaim", "tick-1", false)), Some(Ask::Cancel));
        assert_eq!(ask(&d("allow", "e-approve", true)), Some(Ask::Release));
        assert_eq!(ask(&d("deny", "e-reject", true)), Some(Ask::Cancel));
        // Applied by job_submit.lua already.
        assert_eq!(ask(&d("allow", "sub-lab-1", true)), None);
        assert_eq!(ask(&d("deny", "sub-lab-1", true)), None);
        for k in ["alert", "defer", "require_approval"] {
            assert_eq!(ask(&d(k, "e", false)), None, "{k}");
        }
        let mut dry = d("reclaim", "e", false);
        dry.dry_run = true;
        assert_eq!(ask(&dry), None);
        let mut no_job = d("reclaim", "e", false);
        no_job.job_id = None;
        assert_eq!(ask(&no_job), None);
    }

    #[test]
    fn actions_are_idempotent_on_the_job_state() {
        let jobs = parse_squeue(REAL).unwrap();
        let by = |id: u64| jobs.iter().find(|j| j.job_id == id);
        let done = action(Ask::Cancel, by(1)).unwrap_err();
        assert!(done.contains("already ended (COMPLETED)"), "{done}");
        assert!(action(Ask::Cancel, None).unwrap_err().contains("MinJobAge"));
        // Job 3 is pending for its begin time: cancellable, but not held by bursar.
        assert!(action(Ask::Cancel, by(3)).is_ok());
        assert!(action(Ask::Release, by(3)).unwrap_err().contains("not held"));
        let mut held = by(4).cloned().unwrap();
        held.job_state = "PENDING".into();
        assert!(action(Ask::Release, Some(&held)).is_ok());
    }
}
