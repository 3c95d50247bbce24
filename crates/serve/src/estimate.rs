//! `GET /v1/estimate`: when a request not yet submitted would start, in each partition of the pool
//! (a region's GPU type in one queue) that could run it.
//!
//! The engine thread copies what the estimator needs ([`gather`]: the inventory's rows, the live
//! jobs' sizes and starts, the recent runs' runtimes) and the estimate is computed off it
//! ([`answer`]), so a reader never delays an admission. A job is counted in a partition when its GPU
//! type is the partition's and its queue is the partition's (or the partition names no queue); the
//! engine keeps no job's region, so where two regions have the same GPU type and queue, each counts
//! the job. Admitted jobs not yet started wait in the order of their submission.

use bursar_engine::{Engine, InventoryRow, JobPhase, RunSample};
use bursar_estimate::{Backfill, History, Job, Partition, RunningJob, estimate};
use bursar_model::Timestamp;
use bursar_model::api::{EstimateReply, PartitionEstimate};

/// A live job, as the estimator needs it.
#[derive(Debug, Clone)]
pub struct LiveJob {
    id: String,
    user: String,
    config: u64,
    gpus: u32,
    limit_ms: i64,
    gpu_type: Option<String>,
    queue: Option<String>,
    submitted: Timestamp,
    started: Option<Timestamp>,
}

/// What the engine thread copies for an estimate.
#[derive(Debug, Clone, Default)]
pub struct EstimateInput {
    now: Timestamp,
    rows: Vec<InventoryRow>,
    jobs: Vec<LiveJob>,
    runs: Vec<RunSample>,
}

/// [`gather`] of a read's view.
pub fn gather_view(view: crate::core::View<'_>) -> EstimateInput {
    gather(view.engine)
}

/// Copies the estimator's inputs off the engine (on its thread).
pub fn gather(engine: &Engine) -> EstimateInput {
    let state = engine.state();
    let jobs = state
        .jobs()
        .filter(|(_, j)| matches!(j.phase(), JobPhase::Admitted | JobPhase::Running))
        .map(|(id, j)| LiveJob {
            id: id.to_owned(),
            user: j.user().to_owned(),
            config: j.config(),
            gpus: j.gpus(),
            limit_ms: (j.requested_hours() * 3_600_000.0).round() as i64,
            gpu_type: j.gpu_type().map(str::to_owned),
            queue: j.queue().map(str::to_owned),
            submitted: j.submitted(),
            started: if j.phase() == JobPhase::Running { j.started() } else { None },
        })
        .collect();
    EstimateInput {
        now: state.now(),
        rows: state.inventory().cloned().collect(),
        jobs,
        runs: state.recent_runs().cloned().collect(),
    }
}

fn config_key(config: u64) -> Option<String> {
    (config != 0).then(|| format!("{config:016x}"))
}

fn as_job(j: &LiveJob) -> Job {
    Job { id: j.id.clone(), user: j.user.clone(), config: config_key(j.config), gpus: j.gpus, limit: j.limit_ms }
}

/// What was asked.
#[derive(Debug, Clone)]
pub struct Request {
    /// GPUs.
    pub gpus: u32,
    /// GPU type.
    pub gpu_type: String,
    /// Hours (the limit).
    pub hours: f64,
    /// Only this region.
    pub region: Option<String>,
    /// Only this queue.
    pub queue: Option<String>,
}

/// The estimate of `req` in every partition that could run it, soonest first.
pub fn answer(input: &EstimateInput, req: &Request) -> EstimateReply {
    let mut history = History::new();
    for r in &input.runs {
        history.record(&r.user, config_key(r.config).as_deref(), r.limit_ms, r.runtime_ms);
    }
    let now = input.now.millis();
    let request = Job {
        id: "request".to_owned(),
        user: String::new(),
        config: None,
        gpus: req.gpus,
        limit: (req.hours * 3_600_000.0).round() as i64,
    };
    let mut partitions = Vec::new();
    for inv in &input.rows {
        let row = &inv.row;
        if row.gpu_type != req.gpu_type
            || req.region.as_ref().is_some_and(|r| *r != row.region)
            || req.queue.as_ref().is_some_and(|q| *q != row.queue)
        {
            continue;
        }
        let here = |j: &&LiveJob| {
            j.gpu_type.as_deref() == Some(row.gpu_type.as_str())
                && (row.queue.is_empty() || j.queue.as_deref() == Some(row.queue.as_str()))
        };
        let mut waiting: Vec<&LiveJob> = input.jobs.iter().filter(here).filter(|j| j.started.is_none()).collect();
        waiting.sort_by(|a, b| a.submitted.cmp(&b.submitted).then_with(|| a.id.cmp(&b.id)));
        let running: Vec<RunningJob> = input
            .jobs
            .iter()
            .filter(here)
            .filter_map(|j| j.started.map(|s| RunningJob { job: as_job(j), started: s.millis() }))
            .collect();
        let partition = Partition {
            free: row.free,
            running,
            waiting: waiting.iter().map(|j| as_job(j)).collect(),
            backfill: row.backfill.as_deref().and_then(Backfill::parse).unwrap_or_default(),
        };
        let e = estimate(now, &partition, &history, Some(&request)).last().copied();
        let text = |t: Option<i64>| t.map(|ms| Timestamp(ms).to_string());
        let start = e.and_then(|e| e.start);
        let reason = start.is_none().then(|| {
            format!(
                "{} GPUs asked, more than this partition has ({} in service, {} drained)",
                req.gpus, row.in_service, row.drained
            )
        });
        partitions.push(PartitionEstimate {
            region: row.region.clone(),
            queue: row.queue.clone(),
            in_service: row.in_service,
            allocated: row.allocated,
            free: row.free,
            drained: row.drained,
            reported: inv.time.to_string(),
            source: inv.source.clone(),
            running_jobs: u32::try_from(partition.running.len()).unwrap_or(u32::MAX),
            waiting_jobs: u32::try_from(partition.waiting.len()).unwrap_or(u32::MAX),
            start: text(start),
            wait_s: start.map(|s| (s - now) / 1000),
            earliest: text(e.and_then(|e| e.earliest)),
            latest: text(e.and_then(|e| e.latest)),
            reason,
        });
    }
    partitions.sort_by_key(|p| (p.wait_s.is_none(), p.wait_s.unwrap_or(0), p.region.clone(), p.queue.clone()));
    let note = partitions.is_empty().then(|| {
        if input.rows.is_empty() {
            "no inventory yet: bursar learns what the pool has from `pool.inventory` (sent by a scheduler agent or a producer; docs/wire-format.md)".to_owned()
        } else {
            format!(
                "no partition of GPU type `{}`{} in the inventory",
                req.gpu_type,
                req.region.as_ref().map(|r| format!(" in region `{r}`")).unwrap_or_default()
            )
        }
    });
    EstimateReply {
        now: input.now.to_string(),
        gpus: req.gpus,
        gpu_type: req.gpu_type.clone(),
        hours: req.hours,
        partitions,
        note,
    }
}
