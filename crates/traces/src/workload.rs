//! A seeded, streaming workload generator: realistic v1 event streams of any size in constant memory.
//!
//! Jobs arrive as a Poisson process (mean [`GenConfig::mean_interarrival_secs`]) and are spread over
//! `projects` projects with Zipf-like weights (project `p0` is busiest). Each job draws its size
//! (1–64 GPUs, most 1–8), stage, GPU type, a run time (exponential, mean 2 h, 5 min to 72 h) and a
//! requested limit of 1–2× its run time. Then, in event time:
//!
//! - `job.submitted`; 3 % declare their data not ready and are withdrawn (`job.finished` cancelled)
//!   two minutes later instead of starting;
//! - big or long jobs (≥ 32 GPUs or ≥ 48 h requested) wait for `approval.granted` (85 %) or
//!   `approval.rejected` (15 %, the job never starts);
//! - `job.started` after a queueing delay (exponential, mean 5 min);
//! - `job.sample` every [`GenConfig::sample_every_secs`] while running: busy stretches (utilisation
//!   0.55–0.98) alternate with idle stretches (0.00–0.04); one job in ten is idle-prone (long idle
//!   stretches); when an idle stretch reaches four samples the owner sends `job.keepalive` half the time;
//! - `job.finished` (75 % succeeded, 18 % failed, 7 % cancelled) followed one second later by
//!   `billing.charge` for gpus × run hours; a successful `data_prep` job also yields `asset.registered`;
//! - `clock.tick` every [`GenConfig::tick_every_secs`] while anything is pending.
//!
//! Memory is one record per *live* job plus a heap of their next events, so it depends on concurrency
//! (arrival rate × duration), not on the number of jobs: a million jobs stream as well as a thousand.
//! The same seed gives the same stream, byte for byte ([`crate::rng`] never changes).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use bursar_model::{
    Asset, BillingCharge, BillingMode, Event, EventKind, FinishStatus, JobSpec, Ready, Sample, Timestamp,
};

use crate::rng::SplitMix64;

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct GenConfig {
    /// Jobs to submit.
    pub jobs: u64,
    /// Projects to spread them over (at least 1).
    pub projects: u32,
    /// Seed of every random choice.
    pub seed: u64,
    /// Time of the first arrival.
    pub start: Timestamp,
    /// Mean seconds between two submissions.
    pub mean_interarrival_secs: f64,
    /// Seconds between two utilisation samples of a running job.
    pub sample_every_secs: i64,
    /// Seconds between two `clock.tick` events.
    pub tick_every_secs: i64,
}

impl Default for GenConfig {
    fn default() -> Self {
        GenConfig {
            jobs: 1000,
            projects: 8,
            seed: 1,
            start: Timestamp(1_793_577_600_000), // 2026-11-02T00:00:00Z
            mean_interarrival_secs: 20.0,
            sample_every_secs: 600,
            tick_every_secs: 300,
        }
    }
}

const SIZES: [u32; 7] = [1, 2, 4, 8, 16, 32, 64];
const SIZE_WEIGHTS: [u32; 7] = [30, 15, 20, 25, 6, 3, 1];
const STAGES: [&str; 6] = ["data_prep", "pretrain", "finetune", "eval", "inference", "image_build"];
const STAGE_WEIGHTS: [u32; 6] = [10, 10, 35, 25, 15, 5];
const GPU_TYPES: [(&str, f64, f64); 3] = [("H200", 141.0, 24.0), ("A100", 80.0, 14.0), ("L40S", 48.0, 7.0)];
const STATUSES: [FinishStatus; 3] = [FinishStatus::Succeeded, FinishStatus::Failed, FinishStatus::Cancelled];
const STATUS_WEIGHTS: [u32; 3] = [75, 18, 7];
const MODES: [BillingMode; 3] = [BillingMode::OnDemand, BillingMode::Reserved, BillingMode::PerTask];
const MODE_WEIGHTS: [u32; 3] = [80, 15, 5];

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    Tick,
    Decide,
    Withdraw,
    Start,
    Sample,
    Keepalive,
    Finish,
    Charge,
}

/// A step due at a time: (time ms, insertion order, step, slab slot, job number).
type Scheduled = (i64, u64, Step, usize, u64);

#[derive(Debug, Clone)]
struct Live {
    number: u64,
    project: u32,
    user: u32,
    gpus: u32,
    gpu: usize,
    stage: usize,
    run_ms: i64,
    start_ms: i64,
    approve: bool,
    status: FinishStatus,
    idle_prone: bool,
    idle: bool,
    stretch_left: u32,
    idle_run: u32,
    sample_k: u32,
}

/// The generator: an iterator of events in time order.
#[derive(Debug)]
pub struct Generator {
    cfg: GenConfig,
    rng: SplitMix64,
    next_arrival_ms: i64,
    submitted: u64,
    heap: BinaryHeap<Reverse<Scheduled>>,
    queued: Option<Event>,
    slab: Vec<Option<Live>>,
    free: Vec<usize>,
    live: usize,
    order: u64,
    event_no: u64,
    project_weights: Vec<u32>,
    tick_scheduled: bool,
}

impl Generator {
    /// A generator for `cfg`.
    pub fn new(cfg: GenConfig) -> Generator {
        let projects = cfg.projects.max(1);
        let project_weights = (0..projects).map(|k| (1000 / (k + 1)).max(1)).collect();
        let mut rng = SplitMix64::new(cfg.seed);
        let first = cfg.start.millis() + (rng.exp(cfg.mean_interarrival_secs) * 1000.0) as i64;
        let mut g = Generator {
            rng,
            next_arrival_ms: first,
            submitted: 0,
            heap: BinaryHeap::new(),
            slab: Vec::new(),
            free: Vec::new(),
            live: 0,
            order: 0,
            event_no: 0,
            project_weights,
            tick_scheduled: false,
            queued: None,
            cfg,
        };
        g.schedule_tick(g.cfg.start.millis());
        g
    }

    /// Jobs live right now (submitted, not yet finished or rejected): the generator's memory.
    pub fn live_jobs(&self) -> usize {
        self.live
    }

    fn schedule(&mut self, at_ms: i64, step: Step, slot: usize) {
        self.order += 1;
        let number = self.slab.get(slot).and_then(|s| s.as_ref()).map(|j| j.number).unwrap_or(0);
        self.heap.push(Reverse((at_ms, self.order, step, slot, number)));
    }

    fn schedule_tick(&mut self, now_ms: i64) {
        let every = self.cfg.tick_every_secs.max(1) * 1000;
        if !self.tick_scheduled && (self.submitted < self.cfg.jobs || self.live > 0) {
            self.tick_scheduled = true;
            let next = (now_ms.div_euclid(every) + 1) * every;
            self.schedule(next, Step::Tick, 0);
        }
    }

    fn event(&mut self, at_ms: i64, kind: EventKind) -> Event {
        self.event_no += 1;
        Event { id: format!("e{}", self.event_no), time: Timestamp(at_ms), kind, extra: Vec::new() }
    }

    fn job_id(number: u64) -> String {
        format!("g{number}")
    }

    fn submit(&mut self) -> Event {
        let now = self.next_arrival_ms;
        self.submitted += 1;
        let gap = (self.rng.exp(self.cfg.mean_interarrival_secs) * 1000.0) as i64;
        self.next_arrival_ms = now + gap.max(1);
        let r = &mut self.rng;
        let project = r.weighted(&self.project_weights) as u32;
        let user = r.below(5) as u32;
        let gpus = SIZES[r.weighted(&SIZE_WEIGHTS)];
        let stage = r.weighted(&STAGE_WEIGHTS);
        let gpu = match STAGES[stage] {
            "pretrain" => 0,
            "finetune" => r.below(2) as usize,
            _ => 1 + r.below(2) as usize,
        };
        let run_h = r.exp(2.0).clamp(5.0 / 60.0, 72.0);
        let requested_h = (run_h * (1.0 + r.unit()) * 2.0).ceil() / 2.0;
        let ready_data = !r.chance(0.03);
        let approve_needed = gpus >= 32 || requested_h >= 48.0;
        let approve = r.chance(0.85);
        let status = STATUSES[r.weighted(&STATUS_WEIGHTS)];
        let idle_prone = r.chance(0.10);
        let params = [0.5, 1.5, 7.0, 13.0, 34.0, 70.0][r.below(6) as usize];
        let dataset = r.below(200);
        let script = r.next_u64() & 0xFFFF_FFFF;
        let (gpu_name, gpu_mem, _) = GPU_TYPES[gpu];
        let number = self.submitted;
        let spec = JobSpec {
            id: Self::job_id(number),
            project: format!("p{project}"),
            user: format!("u{project}-{user}"),
            queue: Some(if requested_h <= 4.0 { "short" } else { "long" }.to_owned()),
            gpus: gpus.into(),
            gpu_type: Some(gpu_name.to_owned()),
            gpu_mem_gb: Some(gpu_mem),
            nodes: gpus.div_ceil(8),
            requested_hours: requested_h,
            stage: Some(STAGES[stage].to_owned()),
            model_params_b: Some(params),
            image: Some(format!("registry/p{project}/train:{}", dataset % 7)),
            dataset: Some(format!("ds-{dataset}")),
            script_hash: Some(format!("sha256:{script:08x}")),
            ready: Ready { data: Some(ready_data), ..Ready::all() },
            deferrable: matches!(STAGES[stage], "eval" | "data_prep"),
            ..JobSpec::default()
        };
        let live = Live {
            number,
            project,
            user,
            gpus,
            gpu,
            stage,
            run_ms: (run_h * 3_600_000.0) as i64,
            start_ms: 0,
            approve,
            status,
            idle_prone,
            idle: false,
            stretch_left: 0,
            idle_run: 0,
            sample_k: 0,
        };
        let slot = match self.free.pop() {
            Some(s) => {
                self.slab[s] = Some(live);
                s
            }
            None => {
                self.slab.push(Some(live));
                self.slab.len() - 1
            }
        };
        self.live += 1;
        if !ready_data {
            self.schedule(now + 120_000, Step::Withdraw, slot);
        } else if approve_needed {
            let wait = (self.rng.exp(1800.0) * 1000.0) as i64;
            self.schedule(now + wait.max(1000), Step::Decide, slot);
        } else {
            let wait = (self.rng.exp(300.0) * 1000.0) as i64;
            self.schedule(now + wait.max(1000), Step::Start, slot);
        }
        self.event(now, EventKind::JobSubmitted(Box::new(spec)))
    }

    fn release(&mut self, slot: usize) {
        if let Some(s) = self.slab.get_mut(slot)
            && s.take().is_some()
        {
            self.free.push(slot);
            self.live -= 1;
        }
    }

    fn step(&mut self, at: i64, step: Step, slot: usize, number: u64) -> Option<Event> {
        if step == Step::Tick {
            self.tick_scheduled = false;
            self.schedule_tick(at);
            return Some(self.event(at, EventKind::ClockTick));
        }
        let every = self.cfg.sample_every_secs.max(1) * 1000;
        let job = self.slab.get(slot)?.clone().filter(|j| j.number == number)?;
        let job_id = Self::job_id(job.number);
        match step {
            Step::Tick => None,
            Step::Withdraw => {
                self.release(slot);
                Some(self.event(at, EventKind::JobFinished { job_id, status: FinishStatus::Cancelled }))
            }
            Step::Decide => {
                let by = Some(format!("owner-p{}", job.project));
                if job.approve {
                    let wait = (self.rng.exp(300.0) * 1000.0) as i64;
                    self.schedule(at + wait.max(1000), Step::Start, slot);
                    Some(self.event(at, EventKind::ApprovalGranted { job_id, by }))
                } else {
                    self.release(slot);
                    Some(self.event(at, EventKind::ApprovalRejected { job_id, by }))
                }
            }
            Step::Start => {
                if let Some(Some(j)) = self.slab.get_mut(slot) {
                    j.start_ms = at;
                }
                if job.run_ms > every {
                    self.schedule(at + every, Step::Sample, slot);
                }
                self.schedule(at + job.run_ms, Step::Finish, slot);
                Some(self.event(at, EventKind::JobStarted { job_id, info: Default::default() }))
            }
            Step::Sample => self.sample(at, slot, job, job_id, every),
            Step::Keepalive => {
                let by = Some(format!("u{}-{}", job.project, job.user));
                Some(self.event(at, EventKind::JobKeepalive { job_id, by }))
            }
            Step::Finish => {
                self.schedule(at + 1000, Step::Charge, slot);
                Some(self.event(at, EventKind::JobFinished { job_id, status: job.status }))
            }
            Step::Charge => {
                self.release(slot);
                let (_, _, rate) = GPU_TYPES[job.gpu];
                let gpu_hours = f64::from(job.gpus) * job.run_ms as f64 / 3_600_000.0;
                let mode = MODES[self.rng.weighted(&MODE_WEIGHTS)];
                let charge = BillingCharge {
                    project: Some(format!("p{}", job.project)),
                    job_id: Some(job_id.clone()),
                    gpu_hours: (gpu_hours * 1000.0).round() / 1000.0,
                    amount: Some((gpu_hours * rate * 100.0).round() / 100.0),
                    currency: Some("CNY".to_owned()),
                    mode: Some(mode),
                    attribution: None,
                    bill: None,
                };
                let charge = self.event(at, EventKind::BillingCharge(charge));
                if STAGES[job.stage] == "data_prep" && job.status == FinishStatus::Succeeded {
                    let asset = Asset {
                        kind: "dataset".to_owned(),
                        fingerprint: format!("ds-{}+{}", job.number % 200, job.number),
                        uri: format!("s3://p{}/prepared/{job_id}", job.project),
                        region: None,
                    };
                    let project = format!("p{}", job.project);
                    self.queued = Some(self.event(at, EventKind::AssetRegistered { project, asset }));
                }
                Some(charge)
            }
        }
    }

    fn sample(&mut self, at: i64, slot: usize, job: Live, job_id: String, every: i64) -> Option<Event> {
        let r = &mut self.rng;
        let mut j = job;
        if j.stretch_left == 0 {
            j.idle = !j.idle && r.chance(if j.idle_prone { 0.6 } else { 0.2 });
            let mean = match (j.idle, j.idle_prone) {
                (true, true) => 12.0,
                (true, false) => 3.0,
                (false, _) => 12.0,
            };
            j.stretch_left = (r.exp(mean).ceil() as u32).max(1);
        }
        j.stretch_left -= 1;
        let gpu_util = if j.idle { r.unit() * 0.04 } else { 0.55 + r.unit() * 0.43 };
        let mem_util = 0.3 + r.unit() * 0.6;
        j.idle_run = if j.idle { j.idle_run + 1 } else { 0 };
        let keepalive = j.idle_run == 4 && r.chance(0.5);
        j.sample_k += 1;
        let next = at + every;
        let ends = j.start_ms + j.run_ms;
        if let Some(s) = self.slab.get_mut(slot) {
            *s = Some(j);
        }
        if next < ends {
            self.schedule(next, Step::Sample, slot);
        }
        if keepalive && at + 60_000 < ends {
            self.schedule(at + 60_000, Step::Keepalive, slot);
        }
        Some(self.event(
            at,
            EventKind::JobSample(Sample {
                job_id,
                gpu_util: round3(gpu_util),
                mem_util: Some(round3(mem_util)),
                ..Sample::default()
            }),
        ))
    }
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

impl Iterator for Generator {
    type Item = Event;

    fn next(&mut self) -> Option<Event> {
        if let Some(e) = self.queued.take() {
            return Some(e);
        }
        loop {
            let arrival = (self.submitted < self.cfg.jobs).then_some(self.next_arrival_ms);
            let top = self.heap.peek().map(|Reverse(e)| e.0);
            let from_heap = match (top, arrival) {
                (Some(t), Some(a)) => t <= a,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => return None,
            };
            if !from_heap {
                return Some(self.submit());
            }
            let Reverse((at, _, step, slot, number)) = self.heap.pop()?;
            if let Some(e) = self.step(at, step, slot, number) {
                return Some(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use bursar_model::decode_event;

    fn cfg(jobs: u64, seed: u64) -> GenConfig {
        GenConfig { jobs, projects: 5, seed, ..GenConfig::default() }
    }

    #[test]
    fn same_seed_same_stream_other_seed_other_stream() {
        let a: Vec<String> = Generator::new(cfg(300, 7)).map(|e| e.to_json()).collect();
        let b: Vec<String> = Generator::new(cfg(300, 7)).map(|e| e.to_json()).collect();
        let c: Vec<String> = Generator::new(cfg(300, 8)).map(|e| e.to_json()).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn stream_is_valid_v1_in_time_order_and_every_job_lifecycle_is_consistent() {
        let mut last = i64::MIN;
        let mut phase: HashMap<String, u8> = HashMap::new();
        let mut counts: HashMap<&'static str, u64> = HashMap::new();
        let mut ids = std::collections::HashSet::new();
        let mut idle_samples = 0;
        for e in Generator::new(cfg(2000, 3)) {
            let back = decode_event(&e.to_json()).unwrap();
            assert_eq!(back, e);
            assert!(ids.insert(e.id.clone()), "duplicate id {}", e.id);
            assert!(e.time.millis() >= last, "out of order at {}", e.id);
            last = e.time.millis();
            *counts.entry(e.kind.type_name()).or_default() += 1;
            match &e.kind {
                EventKind::JobSubmitted(j) => assert!(phase.insert(j.id.clone(), 0).is_none()),
                EventKind::JobStarted { job_id, .. } => assert_eq!(phase.insert(job_id.clone(), 1), Some(0)),
                EventKind::JobSample(Sample { job_id, gpu_util, .. }) => {
                    assert_eq!(phase.get(job_id), Some(&1), "sample of a job not running");
                    if *gpu_util < 0.05 {
                        idle_samples += 1;
                    }
                }
                EventKind::JobFinished { job_id, .. } => {
                    assert!(matches!(phase.insert(job_id.clone(), 2), Some(0 | 1)))
                }
                EventKind::JobKeepalive { job_id, .. } => assert_eq!(phase.get(job_id), Some(&1)),
                EventKind::ApprovalRejected { job_id, .. } => {
                    assert_eq!(phase.insert(job_id.clone(), 2), Some(0), "rejected before it started")
                }
                _ => {}
            }
        }
        assert_eq!(counts.get("job.submitted"), Some(&2000));
        assert!(phase.values().all(|&p| p == 2), "every job ends (finished or rejected)");
        for t in ["job.started", "job.sample", "billing.charge", "clock.tick", "approval.granted", "asset.registered"] {
            assert!(counts.get(t).copied().unwrap_or(0) > 0, "no {t}");
        }
        assert!(idle_samples > 0);
    }

    #[test]
    fn memory_is_bounded_by_concurrency_not_by_job_count() {
        let mut g = Generator::new(cfg(10_000, 1));
        let mut peak = 0;
        while g.next().is_some() {
            peak = peak.max(g.live_jobs());
        }
        assert_eq!(g.live_jobs(), 0);
        assert!(peak < 2_000, "peak live jobs {peak}");
        assert!(g.slab.len() <= peak && g.heap.is_empty());
    }
}
