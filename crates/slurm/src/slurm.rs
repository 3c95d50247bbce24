//! The Slurm side: running `squeue`, `scancel` and `scontrol`, and reading `squeue --json`.
//!
//! Jobs are read with `squeue --json --states=all`, which lists pending, running and recently ended
//! jobs (ended ones for `MinJobAge` seconds) with every field, including the AdminComment where
//! `job_submit.lua` stores bursar's job id. JSON rather than a `--format` string because job names and
//! comments are user text that may contain any delimiter, and `squeue --Format` has no AdminComment.

use std::process::Command;

use serde::Deserialize;

use crate::{Error, Result};

/// The marker `job_submit.lua` writes into the AdminComment: `bursar_job=<id>`.
pub const JOB_MARKER: &str = "bursar_job=";

/// The marker of a job held for approval: `bursar_hold=1`.
pub const HOLD_MARKER: &str = "bursar_hold=1";

/// One job as `squeue --json` reports it (the fields the agents use).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct SlurmJob {
    /// Slurm's job id.
    pub job_id: u64,
    /// `PENDING`, `RUNNING`, `COMPLETED`, `FAILED`, `CANCELLED`, `TIMEOUT`, …
    pub job_state: String,
    /// Why it is in that state (`JobHeldUser`, `BeginTime`, `None`, …).
    #[serde(default)]
    pub state_reason: String,
    /// Written by administrators and `job_submit.lua`.
    #[serde(default)]
    pub admin_comment: String,
    /// Start (or expected start) time, Unix seconds; 0 when unknown.
    #[serde(default)]
    pub start_time: i64,
    /// End (or expected end) time, Unix seconds; 0 when unknown.
    #[serde(default)]
    pub end_time: i64,
    /// Raw wait status (exit code × 256, or a signal).
    #[serde(default)]
    pub exit_code: i64,
    /// The node the batch script runs on; empty until the job was allocated.
    #[serde(default)]
    pub batch_host: String,
    /// The owner.
    #[serde(default)]
    pub user_name: String,
}

/// Where a job is in its life, as far as bursar cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Waiting (held, waiting for its begin time or for resources).
    Pending,
    /// Holding its allocation (running, suspended, completing).
    Running,
    /// Ended; `ran` says whether it was ever allocated.
    Ended {
        /// How it ended.
        status: EndStatus,
        /// Whether it ever ran (a job cancelled while pending did not).
        ran: bool,
    },
}

/// How a job ended, in the words of `job.finished`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndStatus {
    /// Exit code 0.
    Succeeded,
    /// Non-zero exit, time limit, node failure, out of memory, …
    Failed,
    /// Cancelled or preempted.
    Cancelled,
}

impl EndStatus {
    /// The `status` of `job.finished`.
    pub fn as_str(self) -> &'static str {
        match self {
            EndStatus::Succeeded => "succeeded",
            EndStatus::Failed => "failed",
            EndStatus::Cancelled => "cancelled",
        }
    }
}

impl SlurmJob {
    /// bursar's job id, from the AdminComment; `None` for a job bursar did not admit.
    pub fn bursar_id(&self) -> Option<&str> {
        let start = self.admin_comment.find(JOB_MARKER)? + JOB_MARKER.len();
        let rest = &self.admin_comment[start..];
        let id = rest.split(|c: char| c.is_whitespace() || c == ';' || c == ',').next().unwrap_or("");
        (!id.is_empty()).then_some(id)
    }

    /// Whether `job_submit.lua` holds this job for approval (and it was not released since).
    pub fn held_by_bursar(&self) -> bool {
        self.job_state == "PENDING" && self.admin_comment.split_whitespace().any(|w| w == HOLD_MARKER)
    }

    /// The AdminComment without the hold marker (what `enforce` writes back when it releases the job).
    pub fn admin_comment_released(&self) -> String {
        self.admin_comment.split_whitespace().filter(|w| *w != HOLD_MARKER).collect::<Vec<_>>().join(" ")
    }

    /// Where the job is in its life.
    pub fn phase(&self) -> Phase {
        let ran = !self.batch_host.is_empty();
        let ended = |status| Phase::Ended { status, ran };
        match self.job_state.as_str() {
            "PENDING" | "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" | "RESV_DEL_HOLD" => Phase::Pending,
            "RUNNING" | "SUSPENDED" | "COMPLETING" | "CONFIGURING" | "STAGE_OUT" | "SIGNALING" | "RESIZING" => {
                Phase::Running
            }
            "COMPLETED" if self.exit_code == 0 => ended(EndStatus::Succeeded),
            "CANCELLED" | "PREEMPTED" => ended(EndStatus::Cancelled),
            // COMPLETED with a non-zero code, FAILED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, BOOT_FAIL,
            // DEADLINE, and any state a later Slurm adds: ended, and not a success.
            _ => ended(EndStatus::Failed),
        }
    }
}

/// Parses the output of `squeue --json`.
pub fn parse_squeue(json: &str) -> Result<Vec<SlurmJob>> {
    #[derive(Deserialize)]
    struct Out {
        jobs: Vec<serde_json::Value>,
        #[serde(default)]
        errors: Vec<serde_json::Value>,
    }
    let out: Out = serde_json::from_str(json).map_err(|e| Error::Squeue(e.to_string()))?;
    if let Some(e) = out.errors.first() {
        return Err(Error::Squeue(format!("squeue reported an error: {e}")));
    }
    let mut jobs = Vec::with_capacity(out.jobs.len());
    for j in out.jobs {
        // A job whose fields do not parse is reported rather than silently dropped: losing a job
        // would lose its start or end event.
        let job: SlurmJob = serde_json::from_value(j).map_err(|e| Error::Squeue(format!("a job entry: {e}")))?;
        jobs.push(job);
    }
    Ok(jobs)
}

/// The Slurm commands the agents run (paths configurable, for sites that install Slurm elsewhere).
#[derive(Debug, Clone)]
pub struct Slurm {
    /// `squeue`.
    pub squeue: String,
    /// `scancel`.
    pub scancel: String,
    /// `scontrol`.
    pub scontrol: String,
}

impl Default for Slurm {
    fn default() -> Slurm {
        Slurm { squeue: "squeue".into(), scancel: "scancel".into(), scontrol: "scontrol".into() }
    }
}

fn run(program: &str, args: &[&str]) -> Result<String> {
    let command = format!("{program} {}", args.join(" "));
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| Error::Command { command: command.clone(), message: e.to_string() })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let err = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        let message = if err.is_empty() { format!("exit status {}", out.status) } else { err };
        Err(Error::Command { command, message })
    }
}

impl Slurm {
    /// Every job slurmctld still knows: pending, running and recently ended.
    pub fn jobs(&self) -> Result<Vec<SlurmJob>> {
        parse_squeue(&run(&self.squeue, &["--json", "--states=all"])?)
    }

    /// The job whose AdminComment names bursar job `bursar_id`, if slurmctld still knows it.
    pub fn find(&self, bursar_id: &str) -> Result<Option<SlurmJob>> {
        Ok(self.jobs()?.into_iter().find(|j| j.bursar_id() == Some(bursar_id)))
    }

    /// `scancel <id>`.
    pub fn cancel(&self, job_id: u64) -> Result<()> {
        run(&self.scancel, &[&job_id.to_string()]).map(|_| ())
    }

    /// Clears the hold marker from the AdminComment, then `scontrol release <id>`.
    pub fn release(&self, job: &SlurmJob) -> Result<()> {
        let id = format!("JobId={}", job.job_id);
        let comment = format!("AdminComment={}", job.admin_comment_released());
        run(&self.scontrol, &["update", &id, &comment])?;
        run(&self.scontrol, &["release", &job.job_id.to_string()]).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Real output of Slurm 22.05.8 (Debian 12) on the lab cluster: completed, held-then-cancelled,
    /// deferred, failed (exit 3) and running-then-cancelled jobs.
    const REAL: &str = include_str!("../tests/data/squeue-22.05.json");

    fn job(jobs: &[SlurmJob], id: u64) -> &SlurmJob {
        jobs.iter().find(|j| j.job_id == id).unwrap_or_else(|| panic!("no job {id}"))
    }

    #[test]
    fn reads_real_squeue_output() {
        let jobs = parse_squeue(REAL).unwrap();
        assert_eq!(jobs.len(), 8);
        let done = job(&jobs, 1);
        assert_eq!(done.bursar_id(), Some("lab-39f0662c183f"));
        assert_eq!(done.phase(), Phase::Ended { status: EndStatus::Succeeded, ran: true });
        let held_then_cancelled = job(&jobs, 2);
        assert_eq!(held_then_cancelled.phase(), Phase::Ended { status: EndStatus::Cancelled, ran: false });
        let deferred = job(&jobs, 3);
        assert_eq!(deferred.phase(), Phase::Pending);
        assert_eq!(deferred.state_reason, "BeginTime");
        assert!(!deferred.held_by_bursar());
        let failed = job(&jobs, 7);
        assert_eq!(failed.exit_code, 768);
        assert_eq!(failed.phase(), Phase::Ended { status: EndStatus::Failed, ran: true });
        let cancelled = job(&jobs, 8);
        assert_eq!(cancelled.phase(), Phase::Ended { status: EndStatus::Cancelled, ran: true });
        assert!(cancelled.end_time > cancelled.start_time);
    }

    #[test]
    fn markers_in_the_admin_comment() {
        let mut j = parse_squeue(REAL).unwrap().remove(3);
        assert_eq!(j.admin_comment, "bursar_job=lab-9379758c56c8 bursar_hold=1");
        assert_eq!(j.bursar_id(), Some("lab-9379758c56c8"));
        assert!(!j.held_by_bursar(), "a completed job is not held");
        j.job_state = "PENDING".into();
        assert!(j.held_by_bursar());
        assert_eq!(j.admin_comment_released(), "bursar_job=lab-9379758c56c8");
        j.admin_comment = "site note; bursar_job=lab-1 bursar_hold=1".into();
        assert_eq!(j.bursar_id(), Some("lab-1"));
        j.admin_comment = "bursar_job=".into();
        assert_eq!(j.bursar_id(), None);
        j.admin_comment = String::new();
        assert_eq!(j.bursar_id(), None);
        assert!(!j.held_by_bursar());
    }

    #[test]
    fn completed_with_a_nonzero_code_is_a_failure() {
        let mut j = parse_squeue(REAL).unwrap().remove(0);
        j.exit_code = 256;
        assert_eq!(j.phase(), Phase::Ended { status: EndStatus::Failed, ran: true });
        j.job_state = "TIMEOUT".into();
        assert_eq!(j.phase(), Phase::Ended { status: EndStatus::Failed, ran: true });
        j.job_state = "SUSPENDED".into();
        assert_eq!(j.phase(), Phase::Running);
    }

    #[test]
    fn rejects_what_is_not_squeue_json() {
        assert!(matches!(parse_squeue("squeue: error: Invalid user"), Err(Error::Squeue(_))));
        assert!(matches!(parse_squeue(r#"{"jobs":[{"job_id":"x"}]}"#), Err(Error::Squeue(_))));
        let err = parse_squeue(r#"{"jobs":[],"errors":[{"error":"Unable to contact slurm controller"}]}"#);
        assert!(err.unwrap_err().to_string().contains("Unable to contact"));
        assert_eq!(parse_squeue(r#"{"jobs":[]}"#).unwrap(), vec![]);
    }
}
