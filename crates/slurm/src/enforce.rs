//! `bursar slurm enforce`: executes bursar's decisions on Slurm.
//!
//! It follows `GET /v1/decisions?after=CURSOR` and, for each decision that asks something of Slurm:
//!
//! | decision | action |
//! |---|---|
//! | `reclaim` of a job, array task or array | `scancel` exactly it: `17`, `5_3`, or `5` for the whole array (a heterogeneous component: the whole heterogeneous job, which Slurm cancels as one) |
//! | `allow` resolving a held job (approval) | clear `bursar_hold=1`, `scontrol release` |
//! | `deny` resolving a held job (rejection, expiry) | `scancel` it, **if it is still held by bursar**: a job someone released meanwhile is left running |
//!
//! Admission decisions made at submission (event id `sub-<job id>`, written by `job_submit.lua`) were
//! already applied by the hook; `alert`, `defer`, `require_approval` and dry-run decisions ask nothing
//! of Slurm (alerts are logged). Which decision asks what is `bursar-agent`'s
//! ([`bursar_agent::follow::ask`], the same for every scheduler); this module says what each ask
//! means on Slurm. Blocking throughout: Slurm is reached through its commands.
//!
//! **Finding the job** without listing the queue: the watcher's state file (read, never written)
//! maps bursar's id to Slurm's; only a job the watcher has not seen yet is looked up in
//! `squeue --json` (the whole queue). **Acting** starts from the job's current rows (`squeue -j`): a
//! job that already ended is not touched, which makes every action idempotent. **Checking**: 22.05's
//! `scancel` exits 0 for a job it did not cancel (an unknown id, a task named by the wrong id), so
//! after each command the enforcer reads the job again until Slurm shows it done (cancelled, or no
//! longer held) and records `action.failed`, whatever the exit status, when it does not.
//!
//! Every action is recorded in the audit log (an `enforce-<decision id>` action record, see
//! [`bursar_agent::record::Record`]): `action.executed` when done or when nothing needed doing (and
//! why), `action.failed` after `max_attempts` tries, with what Slurm said and showed. The cursor
//! advances only after the record was accepted, so after a crash the agent redoes at most the
//! decisions whose record was not yet durable; serve drops a record it already has (same id).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bursar_agent::follow::{self, Ask, Executor, FollowConfig, FollowReport};
use bursar_agent::record::{Outcome, Record, Seen};
use bursar_agent::server::Server;
use bursar_model::api::Sequenced;

use crate::detail::Markers;
use crate::queue::{Key, Phase, Row};
use crate::slurm::{Ask as Read, Slurm};
use crate::state::{self, Kind};
use crate::{Error, Result};

/// The Slurm command that carries out `ask`: a reclaim cancels the job; an approval releases it;
/// a rejection or an expiry cancels it if it is still held by bursar.
fn command(ask: Ask) -> &'static str {
    match ask {
        Ask::Reclaim | Ask::Reject => "scancel",
        Ask::Approve => "scontrol release",
    }
}

/// The id `job_submit.lua` gives job `job`'s submission event; serve keeps it under the hook's
/// principal (`slurmctld:sub-<job>`).
pub fn submitted_id(job: &str) -> String {
    format!("sub-{job}")
}

/// Where bursar's job is in Slurm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// What the decision names: a job, an array task, a whole array.
    pub key: Key,
    /// The JobID of its record (for `scontrol`).
    pub slurm_id: u64,
    /// What `scancel` takes: the key, or a heterogeneous job's leader.
    pub scancel: String,
}

impl Target {
    fn new(key: Key, slurm_id: u64, het_leader: Option<u64>) -> Target {
        let scancel = het_leader.map_or_else(|| key.scancel_target(), |l| l.to_string());
        Target { key, slurm_id, scancel }
    }
}

/// Is every row of a target over (or gone)? Pure.
fn over(rows: &[Row]) -> bool {
    rows.iter().all(|r| match r.phase() {
        Phase::Ended(_) => true,
        // Cancelled and winding down (epilog): no longer running.
        Phase::Running => r.state.starts_with("COMPLETING"),
        Phase::Pending => false,
    })
}

fn states(rows: &[Row]) -> String {
    let mut s: Vec<&str> = rows.iter().map(|r| r.state.as_str()).collect();
    s.dedup();
    if s.is_empty() { "gone".into() } else { s.join("/") }
}

/// The action to take on the target's current rows (`markers` from its record, for the hold): `Ok`
/// to act, `Err` with the reason nothing needs doing. Pure.
pub fn action(ask: Ask, target: &Target, rows: &[Row], markers: Option<&Markers>) -> Result<(), String> {
    if rows.is_empty() {
        return Err(format!(
            "Slurm lists no job {} (ended more than MinJobAge ago, or never created)",
            target.key.scancel_target()
        ));
    }
    if rows.iter().all(|r| matches!(r.phase(), Phase::Ended(_))) {
        return Err(format!("Slurm job {} already ended ({})", target.key.scancel_target(), states(rows)));
    }
    let held = markers.is_some_and(|m| m.hold) && rows.iter().all(|r| r.phase() == Phase::Pending);
    match ask {
        Ask::Reclaim => Ok(()),
        Ask::Reject | Ask::Approve if held => Ok(()),
        Ask::Reject | Ask::Approve => {
            let who = markers
                .and_then(|m| m.released_by.as_deref())
                .map(|w| format!("; {w} released it outside bursar"))
                .unwrap_or_default();
            Err(format!("Slurm job {} is not held by bursar ({}){who}", target.key.scancel_target(), states(rows)))
        }
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
    /// The watcher's state file, read to find Slurm's id of a bursar job.
    pub watch_state: Option<PathBuf>,
    /// Cursor to start from when there is no state file yet.
    pub start_after: u64,
    /// Tries of a failing Slurm command before the failure is recorded.
    pub max_attempts: u32,
    /// Wait after the first failed try (doubles each time).
    pub retry_delay: Duration,
    /// How long to wait for Slurm to show an action done.
    pub verify_within: Duration,
}

/// Finds bursar job `bursar_id` in Slurm: in the watcher's state, else in the whole queue.
pub fn resolve(cfg: &EnforceConfig, bursar_id: &str) -> Result<Option<Target>> {
    if let Some(path) = &cfg.watch_state {
        // A decision can reach the enforcer a moment before the watcher has saved the poll that caused
        // it: look again briefly before listing the whole queue.
        for wait in [0, 300, 600] {
            std::thread::sleep(Duration::from_millis(wait));
            match state::load(path) {
                Ok(st) => {
                    if let Some((key, m)) = st.find(bursar_id) {
                        let het = m.het.map(|(leader, _)| leader).filter(|_| m.kind == Kind::Job);
                        return Ok(Some(Target::new(key, m.slurm_id, het)));
                    }
                }
                // Unreadable (permissions, a newer version): the queue still answers, at its cost.
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the watcher's state");
                    break;
                }
            }
        }
    }
    tracing::info!(job = bursar_id, "not in the watcher's state: looking it up in squeue --json");
    let jobs = cfg.slurm.dump()?;
    let (parent, task) = match bursar_id.rsplit_once('_') {
        Some((p, t)) => (p, t.parse::<u32>().ok()),
        None => (bursar_id, None),
    };
    for j in &jobs {
        let d = j.details();
        let Some(id) = d.markers.bursar_id() else { continue };
        let het = (j.het_job_id != 0).then_some(j.het_job_id);
        if id == bursar_id {
            let key = if j.array_job_id != 0 { Key::Array(j.array_job_id) } else { Key::Job(j.job_id) };
            let slurm_id = if j.array_job_id != 0 { j.array_job_id } else { j.job_id };
            return Ok(Some(Target::new(key, slurm_id, het)));
        }
        if let Some(t) = task
            && id == parent
            && j.array_job_id != 0
            && j.array_task_id == Some(t)
        {
            return Ok(Some(Target::new(Key::Task(j.array_job_id, t), j.job_id, None)));
        }
    }
    Ok(None)
}

/// The markers of the target's record: whether bursar holds it, and whether it was admitted again
/// under another id (a partition change), when it is not over.
fn markers_of(cfg: &EnforceConfig, target: &Target, rows: &[Row]) -> Result<Option<Markers>> {
    if rows.is_empty() || rows.iter().all(|r| matches!(r.phase(), Phase::Ended(_))) {
        return Ok(None);
    }
    let read = cfg.slurm.details(&[Read::for_row(rows, target.slurm_id)], rows.len())?;
    Ok(read.jobs.get(&target.slurm_id).map(|d| d.markers.clone()))
}

/// Waits until `done` holds for the target's rows, or `within` passed; returns the last rows.
fn settle(cfg: &EnforceConfig, target: &Target, done: impl Fn(&[Row]) -> bool) -> Result<(bool, Vec<Row>)> {
    let t0 = Instant::now();
    loop {
        let rows = cfg.slurm.rows_of(&target.key.scancel_target())?;
        if done(&rows) {
            return Ok((true, rows));
        }
        if t0.elapsed() >= cfg.verify_within {
            return Ok((false, rows));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One try: look, act, check. `Ok` with the outcome; `Err` for a try to repeat.
fn attempt(cfg: &EnforceConfig, record: &mut Record, ask: Ask, job_id: &str) -> Result<(Outcome, String)> {
    let Some(target) = resolve(cfg, job_id)? else {
        return Ok((
            Outcome::Skipped,
            "nothing to do: Slurm lists no job with this bursar id (ended more than MinJobAge ago, or never created)"
                .into(),
        ));
    };
    record.set_field("slurm_job_id", target.slurm_id.to_string());
    record.set_field("slurm_target", &target.scancel);
    let rows = cfg.slurm.rows_of(&target.key.scancel_target())?;
    let markers = markers_of(cfg, &target, &rows)?;
    if let Some(now) = markers
        .as_ref()
        .and_then(|m| m.readmit.as_deref())
        .filter(|r| *r != job_id && !job_id.starts_with(&format!("{r}_")))
    {
        // The job moved (its owner changed its partition) and is `now`'s: an action about the id it
        // had before is not about it (the watcher's state may still name the old id for a moment).
        return Ok((
            Outcome::Skipped,
            format!(
                "nothing to do: Slurm job {} was admitted again as {now} (a partition change); {job_id} is no longer its id",
                target.slurm_id
            ),
        ));
    }
    if let Err(why) = action(ask, &target, &rows, markers.as_ref()) {
        return Ok((Outcome::Skipped, format!("nothing to do: {why}")));
    }
    let before = states(&rows);
    match ask {
        Ask::Reclaim | Ask::Reject => {
            let out = cfg.slurm.cancel(&target.scancel)?;
            let (done, after) = settle(cfg, &target, over)?;
            if done {
                let whole = if target.scancel != target.key.scancel_target() {
                    format!(" (with the rest of heterogeneous job {})", target.scancel)
                } else {
                    String::new()
                };
                Ok((
                    Outcome::Done,
                    format!(
                        "cancelled Slurm job {}{whole} ({before} before, {} after)",
                        target.key.scancel_target(),
                        states(&after)
                    ),
                ))
            } else {
                let said = if out.stderr.is_empty() { String::new() } else { format!(": {}", out.stderr) };
                Err(Error::Refused(format!(
                    "scancel {} exited {}{said}, but Slurm job {} is still {} after {} s",
                    target.scancel,
                    if out.success { "0" } else { "non-zero" },
                    target.key.scancel_target(),
                    states(&after),
                    cfg.verify_within.as_secs()
                )))
            }
        }
        Ask::Approve => {
            let admin = cfg
                .slurm
                .details(&[Read::for_row(&rows, target.slurm_id)], rows.len())?
                .jobs
                .get(&target.slurm_id)
                .map(|d| d.admin_comment.clone())
                .unwrap_or_default();
            cfg.slurm.release(target.slurm_id, &admin)?;
            let released =
                |rows: &[Row]| rows.iter().all(|r| !(r.phase() == Phase::Pending && r.reason.starts_with("JobHeld")));
            let (done, after) = settle(cfg, &target, released)?;
            if done {
                Ok((
                    Outcome::Done,
                    format!(
                        "released Slurm job {} ({before} before, {} after)",
                        target.key.scancel_target(),
                        states(&after)
                    ),
                ))
            } else {
                Err(Error::Refused(format!("scontrol release {} left it held ({})", target.slurm_id, states(&after))))
            }
        }
    }
}

/// Carries out `ask` for job `job_id`, retrying failed Slurm commands and refusals; returns the
/// record to log.
pub fn execute(cfg: &EnforceConfig, seen: &Seen, ask: Ask, job_id: &str) -> Record {
    let mut record = Record::new(seen, job_id, command(ask));
    record.set_field("slurm_cluster", &cfg.cluster);
    record.tried(cfg.max_attempts, cfg.retry_delay, |record| attempt(cfg, record, ask, job_id))
}

/// The Slurm enforcer as the shared follower's [`Executor`].
struct SlurmExecutor<'a> {
    cfg: &'a EnforceConfig,
}

impl Executor for SlurmExecutor<'_> {
    fn submitted_id(&self, job: &str) -> String {
        submitted_id(job)
    }

    fn execute(&mut self, d: &Sequenced, ask: Ask, job_id: &str) -> Record {
        execute(self.cfg, &Seen::of(d), ask, job_id)
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
    use crate::queue::parse_rows;

    const ROWS: &str = include_str!("../tests/data/squeue-O-22.05.txt");

    #[test]
    fn a_submission_is_known_under_the_hooks_principal() {
        let allow = |event_id: &str| -> bursar_model::Decision {
            let line = serde_json::json!({"decision_id": "x", "event_id": event_id, "time": "2026-11-02T09:00:00Z",
                "job_id": "lab-1", "decision": "allow", "policies": [], "reason": "r", "admission": true});
            serde_json::from_value(line).unwrap()
        };
        // Regression: with principals serve keeps the hook's ids under its name; such an admission was
        // taken for an approval and cost a lookup of the whole queue per submission.
        assert_eq!(follow::ask(&allow("slurmctld:sub-lab-1"), submitted_id), None, "applied by job_submit.lua");
        assert_eq!(follow::ask(&allow("bob:cli-approve-sub-lab-1"), submitted_id), Some((Ask::Approve, "lab-1")));
    }

    fn rows_of(all: &[Row], pred: impl Fn(&Row) -> bool) -> Vec<Row> {
        all.iter().filter(|r| pred(r)).cloned().collect()
    }

    #[test]
    fn actions_depend_on_what_slurm_shows_now() {
        let all = parse_rows(ROWS).unwrap();
        let job = |id: u64| Target::new(Key::Job(id), id, None);
        // Ended (FAILED): nothing to cancel.
        let failed = rows_of(&all, |r| r.job_id == 40);
        assert!(action(Ask::Reclaim, &job(40), &failed, None).unwrap_err().contains("already ended (FAILED)"));
        assert!(action(Ask::Reclaim, &job(40), &[], None).unwrap_err().contains("MinJobAge"));
        // Running: cancelled on reclaim; not "held", so an expiry leaves it alone.
        let running = rows_of(&all, |r| r.job_id == 42);
        assert!(action(Ask::Reclaim, &job(42), &running, None).is_ok());
        let released = Markers { job: Some("lab-1".into()), released_by: Some("root".into()), ..Markers::default() };
        let why = action(Ask::Reject, &job(42), &running, Some(&released)).unwrap_err();
        assert!(why.contains("not held by bursar (RUNNING); root released it outside bursar"), "{why}");
        // Held for approval: released on approval, cancelled on expiry.
        let held_rows = rows_of(&all, |r| r.job_id == 38);
        let held = Markers { job: Some("lab-1".into()), hold: true, ..Markers::default() };
        assert!(action(Ask::Approve, &job(38), &held_rows, Some(&held)).is_ok());
        assert!(action(Ask::Reject, &job(38), &held_rows, Some(&held)).is_ok());
        assert!(
            action(Ask::Approve, &job(38), &held_rows, Some(&Markers::default())).unwrap_err().contains("not held")
        );
        // A whole array: over only when every record is.
        let array = rows_of(&all, |r| r.array_job_id == Some(46));
        let whole = Target::new(Key::Array(46), 46, None);
        assert_eq!(whole.scancel, "46");
        assert!(action(Ask::Reclaim, &whole, &array, None).is_ok());
        assert!(!over(&array));
        // A heterogeneous component is cancelled through its leader.
        assert_eq!(Target::new(Key::Job(52), 52, Some(51)).scancel, "51");
        assert_eq!(Target::new(Key::Task(46, 1), 48, None).scancel, "46_1");
    }
}
