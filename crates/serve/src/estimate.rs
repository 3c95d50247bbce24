//! `GET /v1/estimate`: when a request not yet submitted would start, in each partition of the pool
//! (a region's GPU type in one queue) that could run it; and the pool's capacity and queue as the
//! pool page and `bursar pending` show them ([`queue`]).
//!
//! The engine thread copies what the estimator needs ([`gather`]: the inventory's rows, the live
//! jobs' sizes and starts, the recent runs' runtimes) and the estimate is computed off it
//! ([`answer`]), so a reader never delays an admission. A job is counted in a partition when its GPU
//! type is the partition's, its queue is the partition's (or the partition names no queue) and its
//! region is the partition's; the engine keeps a job's region (asked for or placed in) where the
//! inventory names several regions, and a job with none is counted in each region of its type.
//! Admitted jobs not yet started wait in the order of their submission. A request naming its
//! dataset starts in a region without a copy only after the copy (`cross_region.copy_hours`).

use bursar_engine::{Engine, InventoryRow, JobPhase, RunSample};
use bursar_estimate::{Backfill, History, Job, Partition, RunningJob, estimate};
use bursar_model::Timestamp;
use bursar_model::api::{CapacityLine, EstimateReply, PartitionEstimate, QueueLine};

/// A live job, as the estimator needs it.
#[derive(Debug, Clone)]
pub struct LiveJob {
    id: String,
    user: String,
    config: u64,
    gpus: bursar_model::Gpus,
    limit_ms: i64,
    gpu_type: Option<String>,
    queue: Option<String>,
    submitted: Timestamp,
    started: Option<Timestamp>,
    project: String,
    /// When it entered the queue (admitted or requeued).
    since: Timestamp,
    /// The scheduler's reason it waits, and since when.
    waits: Option<(String, Timestamp)>,
    /// Its reservation was released as stale: it holds nothing.
    released: bool,
    /// The region it runs in, where known (none: counted in every region of its type).
    region: Option<String>,
}

/// What the engine thread copies for an estimate.
#[derive(Debug, Clone, Default)]
pub struct EstimateInput {
    now: Timestamp,
    rows: Vec<InventoryRow>,
    jobs: Vec<LiveJob>,
    runs: Vec<RunSample>,
    /// The engine's `stale_after` (zero: never).
    stale_after: bursar_model::Duration,
    /// Per registered asset whose copies' regions are known: those regions.
    copies: std::collections::HashMap<String, Vec<String>>,
    /// How long copying a dataset to another region takes (the placement policy's
    /// `cross_region.copy_hours`; none: copies are not counted).
    copy: Option<bursar_model::Duration>,
}

impl EstimateInput {
    /// With the site's configured rows (`[[capacity]]`) for the partitions no `pool.inventory`
    /// names: dated now, from `config`, with the GPUs of bursar's own running jobs there counted as
    /// allocated and the rest of those in service as free.
    pub fn configured(mut self, rows: &[bursar_model::CapacityRow]) -> EstimateInput {
        for c in rows {
            let key = (&c.region, &c.gpu_type, &c.queue);
            if self.rows.iter().any(|r| (&r.row.region, &r.row.gpu_type, &r.row.queue) == key) {
                continue;
            }
            let allocated = self
                .jobs
                .iter()
                .filter(|j| j.started.is_some() && counts_in(c, j))
                .map(|j| j.gpus)
                .sum::<bursar_model::Gpus>();
            let mut row = c.clone();
            row.allocated = allocated.min(row.in_service);
            row.free = row.in_service.saturating_sub(allocated);
            self.rows.push(InventoryRow { row, time: self.now, source: Some("config".to_owned()) });
        }
        self
    }
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
            project: j.project().to_owned(),
            since: j.queued_since(),
            waits: j.waits().map(|(r, t)| (r.to_owned(), t)),
            released: j.set_aside(),
            region: j.region().map(str::to_owned),
        })
        .collect();
    EstimateInput {
        now: state.now(),
        rows: state.inventory().cloned().collect(),
        jobs,
        runs: state.recent_runs().cloned().collect(),
        stale_after: engine.stale_after(),
        copies: state
            .assets()
            .filter(|(_, a)| !a.regions.is_empty())
            .map(|(fp, a)| (fp.to_owned(), a.regions.iter().map(|r| r.as_str().to_owned()).collect()))
            .collect(),
        copy: engine.policies().dataset_copy(),
    }
}

fn config_key(config: u64) -> Option<String> {
    (config != 0).then(|| format!("{config:016x}"))
}

fn as_job(j: &LiveJob) -> Job {
    Job { id: j.id.clone(), user: j.user.clone(), config: config_key(j.config), gpus: units(j.gpus), limit: j.limit_ms }
}

/// A count as the estimator's units: 840ths of a GPU, so a MIG slice is placed as its share (one
/// `1g.10gb` of seven fits where six are taken). Every count bursar accepts fits (1,000,000 GPUs
/// are 840,000,000 parts).
fn units(g: bursar_model::Gpus) -> u32 {
    u32::try_from(g.parts()).unwrap_or(u32::MAX)
}

/// What was asked.
#[derive(Debug, Clone)]
pub struct Request {
    /// GPUs (a share counts MIG slices).
    pub gpus: bursar_model::Gpus,
    /// GPU type.
    pub gpu_type: String,
    /// Hours (the limit).
    pub hours: f64,
    /// Only this region.
    pub region: Option<String>,
    /// Only this queue.
    pub queue: Option<String>,
    /// The dataset the job reads (`job.dataset`): where its copies are is counted.
    pub dataset: Option<String>,
    /// The job asked about, when it is already admitted (`POST /v1/admit?estimate=true`): it is not
    /// counted ahead of itself.
    pub job_id: Option<String>,
}

fn history(input: &EstimateInput) -> History {
    let mut history = History::new();
    for r in &input.runs {
        history.record(&r.user, config_key(r.config).as_deref(), r.limit_ms, r.runtime_ms);
    }
    history
}

/// Whether job `j` counts in the partition of inventory row `row`: its GPU type, its queue unless
/// the row names none, and its region where it is known.
fn counts_in(row: &bursar_model::CapacityRow, j: &LiveJob) -> bool {
    j.gpu_type.as_deref() == Some(row.gpu_type.as_str())
        && (row.queue.is_empty() || j.queue.as_deref() == Some(row.queue.as_str()))
        && j.region.as_deref().is_none_or(|r| r == row.region)
}

/// The partition of `row` as the estimator sees it, with its waiting jobs (admitted, not started)
/// in the order the scheduler takes them: submission.
fn partition<'a>(input: &'a EstimateInput, row: &bursar_model::CapacityRow) -> (Partition, Vec<&'a LiveJob>) {
    let mut waiting: Vec<&LiveJob> = input.jobs.iter().filter(|j| counts_in(row, j) && j.started.is_none()).collect();
    waiting.sort_by(|a, b| a.submitted.cmp(&b.submitted).then_with(|| a.id.cmp(&b.id)));
    let running: Vec<RunningJob> = input
        .jobs
        .iter()
        .filter(|j| counts_in(row, j))
        .filter_map(|j| j.started.map(|s| RunningJob { job: as_job(j), started: s.millis() }))
        .collect();
    let p = Partition {
        free: units(row.free),
        running,
        waiting: waiting.iter().map(|j| as_job(j)).collect(),
        backfill: row.backfill.as_deref().and_then(Backfill::parse).unwrap_or_default(),
    };
    (p, waiting)
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// A job's soonest estimate over the partitions that could run it: start, earliest, latest (ms),
/// and the partition's region.
type Soonest<'a> = (Option<i64>, Option<i64>, Option<i64>, &'a str);

/// The pool's capacity per partition (with the GPUs expected free in an hour) and its queue: every
/// admitted job not started, per queue in submission order, with its place, its age, its
/// estimated start in the partition that starts it soonest, and why it waits.
pub fn queue(input: &EstimateInput) -> (Vec<CapacityLine>, Vec<QueueLine>) {
    let history = history(input);
    let now = input.now.millis();
    let in_hour = now.saturating_add(3_600_000);
    let mut capacity = Vec::new();
    // Per job: the soonest (start, earliest, latest, region) over the partitions that could run it,
    // and whether any partition of its type and queue was seen.
    let mut best: std::collections::HashMap<&str, Soonest<'_>> = std::collections::HashMap::new();
    let mut short: std::collections::HashMap<&str, String> = std::collections::HashMap::new();
    for inv in &input.rows {
        let row = &inv.row;
        let (p, waiting) = partition(input, row);
        let estimates = estimate(now, &p, &history, None);
        for (j, e) in waiting.iter().zip(&estimates) {
            let entry = best.entry(j.id.as_str()).or_insert((None, None, None, ""));
            let sooner = match (e.start, entry.0) {
                (Some(s), Some(b)) => s < b,
                (Some(_), None) => true,
                (None, _) => false,
            };
            if sooner || entry.3.is_empty() {
                *entry = (e.start, e.earliest, e.latest, row.region.as_str());
            }
            if e.start.is_none() {
                short.entry(j.id.as_str()).or_insert_with(|| {
                    if j.gpus > row.in_service {
                        format!(
                            "asks {}, more than {} / {} has ({} in service)",
                            gpus_text(j.gpus), row.region, row.gpu_type, row.in_service
                        )
                    } else {
                        format!(
                            "{} / {} has {} free of {} in service, the rest held by jobs bursar does not know of: no estimate",
                            row.region, row.gpu_type, row.free, row.in_service
                        )
                    }
                });
            }
        }
        capacity.push(CapacityLine {
            region: row.region.clone(),
            gpu_type: row.gpu_type.clone(),
            queue: row.queue.clone(),
            in_service: row.in_service,
            allocated: row.allocated,
            free: row.free,
            drained: row.drained,
            free_in_hour: bursar_model::Gpus::from_parts(u64::from(bursar_estimate::free_at(
                now, in_hour, &p, &history,
            ))),
            reserved: waiting.iter().filter(|j| !j.released).map(|j| j.gpus).sum(),
            running_jobs: count(p.running.len()),
            waiting_jobs: count(p.waiting.len()),
            backfill: p.backfill.name().to_owned(),
            reported: inv.time.to_string(),
            source: inv.source.clone(),
        });
    }
    capacity.sort_by(|a, b| (&a.region, &a.gpu_type, &a.queue).cmp(&(&b.region, &b.gpu_type, &b.queue)));

    let mut waiting: Vec<&LiveJob> = input.jobs.iter().filter(|j| j.started.is_none()).collect();
    waiting.sort_by(|a, b| {
        (a.queue.as_deref().unwrap_or_default(), a.submitted, &a.id).cmp(&(
            b.queue.as_deref().unwrap_or_default(),
            b.submitted,
            &b.id,
        ))
    });
    let text = |t: Option<i64>| t.map(|ms| Timestamp(ms).to_string());
    let mut lines: Vec<QueueLine> = Vec::with_capacity(waiting.len());
    let mut position = 0u32;
    let mut last_queue: Option<&str> = None;
    for j in waiting {
        let queue = j.queue.as_deref().unwrap_or_default();
        if last_queue != Some(queue) {
            position = 0;
            last_queue = Some(queue);
        }
        position = position.saturating_add(1);
        let found = best.get(j.id.as_str()).copied();
        let (start, earliest, latest, region) = found.unwrap_or((None, None, None, ""));
        let reason = match (&j.gpu_type, found, start) {
            (None, _, _) => "names no GPU type: bursar cannot tell which partition it waits for".to_owned(),
            (Some(t), None, _) => format!(
                "no inventory of {t}{}: bursar does not know what it waits for",
                j.queue.as_deref().map(|q| format!(" in queue {q}")).unwrap_or_default()
            ),
            (Some(_), Some(_), None) => short.get(j.id.as_str()).cloned().unwrap_or_default(),
            (Some(_), Some(_), Some(s)) if s <= now => {
                "its GPUs are free: waiting for the scheduler to start it".to_owned()
            }
            (Some(_), Some(_), Some(_)) if position > 1 => {
                format!("waits for {}: {} ahead of it in the queue", gpus_text(j.gpus), jobs_text(position - 1))
            }
            (Some(_), Some(_), Some(_)) => format!("waits for {} to be free", gpus_text(j.gpus)),
        };
        let stale = input.stale_after.millis() > 0;
        let (reason, scheduler_reason, reason_since, estimate_note) = match &j.waits {
            Some((why, at)) => (why.clone(), true, Some(at.to_string()), Some(reason)),
            None => (reason, false, None, None),
        };
        lines.push(QueueLine {
            queue: queue.to_owned(),
            position,
            job_id: j.id.clone(),
            project: j.project.clone(),
            user: j.user.clone(),
            gpus: j.gpus,
            gpu_type: j.gpu_type.clone(),
            requested_hours: j.limit_ms as f64 / 3_600_000.0,
            since: j.since.to_string(),
            stale_at: (stale && !j.released).then(|| j.since.plus(input.stale_after).to_string()),
            reservation_released: j.released,
            region: (!region.is_empty()).then(|| region.to_owned()),
            start: text(start),
            earliest: text(earliest),
            latest: text(latest),
            reason,
            scheduler_reason,
            reason_since,
            estimate_note,
        });
    }
    (capacity, lines)
}

fn gpus_text(n: impl Into<bursar_model::Gpus>) -> String {
    let n = n.into();
    if n.is_whole() { bursar_model::counted(u64::from(n.floor()), "GPU", "GPUs") } else { format!("{n} GPUs") }
}

fn jobs_text(n: u32) -> String {
    bursar_model::counted(u64::from(n), "job", "jobs")
}

/// The estimate of `req` in every partition that could run it, soonest first.
pub fn answer(input: &EstimateInput, req: &Request) -> EstimateReply {
    let history = history(input);
    let now = input.now.millis();
    let request = Job {
        id: "request".to_owned(),
        user: String::new(),
        config: None,
        gpus: units(req.gpus),
        limit: (req.hours * 3_600_000.0).round() as i64,
    };
    // The dataset's copies, when the request names one whose copies' regions are known, and the
    // copy's time (none configured: copies are not counted).
    let copy = input.copy.unwrap_or(bursar_model::Duration(0));
    let copies = req.dataset.as_deref().and_then(|d| input.copies.get(d)).filter(|_| input.copy.is_some());
    let mut partitions = Vec::new();
    for inv in &input.rows {
        let row = &inv.row;
        if row.gpu_type != req.gpu_type
            || req.region.as_ref().is_some_and(|r| *r != row.region)
            || req.queue.as_ref().is_some_and(|q| *q != row.queue)
        {
            continue;
        }
        let (mut partition, waiting) = partition(input, row);
        if let Some(me) = &req.job_id {
            let keep: Vec<bool> = waiting.iter().map(|j| &j.id != me).collect();
            let mut k = keep.iter();
            partition.waiting.retain(|_| k.next().copied().unwrap_or(true));
        }
        let mut e = estimate(now, &partition, &history, Some(&request)).last().copied();
        // A region without a copy of the dataset starts the job once the copy is made, which can
        // go on while the job waits: each end of the range is at least the copy's end.
        let dataset = copies.map(|regions| {
            if regions.contains(&row.region) {
                "has a copy here".to_owned()
            } else {
                if let Some(est) = e.as_mut() {
                    let ready = now.saturating_add(copy.0.max(0));
                    for t in [&mut est.start, &mut est.earliest, &mut est.latest] {
                        *t = t.map(|t| t.max(ready));
                    }
                }
                format!("no copy here: copied first (about {copy}; copies in {})", regions.join(", "))
            }
        });
        let text = |t: Option<i64>| t.map(|ms| Timestamp(ms).to_string());
        let start = e.and_then(|e| e.start);
        let reason = start.is_none().then(|| {
            format!(
                "{} asked, more than this partition has ({} in service, {} drained)",
                gpus_text(req.gpus),
                row.in_service,
                row.drained
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
            dataset,
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
