//! The scheduler, as a simulation: jobs wait in order, start when their GPUs are free, end at their
//! runtime, and later jobs pass a blocked one as the scheduler's [`Backfill`] allows.
//!
//! One [`Scheduler`] serves two masters: the estimator runs it from now with no arrivals and
//! durations predicted from history (or, for the baseline, the limits), and the accuracy
//! benchmark replays a trace through it with the true runtimes and every arrival, which is the
//! truth the estimates are measured against. What the scheduler *plans* with (the backfill's
//! reservation) is always the requested limits, as a real scheduler's is; what *happens* (when a
//! job ends) is the runtime the caller gives.
//!
//! Jobs are named by a caller's `usize` key. A job asking for more GPUs than the partition has
//! (free plus held) is never started and never blocks the jobs behind it: Slurm leaves such a job
//! pending with a reason and schedules around it.

use std::collections::{HashMap, VecDeque};

use crate::Millis;

/// How the scheduler lets later jobs pass a first job that does not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backfill {
    /// EASY backfill (Slurm's `sched/backfill`, approximately): the first waiting job gets a
    /// reservation at the earliest time the running jobs' limits free its GPUs (the *shadow* time);
    /// a later job starts now if it fits the free GPUs and either its limit ends before the shadow
    /// time or it uses only GPUs the first job will not need then.
    #[default]
    Easy,
    /// Strictly in order: nothing passes a job that does not fit (Kueue's `StrictFIFO`).
    Strict,
    /// Any later job that fits the free GPUs starts, whatever it delays (Kueue's `BestEffortFIFO`).
    BestEffort,
}

impl Backfill {
    /// The name used in configuration and answers: `easy`, `strict`, `best_effort`.
    pub fn name(self) -> &'static str {
        match self {
            Backfill::Easy => "easy",
            Backfill::Strict => "strict",
            Backfill::BestEffort => "best_effort",
        }
    }

    /// Reads [`Backfill::name`].
    pub fn parse(s: &str) -> Option<Backfill> {
        match s {
            "easy" => Some(Backfill::Easy),
            "strict" => Some(Backfill::Strict),
            "best_effort" => Some(Backfill::BestEffort),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Active {
    key: usize,
    gpus: u32,
    /// When the scheduler expects it to end: its start plus its limit.
    planned_end: Millis,
    /// When it ends in this simulation.
    end: Millis,
}

#[derive(Debug, Clone, Copy)]
struct Queued {
    key: usize,
    gpus: u32,
    limit: Millis,
    runtime: Millis,
}

/// One partition's scheduler: free GPUs, running jobs, the queue.
#[derive(Debug, Clone)]
pub struct Scheduler {
    free: i64,
    held: i64,
    backfill: Backfill,
    running: Vec<Active>,
    queue: VecDeque<Queued>,
}

impl Scheduler {
    /// A partition with `free` GPUs free and nothing running or waiting.
    pub fn new(free: u32, backfill: Backfill) -> Scheduler {
        Scheduler { free: i64::from(free), held: 0, backfill, running: Vec::new(), queue: VecDeque::new() }
    }

    /// A job already running, whose GPUs are not among the free ones: planned (by the scheduler)
    /// to end at `planned_end`, ending in this simulation at `end`.
    pub fn hold(&mut self, key: usize, gpus: u32, planned_end: Millis, end: Millis) {
        self.held += i64::from(gpus);
        self.running.push(Active { key, gpus, planned_end, end });
    }

    /// A job joins the end of the queue, asking for `gpus` for at most `limit`, and (in this
    /// simulation) running for `runtime` once started.
    pub fn enqueue(&mut self, key: usize, gpus: u32, limit: Millis, runtime: Millis) {
        self.queue.push_back(Queued { key, gpus, limit, runtime: runtime.clamp(0, limit.max(0)) });
    }

    /// GPUs free now.
    pub fn free(&self) -> i64 {
        self.free
    }

    /// Jobs waiting.
    pub fn waiting(&self) -> usize {
        self.queue.len()
    }

    /// Jobs running.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    fn possible(&self, gpus: u32) -> bool {
        i64::from(gpus) <= self.free + self.held
    }

    fn start(&mut self, now: Millis, q: Queued) {
        self.free -= i64::from(q.gpus);
        self.held += i64::from(q.gpus);
        self.running.push(Active {
            key: q.key,
            gpus: q.gpus,
            planned_end: now.saturating_add(q.limit),
            end: now.saturating_add(q.runtime),
        });
    }

    /// One scheduling pass at `now`: starts the jobs the policy lets start, returns their keys in
    /// the order started.
    pub fn pass(&mut self, now: Millis) -> Vec<usize> {
        let mut started = Vec::new();
        // The first possible job, and those after it, start while they fit.
        let mut i = 0;
        let mut blocked = None;
        while i < self.queue.len() {
            let q = self.queue[i];
            if !self.possible(q.gpus) {
                i += 1;
                continue;
            }
            if i64::from(q.gpus) <= self.free {
                self.queue.remove(i);
                self.start(now, q);
                started.push(q.key);
                continue;
            }
            blocked = Some(i);
            break;
        }
        let Some(head) = blocked else { return started };
        let need = i64::from(self.queue[head].gpus);
        let (shadow, mut extra) = match self.backfill {
            Backfill::Strict => return started,
            Backfill::BestEffort => (Millis::MAX, i64::MAX),
            Backfill::Easy => {
                let mut ends: Vec<(Millis, u32)> = self.running.iter().map(|a| (a.planned_end, a.gpus)).collect();
                ends.sort_unstable();
                let mut acc = self.free;
                let mut found = (Millis::MAX, 0);
                for (end, gpus) in ends {
                    acc += i64::from(gpus);
                    if acc >= need {
                        found = (end.max(now), acc - need);
                        break;
                    }
                }
                found
            }
        };
        let mut i = head + 1;
        while i < self.queue.len() {
            let q = self.queue[i];
            let gpus = i64::from(q.gpus);
            let ends_before = now.saturating_add(q.limit) <= shadow;
            if self.possible(q.gpus) && gpus <= self.free && (ends_before || gpus <= extra) {
                if !ends_before {
                    extra -= gpus;
                }
                self.queue.remove(i);
                self.start(now, q);
                started.push(q.key);
                continue;
            }
            i += 1;
        }
        started
    }

    /// When the next running job ends, if any runs.
    pub fn next_end(&self) -> Option<Millis> {
        self.running.iter().map(|a| a.end).min()
    }

    /// Ends every running job whose end is at or before `t`; returns their keys.
    pub fn end_until(&mut self, t: Millis) -> Vec<usize> {
        let mut ended = Vec::new();
        let mut freed = 0;
        self.running.retain(|a| {
            if a.end <= t {
                ended.push(a.key);
                freed += i64::from(a.gpus);
                false
            } else {
                true
            }
        });
        self.free += freed;
        self.held -= freed;
        ended
    }

    /// Runs the simulation from `now` with no further arrivals until every job that can start has
    /// started; returns each started job's start time by key. A job missing from the answer can
    /// never start here.
    pub fn run_until_started(&mut self, now: Millis) -> HashMap<usize, Millis> {
        let mut starts = HashMap::new();
        let mut t = now;
        loop {
            self.end_until(t);
            for key in self.pass(t) {
                starts.insert(key, t);
            }
            if !self.queue.iter().any(|q| self.possible(q.gpus)) {
                break;
            }
            match self.next_end() {
                Some(end) => t = end.max(t),
                None => break,
            }
        }
        starts
    }
}
