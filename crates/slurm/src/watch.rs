//! `bursar slurm watch`: job lifecycle events from Slurm.
//!
//! Every `interval` it lists the jobs slurmctld knows (`squeue --json --states=all`), compares them
//! with what it already sent (its state file), and sends the difference to serve in one batch:
//! `job.started` when an admitted job holds its allocation, `job.finished` when it ended (a job that
//! started and ended between two polls gets both). Only after serve accepted the batch is the state
//! file rewritten; a crash in between resends the same events under the same ids, which serve drops.
//!
//! A job that disappears from squeue while bursar believes it runs (the watcher was down for longer
//! than `MinJobAge`) is finished as `cancelled` with `slurm_state: "unknown"`: its GPUs are released
//! in bursar's books, and the audit log says the end was not observed.
//!
//! Why polling rather than `jobcomp/lua`: a jobcomp hook runs inside slurmctld (serialised with every
//! other RPC, like `job_submit.lua`), only sees ends (not starts), and must never block; a poller sees
//! both, cannot stall the scheduler when bursar is slow or down, and catches up after its own restart
//! from slurmctld's memory of ended jobs. See docs/integrations/slurm.md.

use std::path::PathBuf;
use std::time::Duration;

use bursar_model::{Event, Input};

use crate::events;
use crate::slurm::{EndStatus, Phase, Slurm, SlurmJob};
use crate::state::{self, Sent, WatchState};
use crate::{Error, Result};
use bursar_agent::server::Server;

/// One event to send and what the state becomes once serve has it.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Slurm's job id.
    pub slurm_id: u64,
    /// bursar's job id.
    pub bursar_id: String,
    /// The event.
    pub event: Event,
    /// The job's state once sent.
    pub sent: Sent,
}

/// What to send, given what was sent (`state`) and what squeue lists now (`jobs`), at `now` (Unix s).
/// Also returns the Slurm ids to forget (finished and no longer listed). Pure: the agent's whole
/// decision logic, tested without a cluster.
pub fn plan(cluster: &str, state: &WatchState, jobs: &[SlurmJob], now: i64) -> (Vec<Step>, Vec<u64>) {
    let mut steps = Vec::new();
    let mut listed = std::collections::BTreeSet::new();
    for job in jobs {
        let Some(bid) = job.bursar_id() else { continue };
        listed.insert(job.job_id);
        let prev = state.jobs.get(&job.job_id).map(|(_, s)| *s);
        let at = |t: i64| if t > 0 { t } else { now };
        let started = |steps: &mut Vec<Step>| {
            steps.push(Step {
                slurm_id: job.job_id,
                bursar_id: bid.to_owned(),
                event: events::started(cluster, job.job_id, bid, at(job.start_time)),
                sent: Sent::Started,
            });
        };
        match (job.phase(), prev) {
            (Phase::Pending, _) | (Phase::Running, Some(_)) | (Phase::Ended { .. }, Some(Sent::Finished)) => {}
            (Phase::Running, None) => started(&mut steps),
            (Phase::Ended { status, ran }, prev) => {
                if ran && prev.is_none() {
                    started(&mut steps);
                }
                steps.push(Step {
                    slurm_id: job.job_id,
                    bursar_id: bid.to_owned(),
                    event: events::finished(
                        cluster,
                        job.job_id,
                        bid,
                        at(job.end_time),
                        status,
                        &job.job_state,
                        Some(job.exit_code),
                    ),
                    sent: Sent::Finished,
                });
            }
        }
    }
    let mut forget = Vec::new();
    for (id, (bid, sent)) in &state.jobs {
        if listed.contains(id) {
            continue;
        }
        match sent {
            Sent::Finished => forget.push(*id),
            Sent::Started => steps.push(Step {
                slurm_id: *id,
                bursar_id: bid.clone(),
                event: events::finished(cluster, *id, bid, now, EndStatus::Cancelled, "unknown", None),
                sent: Sent::Finished,
            }),
        }
    }
    (steps, forget)
}

/// Settings of `bursar slurm watch`.
#[derive(Debug, Clone)]
pub struct WatchConfig {
    /// serve.
    pub server: Server,
    /// The Slurm commands.
    pub slurm: Slurm,
    /// Cluster name used in event ids.
    pub cluster: String,
    /// The state file.
    pub state: PathBuf,
    /// Time between two polls.
    pub interval: Duration,
}

/// What one poll did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PollReport {
    /// Jobs squeue listed.
    pub listed: usize,
    /// Events sent.
    pub sent: usize,
    /// Of those, events serve had already seen.
    pub duplicates: u64,
}

/// One poll: list, plan, send, persist.
pub fn poll_once(cfg: &WatchConfig, state: &mut WatchState) -> Result<PollReport> {
    let jobs = cfg.slurm.jobs()?;
    let now = unix_now();
    let (steps, forget) = plan(&cfg.cluster, state, &jobs, now);
    let events: Vec<Input> = steps.iter().map(|s| Input::Event(s.event.clone())).collect();
    let posted = cfg.server.post(&events)?;
    let changed = !steps.is_empty() || !forget.is_empty();
    for s in steps {
        state.jobs.insert(s.slurm_id, (s.bursar_id, s.sent));
    }
    for id in forget {
        state.jobs.remove(&id);
    }
    if changed {
        state.version = 1;
        state::save(&cfg.state, state)?;
    }
    Ok(PollReport { listed: jobs.len(), sent: events.len(), duplicates: posted.duplicates })
}

fn unix_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

/// Polls forever (or once), logging and retrying failed polls; returns only on a state-file error,
/// which a retry would not fix.
pub fn run(cfg: &WatchConfig, once: bool) -> Result<PollReport> {
    let mut state: WatchState = state::load(&cfg.state)?;
    tracing::info!(state = %cfg.state.display(), known = state.jobs.len(), "slurm watch starting");
    loop {
        match poll_once(cfg, &mut state) {
            Ok(r) => {
                if r.sent > 0 {
                    tracing::info!(listed = r.listed, sent = r.sent, duplicates = r.duplicates, "sent job events");
                }
                if once {
                    return Ok(r);
                }
            }
            Err(e @ Error::Agent(bursar_agent::Error::State { .. })) => return Err(e),
            Err(e) => {
                tracing::warn!(error = %e, "poll failed; retrying");
                if once {
                    return Err(e);
                }
            }
        }
        std::thread::sleep(cfg.interval);
    }
}

#[cfg(test)]
mod tests {
    /// An event as the JSON serve receives.
    fn v(e: &bursar_model::Event) -> serde_json::Value {
        serde_json::to_value(e).unwrap()
    }
    use super::*;
    use crate::slurm::parse_squeue;

    const REAL: &str = include_str!("../tests/data/squeue-22.05.json");
    const NOW: i64 = 1_796_018_200;

    fn ids(steps: &[Step]) -> Vec<String> {
        steps.iter().map(|s| v(&s.event)["id"].as_str().unwrap_or("").to_owned()).collect()
    }

    #[test]
    fn first_poll_reports_every_start_and_end() {
        let jobs = parse_squeue(REAL).unwrap();
        let (steps, forget) = plan("lab", &WatchState::default(), &jobs, NOW);
        assert!(forget.is_empty());
        // Job 2 was cancelled while held: finished, never started. Job 3 waits for its begin time: nothing.
        assert_eq!(
            ids(&steps),
            [
                "slurm-lab-1-started",
                "slurm-lab-1-finished",
                "slurm-lab-2-finished",
                "slurm-lab-4-started",
                "slurm-lab-4-finished",
                "slurm-lab-5-started",
                "slurm-lab-5-finished",
                "slurm-lab-6-started",
                "slurm-lab-6-finished",
                "slurm-lab-7-started",
                "slurm-lab-7-finished",
                "slurm-lab-8-started",
                "slurm-lab-8-finished",
            ]
        );
        let seven = steps.iter().find(|s| v(&s.event)["id"] == "slurm-lab-7-finished").unwrap();
        assert_eq!(v(&seven.event)["status"], "failed");
        assert_eq!(v(&seven.event)["exit_code"], 3);
        assert_eq!(v(&seven.event)["job_id"], "lab-2153205e1878");
        assert_eq!(v(&seven.event)["slurm_job_id"], "7");
        let two = steps.iter().find(|s| v(&s.event)["id"] == "slurm-lab-2-finished").unwrap();
        assert_eq!(v(&two.event)["status"], "cancelled");
    }

    #[test]
    fn a_second_poll_sends_nothing_and_a_vanished_job_is_finished_once() {
        let jobs = parse_squeue(REAL).unwrap();
        let mut state = WatchState::default();
        let (steps, _) = plan("lab", &state, &jobs, NOW);
        for s in steps {
            state.jobs.insert(s.slurm_id, (s.bursar_id, s.sent));
        }
        let (again, forget) = plan("lab", &state, &jobs, NOW);
        assert!(again.is_empty(), "{:?}", ids(&again));
        assert!(forget.is_empty());

        // A running job the watcher knew, gone from squeue (watcher down for longer than MinJobAge).
        state.jobs.insert(99, ("lab-gone".into(), Sent::Started));
        let (steps, forget) = plan("lab", &state, &jobs, NOW);
        assert_eq!(ids(&steps), ["slurm-lab-99-finished"]);
        assert_eq!(v(&steps[0].event)["slurm_state"], "unknown");
        assert_eq!(v(&steps[0].event)["status"], "cancelled");
        assert!(forget.is_empty());
        state.jobs.insert(99, ("lab-gone".into(), Sent::Finished));
        let (steps, forget) = plan("lab", &state, &[], NOW);
        assert!(steps.iter().all(|s| s.slurm_id != 99));
        assert!(forget.contains(&99));
    }

    #[test]
    fn a_running_job_starts_once_then_finishes() {
        let mut jobs = parse_squeue(REAL).unwrap();
        jobs.retain(|j| j.job_id == 8);
        jobs[0].job_state = "RUNNING".into();
        let mut state = WatchState::default();
        let (steps, _) = plan("lab", &state, &jobs, NOW);
        assert_eq!(ids(&steps), ["slurm-lab-8-started"]);
        assert_eq!(v(&steps[0].event)["time"], "2026-11-30T05:55:20Z");
        state.jobs.insert(8, ("lab-1ea4a76188d2".into(), Sent::Started));
        assert!(plan("lab", &state, &jobs, NOW).0.is_empty());
        jobs[0].job_state = "CANCELLED".into();
        assert_eq!(ids(&plan("lab", &state, &jobs, NOW).0), ["slurm-lab-8-finished"]);
    }

    #[test]
    fn jobs_bursar_did_not_admit_are_ignored() {
        let mut jobs = parse_squeue(REAL).unwrap();
        for j in &mut jobs {
            j.admin_comment = "set by an admin".into();
        }
        assert!(plan("lab", &WatchState::default(), &jobs, NOW).0.is_empty());
    }
}
