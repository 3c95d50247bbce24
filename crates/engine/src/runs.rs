//! A job's runs as the scheduler reports them (wire format v1.x): the allocation of each run, runs
//! after a requeue, reruns of a finished job, array tasks, admissions the scheduler never confirms.
//!
//! The promise these keep is the quota's: every GPU a job holds is reserved and charged, on what the
//! scheduler allocated, for every run. The rules, each a method on [`State`] so the ledger partition
//! of `serve --cluster` applies the same arithmetic to its copy of a job ([`crate::shared`]):
//!
//! - **Allocation** ([`State::correct_allocation`]): a start that names the GPUs allocated replaces
//!   the admission's estimate: the reservation becomes allocation × requested hours and the held,
//!   queue and running counts follow. The admitted figure is kept ([`RunNotes::admitted_gpus`]).
//! - **Requeue** ([`State::requeue`]): the run is settled (runtime × its GPUs, as a release would)
//!   and leaves the running count; the job keeps its admission (its reservation and held GPUs) for the
//!   next run, as an admitted job that has not started does.
//! - **Rerun** ([`State::reopen`]): a finished job the scheduler runs again without an admission is
//!   admitted again as it was (reserved and held from now), so its GPUs are charged; policies decide
//!   whether it may go on (`on_rerun` in the reclaim family).
//! - **Arrays** ([`State::spawn_task`], [`State::task_released`]): the array reserves every task and
//!   holds the tasks that may run at once; a task's first start creates it as a job of its own, which
//!   takes one task's share of the reservation and hold from the array; when the last task is
//!   released the array is finished.
//! - **Confirmation** ([`State::confirm`]): an admission with `confirm_within_s` waits for the
//!   scheduler to say it created the job; the engine releases it at the deadline otherwise.
//!
//! [`RunNotes::admitted_gpus`]: crate::state::RunNotes::admitted_gpus

use std::sync::Arc;

use bursar_model::{FinishStatus, Gpus, Timestamp};

use crate::state::{JobPhase, JobRecord, State};

/// A start whose allocation differed from the reservation: what it was and what it is now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Correction {
    /// GPUs held before the start.
    pub before: Gpus,
    /// GPUs allocated.
    pub after: Gpus,
    /// GPU-hours reserved before.
    pub reserved_before: f64,
    /// GPU-hours reserved now.
    pub reserved_after: f64,
}

/// "1 GPU", "8 GPUs", "2/7 of a GPU" (two MIG slices of seven), "10/7 GPUs".
pub(crate) fn gpus_text(n: Gpus) -> String {
    if n == 1 {
        "1 GPU".to_owned()
    } else if n < 1 && !n.is_zero() {
        format!("{n} of a GPU")
    } else {
        format!("{n} GPUs")
    }
}

/// GPU-hours as a person reads them: at most two decimals, no trailing zeros (`0.27`, `80`).
pub(crate) fn hours_text(v: f64) -> String {
    let s = format!("{v:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" { "0".to_owned() } else { s.to_owned() }
}

/// The worse of two ends: failed over cancelled over succeeded.
fn worse(a: Option<FinishStatus>, b: FinishStatus) -> FinishStatus {
    let rank = |s: FinishStatus| match s {
        FinishStatus::Succeeded => 0,
        FinishStatus::Cancelled => 1,
        FinishStatus::Failed => 2,
    };
    match a {
        Some(a) if rank(a) >= rank(b) => a,
        _ => b,
    }
}

impl State {
    /// Moves the job's held GPUs (and its queue's) from `before` to what it holds now.
    pub(crate) fn rehold(&mut self, job: &JobRecord, before: Gpus) {
        let after = job.held_gpus();
        if after == before {
            return;
        }
        let delta = after.signed() - before.signed();
        let queue = job.profile.queue.clone();
        self.for_each_ledger(job, |l| {
            l.held_gpus = l.held_gpus.offset(delta);
            if let Some(q) = &queue {
                l.add_queue(q, delta);
            }
        });
    }

    /// Adds `hours` (either sign) to the job's reservation, in its ledgers too.
    /// Releases the reservation and the hold of an admitted job that has not started, keeping the
    /// job admitted (a stale reservation, [`crate::EngineConfig::stale_after`]); returns the GPU-hours
    /// and GPUs released. [`State::rereserve_stale`] undoes it when the job starts after all.
    pub(crate) fn unreserve_stale(&mut self, job: &mut JobRecord) -> (f64, Gpus) {
        let (day, held, queue, reserved) =
            (job.submitted.day(), job.held_gpus(), job.profile.queue.clone(), job.reserved);
        self.for_each_ledger(job, |l| {
            let b = l.bucket(day);
            b.reserved = (b.reserved - reserved).max(0.0);
            l.held_gpus = l.held_gpus.saturating_sub(held);
            if let Some(q) = &queue {
                l.add_queue(q, -held.signed());
            }
        });
        job.reserved = 0.0;
        job.with_runs(|r| r.released_stale = true);
        (reserved, held)
    }

    /// Sets the admitted, not started job `old` aside for `new`, which replaces it (`job.replaces`):
    /// its reservation and hold are released, as a stale one's are, before `new` is evaluated, so the
    /// move counts once. Returns the GPU-hours and GPUs set aside.
    pub(crate) fn set_aside_for(&mut self, old: &mut JobRecord, new: &Arc<str>) -> (f64, Gpus) {
        let (day, held, queue, reserved) =
            (old.submitted.day(), old.held_gpus(), old.profile.queue.clone(), old.reserved);
        self.for_each_ledger(old, |l| {
            let b = l.bucket(day);
            b.reserved = (b.reserved - reserved).max(0.0);
            l.held_gpus = l.held_gpus.saturating_sub(held);
            if let Some(q) = &queue {
                l.add_queue(q, -held.signed());
            }
        });
        old.reserved = 0.0;
        old.with_runs(|r| r.replaced_by = Some(new.clone()));
        (reserved, held)
    }

    /// The move of a job set aside for another did not happen (the new admission was not allowed,
    /// or the scheduler never created it, or started the old job): the old job is reserved and held
    /// again in full, from `from` when given (as [`State::reopen`] does in the other partitions),
    /// else on its own day as before. False when it was not set aside.
    pub(crate) fn take_back(&mut self, old: &mut JobRecord, from: Option<Timestamp>) -> bool {
        if old.runs().is_none_or(|r| r.replaced_by.is_none()) {
            return false;
        }
        old.with_runs(|r| r.replaced_by = None);
        if let Some(at) = from {
            old.submitted = at;
        }
        self.reserve(old);
        true
    }

    /// A job whose reservation was released as stale starts at `at` after all: reserved and held
    /// again in full from `at`, as a job the scheduler runs again is ([`State::reopen`], which is
    /// what the other partitions of `serve --cluster` apply). False when it was not released.
    pub(crate) fn rereserve_stale(&mut self, job: &mut JobRecord, at: Timestamp) -> bool {
        if !job.runs().is_some_and(|r| r.released_stale) {
            return false;
        }
        job.with_runs(|r| r.released_stale = false);
        job.submitted = at;
        self.reserve(job);
        true
    }

    fn rereserve(&mut self, job: &mut JobRecord, hours: f64) {
        if hours == 0.0 {
            return;
        }
        job.reserved = (job.reserved + hours).max(0.0);
        let day = job.submitted.day();
        self.for_each_ledger(job, |l| {
            let b = l.bucket(day);
            b.reserved = (b.reserved + hours).max(0.0);
        });
    }

    /// The scheduler allocated `gpus` to the job's run about to start: when that differs from what
    /// the job holds, its reservation and GPU counts follow the allocation. Call before
    /// [`State::start`]. `None` when nothing changed.
    pub(crate) fn correct_allocation(&mut self, job: &mut JobRecord, gpus: Gpus) -> Option<Correction> {
        if gpus == job.gpus || job.array().is_some() {
            return None;
        }
        let before = job.gpus;
        let reserved_before = job.reserved;
        let held_before = job.held_gpus();
        let running = job.started.is_some();
        job.gpus = gpus;
        job.with_runs(|r| {
            r.admitted_gpus.get_or_insert(before);
        });
        if job.phase.is_live() {
            // What a run on the allocation could still use: allocation × requested hours.
            let want = gpus.as_f64() * job.requested_hours;
            self.rereserve(job, want - reserved_before);
            self.rehold(job, held_before);
            if running {
                let delta = gpus.signed() - before.signed();
                self.for_each_ledger(job, |l| {
                    l.running_gpus = l.running_gpus.offset(delta);
                });
            }
        }
        Some(Correction { before, after: gpus, reserved_before, reserved_after: job.reserved })
    }

    /// The job's run ended at `at` and the job waits to run again: the run is settled (runtime × its
    /// GPUs into `used` and `unbilled`) and leaves the running count, and its GPUs leave the held
    /// count (the scheduler freed them: a requeued job waiting in its queue must not keep the
    /// project's other submissions out, issue 55); the reservation stays for the next run, whose
    /// start holds them again. Returns the run's GPU-hours (0 when it was not running).
    pub(crate) fn requeue(&mut self, job: &mut JobRecord, at: Timestamp) -> f64 {
        if job.phase != JobPhase::Running || job.started.is_none() {
            return 0.0;
        }
        let used = job.runtime_gpu_hours(at);
        let (day, gpus) = (job.submitted.day(), job.gpus);
        self.for_each_ledger(job, |l| {
            let b = l.bucket(day);
            b.used += used;
            b.unbilled += used;
            l.running_gpus = l.running_gpus.saturating_sub(gpus);
        });
        job.unbilled += used;
        job.started = crate::state::OptTime::NONE;
        job.ended = crate::state::OptTime::NONE;
        job.phase = JobPhase::Admitted;
        let held = job.held_gpus();
        job.with_runs(|r| {
            r.reruns = r.reruns.saturating_add(1);
            r.earlier_gpu_hours += used;
            r.requeued = true;
        });
        self.rehold(job, held);
        // A policy's marks describe the run they were made in (an idle window, an alert).
        job.clear_marks();
        used
    }

    /// A reclaim the scheduler did not carry out (its agent recorded `action.failed`): the job still
    /// holds what it held, so it is held, reserved and charged again as if it had not been released —
    /// its run up to the reclaim (`at`) stays settled, and a run that was going continues from `at`, so
    /// the time since is charged too. Its reservation is what is left of its request. False when the
    /// job was not released by a reclaim, or is an array (its tasks are restored one by one).
    pub(crate) fn unreclaim(&mut self, job: &mut JobRecord, at: Timestamp) -> bool {
        if job.phase != JobPhase::Reclaimed || job.array().is_some() {
            return false;
        }
        let was_running = job.started.is_some();
        let last_run = job.runtime_gpu_hours(at);
        job.status = None;
        job.started = crate::state::OptTime::NONE;
        job.ended = crate::state::OptTime::NONE;
        if last_run > 0.0 {
            job.with_runs(|r| r.earlier_gpu_hours += last_run);
        }
        job.phase = JobPhase::Admitted;
        self.reserve(job);
        let spent = job.runs().map_or(0.0, |r| r.earlier_gpu_hours);
        self.rereserve(job, -spent.min(job.reserved));
        if was_running {
            self.start(job, at);
        }
        job.with_runs(|r| r.reclaim_failed = Some(at).into());
        true
    }

    /// A finished job the scheduler runs again without an admission: admitted again as it was,
    /// reserved and held from `at` (its earlier runs stay settled on their own day).
    pub(crate) fn reopen(&mut self, job: &mut JobRecord, at: Timestamp) {
        if job.phase.is_live() || job.phase == JobPhase::PendingApproval {
            return;
        }
        let last_run = job.runtime_gpu_hours(at);
        job.phase = JobPhase::Admitted;
        job.status = None;
        job.started = crate::state::OptTime::NONE;
        job.ended = crate::state::OptTime::NONE;
        job.submitted = at;
        if last_run > 0.0 {
            job.with_runs(|r| r.earlier_gpu_hours += last_run);
        }
        job.clear_marks();
        if let Some(a) = job.rare.as_mut().and_then(|r| r.runs.array.as_mut()) {
            // An array run again: every task again.
            a.created = 0;
            a.live.clear();
            a.worst = None;
        }
        job.with_runs(|r| {
            // Run again, it is reserved and held in full: a release as stale before its end is over.
            r.released_stale = false;
            // A late confirmation of a job released as unconfirmed is its first run, not a rerun.
            if !std::mem::take(&mut r.released_unconfirmed) {
                r.reruns = r.reruns.saturating_add(1);
            }
        });
        self.reserve(job);
    }

    /// Creates task `task` of array `parent` on its first start: a job of its own with the array's
    /// profile and one task's GPUs and hours, taking one task's share of the array's reservation and
    /// hold. `Err` says why it cannot be (no such array, not live, not an array).
    pub(crate) fn spawn_task(&mut self, parent: &str, task: &Arc<str>) -> Result<(), String> {
        let Some(mut p) = self.jobs.remove(parent) else {
            return Err(format!("array {parent} is not known"));
        };
        let parent_id: Arc<str> = Arc::from(parent);
        let result = (|| {
            if p.array().is_none() {
                return Err(format!("job {parent} is not an array"));
            }
            if !p.phase.is_live() {
                return Err(format!("array {parent} is {} and starts no task", p.phase.as_str()));
            }
            let held_before = p.held_gpus();
            let share = p.gpus.as_f64() * p.requested_hours;
            let beyond = p.array().is_some_and(|a| a.unstarted() == 0);
            if let Some(a) = p.rare.as_mut().and_then(|r| r.runs.array.as_mut()) {
                a.created = a.created.saturating_add(1).min(a.tasks);
                a.live.push(task.clone());
            }
            let mut child = p.clone();
            child.rare = None;
            child.reserved = 0.0;
            child.unbilled = 0.0;
            child.started = crate::state::OptTime::NONE;
            child.ended = crate::state::OptTime::NONE;
            child.status = None;
            child.phase = JobPhase::Admitted;
            child.util = Default::default();
            child.with_runs(|r| r.parent = Some(parent_id.clone()));
            // The task's share moves from the array to the task: nothing changes in the ledgers'
            // reserved hours, unless the task is one the array was not admitted for.
            if beyond {
                self.rereserve(&mut child, share);
            } else {
                p.reserved = (p.reserved - share).max(0.0);
                child.reserved = share;
            }
            // Held: the array now holds fewer slots, the task holds its GPUs.
            let p_after = p.held_gpus();
            let delta = p_after.signed() + child.gpus.signed() - held_before.signed();
            if delta != 0 {
                let queue = p.profile.queue.clone();
                self.for_each_ledger(&p, |l| {
                    l.held_gpus = l.held_gpus.offset(delta);
                    if let Some(q) = &queue {
                        l.add_queue(q, delta);
                    }
                });
            }
            self.jobs.insert(task.clone(), child);
            Ok(())
        })();
        self.jobs.insert(parent_id, p);
        result
    }

    /// After task `task` (with end `status`) was released: the array stops counting it live and holds
    /// a slot again for a task not started; when no task is left to run or running, the array itself
    /// is finished. Returns the array's id and end when that happened.
    pub(crate) fn task_released(
        &mut self,
        task: &str,
        status: FinishStatus,
        at: Timestamp,
    ) -> Option<(Arc<str>, FinishStatus)> {
        let parent = self.jobs.get(task)?.parent()?.clone();
        let mut p = self.jobs.remove(&parent)?;
        let held_before = p.held_gpus();
        let mut done = None;
        if let Some(a) = p.rare.as_mut().and_then(|r| r.runs.array.as_mut()) {
            a.live.retain(|t| &**t != task);
            a.worst = Some(worse(a.worst, status));
            if a.unstarted() == 0 && a.live.is_empty() {
                done = a.worst;
            }
        }
        if p.phase.is_live() {
            self.rehold(&p, held_before);
            if let Some(end) = done {
                self.release(&mut p, at, JobPhase::Finished);
                p.status = Some(end);
            }
        } else {
            done = None;
        }
        self.jobs.insert(parent.clone(), p);
        done.map(|s| (parent, s))
    }

    /// The live tasks of array `id` (to release with it when the whole array is reclaimed).
    pub(crate) fn live_tasks(&self, id: &str) -> Vec<Arc<str>> {
        self.jobs.get(id).and_then(|j| j.array()).map(|a| a.live.clone()).unwrap_or_default()
    }

    /// The scheduler confirmed it created the job: no deadline any more. True when one was pending.
    pub(crate) fn confirm(job: &mut JobRecord) -> bool {
        if job.runs().is_some_and(|r| r.replaces.is_some()) {
            // A move the scheduler made: the job it replaced stays set aside until it ends.
            job.with_runs(|r| r.replaces = None);
        }
        if job.runs().is_none_or(|r| r.confirm_by.is_none()) {
            return false;
        }
        job.with_runs(|r| r.confirm_by = crate::state::OptTime::NONE);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::ScopeKind;
    use bursar_model::{ArraySpec, JobSpec};

    fn t(min: i64) -> Timestamp {
        Timestamp(1_796_000_000_000 + min * 60_000)
    }

    fn spec(id: &str, gpus: u32, hours: f64) -> JobSpec {
        JobSpec {
            id: id.into(),
            project: "p".into(),
            user: "u".into(),
            queue: Some("q".into()),
            gpus: gpus.into(),
            nodes: 1,
            requested_hours: hours,
            ..JobSpec::default()
        }
    }

    fn admit(st: &mut State, s: &JobSpec, at: Timestamp) {
        let mut r = st.record_from_spec(s, at);
        st.reserve(&mut r);
        st.jobs.insert(Arc::from(s.id.as_str()), r);
    }

    fn with<T>(st: &mut State, id: &str, f: impl FnOnce(&mut State, &mut JobRecord) -> T) -> T {
        let mut j = st.jobs.remove(id).unwrap();
        let out = f(st, &mut j);
        st.jobs.insert(Arc::from(id), j);
        out
    }

    fn ledger(st: &State) -> (u32, u32, u32, f64, f64) {
        let l = st.ledger(ScopeKind::Project, "p").unwrap();
        let u = l.usage(bursar_model::Period::Month, t(0).day());
        let n = |g: Gpus| {
            assert!(g.is_whole(), "{g}");
            g.floor()
        };
        (n(l.held_gpus), n(l.running_gpus), n(l.queue_gpus("q")), u.reserved, u.used)
    }

    #[test]
    fn an_allocation_larger_than_the_estimate_is_reserved_and_held() {
        let mut st = State::default();
        admit(&mut st, &spec("j", 2, 10.0), t(0));
        assert_eq!(ledger(&st), (2, 0, 2, 20.0, 0.0));
        let c = with(&mut st, "j", |st, j| {
            let c = st.correct_allocation(j, 8.into());
            st.start(j, t(1));
            c
        })
        .unwrap();
        assert_eq!((c.before.floor(), c.after.floor(), c.reserved_before, c.reserved_after), (2, 8, 20.0, 80.0));
        assert_eq!(ledger(&st), (8, 8, 8, 80.0, 0.0));
        // Released after 30 minutes: 8 GPUs × 0.5 h.
        with(&mut st, "j", |st, j| st.release(j, t(31), JobPhase::Finished));
        assert_eq!(ledger(&st), (0, 0, 0, 0.0, 4.0));
        assert_eq!(st.job("j").unwrap().runs().unwrap().admitted_gpus, Some(Gpus::whole(2)));
    }

    #[test]
    fn each_run_is_settled_on_its_own_and_the_gap_is_free() {
        let mut st = State::default();
        admit(&mut st, &spec("j", 4, 10.0), t(0));
        with(&mut st, "j", |st, j| st.start(j, t(0)));
        // Preempted after an hour: 4 GPU-hours settled, no longer running, still admitted, and its
        // GPUs free while it waits (issue 55: they counted as held, keeping others out).
        let used = with(&mut st, "j", |st, j| st.requeue(j, t(60)));
        assert_eq!(used, 4.0);
        assert_eq!(ledger(&st), (0, 0, 0, 40.0, 4.0));
        assert_eq!(st.job("j").unwrap().phase(), JobPhase::Admitted);
        // Waits two hours (not charged), runs again on 2 GPUs for 30 minutes, finishes.
        with(&mut st, "j", |st, j| {
            st.correct_allocation(j, 2.into());
            st.start(j, t(180));
        });
        assert_eq!(ledger(&st), (2, 2, 2, 20.0, 4.0));
        with(&mut st, "j", |st, j| st.release(j, t(210), JobPhase::Finished));
        assert_eq!(ledger(&st), (0, 0, 0, 0.0, 5.0));
        let j = st.job("j").unwrap();
        assert_eq!((j.unbilled(), j.runs().unwrap().reruns), (5.0, 1));
        assert_eq!(j.total_runtime_gpu_hours(t(300)), 5.0, "both runs, the gap not");
    }

    #[test]
    fn a_rerun_of_a_finished_job_is_reserved_again() {
        let mut st = State::default();
        admit(&mut st, &spec("j", 4, 1.0), t(0));
        with(&mut st, "j", |st, j| {
            st.start(j, t(0));
            st.release(j, t(30), JobPhase::Finished);
        });
        assert_eq!(ledger(&st), (0, 0, 0, 0.0, 2.0));
        with(&mut st, "j", |st, j| st.reopen(j, t(40)));
        assert_eq!(ledger(&st), (4, 0, 4, 4.0, 2.0));
        with(&mut st, "j", |st, j| {
            st.start(j, t(40));
            st.release(j, t(70), JobPhase::Finished);
        });
        assert_eq!(ledger(&st), (0, 0, 0, 0.0, 4.0));
    }

    #[test]
    fn an_array_reserves_every_task_and_holds_its_slots() {
        let mut st = State::default();
        let mut s = spec("a", 2, 1.0);
        s.array = Some(ArraySpec { tasks: 5, max_running: Some(2) });
        admit(&mut st, &s, t(0));
        // 5 tasks × 2 GPUs × 1 h reserved; 2 tasks at once hold 4 GPUs.
        assert_eq!(ledger(&st), (4, 0, 4, 10.0, 0.0));
        for task in ["a_0", "a_1"] {
            let id: Arc<str> = Arc::from(task);
            st.spawn_task("a", &id).unwrap();
            with(&mut st, task, |st, j| st.start(j, t(0)));
        }
        assert_eq!(ledger(&st), (4, 4, 4, 10.0, 0.0));
        assert_eq!(st.job("a").unwrap().held_gpus(), 0, "both slots are taken by live tasks");
        // Task 0 ends after an hour: settled on its own; a slot is free again.
        with(&mut st, "a_0", |st, j| st.release(j, t(60), JobPhase::Finished));
        assert_eq!(st.task_released("a_0", FinishStatus::Succeeded, t(60)), None);
        assert_eq!(ledger(&st), (4, 2, 4, 8.0, 2.0));
        // The other three start and end one by one; then task 1; the array is done.
        for task in ["a_2", "a_3", "a_4"] {
            let id: Arc<str> = Arc::from(task);
            st.spawn_task("a", &id).unwrap();
            with(&mut st, task, |st, j| {
                st.start(j, t(60));
                st.release(j, t(90), JobPhase::Finished);
            });
            assert_eq!(st.task_released(task, FinishStatus::Failed, t(90)), None);
        }
        with(&mut st, "a_1", |st, j| st.release(j, t(120), JobPhase::Finished));
        let done = st.task_released("a_1", FinishStatus::Succeeded, t(120));
        assert_eq!(done.map(|(p, s)| (p.to_string(), s)), Some(("a".to_owned(), FinishStatus::Failed)));
        // 2 GPU-hours (a_0) + 3 × 1 (a_2..4) + 4 (a_1): 9; nothing reserved or held.
        assert_eq!(ledger(&st), (0, 0, 0, 0.0, 9.0));
        assert_eq!(st.job("a").unwrap().phase(), JobPhase::Finished);
    }

    #[test]
    fn an_array_finished_early_releases_what_never_started() {
        let mut st = State::default();
        let mut s = spec("a", 2, 1.0);
        s.array = Some(ArraySpec { tasks: 10, max_running: None });
        admit(&mut st, &s, t(0));
        assert_eq!(ledger(&st), (20, 0, 20, 20.0, 0.0));
        let id: Arc<str> = Arc::from("a_0");
        st.spawn_task("a", &id).unwrap();
        with(&mut st, "a_0", |st, j| st.start(j, t(0)));
        // The array is cancelled: what never started is released; the live task is its own.
        with(&mut st, "a", |st, j| st.release(j, t(30), JobPhase::Finished));
        assert_eq!(ledger(&st), (2, 2, 2, 2.0, 0.0));
        with(&mut st, "a_0", |st, j| st.release(j, t(30), JobPhase::Finished));
        assert_eq!(st.task_released("a_0", FinishStatus::Cancelled, t(30)), None);
        assert_eq!(ledger(&st), (0, 0, 0, 0.0, 1.0));
    }
}
