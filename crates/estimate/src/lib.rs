//! When would a job start? The estimator behind `bursar estimate`, `GET /v1/estimate` and the queue
//! on the pool page.
//!
//! Given one partition of the pool (a region's GPU type in one queue: its free GPUs now), the jobs
//! running in it (when each started, its GPUs, the limit its user requested) and the jobs waiting
//! in the scheduler's order, it simulates what the scheduler will do — running jobs end, waiting
//! jobs start, later jobs backfill as the scheduler allows ([`sim`], [`Backfill`]) — and gives each
//! waiting job, and a request not yet submitted, an estimated start with a range. A running job's
//! end is predicted from history, not from its limit alone: the same user's and configuration's
//! past runtimes against what they requested ([`predict`], [`History`]); users ask for far more
//! time than they use, which is why an estimate from the limits (what Slurm's `squeue --start`
//! shows) starts jobs too late. Its accuracy is measured against that estimate by replaying real
//! traces (`bursar-bench-estimate`, `docs/estimate.md`).
//!
//! Boundaries: pure computation over plain values, no I/O, no clock (the caller passes `now`),
//! no dependency. It does not know bursar's events or state: `bursar-serve` builds the
//! [`Partition`]s from the engine's jobs and the pool's inventory, and the benchmark from traces.
//! Times are milliseconds since the Unix epoch (bursar's event time), durations milliseconds.
//! GPU counts are in whatever unit the caller counts, the same for every count of a partition:
//! `bursar-serve` counts 840ths of a GPU (`bursar_model::Gpus`), so a MIG slice is placed as its
//! share; the benchmark counts the traces' whole GPUs.
//!
//! Layout: [`predict`] (runtime from history), [`sim`] (the scheduler, shared by the estimator and
//! the benchmark's replay), this file (a partition's estimates: [`estimate`]).

pub mod predict;
pub mod sim;

pub use predict::{Basis, History, Prediction};
pub use sim::{Backfill, Scheduler};

/// Milliseconds since the Unix epoch, or a duration in milliseconds.
pub type Millis = i64;

/// A job as the estimator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// Its id (for the caller; the estimator only passes it through).
    pub id: String,
    /// Its user: whose history predicts its runtime.
    pub user: String,
    /// Its configuration (`JobSpec::config`), when it names one.
    pub config: Option<String>,
    /// GPUs it holds or asks for, in the caller's unit (see the crate's documentation).
    pub gpus: u32,
    /// The time limit it requested (ms): the scheduler plans with it, the job is ended at it.
    pub limit: Millis,
}

/// A job holding GPUs in the partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningJob {
    /// The job.
    pub job: Job,
    /// When its current run started.
    pub started: Millis,
}

/// One partition of the pool — a region's GPU type in one queue — as the scheduler sees it now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Partition {
    /// GPUs free now (in service, not allocated, not drained). May be below what the running jobs
    /// below would leave (jobs bursar does not know hold GPUs too): their GPUs are never counted as
    /// returning, which errs late, never early.
    pub free: u32,
    /// The jobs running in it.
    pub running: Vec<RunningJob>,
    /// The jobs waiting for it, in the scheduler's order (first starts first).
    pub waiting: Vec<Job>,
    /// How the scheduler lets later jobs pass a blocked one.
    pub backfill: Backfill,
}

/// When a job is expected to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Estimate {
    /// The estimate: the simulation with every duration predicted from history. `None`: it cannot
    /// start in this partition (it asks for more GPUs than the partition has, counting the GPUs
    /// running jobs will return).
    pub start: Option<Millis>,
    /// The early end of the range: the simulation with every duration at the short end of its
    /// history (the shortest recent run).
    pub earliest: Option<Millis>,
    /// The late end of the range: the simulation with every duration at its requested limit, the
    /// estimate `squeue --start` gives. A job does not start later unless something overtakes it
    /// (a job of higher priority arrives) or capacity is lost (a node drained).
    pub latest: Option<Millis>,
}

/// The estimates of a partition: one per waiting job, in the order given, then the request's (if
/// one was given) as if it were submitted now, behind every waiting job.
///
/// A running job whose predicted end has passed (it outlived its history) is expected to end
/// halfway between now and its limit; one past its limit, now.
pub fn estimate(now: Millis, partition: &Partition, history: &History, request: Option<&Job>) -> Vec<Estimate> {
    let waiting: Vec<&Job> = partition.waiting.iter().chain(request).collect();
    let predictions: Vec<Prediction> = waiting.iter().map(|j| history.predict(j)).collect();
    let running: Vec<(Prediction, &RunningJob)> =
        partition.running.iter().map(|r| (history.predict(&r.job), r)).collect();
    let base = running.len();
    let run = |pick: fn(&Prediction) -> Millis| -> Vec<Option<Millis>> {
        let mut s = scheduler(now, partition.free, partition.backfill, &running, &waiting, &predictions, pick);
        let starts = s.run_until_started(now);
        (0..waiting.len()).map(|i| starts.get(&(base + i)).copied()).collect()
    };
    let mid = run(|p| p.runtime);
    let low = run(|p| p.low);
    let high = run(|p| p.limit);
    mid.iter()
        .zip(&low)
        .zip(&high)
        .map(|((&start, &earliest), &latest)| Estimate {
            start,
            // EASY backfill has anomalies (a shorter job can make a later one wait longer): the
            // range is widened to hold the estimate.
            earliest: min_opt(earliest, start),
            latest: max_opt(latest, start),
        })
        .collect()
}

/// The partition's scheduler at `now`: the running jobs held until their expected ends, the waiting
/// jobs queued in order (keys: running jobs first, then the waiting ones), every duration `pick`ed
/// from its prediction.
fn scheduler(
    now: Millis,
    free: u32,
    backfill: Backfill,
    running: &[(Prediction, &RunningJob)],
    waiting: &[&Job],
    predictions: &[Prediction],
    pick: fn(&Prediction) -> Millis,
) -> Scheduler {
    let mut s = Scheduler::new(free, backfill);
    for (i, (p, r)) in running.iter().enumerate() {
        let end = expected_end(now, r.started, r.job.limit, pick(p));
        s.hold(i, r.job.gpus, r.started.saturating_add(r.job.limit), end);
    }
    for (i, (j, p)) in waiting.iter().zip(predictions).enumerate() {
        s.enqueue(running.len() + i, j.gpus, j.limit, pick(p));
    }
    s
}

/// GPUs expected free at `at` (no earlier than `now`): the simulation of [`estimate`] with every
/// duration predicted from history, run to `at`, so the waiting jobs that start by then have taken
/// their GPUs. What a job submitted at `at` would find free (the pool page's "free in an hour").
/// Never more than the partition's free GPUs plus what the running jobs hold; GPUs held by jobs
/// bursar does not know are not counted as coming back.
pub fn free_at(now: Millis, at: Millis, partition: &Partition, history: &History) -> u32 {
    let waiting: Vec<&Job> = partition.waiting.iter().collect();
    let predictions: Vec<Prediction> = waiting.iter().map(|j| history.predict(j)).collect();
    let running: Vec<(Prediction, &RunningJob)> =
        partition.running.iter().map(|r| (history.predict(&r.job), r)).collect();
    let mut s = scheduler(now, partition.free, partition.backfill, &running, &waiting, &predictions, |p| p.runtime);
    let mut t = now;
    loop {
        s.end_until(t);
        s.pass(t);
        match s.next_end() {
            Some(end) if end <= at => t = end.max(t),
            _ => break,
        }
    }
    u32::try_from(s.free().max(0)).unwrap_or(u32::MAX)
}

/// When a running job is expected to end, given when it started, its limit and its predicted
/// runtime: the prediction while it is ahead; once it has passed, halfway from now to the limit;
/// past the limit, now.
pub fn expected_end(now: Millis, started: Millis, limit: Millis, runtime: Millis) -> Millis {
    let predicted = started.saturating_add(runtime.min(limit));
    if predicted > now {
        return predicted;
    }
    let limit_end = started.saturating_add(limit);
    if limit_end <= now {
        return now;
    }
    now + (limit_end - now) / 2
}

fn min_opt(a: Option<Millis>, b: Option<Millis>) -> Option<Millis> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn max_opt(a: Option<Millis>, b: Option<Millis>) -> Option<Millis> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests;
