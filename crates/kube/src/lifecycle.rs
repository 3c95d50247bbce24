//! Job lifecycle from what the API server shows: which `job.started`, `job.requeued` and
//! `job.finished` to send, given what was sent before. Pure: the watcher (`watch.rs`) turns Workloads
//! or Jobs and their Pods into [`UnitView`]s and [`PodView`]s, calls [`plan`], posts the events and
//! only then saves the state, so the whole decision logic is tested without a cluster.
//!
//! A **unit** is what bursar admitted: a Kueue Workload, or a Job (JobSet, PyTorchJob, bare Pod)
//! the webhook admitted. A **run** is one stretch in which its pods hold GPUs:
//!
//! - it **starts** when the pods that hold GPUs (bound to a node, not terminated) are as many as the
//!   unit expects (Kueue's admitted counts, the Job's parallelism), or when the first of them has
//!   held GPUs for `settle` without the rest; its time is the earliest binding, its `gpus` what those
//!   pods hold, and `kube_pods` names them (the utilisation source maps dcgm-exporter's
//!   `namespace`/`pod` labels with it);
//! - it ends **requeued** when the unit is evicted or suspended (Kueue preemption, PodsReadyTimeout,
//!   a suspended Job) and its pods are gone, at the last pod's end;
//! - it ends **finished** when the unit finished (`Finished`, `Complete`, `Failed`), was taken out
//!   for good (a deactivated Workload, a Job suspended by bursar's reclaim), or was deleted.
//!
//! Ids are `<job>-r<run>-started|requeued|finished` (run 0: finished without ever running), so a
//! resend after a crash is the same event and serve drops it, and a rerun is a new run.

use std::collections::BTreeMap;

use bursar_model::{FinishStatus, Gpus, Timestamp};
use serde::{Deserialize, Serialize};

/// How a unit ended for good.
#[derive(Debug, Clone, PartialEq)]
pub struct End {
    /// When.
    pub at: Timestamp,
    /// How.
    pub status: FinishStatus,
    /// The API's word for it (`Succeeded`, `BackoffLimitExceeded`, `InactiveWorkload`, …).
    pub reason: String,
}

/// A unit whose pods were stopped without ending it, or taken out for good.
#[derive(Debug, Clone, PartialEq)]
pub struct Stop {
    /// When the API recorded it (the condition's transition time), if it did.
    pub at: Option<Timestamp>,
    /// `true`: it will not run again unless someone puts it back (a deactivated Workload, a Job
    /// suspended by bursar's reclaim): the run is finished (`cancelled`). `false`: it waits to run
    /// again (eviction, preemption, a suspended Job): the run is requeued.
    pub for_good: bool,
    /// The API's word for it.
    pub reason: String,
}

/// What the watcher sees of one unit now.
#[derive(Debug, Clone, PartialEq)]
pub struct UnitView {
    /// bursar's job id.
    pub job_id: String,
    /// Namespace.
    pub namespace: String,
    /// Kind (`Workload`, `Job`, …).
    pub kind: String,
    /// Name.
    pub name: String,
    /// Pods holding GPUs a run is expected to have.
    pub expected_pods: u32,
    /// bursar admitted it (Kueue: bursar's check is `Ready`; webhook: always, held ones too). A unit
    /// not admitted is not bursar's to report until it is.
    pub admitted: bool,
    /// Ended for good.
    pub end: Option<End>,
    /// Stopped (evicted, suspended, deactivated).
    pub stopped: Option<Stop>,
    /// Why it waits, as Kueue says it (a Workload's `QuotaReserved` condition that is not true, or
    /// the admission checks still pending), when it does; the pods' own reasons come from them.
    pub waits: Option<String>,
}

/// What the watcher sees of one pod holding (or having held) GPUs.
#[derive(Debug, Clone, PartialEq)]
pub struct PodView {
    /// The pod's name.
    pub name: String,
    /// GPUs it asks for (`2/7` for two `nvidia.com/mig-1g.10gb`).
    pub gpus: Gpus,
    /// When it was bound to a node (GPUs are held from then).
    pub placed_at: Option<Timestamp>,
    /// When it stopped holding them (terminated, or deleted).
    pub ended_at: Option<Timestamp>,
    /// Why it is not placed yet, as the scheduler says it (`PodScheduled` false: `Unschedulable:
    /// 0/4 nodes are available: 4 Insufficient nvidia.com/gpu.`; `SchedulingGated`).
    pub waits: Option<String>,
}

impl PodView {
    fn holding(&self) -> bool {
        self.placed_at.is_some() && self.ended_at.is_none()
    }
}

/// The last event sent for a unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sent {
    /// `job.queued`: admitted and created, not running yet.
    Queued,
    /// `job.started` of the current run.
    Started,
    /// `job.requeued` of the current run.
    Requeued,
    /// `job.finished`.
    Finished,
}

/// What the watcher remembers about one unit (its state file holds these by unit uid).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitState {
    /// bursar's job id.
    pub job_id: String,
    /// The run the last event was about (0: none yet).
    pub run: u32,
    /// The last event sent.
    pub sent: Sent,
    /// When the current run started (ms), to tell its pods from an earlier run's.
    #[serde(default)]
    pub run_started: i64,
    /// When the last run ended (ms), to tell a new run's pods from the last one's.
    #[serde(default)]
    pub run_ended: i64,
    /// The pods of the current run.
    #[serde(default)]
    pub pods: Vec<String>,
    /// Namespace (for the events of a unit that was deleted).
    #[serde(default)]
    pub namespace: String,
    /// Kind.
    #[serde(default)]
    pub kind: String,
    /// Name.
    #[serde(default)]
    pub name: String,
    /// The reason it waits that was last sent (`job.queued`'s `reason`), and how many were sent:
    /// a changed reason is sent again, as `<job>-waits-<n>`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub waits: String,
    /// How many reasons were sent after the first `job.queued`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub waits_sent: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One event to send.
#[derive(Debug, Clone, PartialEq)]
pub enum Planned {
    /// The admitted unit exists and waits to run (it confirms the admission); sent again when the
    /// reason it waits changes.
    Queued {
        /// When the watcher saw it admitted, or saw the reason change.
        at: Timestamp,
        /// Why it waits, as Kueue or the pod scheduler says it.
        reason: Option<String>,
    },
    /// A run started.
    Started {
        /// When.
        at: Timestamp,
        /// GPUs its pods hold.
        gpus: Gpus,
        /// Its pods.
        pods: Vec<String>,
    },
    /// The run ended and the job waits to run again.
    Requeued {
        /// When.
        at: Timestamp,
        /// Why (the API's word).
        reason: String,
    },
    /// The job ended.
    Finished {
        /// When.
        at: Timestamp,
        /// How.
        status: FinishStatus,
        /// Why (the API's word).
        reason: String,
    },
}

/// One event and what the unit's state is once serve has it.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The unit's uid (state key).
    pub uid: String,
    /// The event's id.
    pub id: String,
    /// bursar's job id.
    pub job_id: String,
    /// The event.
    pub event: Planned,
    /// The unit's state after it.
    pub state: UnitState,
}

fn id(job: &str, run: u32, what: &str) -> String {
    format!("{job}-r{run}-{what}")
}

/// The steps that bring `state` up to what `units` show at `now`, and the uids to forget (finished
/// units the API no longer lists). `settle`: how long a run waits for all its pods before it is
/// started with the GPUs that are held.
pub fn plan(
    state: &BTreeMap<String, UnitState>,
    units: &BTreeMap<String, (UnitView, Vec<PodView>)>,
    now: Timestamp,
    settle: bursar_model::Duration,
) -> (Vec<Step>, Vec<String>) {
    let mut steps = Vec::new();
    for (uid, (unit, pods)) in units {
        let pods: Vec<&PodView> = pods.iter().filter(|p| !p.gpus.is_zero()).collect();
        let prev = state.get(uid);
        let mut st = prev.cloned().unwrap_or_else(|| UnitState {
            job_id: unit.job_id.clone(),
            run: 0,
            sent: Sent::Requeued,
            run_started: 0,
            run_ended: 0,
            pods: Vec::new(),
            namespace: unit.namespace.clone(),
            kind: unit.kind.clone(),
            name: unit.name.clone(),
            waits: String::new(),
            waits_sent: 0,
        });
        let fresh = prev.is_none();
        if fresh && !unit.admitted {
            continue;
        }
        let mut push = |st: &mut UnitState, event: Planned| {
            let mut again = false;
            let (what, sent) = match &event {
                Planned::Queued { reason, .. } => {
                    // The first `job.queued` of a unit, or a changed reason for one already queued
                    // (or requeued and waiting again).
                    again = st.sent == Sent::Queued || st.run > 0;
                    if again {
                        st.waits_sent += 1;
                    }
                    st.waits = reason.clone().unwrap_or_default();
                    ("queued", if st.sent == Sent::Requeued && st.run > 0 { Sent::Requeued } else { Sent::Queued })
                }
                Planned::Started { at, pods, .. } => {
                    st.run += 1;
                    st.run_started = at.millis();
                    st.pods.clone_from(pods);
                    ("started", Sent::Started)
                }
                Planned::Requeued { at, .. } => {
                    st.run_ended = at.millis();
                    ("requeued", Sent::Requeued)
                }
                Planned::Finished { at, .. } => {
                    st.run_ended = at.millis();
                    ("finished", Sent::Finished)
                }
            };
            st.sent = sent;
            let id = if again {
                format!("{}-waits-{}", st.job_id, st.waits_sent)
            } else if what == "queued" {
                format!("{}-queued", st.job_id)
            } else {
                id(&st.job_id, st.run, what)
            };
            steps.push(Step { uid: uid.clone(), id, job_id: st.job_id.clone(), event, state: st.clone() });
        };
        let holding: Vec<&PodView> = pods.iter().copied().filter(|p| p.holding()).collect();
        let settled = unit.end.is_some() || unit.stopped.is_some();
        // A new run: pods bound that were not the last run's. (Not "bound after the last run
        // ended": the API's times are whole seconds, and a replacement pod is often bound within the
        // second its predecessor went.)
        let new_run = |st: &UnitState| -> Vec<&PodView> {
            pods.iter().copied().filter(|p| p.placed_at.is_some() && !st.pods.contains(&p.name)).collect()
        };
        let start = |run: &[&PodView]| -> Planned {
            let at = run.iter().filter_map(|p| p.placed_at).min().unwrap_or(now);
            let mut names: Vec<String> = run.iter().map(|p| p.name.clone()).collect();
            names.sort();
            Planned::Started { at, gpus: run.iter().map(|p| p.gpus).sum(), pods: names }
        };
        // When the run's pods stopped holding GPUs.
        let run_end = |st: &UnitState, fallback: Option<Timestamp>| -> Timestamp {
            let ended = pods.iter().filter(|p| st.pods.contains(&p.name)).filter_map(|p| p.ended_at).max();
            ended.or(fallback).unwrap_or(now).max(Timestamp(st.run_started))
        };
        match st.sent {
            Sent::Requeued | Sent::Queued => {
                let run = new_run(&st);
                if settled {
                    let ran = run.iter().any(|p| p.placed_at.is_some());
                    if ran {
                        // Started and stopped while the watcher was not looking.
                        let started = start(&run.iter().copied().filter(|p| p.placed_at.is_some()).collect::<Vec<_>>());
                        push(&mut st, started);
                    }
                    if let Some(end) = &unit.end {
                        let at = if ran { end.at.max(Timestamp(st.run_started)) } else { end.at };
                        push(&mut st, Planned::Finished { at, status: end.status, reason: end.reason.clone() });
                    } else if let Some(stop) = &unit.stopped {
                        if stop.for_good {
                            let at = if ran { run_end(&st, stop.at) } else { stop.at.unwrap_or(now) };
                            push(
                                &mut st,
                                Planned::Finished { at, status: FinishStatus::Cancelled, reason: stop.reason.clone() },
                            );
                        } else if ran && holding.is_empty() {
                            let at = run_end(&st, stop.at);
                            push(&mut st, Planned::Requeued { at, reason: stop.reason.clone() });
                        }
                    }
                } else {
                    let held: Vec<&PodView> = run.iter().copied().filter(|p| p.holding()).collect();
                    let first = held.iter().filter_map(|p| p.placed_at).min();
                    let complete = held.len() as u32 >= unit.expected_pods.max(1);
                    // Why it waits: Kueue's word for the unit, else the first unplaced pod's.
                    let waits = unit.waits.clone().or_else(|| {
                        pods.iter()
                            .filter(|p| p.placed_at.is_none() && p.ended_at.is_none())
                            .find_map(|p| p.waits.clone())
                    });
                    if first.is_some_and(|t| complete || now.millis() - t.millis() >= settle.millis()) {
                        push(&mut st, start(&held));
                    } else if fresh {
                        push(&mut st, Planned::Queued { at: now, reason: waits });
                    } else if let Some(w) = waits.filter(|w| *w != st.waits) {
                        push(&mut st, Planned::Queued { at: now, reason: Some(w) });
                    }
                }
            }
            Sent::Started => {
                if let Some(end) = &unit.end {
                    let at = end.at.max(Timestamp(st.run_started));
                    push(&mut st, Planned::Finished { at, status: end.status, reason: end.reason.clone() });
                } else if let Some(stop) = unit.stopped.as_ref().filter(|_| holding.is_empty()) {
                    let at = run_end(&st, stop.at);
                    let event = if stop.for_good {
                        Planned::Finished { at, status: FinishStatus::Cancelled, reason: stop.reason.clone() }
                    } else {
                        Planned::Requeued { at, reason: stop.reason.clone() }
                    };
                    push(&mut st, event);
                }
            }
            Sent::Finished => {
                // Put back and running again (a reactivated Workload, a resumed Job): a new run,
                // which serve charges and flags as a rerun.
                let run = new_run(&st);
                let held: Vec<&PodView> = run.iter().copied().filter(|p| p.holding()).collect();
                if !settled && held.len() as u32 >= unit.expected_pods.max(1) {
                    push(&mut st, start(&held));
                }
            }
        }
    }
    let mut forget = Vec::new();
    for (uid, st) in state {
        if units.contains_key(uid) {
            continue;
        }
        match st.sent {
            Sent::Finished => forget.push(uid.clone()),
            Sent::Started | Sent::Requeued | Sent::Queued => {
                let mut next = st.clone();
                next.sent = Sent::Finished;
                next.run_ended = now.millis();
                steps.push(Step {
                    uid: uid.clone(),
                    id: id(&st.job_id, st.run, "finished"),
                    job_id: st.job_id.clone(),
                    event: Planned::Finished { at: now, status: FinishStatus::Cancelled, reason: "Deleted".into() },
                    state: next,
                });
            }
        }
    }
    (steps, forget)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bursar_model::Duration;

    const T0: i64 = 1_796_018_000_000;

    fn t(s: i64) -> Timestamp {
        Timestamp(T0 + s * 1000)
    }

    fn unit(expected: u32) -> UnitView {
        UnitView {
            job_id: "kube-abc".into(),
            namespace: "nlp".into(),
            kind: "Workload".into(),
            name: "job-train".into(),
            expected_pods: expected,
            admitted: true,
            end: None,
            stopped: None,
            waits: None,
        }
    }

    fn pod(name: &str, gpus: impl Into<Gpus>, placed: Option<i64>, ended: Option<i64>) -> PodView {
        PodView { name: name.into(), gpus: gpus.into(), placed_at: placed.map(t), ended_at: ended.map(t), waits: None }
    }

    /// Runs `plan` and applies its steps, as the watcher does once serve accepted them.
    fn step(
        state: &mut BTreeMap<String, UnitState>,
        u: &UnitView,
        pods: Vec<PodView>,
        now: i64,
    ) -> Vec<(String, Planned)> {
        let units = BTreeMap::from([("uid-1".to_owned(), (u.clone(), pods))]);
        let (steps, forget) = plan(state, &units, t(now), Duration::seconds(30));
        assert!(forget.is_empty());
        let out = steps.iter().map(|s| (s.id.clone(), s.event.clone())).collect();
        for s in steps {
            state.insert(s.uid, s.state);
        }
        out
    }

    fn ids(steps: &[(String, Planned)]) -> Vec<&str> {
        steps.iter().map(|(i, _)| i.as_str()).collect()
    }

    #[test]
    fn a_run_starts_when_all_its_pods_hold_gpus_and_is_charged_on_them() {
        let mut st = BTreeMap::new();
        let u = unit(2);
        assert_eq!(
            ids(&step(&mut st, &u, vec![pod("p0", 4, None, None), pod("p1", 4, None, None)], 0)),
            ["kube-abc-queued"]
        );
        assert!(
            step(&mut st, &u, vec![pod("p0", 4, Some(5), None), pod("p1", 4, None, None)], 6).is_empty(),
            "waits for the gang"
        );
        let s = step(&mut st, &u, vec![pod("p0", 4, Some(5), None), pod("p1", 4, Some(7), None)], 8);
        assert_eq!(ids(&s), ["kube-abc-r1-started"]);
        assert_eq!(s[0].1, Planned::Started { at: t(5), gpus: Gpus::whole(8), pods: vec!["p0".into(), "p1".into()] });
        assert!(
            step(&mut st, &u, vec![pod("p0", 4, Some(5), None), pod("p1", 4, Some(7), None)], 9).is_empty(),
            "once"
        );
    }

    #[test]
    fn a_run_of_mig_slices_is_charged_on_their_shares() {
        let mut st = BTreeMap::new();
        let two = Gpus::fraction(2, 7).unwrap();
        let s = step(&mut st, &unit(2), vec![pod("p0", two, Some(5), None), pod("p1", two, Some(6), None)], 7);
        assert_eq!(ids(&s), ["kube-abc-r1-started"]);
        let gpus = Gpus::fraction(4, 7).unwrap();
        assert_eq!(s[0].1, Planned::Started { at: t(5), gpus, pods: vec!["p0".into(), "p1".into()] });
    }

    #[test]
    fn a_partial_gang_starts_after_the_settle_time_with_what_it_holds() {
        let mut st = BTreeMap::new();
        let pods = || vec![pod("p0", 4, Some(5), None), pod("p1", 4, None, None)];
        assert_eq!(ids(&step(&mut st, &unit(2), pods(), 34)), ["kube-abc-queued"]);
        assert!(step(&mut st, &unit(2), pods(), 34).is_empty());
        let s = step(&mut st, &unit(2), pods(), 35);
        assert_eq!(s[0].1, Planned::Started { at: t(5), gpus: Gpus::whole(4), pods: vec!["p0".into()] });
    }

    #[test]
    fn eviction_requeues_and_the_next_run_is_new() {
        let mut st = BTreeMap::new();
        let mut u = unit(1);
        step(&mut st, &u, vec![pod("p0", 2, Some(5), None)], 6);
        u.stopped = Some(Stop { at: Some(t(100)), for_good: false, reason: "Preempted".into() });
        assert!(step(&mut st, &u, vec![pod("p0", 2, Some(5), None)], 101).is_empty(), "its pod still holds GPUs");
        let s = step(&mut st, &u, vec![pod("p0", 2, Some(5), Some(103))], 104);
        assert_eq!(ids(&s), ["kube-abc-r1-requeued"]);
        assert_eq!(s[0].1, Planned::Requeued { at: t(103), reason: "Preempted".into() });
        assert!(step(&mut st, &u, vec![], 105).is_empty());
        u.stopped = None;
        let s = step(&mut st, &u, vec![pod("p0b", 2, Some(200), None)], 201);
        assert_eq!(ids(&s), ["kube-abc-r2-started"]);
        u.end = Some(End { at: t(300), status: FinishStatus::Succeeded, reason: "Succeeded".into() });
        let s = step(&mut st, &u, vec![pod("p0b", 2, Some(200), Some(299))], 301);
        assert_eq!(ids(&s), ["kube-abc-r2-finished"]);
        assert_eq!(
            s[0].1,
            Planned::Finished { at: t(300), status: FinishStatus::Succeeded, reason: "Succeeded".into() }
        );
        assert!(step(&mut st, &u, vec![], 302).is_empty());
    }

    /// Regression: a replacement pod bound within the second its predecessor went (the API's times
    /// are whole seconds) was taken for the old run's and the second run never started.
    #[test]
    fn a_next_run_bound_in_the_same_second_as_the_last_ended_starts() {
        let mut st = BTreeMap::new();
        let mut u = unit(1);
        step(&mut st, &u, vec![pod("p0", 1, Some(5), None)], 6);
        u.stopped = Some(Stop { at: Some(t(10)), for_good: false, reason: "Preempted".into() });
        assert_eq!(ids(&step(&mut st, &u, vec![pod("p0", 1, Some(5), Some(10))], 11)), ["kube-abc-r1-requeued"]);
        u.stopped = None;
        let s = step(&mut st, &u, vec![pod("p1", 1, Some(10), None)], 12);
        assert_eq!(ids(&s), ["kube-abc-r2-started"]);
        assert_eq!(s[0].1, Planned::Started { at: t(10), gpus: Gpus::whole(1), pods: vec!["p1".into()] });
    }

    #[test]
    fn deactivation_finishes_the_run_as_cancelled_at_the_last_pod_end() {
        let mut st = BTreeMap::new();
        let mut u = unit(1);
        step(&mut st, &u, vec![pod("p0", 1, Some(5), None)], 6);
        u.stopped = Some(Stop { at: Some(t(50)), for_good: true, reason: "InactiveWorkload".into() });
        let s = step(&mut st, &u, vec![], 60);
        assert_eq!(ids(&s), ["kube-abc-r1-finished"]);
        assert_eq!(
            s[0].1,
            Planned::Finished { at: t(50), status: FinishStatus::Cancelled, reason: "InactiveWorkload".into() },
            "the pod is gone: the condition's time"
        );
    }

    #[test]
    fn a_restart_after_a_whole_run_sends_both_with_real_times() {
        let mut st = BTreeMap::new();
        let mut u = unit(1);
        u.end = Some(End { at: t(90), status: FinishStatus::Failed, reason: "BackoffLimitExceeded".into() });
        let s = step(&mut st, &u, vec![pod("p0", 1, Some(10), Some(80))], 500);
        assert_eq!(ids(&s), ["kube-abc-r1-started", "kube-abc-r1-finished"]);
        assert_eq!(s[0].1, Planned::Started { at: t(10), gpus: Gpus::whole(1), pods: vec!["p0".into()] });
        assert!(matches!(s[1].1, Planned::Finished { at, status: FinishStatus::Failed, .. } if at == t(90)));
    }

    #[test]
    fn a_unit_that_never_ran_finishes_once_when_it_ends_or_is_deleted() {
        let mut st = BTreeMap::new();
        let mut u = unit(1);
        assert_eq!(ids(&step(&mut st, &u, vec![], 1)), ["kube-abc-queued"]);
        u.stopped = Some(Stop { at: Some(t(20)), for_good: true, reason: "AdmissionCheck".into() });
        let s = step(&mut st, &u, vec![], 21);
        assert_eq!(ids(&s), ["kube-abc-r0-finished"]);
        // Deleted while running: finished as cancelled, then forgotten.
        let mut st = BTreeMap::new();
        step(&mut st, &unit(1), vec![pod("p0", 1, Some(5), None)], 6);
        let (steps, forget) = plan(&st, &BTreeMap::new(), t(70), Duration::seconds(30));
        assert_eq!(steps.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), ["kube-abc-r1-finished"]);
        assert!(forget.is_empty());
        st.insert("uid-1".into(), steps[0].state.clone());
        let (steps, forget) = plan(&st, &BTreeMap::new(), t(71), Duration::seconds(30));
        assert!(steps.is_empty());
        assert_eq!(forget, ["uid-1"]);
    }

    #[test]
    fn a_held_unit_sends_nothing_and_pods_without_gpus_do_not_count() {
        let mut st = BTreeMap::new();
        let mut u = unit(1);
        u.stopped = Some(Stop { at: None, for_good: false, reason: "Suspended".into() });
        assert!(step(&mut st, &u, vec![], 5).is_empty(), "a Job created suspended, waiting for approval");
        u.stopped = None;
        assert_eq!(ids(&step(&mut st, &u, vec![pod("sidecar", 0, Some(5), None)], 6)), ["kube-abc-queued"]);
        assert!(step(&mut st, &u, vec![pod("sidecar", 0, Some(5), None)], 7).is_empty());
        // A unit bursar did not admit (denied, or its check still pending) is not reported.
        let mut st = BTreeMap::new();
        let mut denied = unit(1);
        denied.admitted = false;
        denied.stopped = Some(Stop { at: None, for_good: true, reason: "AdmissionCheck".into() });
        assert!(step(&mut st, &denied, vec![], 8).is_empty());
        assert!(st.is_empty());
    }

    #[test]
    fn a_reactivated_unit_runs_again_as_a_new_run() {
        let mut st = BTreeMap::new();
        let mut u = unit(1);
        step(&mut st, &u, vec![pod("p0", 1, Some(5), None)], 6);
        u.stopped = Some(Stop { at: Some(t(50)), for_good: true, reason: "InactiveWorkload".into() });
        step(&mut st, &u, vec![pod("p0", 1, Some(5), Some(49))], 51);
        u.stopped = None;
        let s = step(&mut st, &u, vec![pod("p0b", 1, Some(80), None)], 81);
        assert_eq!(ids(&s), ["kube-abc-r2-started"]);
    }

    #[test]
    fn a_waiting_unit_says_why_and_says_it_again_when_the_reason_changes() {
        let mut state = BTreeMap::new();
        let mut u = unit(1);
        u.waits = Some("AdmissionChecks: waiting for gpu-budget".into());
        let first = step(&mut state, &u, vec![pod("p0", 8, None, None)], 0);
        assert_eq!(
            first,
            vec![(
                "kube-abc-queued".to_owned(),
                Planned::Queued { at: t(0), reason: Some("AdmissionChecks: waiting for gpu-budget".into()) }
            )]
        );
        // Kueue has nothing more to say; the pod scheduler does.
        u.waits = None;
        let mut waiting = pod("p0", 8, None, None);
        waiting.waits = Some("Unschedulable: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu.".into());
        let second = step(&mut state, &u, vec![waiting.clone()], 10);
        assert_eq!(
            second,
            vec![(
                "kube-abc-waits-1".to_owned(),
                Planned::Queued {
                    at: t(10),
                    reason: Some("Unschedulable: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu.".into())
                }
            )]
        );
        assert!(step(&mut state, &u, vec![waiting], 20).is_empty(), "the same reason is not sent twice");
        let started = step(&mut state, &u, vec![pod("p0", 8, Some(25), None)], 30);
        assert!(
            matches!(started.as_slice(), [(id, Planned::Started { .. })] if id == "kube-abc-r1-started"),
            "{started:?}"
        );
    }
}
