//! How right is an estimated start? A replay of a real trace through the scheduler, with each
//! job's start estimated at its submission, twice: from the requested limits alone (what Slurm's
//! `squeue --start` does) and by `bursar-estimate` (ends predicted from history). The bin
//! `bursar-bench-estimate` runs it; `docs/estimate.md` explains the choices and gives the figures.
//!
//! The modelled inputs, each the same for both estimators:
//!
//! - **Limits.** Neither Philly nor OpenB records the limit a user asked for. A job's limit is its
//!   true runtime rounded up to the next rung of [`LADDER_HOURS`] (1, 2, 4, 8, 12, 24, 48, 72 h),
//!   or, above the ladder, the queue's maximum: the trace's longest runtime rounded up to a whole
//!   day, so no job outlives its limit. Both estimators get this limit, never the runtime.
//! - **Users and configurations.** The user is the trace's (`user`), or for OpenB, which has none,
//!   its QoS class (`project`); no trace names configurations.
//! - **Queues and capacity.** Philly's queues are its virtual clusters (`vc`: a team's share);
//!   OpenB is one queue. A queue's GPUs are `scale` × the most GPUs its jobs held at once in the
//!   recorded schedule (at least its largest job): below 1, jobs queue.
//!
//! The truth ([`Truth::Replay`], the default): the trace's submissions replayed through the same
//! scheduler (FIFO with EASY backfill, planning with the limits) with the true runtimes; a job's
//! true wait is its replayed start minus its submission. At each submission the estimators see
//! what a live estimator would: the free GPUs, the running jobs (start, GPUs, limit), the queue
//! ahead in order, and the history of runs that have *ended* by then.
//!
//! [`Truth::Recorded`] measures against the trace's own recorded starts instead, with the state
//! at each submission read from the recorded schedule. Those waits were shaped by jobs outside
//! the sample (the Philly file is a sample of the cluster's jobs; OpenB's waits are placement
//! latency of seconds), which neither estimator can see; the oracle line (the simulation with the
//! true runtimes) shows how much of the error no runtime prediction can remove.

use std::collections::HashMap;

use bursar_estimate::{Backfill, History, Job, Millis, Partition, RunningJob, Scheduler, estimate};
use bursar_traces::JobTrace;

/// The modelled limits users pick from, in hours.
pub const LADDER_HOURS: [i64; 8] = [1, 2, 4, 8, 12, 24, 48, 72];

const HOUR: Millis = 3_600_000;
const DAY: Millis = 24 * HOUR;
/// Waits under this count as equal for "within a factor of two" (a minute: a scheduler's pass).
pub const FLOOR: Millis = 60_000;

/// What the estimates are measured against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Truth {
    /// The trace replayed through the scheduler with its true runtimes.
    Replay,
    /// The starts the trace recorded.
    Recorded,
}

/// A job of the benchmark: what the trace says and what is modelled.
#[derive(Debug, Clone)]
pub struct BenchJob {
    /// The estimator's view (user, GPUs, modelled limit).
    pub job: Job,
    /// Its queue.
    pub queue: String,
    /// Submitted at.
    pub submitted: Millis,
    /// Its true runtime (never shown to an estimator).
    pub runtime: Millis,
    /// Its recorded start.
    pub recorded_start: Millis,
}

/// The modelled limit of a job that ran `runtime`: the next rung of the ladder, else `queue_max`.
pub fn modelled_limit(runtime: Millis, queue_max: Millis) -> Millis {
    LADDER_HOURS.iter().map(|h| h * HOUR).find(|&l| runtime <= l).unwrap_or(queue_max)
}

/// The trace's jobs that started and ended, with modelled limits; and how many were left out.
pub fn prepare(traces: &[JobTrace], queue_of: impl Fn(&JobTrace) -> String) -> (Vec<BenchJob>, usize) {
    let mut jobs = Vec::new();
    let mut left_out = 0;
    for t in traces {
        let (Some(start), Some((end, _))) = (t.started, t.finished) else {
            left_out += 1;
            continue;
        };
        if t.spec.gpus == 0 || start < t.submitted || end < start {
            left_out += 1;
            continue;
        }
        let user = if t.spec.user.is_empty() { t.spec.project.clone() } else { t.spec.user.clone() };
        jobs.push(BenchJob {
            job: Job { id: t.spec.id.clone(), user, config: t.spec.config.clone(), gpus: t.spec.gpus.ceil(), limit: 0 },
            queue: queue_of(t),
            submitted: t.submitted.millis(),
            runtime: end.millis() - start.millis(),
            recorded_start: start.millis(),
        });
    }
    let longest = jobs.iter().map(|j| j.runtime).max().unwrap_or(0);
    let queue_max = (longest + DAY - 1) / DAY * DAY;
    for j in &mut jobs {
        j.job.limit = modelled_limit(j.runtime, queue_max.max(LADDER_HOURS[7] * HOUR));
    }
    jobs.sort_by(|a, b| a.submitted.cmp(&b.submitted).then_with(|| a.job.id.cmp(&b.job.id)));
    (jobs, left_out)
}

/// Each queue's GPUs: `scale` × its peak in the recorded schedule, at least its largest job.
pub fn capacities(jobs: &[BenchJob], scale: f64) -> HashMap<String, u32> {
    let mut steps: HashMap<&str, Vec<(Millis, i64)>> = HashMap::new();
    let mut largest: HashMap<&str, u32> = HashMap::new();
    for j in jobs {
        let s = steps.entry(&j.queue).or_default();
        s.push((j.recorded_start, i64::from(j.job.gpus)));
        s.push((j.recorded_start + j.runtime, -i64::from(j.job.gpus)));
        let l = largest.entry(&j.queue).or_default();
        *l = (*l).max(j.job.gpus);
    }
    steps
        .into_iter()
        .map(|(q, mut s)| {
            s.sort_unstable();
            let (mut now, mut peak) = (0i64, 0i64);
            for (_, d) in s {
                now += d;
                peak = peak.max(now);
            }
            let cap = ((peak as f64) * scale).floor() as u32;
            (q.to_owned(), cap.max(largest.get(q).copied().unwrap_or(0)))
        })
        .collect()
}

/// One job's outcome: true wait and the three estimated waits (ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// The true wait.
    pub truth: Millis,
    /// From the limits alone.
    pub limits: Millis,
    /// From history (bursar-estimate).
    pub history: Millis,
    /// The simulation with the true runtimes (not an estimator: the floor of the error).
    pub oracle: Millis,
}

/// Replays `jobs` and estimates each at its submission.
pub fn run(jobs: &[BenchJob], caps: &HashMap<String, u32>, truth: Truth) -> Vec<Outcome> {
    match truth {
        Truth::Replay => replay(jobs, caps),
        Truth::Recorded => recorded(jobs, caps),
    }
}

struct Estimates {
    limits: Millis,
    history: Millis,
    oracle: Millis,
}

/// The three estimates of job `new` at `now`, with `running` (key, start) and `waiting` keys ahead.
fn three(
    now: Millis,
    jobs: &[BenchJob],
    free: u32,
    running: &[(usize, Millis)],
    waiting: &[usize],
    new: usize,
    history: &History,
) -> Option<Estimates> {
    let partition = Partition {
        free,
        running: running.iter().map(|&(k, s)| RunningJob { job: jobs[k].job.clone(), started: s }).collect(),
        waiting: waiting.iter().map(|&k| jobs[k].job.clone()).collect(),
        backfill: Backfill::Easy,
    };
    let e = estimate(now, &partition, history, Some(&jobs[new].job));
    let mine = e.last()?;
    let mut oracle = Scheduler::new(free, Backfill::Easy);
    for &(k, s) in running {
        let j = &jobs[k];
        oracle.hold(k, j.job.gpus, s + j.job.limit, (s + j.runtime).max(now));
    }
    for &k in waiting.iter().chain([&new]) {
        oracle.enqueue(k, jobs[k].job.gpus, jobs[k].job.limit, jobs[k].runtime);
    }
    let o = oracle.run_until_started(now);
    Some(Estimates { limits: mine.latest? - now, history: mine.start? - now, oracle: o.get(&new).copied()? - now })
}

#[derive(Default)]
struct QueueState {
    sched: Option<Scheduler>,
    running: HashMap<usize, Millis>,
    waiting: Vec<usize>,
}

fn replay(jobs: &[BenchJob], caps: &HashMap<String, u32>) -> Vec<Outcome> {
    // Events: (time, kind 0 = end / 1 = arrival, key). Ends first at a time, so a job submitted
    // when another ends sees the GPUs free, as the scheduler's pass would.
    let mut queues: HashMap<&str, QueueState> = HashMap::new();
    let mut history = History::new();
    let mut pending: std::collections::BinaryHeap<std::cmp::Reverse<(Millis, u8, usize)>> =
        jobs.iter().enumerate().map(|(k, j)| std::cmp::Reverse((j.submitted, 1, k))).collect();
    let mut estimates: HashMap<usize, Estimates> = HashMap::new();
    let mut starts: HashMap<usize, Millis> = HashMap::new();
    while let Some(std::cmp::Reverse((t, _, _))) = pending.peek().copied() {
        let mut touched: Vec<&str> = Vec::new();
        while let Some(&std::cmp::Reverse((t2, kind, k))) = pending.peek() {
            if t2 != t {
                break;
            }
            pending.pop();
            let j = &jobs[k];
            let q = queues.entry(&j.queue).or_default();
            let cap = caps.get(&j.queue).copied().unwrap_or(j.job.gpus);
            let sched = q.sched.get_or_insert_with(|| Scheduler::new(cap, Backfill::Easy));
            if kind == 0 {
                sched.end_until(t);
                q.running.remove(&k);
                history.record(&j.job.user, j.job.config.as_deref(), j.job.limit, j.runtime);
            } else {
                let free = u32::try_from(sched.free().max(0)).unwrap_or(0);
                let running: Vec<(usize, Millis)> = q.running.iter().map(|(&k, &s)| (k, s)).collect();
                if let Some(e) = three(t, jobs, free, &running, &q.waiting, k, &history) {
                    estimates.insert(k, e);
                }
                sched.enqueue(k, j.job.gpus, j.job.limit, j.runtime);
                q.waiting.push(k);
            }
            if !touched.contains(&j.queue.as_str()) {
                touched.push(&j.queue);
            }
        }
        for name in touched {
            let Some(q) = queues.get_mut(name) else { continue };
            let Some(sched) = q.sched.as_mut() else { continue };
            for k in sched.pass(t) {
                starts.insert(k, t);
                q.running.insert(k, t);
                q.waiting.retain(|&w| w != k);
                pending.push(std::cmp::Reverse((t + jobs[k].runtime, 0, k)));
            }
        }
    }
    outcomes(jobs, &estimates, |k| starts.get(&k).copied())
}

fn recorded(jobs: &[BenchJob], caps: &HashMap<String, u32>) -> Vec<Outcome> {
    let mut by_end: Vec<usize> = (0..jobs.len()).collect();
    by_end.sort_by_key(|&k| jobs[k].recorded_start + jobs[k].runtime);
    let mut history = History::new();
    let mut next_end = 0;
    let mut estimates = HashMap::new();
    for (k, j) in jobs.iter().enumerate() {
        let now = j.submitted;
        while let Some(&e) = by_end.get(next_end) {
            let ended = &jobs[e];
            if ended.recorded_start + ended.runtime > now {
                break;
            }
            history.record(&ended.job.user, ended.job.config.as_deref(), ended.job.limit, ended.runtime);
            next_end += 1;
        }
        let same = |o: &BenchJob| o.queue == j.queue;
        let running: Vec<(usize, Millis)> = jobs
            .iter()
            .enumerate()
            .filter(|(o, b)| *o != k && same(b) && b.recorded_start <= now && now < b.recorded_start + b.runtime)
            .map(|(o, b)| (o, b.recorded_start))
            .collect();
        let waiting: Vec<usize> =
            jobs[..k].iter().enumerate().filter(|(_, b)| same(b) && b.recorded_start > now).map(|(o, _)| o).collect();
        let cap = i64::from(caps.get(&j.queue).copied().unwrap_or(j.job.gpus));
        let held: i64 = running.iter().map(|&(o, _)| i64::from(jobs[o].job.gpus)).sum();
        let free = u32::try_from((cap - held).max(0)).unwrap_or(0);
        if let Some(e) = three(now, jobs, free, &running, &waiting, k, &history) {
            estimates.insert(k, e);
        }
    }
    outcomes(jobs, &estimates, |k| Some(jobs[k].recorded_start))
}

fn outcomes(
    jobs: &[BenchJob],
    estimates: &HashMap<usize, Estimates>,
    start: impl Fn(usize) -> Option<Millis>,
) -> Vec<Outcome> {
    (0..jobs.len())
        .filter_map(|k| {
            let e = estimates.get(&k)?;
            let truth = start(k)? - jobs[k].submitted;
            Some(Outcome { truth, limits: e.limits, history: e.history, oracle: e.oracle })
        })
        .collect()
}

/// Accuracy of one estimator over a set of jobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Accuracy {
    /// Jobs counted.
    pub jobs: usize,
    /// The median of |estimated wait − true wait| (ms).
    pub median_abs_error: Millis,
    /// The mean of |estimated wait − true wait| (ms).
    pub mean_abs_error: Millis,
    /// The share of jobs whose estimated wait is within a factor of two of the true wait (both
    /// raised to [`FLOOR`] first, so a 5-second estimate of a 20-second wait counts as right).
    pub within_2x: f64,
}

/// The accuracy of `pick` over `outcomes`.
pub fn accuracy(outcomes: &[&Outcome], pick: impl Fn(&Outcome) -> Millis) -> Accuracy {
    let mut errors: Vec<Millis> = outcomes.iter().map(|o| (pick(o) - o.truth).abs()).collect();
    errors.sort_unstable();
    let median = match errors.len() {
        0 => 0,
        n if n % 2 == 1 => errors[n / 2],
        n => (errors[n / 2 - 1] + errors[n / 2]) / 2,
    };
    let within = outcomes
        .iter()
        .filter(|o| {
            let (e, t) = (pick(o).max(FLOOR), o.truth.max(FLOOR));
            e <= 2 * t && t <= 2 * e
        })
        .count();
    let sum: i128 = errors.iter().map(|&e| i128::from(e)).sum();
    let mean = if errors.is_empty() { 0 } else { Millis::try_from(sum / errors.len() as i128).unwrap_or(Millis::MAX) };
    Accuracy {
        jobs: outcomes.len(),
        median_abs_error: median,
        mean_abs_error: mean,
        within_2x: if outcomes.is_empty() { 0.0 } else { within as f64 / outcomes.len() as f64 },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_round_up_the_ladder_or_take_the_queue_maximum() {
        let max = 10 * DAY;
        let table = [(1, HOUR), (HOUR, HOUR), (HOUR + 1, 2 * HOUR), (9 * HOUR, 12 * HOUR), (73 * HOUR, max)];
        for (runtime, want) in table {
            assert_eq!(modelled_limit(runtime, max), want, "{runtime}");
        }
    }

    #[test]
    fn medians_and_the_factor_of_two_by_hand() {
        let o = |truth: Millis, est: Millis| Outcome { truth, limits: est, history: est, oracle: est };
        // errors 0, 10 min, 30 min, 2 h: median (10 + 30) / 2 = 20 min.
        // within 2×: 0 vs 0 (floored: 1 min each) yes; 20 vs 30 min yes; 60 vs 30 min yes; 1 h vs 3 h no.
        let all = [o(0, 0), o(20 * 60_000, 30 * 60_000), o(HOUR, 30 * 60_000), o(HOUR, 3 * HOUR)];
        let refs: Vec<&Outcome> = all.iter().collect();
        let a = accuracy(&refs, |o| o.history);
        assert_eq!(a.median_abs_error, 20 * 60_000);
        assert_eq!(a.mean_abs_error, (10 + 30 + 120) * 60_000 / 4);
        assert_eq!(a.within_2x, 0.75);
    }
}
