//! Facts: per job, where its GPU-hours went, kept in SQLite tables beside the audit log and brought up
//! to date from the log incrementally, so a report over a year is a query, not a replay.
//!
//! # Where the facts come from
//!
//! The audit log holds every applied input (raw line, in commit order), every decision, and the job
//! steps the engine took while applying each input (`lifecycle`: admitted, deferred, held, denied,
//! started, finished with its status, reclaimed — [`bursar_engine::Step`]), written in the same
//! transaction as the input. [`FactsStore::catch_up`] reads them through `bursar-audit`'s typed reads
//! only ([`AuditLog::events_since`], [`AuditLog::steps_between`], [`AuditLog::decisions_since`]):
//!
//! - **The lifecycle is the engine's.** A job's start and release are its `started` and first
//!   `finished`/`reclaimed` step, at the step's time (for a timer, when it fell due); nothing here
//!   decides them again from raw events. A job gets its facts (project, user, tags, configuration,
//!   GPUs, submission time) from the `job.submitted` input whose handling produced its first
//!   admission step (admitted, deferred, held or denied). A denied job keeps a row (so what policies
//!   prevented can be grouped by its user or tags) but never holds GPUs, so it has no hours. A
//!   denied (or rejected) job submitted again under its id takes the new submission's facts, whole,
//!   whether the two fall in one catch-up or two (the row used to keep the first one's GPUs when they
//!   fell in two, and `verify --deep`, which rebuilds in one, reported an edit).
//! - **Accounting comes from the events.** Utilisation samples (`job.sample`) and billing charges
//!   (`billing.charge`) are read from the inputs; the steps of an input are applied before the
//!   input's own sample, as the engine fired them before evaluating it.
//! - **Throughput** comes from the samples too: a sample's `throughput` or `progress`
//!   ([`bursar_model::Work`]) joins the job's [`RunRate`] while it runs (between its start and its
//!   release, like utilisation), the one definition of a run's rate the engine also uses; the rate
//!   is stored with the job (`facts_jobs.throughput`, units per second for the whole job, and its
//!   `unit`) for the cost per unit of work.
//! - **What policies prevented** comes from the decisions (`facts_prevented`, one row per `deny`,
//!   `defer` or `reclaim` decision with GPU-hours).
//!
//! Each batch is written in one transaction together with the new cursors (`facts_meta`), so a crash
//! never double-counts and a rerun of `catch_up` is a no-op. `bursar eval --audit` calls it after the
//! stream; `serve` calls it before it answers a report; `bursar report` calls it first. The facts are
//! derived data: dropping the `facts_*` tables and catching up rebuilds them (that is what happens
//! when the idle threshold changes).
//!
//! # The accounting rules (docs/reports.md has the long form)
//!
//! All amounts are integer **GPU-milliseconds** (gpus × ms), so the split adds up exactly (a MIG
//! share's stretch is rounded to the millisecond once, and that one figure goes to both nominal and
//! its part):
//! `productive + idle + failure + held = nominal` for every job and day, and so for every sum of them.
//!
//! - **Nominal**: from the engine's `started` step to the release, × gpus. The release is the job's
//!   first `finished` or `reclaimed` step. A job the engine never started (denied, held, or a
//!   sample without a start) has no GPU-hours.
//! - **Samples are piecewise constant**: a sample's utilisation holds from its time until the next
//!   sample (or the release); the stretch from the start to the first sample takes the first sample's
//!   value. A job without any sample is **not measured**: its hours are `unmeasured`, neither
//!   productive nor idle, and the effective ratio leaves them out (they are also `unsampled` on the
//!   job). A failed job's hours are failure whether measured or not.
//! - **Productive**: stretches at or above the idle threshold. **Idle**: stretches under it.
//! - **Held**: the trailing idle stretches after the last productive one, up to the release — the GPUs
//!   were held after the work ended. A job that never had a productive stretch has no "end of work":
//!   its hours are idle, not held.
//! - **Failure**: every hour of a job that `failed`; and every hour of a **rerun** that did not
//!   succeed. A rerun is a job submitted while the last finished job of the same project and
//!   configuration ([`bursar_model::JobSpec::config_key`]) had failed. A rerun that succeeds keeps its
//!   normal split: its hours produced the result, and the failed attempt's hours are already counted
//!   as failure (counting both would count the same loss twice). Jobs with no configuration at all
//!   (no `config`, image, dataset, script or model size) are never matched as reruns.
//! - **Queue wait**: submission to start, in hours of time (not GPU-hours), on the day the job started.
//! - Hours are attributed to the UTC day (and hour, for the usage curve) in which they passed, so a
//!   job crossing a month boundary is split between the months.
//!
//! A running job is counted up to its latest sample; the stretch since then is added at release.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use bursar_audit::{AuditLog, StoredDecision, StoredEvent, StoredStep};
use bursar_engine::Step;
use bursar_model::{EventKind, FinishStatus, Gpus, JobSpec, RunRate, Work, decode_event};
use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};
use serde::{Deserialize, Serialize};

use crate::error::{ReportError, Result};
use crate::period::{DAY_MS, HOUR_MS};
use crate::policy::PolicyHints;

/// `ms` of time on `g` GPUs, in GPU-ms: exact for whole GPUs, rounded to the nearest GPU-ms for a
/// share (2/7 of a GPU for 7 ms is 2 GPU-ms).
fn gpu_ms(ms: i64, g: Gpus) -> i64 {
    if g.is_whole() {
        ms.saturating_mul(i64::from(g.floor()))
    } else {
        let parts = i128::from(ms) * i128::from(g.parts());
        let per = i128::from(Gpus::PARTS);
        i64::try_from((parts + per / 2).div_euclid(per)).unwrap_or(i64::MAX)
    }
}

/// Version of the `facts_*` tables; a different stored version is rebuilt from the log. Version 2:
/// the lifecycle from the engine's steps, and `facts_prevented`. Version 3: each job's GPU type and
/// measured throughput (`facts_jobs.gpu_type`, `unit`, `throughput`, `throughput_samples`). Version 4:
/// the hours of a job without samples are `unmeasured`, no longer productive (issue 45).
/// Version 5: a charge per day of its charge period with what its bill line says (attribution, GPU
/// type, category, correction, unused capacity, billed / effective / list money in micro-units).
/// Version 6: the queue wait by why the job waited (`facts_jobs.wait_*_ms`), the usage curve per GPU
/// type (`facts_usage_hour.gpu_type`), the waiting and billed card-ms per GPU type and hour
/// (`facts_wait_hour`, `facts_bill_hour`) for queueing. Version 7: each job's and bill line's region
/// (`facts_jobs.region`, `facts_charges.region`, `facts_usage_hour.region`) for the pool's prices by
/// region. Version 8: the submission's own `config` (`facts_jobs.named_config`), what `--by config`
/// groups by.
pub const FACTS_VERSION: i64 = 8;

const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS facts_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS facts_jobs (
    job           TEXT PRIMARY KEY,
    project       TEXT NOT NULL,
    user          TEXT NOT NULL,
    tags          TEXT NOT NULL,
    config        TEXT,
    gpus          INTEGER NOT NULL,
    submitted     INTEGER,
    started       INTEGER,
    released      INTEGER,
    status        TEXT,
    rerun         INTEGER NOT NULL,
    queue_wait_ms INTEGER,
    unsampled     INTEGER NOT NULL,
    state         TEXT NOT NULL,
    gpu_type      TEXT,
    unit          TEXT,
    throughput    REAL,
    throughput_samples INTEGER NOT NULL DEFAULT 0,
    wait_approval_ms  INTEGER NOT NULL DEFAULT 0,
    wait_off_peak_ms  INTEGER NOT NULL DEFAULT 0,
    wait_capacity_ms  INTEGER NOT NULL DEFAULT 0,
    wait_readiness_ms INTEGER NOT NULL DEFAULT 0,
    region        TEXT,
    named_config  TEXT
);
CREATE INDEX IF NOT EXISTS facts_jobs_project ON facts_jobs(project, started);
CREATE TABLE IF NOT EXISTS facts_job_day (
    job        TEXT NOT NULL,
    day        INTEGER NOT NULL,
    nominal    INTEGER NOT NULL,
    productive INTEGER NOT NULL,
    idle       INTEGER NOT NULL,
    failure    INTEGER NOT NULL,
    held       INTEGER NOT NULL,
    unmeasured INTEGER NOT NULL DEFAULT 0,
    g_effective    INTEGER NOT NULL DEFAULT 0,
    g_low_util     INTEGER NOT NULL DEFAULT 0,
    g_data_wait    INTEGER NOT NULL DEFAULT 0,
    g_setup        INTEGER NOT NULL DEFAULT 0,
    g_idle         INTEGER NOT NULL DEFAULT 0,
    g_held         INTEGER NOT NULL DEFAULT 0,
    g_interruption INTEGER NOT NULL DEFAULT 0,
    g_unmeasured   INTEGER NOT NULL DEFAULT 0,
    g_sm_active    INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (job, day)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS facts_job_day_day ON facts_job_day(day);
CREATE TABLE IF NOT EXISTS facts_usage_hour (
    project  TEXT NOT NULL,
    gpu_type TEXT NOT NULL,
    region   TEXT NOT NULL,
    hour     INTEGER NOT NULL,
    gpu_ms   INTEGER NOT NULL,
    PRIMARY KEY (project, gpu_type, region, hour)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS facts_wait_hour (
    gpu_type TEXT NOT NULL,
    hour     INTEGER NOT NULL,
    gpu_ms   INTEGER NOT NULL,
    PRIMARY KEY (gpu_type, hour)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS facts_bill_hour (
    gpu_type TEXT NOT NULL,
    hour     INTEGER NOT NULL,
    gpu_ms   INTEGER NOT NULL,
    PRIMARY KEY (gpu_type, hour)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS facts_configs (
    project TEXT NOT NULL,
    config  TEXT NOT NULL,
    failed  INTEGER NOT NULL,
    PRIMARY KEY (project, config)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS facts_charges (
    event_seq   INTEGER NOT NULL,
    day         INTEGER NOT NULL,
    project     TEXT,
    job         TEXT,
    user        TEXT,
    tags        TEXT,
    gpu_type    TEXT,
    attribution TEXT NOT NULL,
    category    TEXT,
    correction  INTEGER NOT NULL DEFAULT 0,
    unused      INTEGER NOT NULL DEFAULT 0,
    gpu_ms      INTEGER NOT NULL,
    billed      INTEGER,
    effective   INTEGER,
    list        INTEGER,
    currency    TEXT,
    mode        TEXT,
    region      TEXT,
    PRIMARY KEY (event_seq, day)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS facts_charges_day ON facts_charges(day);
CREATE TABLE IF NOT EXISTS facts_prevented (
    decision_seq INTEGER PRIMARY KEY,
    decision_id  TEXT NOT NULL,
    time         INTEGER NOT NULL,
    job          TEXT,
    project      TEXT,
    user         TEXT,
    decision     TEXT NOT NULL,
    dry_run      INTEGER NOT NULL,
    gpu_hours    REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS facts_prevented_time ON facts_prevented(time);
"#;

/// Drops every facts table: the ones `bursar_audit::derived::DERIVED_TABLES` lists as this crate's,
/// the same list `verify --deep` compares (a test checks that [`SCHEMA`] creates exactly those).
fn drop_facts(conn: &Connection, context: &'static str) -> Result<()> {
    use bursar_audit::derived::{Check, Owner, derived_tables};
    for t in derived_tables(Owner::Report, Check::Rebuild) {
        conn.execute_batch(&format!("DROP TABLE IF EXISTS {}", t.name)).map_err(ReportError::sqlite(context))?;
    }
    Ok(())
}

/// The gap between nominal and effective GPU-milliseconds in the brief's causes (issue 52); with
/// `effective` they add up to the nominal hours held: `effective + low_util + data_wait + setup + idle
/// + held + interruption + unmeasured == nominal`. docs/reports.md has each formula.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gap {
    /// Weighted by use: each productive stretch × its measured use (SM activity where the sample
    /// carries it, else GPU utilisation), rounded down to whole GPU-ms.
    pub effective: i64,
    /// The rest of the productive stretches: held, productive, below full use.
    pub low_util: i64,
    /// Stretches (or their part) the job's own input-wait counter (`input_wait`) attributes to input.
    pub data_wait: i64,
    /// Below the idle threshold from a run's start to its first productive stretch.
    pub setup: i64,
    /// Below the threshold between productive stretches, or in a run that never became productive.
    pub idle: i64,
    /// Below the threshold after a finished job's last productive stretch.
    pub held: i64,
    /// Every hour of a run that was requeued or preempted, of a failed job, of a rerun that did not
    /// succeed: the work was lost or run again.
    pub interruption: i64,
    /// No sample: not known.
    pub unmeasured: i64,
    /// Of the productive stretches, the GPU-ms whose use was measured as SM activity (not a part: says
    /// which measure weighted `effective`).
    #[serde(default)]
    pub sm_active: i64,
}

impl Gap {
    /// Adds `o` field by field.
    pub fn add(&mut self, o: &Gap) {
        self.effective += o.effective;
        self.low_util += o.low_util;
        self.data_wait += o.data_wait;
        self.setup += o.setup;
        self.idle += o.idle;
        self.held += o.held;
        self.interruption += o.interruption;
        self.unmeasured += o.unmeasured;
        self.sm_active += o.sm_active;
    }

    /// The sum of the parts (everything but `sm_active`).
    pub fn total(&self) -> i64 {
        self.effective
            + self.low_util
            + self.data_wait
            + self.setup
            + self.idle
            + self.held
            + self.interruption
            + self.unmeasured
    }

    /// Moves every part into `interruption`.
    fn interrupt(&mut self) {
        self.interruption = self.total();
        *self = Gap { interruption: self.interruption, ..Gap::default() };
    }

    fn sub(&mut self, o: &Gap) {
        self.effective -= o.effective;
        self.low_util -= o.low_util;
        self.data_wait -= o.data_wait;
        self.setup -= o.setup;
        self.idle -= o.idle;
        self.held -= o.held;
        self.interruption -= o.interruption;
        self.unmeasured -= o.unmeasured;
        self.sm_active -= o.sm_active;
    }
}

/// Why a job waited between its submission and its first start (issue 52): the engine's step that
/// began each stretch of the wait says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitReason {
    /// Held for a person's approval (the `held` step, until the `admitted` one).
    Approval,
    /// Deferred by a `defer` decision, e.g. deferrable work sent to off-peak hours (the `deferred`
    /// step, until the deferral ends).
    OffPeak,
    /// Admitted and waiting for the scheduler to place it: for GPUs.
    Capacity,
    /// Admitted while its submission declared its image, data or script not ready (`false`): the
    /// scheduler cannot start it before they are.
    Readiness,
}

/// A job's queue wait by [`WaitReason`], in ms of time; the parts add up to the queue wait.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waits {
    /// Waiting for approval.
    pub approval: i64,
    /// Deferred (off-peak).
    pub off_peak: i64,
    /// Waiting for GPUs.
    pub capacity: i64,
    /// Waiting for its image, data or script.
    pub readiness: i64,
}

impl Waits {
    /// Adds `ms` to the part of `reason`.
    pub fn add(&mut self, reason: WaitReason, ms: i64) {
        match reason {
            WaitReason::Approval => self.approval += ms,
            WaitReason::OffPeak => self.off_peak += ms,
            WaitReason::Capacity => self.capacity += ms,
            WaitReason::Readiness => self.readiness += ms,
        }
    }

    /// The sum of the parts.
    pub fn total(&self) -> i64 {
        self.approval + self.off_peak + self.capacity + self.readiness
    }
}

/// What a sample measured, beside `gpu_util`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Measure {
    /// GPU utilisation.
    pub util: f64,
    /// DCGM SM activity, when sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm: Option<f64>,
    /// The share of the interval the job waited for input, when sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<f64>,
}

/// A fraction as parts per million, clamped to [0, 1].
fn ppm(f: f64) -> i64 {
    if f.is_finite() { (f.clamp(0.0, 1.0) * 1e6).round() as i64 } else { 0 }
}

/// `ms × f`, rounded down, in whole GPU-ms.
fn part(ms: i64, f: f64) -> i64 {
    (i128::from(ms) * i128::from(ppm(f)) / 1_000_000) as i64
}

/// How a job's GPU-milliseconds split. `productive + idle + failure + held + unmeasured == nominal`,
/// and the [`Gap`] adds up to `nominal` too.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Split {
    /// From start to release.
    pub nominal: i64,
    /// At or above the idle threshold.
    pub productive: i64,
    /// Under the idle threshold, before the work ended.
    pub idle: i64,
    /// Failed jobs and unsuccessful reruns.
    pub failure: i64,
    /// After the last productive stretch, until release.
    pub held: i64,
    /// Of a job without any utilisation sample: not known to be productive or idle.
    #[serde(default)]
    pub unmeasured: i64,
    /// The same hours in the gap's causes.
    #[serde(default)]
    pub gap: Gap,
}

impl Split {
    /// Adds `o` field by field.
    pub fn add(&mut self, o: &Split) {
        self.gap.add(&o.gap);
        self.nominal += o.nominal;
        self.productive += o.productive;
        self.idle += o.idle;
        self.failure += o.failure;
        self.held += o.held;
        self.unmeasured += o.unmeasured;
    }

    /// The GPU-milliseconds whose use is known: all but the unmeasured ones.
    pub fn measured(&self) -> i64 {
        self.nominal - self.unmeasured
    }

    /// productive / measured; `None` when nothing was measured (not measured is not effective).
    pub fn effective_ratio(&self) -> Option<f64> {
        let m = self.measured();
        (m > 0).then(|| self.productive as f64 / m as f64)
    }

    /// Whether the parts add up to the whole, in both splits.
    pub fn adds_up(&self) -> bool {
        self.productive + self.idle + self.failure + self.held + self.unmeasured == self.nominal
            && self.gap.total() == self.nominal
    }
}

/// The accounting state of one job (kept as JSON while the job is open).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobFacts {
    /// Project.
    pub project: String,
    /// User.
    pub user: String,
    /// Tags, sorted by key.
    pub tags: Vec<(String, String)>,
    /// Configuration key, when the job has one (see the module docs).
    pub config: Option<String>,
    /// The submission's own `config` field, when it names one: what `--by config` groups by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub named_config: Option<String>,
    /// GPUs (a MIG slice as its share, `2/7`).
    pub gpus: Gpus,
    /// GPU type, when the submission names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_type: Option<String>,
    /// Region, when the submission names one (v1.x `region`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// The rate of work measured so far from the job's samples.
    #[serde(default, skip_serializing_if = "is_default")]
    pub run: RunRate,
    /// Submission time, ms.
    pub submitted: Option<i64>,
    /// Start time, ms.
    pub started: Option<i64>,
    /// Release time, ms.
    pub released: Option<i64>,
    /// `succeeded`, `failed`, `cancelled` or `reclaimed` once released; `denied` for a job the
    /// engine refused.
    pub status: Option<String>,
    /// Submitted while its configuration's last finished run had failed.
    pub rerun: bool,
    /// Its submission declared the image, data or script not ready (`false`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    not_ready: bool,
    /// Before the first start: why it waits now, and since when (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    waiting: Option<(WaitReason, i64)>,
    /// The queue wait by why the job waited, once started.
    #[serde(default, skip_serializing_if = "is_default")]
    pub waits: Waits,
    /// Latest sample: time and utilisation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last: Option<(i64, f64)>,
    /// The latest sample's other measures (SM activity, input wait).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_more: Option<(Option<f64>, Option<f64>)>,
    /// The current run had a productive stretch (the gap's setup ends there).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    run_productive: bool,
    /// Below-threshold GPU-ms per day of the current run before its first productive stretch
    /// (setup once it has one; idle if it never does).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pre: BTreeMap<i64, i64>,
    /// Below-threshold GPU-ms per day since the current run's last productive stretch.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    gtail: BTreeMap<i64, i64>,
    /// The gap of the current run per day (all of it is interruption if the run is requeued).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    run_gap: BTreeMap<i64, Gap>,
    /// Start of the current run, when it is not the first (after a requeue or a rerun).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    run_start: Option<i64>,
    /// Between two runs (requeued, waiting to run again): nothing accrues.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    paused: bool,
    #[serde(default)]
    had_productive: bool,
    /// GPU-ms with no sample to classify them.
    #[serde(default)]
    pub unsampled: i64,
    /// Idle GPU-ms per day since the last productive stretch.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    tail: BTreeMap<i64, i64>,
    /// Split per day (emptied once written after release).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub days: BTreeMap<i64, Split>,
    /// GPU-ms per hour added since the last flush.
    #[serde(skip)]
    usage: BTreeMap<i64, i64>,
    /// GPU-ms (requested GPUs × ms waited) per hour of a wait that ended in a start, since the last
    /// flush: the demand queueing sets against the capacity billed.
    #[serde(skip)]
    wait_usage: BTreeMap<i64, i64>,
    /// Days changed since the last flush.
    #[serde(skip)]
    days_dirty: bool,
}

/// The configuration key of `spec`, or None when it carries no configuration at all
/// ([`JobSpec::has_config`]).
pub fn config_of(spec: &JobSpec) -> Option<String> {
    spec.has_config().then(|| spec.config_key())
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

impl JobFacts {
    /// A submitted job.
    pub fn submitted(spec: &JobSpec, at: i64, rerun: bool) -> JobFacts {
        JobFacts {
            project: spec.project.clone(),
            user: spec.user.clone(),
            tags: spec.tags.clone(),
            config: config_of(spec),
            named_config: spec.config.clone(),
            gpus: spec.gpus,
            gpu_type: spec.gpu_type.clone(),
            region: spec.region.clone(),
            submitted: Some(at),
            rerun,
            not_ready: [spec.ready.image, spec.ready.data, spec.ready.script].contains(&Some(false)),
            ..JobFacts::default()
        }
    }

    /// An admission step at `t` before the first start: the job now waits for `reason` (for an
    /// `admitted` step, [`WaitReason::Capacity`], or [`WaitReason::Readiness`] when its submission
    /// declared something not ready). The first stretch of the wait begins at the submission, so the
    /// stretches add up to the queue wait. Returns whether anything changed.
    pub fn wait(&mut self, t: i64, step: Step) -> bool {
        if self.started.is_some() || self.released.is_some() || self.status.is_some() {
            return false;
        }
        let reason = match step {
            Step::Held => WaitReason::Approval,
            Step::Deferred => WaitReason::OffPeak,
            Step::Admitted if self.not_ready => WaitReason::Readiness,
            Step::Admitted => WaitReason::Capacity,
            _ => return false,
        };
        let from = match self.waiting {
            Some((r, since)) => {
                let t = t.max(since);
                self.waits.add(r, t - since);
                t
            }
            None => self.submitted.map_or(t, |s| s.min(t)),
        };
        self.waiting = Some((reason, from));
        true
    }

    /// Closes the wait at the first start `t`: its last stretch counts for its reason (a start with
    /// no admission step on record: capacity), and the whole wait, × the requested GPUs, joins the
    /// waiting curve.
    fn end_wait(&mut self, t: i64) {
        let (reason, since) = self.waiting.take().unwrap_or((WaitReason::Capacity, self.submitted.unwrap_or(t)));
        let since = since.min(t);
        self.waits.add(reason, t - since);
        let Some(from) = self.submitted.filter(|s| *s < t) else { return };
        let g = self.gpus;
        let mut x = from;
        while x < t {
            let end = t.min((x.div_euclid(HOUR_MS) + 1) * HOUR_MS);
            *self.wait_usage.entry(x.div_euclid(HOUR_MS)).or_insert(0) += gpu_ms(end - x, g);
            x = end;
        }
    }

    /// The job's total split.
    pub fn total(&self) -> Split {
        let mut s = Split::default();
        for d in self.days.values() {
            s.add(d);
        }
        s
    }

    /// Queue wait in ms, once started.
    pub fn queue_wait(&self) -> Option<i64> {
        Some(self.started? - self.submitted?).filter(|w| *w >= 0)
    }

    /// The engine's `started` step at `t`, on `gpus` when the scheduler named the allocation.
    /// Returns whether anything changed. A start after a requeue begins the next run.
    pub fn start(&mut self, t: i64, gpus: Option<Gpus>) -> bool {
        if self.released.is_some() {
            return false;
        }
        if self.started.is_some() {
            if !self.paused {
                return false;
            }
            self.paused = false;
            self.run_start = Some(t);
            self.last = None;
        } else {
            self.end_wait(t);
            self.started = Some(t);
        }
        self.run_productive = false;
        self.pre.clear();
        self.gtail.clear();
        self.run_gap.clear();
        if let Some(g) = gpus {
            self.gpus = g;
        }
        true
    }

    /// The engine's `requeued` step at `t`: the run so far is counted, and nothing accrues until the
    /// next start.
    pub fn requeue(&mut self, t: i64, threshold: f64) -> bool {
        let Some(from) = self.run_from() else { return false };
        if self.released.is_some() || self.paused {
            return false;
        }
        let t = t.max(from);
        let (from, value) = match self.last {
            None => (from, None),
            Some((lt, lu)) => (lt, Some(lu)),
        };
        let more = self.last_more.unwrap_or_default();
        self.accrue(from, t, value.map(|util| Measure { util, sm: more.0, wait: more.1 }), threshold);
        self.last = None;
        self.last_more = None;
        self.paused = true;
        // The run is lost or run again: every hour of it is interruption.
        for (day, g) in std::mem::take(&mut self.run_gap) {
            if let Some(d) = self.days.get_mut(&day) {
                d.gap.sub(&g);
                d.gap.interruption += g.total();
            }
        }
        self.pre.clear();
        self.gtail.clear();
        self.run_productive = false;
        true
    }

    /// A finished job the scheduler runs again (the engine admitted it again): released no longer,
    /// waiting for its next start. `days` must hold what was written for it (the caller loads it).
    pub fn reopen(&mut self) -> bool {
        if self.released.is_none() {
            return false;
        }
        self.released = None;
        self.status = None;
        self.last = None;
        self.paused = self.started.is_some();
        true
    }

    /// Where the current run's stretch begins: its start (the first run's, or a later run's).
    fn run_from(&self) -> Option<i64> {
        self.run_start.or(self.started)
    }

    /// The engine's `denied` step: the job never holds GPUs.
    pub fn deny(&mut self) -> bool {
        if self.started.is_some() || self.released.is_some() {
            return false;
        }
        self.status = Some("denied".to_owned());
        self.waiting = None;
        true
    }

    /// A utilisation sample at `t`. Ignored unless the job has started and is not yet released: only
    /// the engine's steps start a job.
    pub fn sample(&mut self, t: i64, util: f64, threshold: f64) -> bool {
        self.sample_with(t, Measure { util, sm: None, wait: None }, threshold)
    }

    /// A sample at `t` with its SM activity and input wait, when it carries them.
    pub fn sample_with(&mut self, t: i64, m: Measure, threshold: f64) -> bool {
        let util = m.util;
        let Some(started) = self.run_from() else { return false };
        if self.released.is_some() || self.paused {
            return false;
        }
        let (from, value) = match self.last {
            None => (started, m),
            Some((lt, lu)) => {
                let more = self.last_more.unwrap_or_default();
                (lt, Measure { util: lu, sm: more.0, wait: more.1 })
            }
        };
        if t < from {
            return false; // out of order: the stretch it would describe is already counted
        }
        self.accrue(from, t, Some(value), threshold);
        self.last = Some((t, util));
        self.last_more = Some((m.sm, m.wait));
        true
    }

    /// A sample's measure of work at `t`. Counted, like utilisation, only between the engine's start
    /// and release of the job.
    pub fn work(&mut self, t: i64, w: &Work<'_>) -> bool {
        if self.started.is_none() || self.released.is_some() || self.paused {
            return false;
        }
        self.run.add(bursar_model::Timestamp(t), w)
    }

    /// The engine's release step (`finished` with its status, or `reclaimed`) at `t`.
    pub fn release(&mut self, t: i64, status: &str, threshold: f64) -> bool {
        if self.released.is_some() {
            return false;
        }
        self.status = Some(status.to_owned());
        self.waiting = None;
        let Some(started) = self.run_from().filter(|_| !self.paused) else {
            self.released = Some(t);
            self.paused = false;
            return true;
        };
        let t = t.max(started);
        let more = self.last_more.unwrap_or_default();
        let (from, value) = match self.last {
            None => (started, None),
            Some((lt, lu)) => (lt, Some(Measure { util: lu, sm: more.0, wait: more.1 })),
        };
        self.accrue(from, t, value, threshold);
        self.released = Some(t);
        self.last = None;
        self.last_more = None;
        if status == "failed" || (self.rerun && status != "succeeded") {
            for d in self.days.values_mut() {
                d.gap.interrupt();
                d.failure += d.productive + d.idle + d.held + d.unmeasured;
                d.productive = 0;
                d.idle = 0;
                d.held = 0;
                d.unmeasured = 0;
            }
        } else {
            if self.had_productive {
                for (day, ms) in std::mem::take(&mut self.tail) {
                    if let Some(d) = self.days.get_mut(&day) {
                        d.idle -= ms;
                        d.held += ms;
                    }
                }
            }
            if self.run_productive {
                for (day, ms) in std::mem::take(&mut self.gtail) {
                    if let Some(d) = self.days.get_mut(&day) {
                        d.gap.idle -= ms;
                        d.gap.held += ms;
                    }
                }
            }
        }
        self.tail.clear();
        self.gtail.clear();
        self.pre.clear();
        self.run_gap.clear();
        self.days_dirty = true;
        true
    }

    /// Adds to the gap of `day`, and of the current run.
    fn gap_add(&mut self, day: i64, f: impl Fn(&mut Gap)) {
        f(&mut self.days.entry(day).or_default().gap);
        f(self.run_gap.entry(day).or_default());
    }

    /// Counts `[a, b)` at measure `m` (None: no sample, not measured), split by hour and day.
    fn accrue(&mut self, a: i64, b: i64, m: Option<Measure>, threshold: f64) {
        let util = m.map(|m| m.util);
        let g = self.gpus;
        let mut t = a;
        while t < b {
            let end = b.min((t.div_euclid(HOUR_MS) + 1) * HOUR_MS);
            let ms = gpu_ms(end - t, g);
            let day = t.div_euclid(DAY_MS);
            *self.usage.entry(t.div_euclid(HOUR_MS)).or_insert(0) += ms;
            let d = self.days.entry(day).or_default();
            d.nominal += ms;
            match util {
                None => {
                    d.unmeasured += ms;
                    self.unsampled += ms;
                }
                Some(u) if u >= threshold => {
                    d.productive += ms;
                    self.had_productive = true;
                    self.tail.clear();
                }
                Some(_) => {
                    d.idle += ms;
                    *self.tail.entry(day).or_insert(0) += ms;
                }
            }
            match m {
                None => self.gap_add(day, |g| g.unmeasured += ms),
                Some(m) if m.util >= threshold => {
                    let eff = part(ms, m.sm.unwrap_or(m.util));
                    let data = part(ms, m.wait.unwrap_or(0.0)).min(ms - eff);
                    let sm = if m.sm.is_some() { ms } else { 0 };
                    self.gap_add(day, |g| {
                        g.effective += eff;
                        g.data_wait += data;
                        g.low_util += ms - eff - data;
                        g.sm_active += sm;
                    });
                    if !self.run_productive {
                        self.run_productive = true;
                        for (pd, v) in std::mem::take(&mut self.pre) {
                            self.gap_add(pd, |g| {
                                g.idle -= v;
                                g.setup += v;
                            });
                        }
                    }
                    self.gtail.clear();
                }
                Some(m) => {
                    let data = part(ms, m.wait.unwrap_or(0.0));
                    let rest = ms - data;
                    self.gap_add(day, |g| {
                        g.data_wait += data;
                        g.idle += rest;
                    });
                    let to = if self.run_productive { &mut self.gtail } else { &mut self.pre };
                    *to.entry(day).or_insert(0) += rest;
                }
            }
            t = end;
        }
        if b > a {
            self.days_dirty = true;
        }
    }
}

/// Reads a [`Gap`] from nine columns starting at `i` (`g_effective` … `g_sm_active`).
pub fn gap_at(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<Gap> {
    Ok(Gap {
        effective: r.get(i)?,
        low_util: r.get(i + 1)?,
        data_wait: r.get(i + 2)?,
        setup: r.get(i + 3)?,
        idle: r.get(i + 4)?,
        held: r.get(i + 5)?,
        interruption: r.get(i + 6)?,
        unmeasured: r.get(i + 7)?,
        sm_active: r.get(i + 8)?,
    })
}

/// What one [`FactsStore::catch_up`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CatchUp {
    /// Events read from the log.
    pub events: u64,
    /// Job steps read from the log.
    pub steps: u64,
    /// Decisions read from the log.
    pub decisions: u64,
    /// Samples and steps about a job without facts (one the engine never admitted, or whose
    /// submission is no longer in the log).
    pub unattributed: u64,
    /// Event cursor after the run.
    pub event_cursor: i64,
}

/// The facts tables of one audit database.
#[derive(Debug)]
pub struct FactsStore {
    /// The audit tables, read only through `bursar-audit`'s typed reads. Declared (so dropped) before
    /// the write connection: SQLite checkpoints the WAL into the file when the last connection
    /// closes, which a read-only one cannot do, so the write connection must close last.
    log: AuditLog,
    /// The facts tables (read-write).
    conn: Connection,
    path: String,
    hints: PolicyHints,
}

/// Events read per transaction.
const BATCH: usize = 20_000;
/// Decisions read per transaction.
const DECISION_BATCH: usize = 5_000;

impl FactsStore {
    /// Opens the facts of the audit database at `path` (which must exist), creating the tables if
    /// needed. With `hints`, they are stored as the policies in force; if their idle threshold differs
    /// from the stored one, the facts are rebuilt from the log on the next [`FactsStore::catch_up`].
    pub fn open(path: impl AsRef<Path>, hints: Option<&PolicyHints>) -> Result<FactsStore> {
        let p = path.as_ref();
        let shown = p.display().to_string();
        if !p.exists() {
            return Err(ReportError::Invalid(format!(
                "`{shown}` does not exist\n  help: create it with `bursar eval --policies policies --events events.jsonl --audit {shown}`"
            )));
        }
        // The audit log's own check: its schema version says whether this is an audit log.
        let log = AuditLog::open_read(p).map_err(|e| match e {
            bursar_audit::AuditError::Invalid(m) => {
                ReportError::Invalid(format!("{m}\n  help: create one with `bursar eval … --audit {shown}`"))
            }
            other => ReportError::Audit(other),
        })?;
        let conn = Connection::open(p).map_err(ReportError::sqlite(format!("open `{shown}`")))?;
        conn.busy_timeout(std::time::Duration::from_secs(10)).map_err(ReportError::sqlite("set the busy timeout"))?;
        let mut store = FactsStore { conn, log, path: shown, hints: PolicyHints::default() };
        store.ensure_schema()?;
        let stored: Option<PolicyHints> = store.meta("hints")?.and_then(|s| serde_json::from_str(&s).ok());
        match (hints, stored) {
            (Some(h), stored) => {
                if stored.as_ref().map(PolicyHints::idle_threshold) != Some(h.idle_threshold()) {
                    store.reset()?;
                }
                store.set_meta("hints", &serde_json::to_string(h).unwrap_or_default())?;
                store.hints = h.clone();
            }
            (None, Some(s)) => store.hints = s,
            (None, None) => {}
        }
        Ok(store)
    }

    fn ensure_schema(&mut self) -> Result<()> {
        let version: Option<i64> = self
            .conn
            .query_row("SELECT count(*) FROM sqlite_master WHERE name = 'facts_meta'", [], |r| r.get::<_, i64>(0))
            .map_err(ReportError::sqlite("read the facts schema"))
            .and_then(
                |n| if n == 0 { Ok(None) } else { self.meta("version").map(|v| v.and_then(|v| v.parse().ok())) },
            )?;
        if version.is_some_and(|v| v != FACTS_VERSION) {
            drop_facts(&self.conn, "drop facts of another version")?;
        }
        self.conn
            .execute_batch(SCHEMA)
            .map_err(ReportError::sqlite(format!("create the facts tables in `{}`", self.path)))?;
        self.set_meta("version", &FACTS_VERSION.to_string())
    }

    /// Drops every fact: the next catch-up rebuilds them from the start of the log.
    pub fn reset(&mut self) -> Result<()> {
        let hints = self.meta("hints")?;
        drop_facts(&self.conn, "drop the facts")?;
        self.conn.execute_batch(SCHEMA).map_err(ReportError::sqlite("create the facts tables"))?;
        self.set_meta("version", &FACTS_VERSION.to_string())?;
        if let Some(h) = hints {
            self.set_meta("hints", &h)?;
        }
        Ok(())
    }

    fn meta(&self, key: &str) -> Result<Option<String>> {
        self.conn
            .query_row("SELECT value FROM facts_meta WHERE key = ?1", [key], |r| r.get(0))
            .optional()
            .map_err(ReportError::sqlite("read the facts cursor"))
    }

    fn set_meta(&self, key: &str, value: &str) -> Result<()> {
        self.conn
            .execute("INSERT OR REPLACE INTO facts_meta(key, value) VALUES (?1, ?2)", [key, value])
            .map(|_| ())
            .map_err(ReportError::sqlite("write the facts cursor"))
    }

    /// The connection, for queries over the `facts_*` tables (the audit tables are read through
    /// [`FactsStore::audit`]).
    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// The audit log the facts are derived from, for its typed reads.
    pub fn audit(&self) -> &AuditLog {
        &self.log
    }

    /// The database path, as given.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The policy hints in force.
    pub fn hints(&self) -> &PolicyHints {
        &self.hints
    }

    /// The idle threshold the facts were computed with.
    pub fn idle_threshold(&self) -> f64 {
        self.hints.idle_threshold()
    }

    /// Applies everything the log committed after the cursors, one transaction per batch. The
    /// transaction takes the write lock first, so two catch-ups of the same file (two report
    /// requests to `serve`) run one after the other, the second from the first's cursors.
    pub fn catch_up(&mut self) -> Result<CatchUp> {
        let threshold = self.idle_threshold();
        let mut total = CatchUp::default();
        loop {
            let tx = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(ReportError::sqlite("start a facts transaction"))?;
            let n = catch_up_batch(&tx, &self.log, threshold, &mut total)?;
            tx.commit().map_err(ReportError::sqlite("commit the facts"))?;
            if n == 0 {
                return Ok(total);
            }
        }
    }
}

fn get_cursor(tx: &Transaction<'_>, key: &str) -> Result<i64> {
    let v: Option<String> = tx
        .query_row("SELECT value FROM facts_meta WHERE key = ?1", [key], |r| r.get(0))
        .optional()
        .map_err(ReportError::sqlite("read the facts cursor"))?;
    Ok(v.and_then(|v| v.parse().ok()).unwrap_or(0))
}

fn set_cursor(tx: &Transaction<'_>, key: &str, v: i64) -> Result<()> {
    tx.execute("INSERT OR REPLACE INTO facts_meta(key, value) VALUES (?1, ?2)", params![key, v.to_string()])
        .map(|_| ())
        .map_err(ReportError::sqlite("write the facts cursor"))
}

/// One batch: returns how many log rows it consumed.
fn catch_up_batch(tx: &Transaction<'_>, log: &AuditLog, threshold: f64, total: &mut CatchUp) -> Result<u64> {
    let ecur = get_cursor(tx, "event_cursor")?;
    let dcur = get_cursor(tx, "decision_cursor")?;
    let events = log.events_since(ecur, BATCH)?;
    let emax = events.last().map_or(ecur, |e| e.seq);
    // Written in the same transaction as their events, so every step of this page is there.
    let steps = if emax > ecur { log.steps_between(ecur, emax)? } else { Vec::new() };
    let nst = steps.len() as u64;
    let decisions = log.decisions_since(dcur, DECISION_BATCH)?;
    if events.is_empty() && decisions.is_empty() {
        total.event_cursor = ecur;
        return Ok(0);
    }

    let mut batch = Batch {
        tx,
        jobs: HashMap::new(),
        dirty: HashSet::new(),
        configs: HashMap::new(),
        usage: HashMap::new(),
        waiting: HashMap::new(),
    };
    let mut steps = steps.iter().peekable();
    for ev in &events {
        // The engine's steps for this input, in the order it took them (timers that fell due first).
        while let Some(st) = steps.next_if(|st| st.event_seq <= ev.seq) {
            if st.event_seq == ev.seq {
                batch.step(st, ev, threshold, total)?;
            }
        }
        match ev.kind.as_str() {
            "job.sample" => {
                let Ok(e) = decode_event(&ev.raw) else { continue };
                if let EventKind::JobSample(sample) = &e.kind {
                    let work = sample.work();
                    batch.with(&sample.job_id, total, |j| {
                        let m = Measure { util: sample.gpu_util, sm: sample.sm_active, wait: sample.input_wait };
                        let util = j.sample_with(ev.time, m, threshold);
                        let work = work.is_some_and(|w| j.work(ev.time, &w));
                        util || work
                    })?;
                }
            }
            "billing.charge" => {
                let Ok(e) = decode_event(&ev.raw) else { continue };
                if let EventKind::BillingCharge(c) = &e.kind {
                    store_charge(tx, ev.seq, ev.time, c)?;
                }
            }
            _ => {}
        }
    }
    batch.flush()?;
    let dnew = prevented(tx, &decisions)?.unwrap_or(dcur);
    set_cursor(tx, "event_cursor", emax)?;
    set_cursor(tx, "decision_cursor", dnew)?;
    let (nev, ndec) = (events.len() as u64, decisions.len() as u64);
    total.events += nev;
    total.steps += nst;
    total.decisions += ndec;
    total.event_cursor = emax;
    Ok(nev + ndec)
}

/// Money in micro-units (10⁻⁶ of the currency): the report's integer unit for money, as GPU-ms is for
/// card-hours. Rounded once, here; exact for amounts below 9×10⁹.
pub fn micros(amount: f64) -> i64 {
    (amount * 1e6).round() as i64
}

/// Splits `total` over the days of `[start, end)` in proportion to the milliseconds of each, in whole
/// units: each day gets the floor of its share, and what the floors leave goes one unit at a time to
/// the days with the largest remainders (the earlier on a tie). The parts add up to `total` exactly.
pub fn split_by_day(total: i64, start: i64, end: i64) -> Vec<(i64, i64)> {
    split_by(total, start, end, DAY_MS)
}

/// [`split_by_day`] over slots of `unit` ms (days, hours), numbered `t.div_euclid(unit)`.
pub fn split_by(total: i64, start: i64, end: i64, unit: i64) -> Vec<(i64, i64)> {
    let len = i128::from(end - start);
    if len <= 0 {
        return vec![(start.div_euclid(unit), total)];
    }
    let mut parts: Vec<(i64, i64, i128)> = Vec::new();
    let mut t = start;
    let sign = total.signum();
    let abs = i128::from(total).abs();
    while t < end {
        let day = t.div_euclid(unit);
        let next = ((day + 1) * unit).min(end);
        let num = abs * i128::from(next - t);
        parts.push((day, (num / len) as i64, num % len));
        t = next;
    }
    let given: i64 = parts.iter().map(|p| p.1).sum();
    let mut left = (abs as i64) - given;
    let mut order: Vec<usize> = (0..parts.len()).collect();
    order.sort_by(|a, b| parts[*b].2.cmp(&parts[*a].2).then(a.cmp(b)));
    for i in order {
        if left <= 0 {
            break;
        }
        parts[i].1 += 1;
        left -= 1;
    }
    parts.into_iter().map(|(d, v, _)| (d, v * sign)).collect()
}

/// Stores a `billing.charge`: one row per day of its charge period (a charge without a bill line: its
/// event's day), with card-ms and money split by [`split_by_day`].
fn store_charge(tx: &Transaction<'_>, seq: i64, time: i64, c: &bursar_model::BillingCharge) -> Result<()> {
    use bursar_model::Attribution;
    let gpu_ms = (c.gpu_hours * HOUR_MS as f64).round() as i64;
    let bill = c.bill.as_deref();
    let (start, end) = bill.map_or((time, time), |b| (b.period_start.0, b.period_end.0));
    let attribution = match (c.attribution, &c.job_id) {
        (Some(a), _) => a.as_str(),
        (None, Some(_)) => Attribution::Job.as_str(),
        (None, None) => "named",
    };
    let money = |v: Option<f64>| v.map(micros);
    let (billed, effective) = (money(c.amount), money(bill.and_then(|b| b.effective_cost).or(c.amount)));
    let list = money(bill.and_then(|b| b.list_cost));
    let tags = bill.filter(|b| !b.tags.is_empty()).and_then(|b| serde_json::to_string(&b.tags).ok());
    let user = bill.and_then(|b| b.tags.get("user").cloned());
    let days = split_by_day(gpu_ms, start, end);
    let split = |v: Option<i64>| v.map(|v| split_by_day(v, start, end));
    let (b, e, l) = (split(billed), split(effective), split(list));
    let mut st = tx
        .prepare_cached(
            "INSERT OR IGNORE INTO facts_charges(event_seq, day, project, job, user, tags, gpu_type, attribution,
               category, correction, unused, gpu_ms, billed, effective, list, currency, mode, region)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
        )
        .map_err(ReportError::sqlite("store a billing charge"))?;
    for (i, (day, ms)) in days.iter().enumerate() {
        let at = |v: &Option<Vec<(i64, i64)>>| v.as_ref().and_then(|v| v.get(i)).map(|x| x.1);
        st.execute(params![
            seq,
            day,
            c.project,
            c.job_id,
            user,
            tags,
            bill.and_then(|b| b.gpu_type.clone()),
            attribution,
            bill.map(|b| b.category.as_str()),
            bill.is_some_and(|b| b.correction),
            bill.is_some_and(|b| b.unused()),
            ms,
            at(&b),
            at(&e),
            at(&l),
            c.currency,
            c.mode.map(|m| match m {
                bursar_model::BillingMode::OnDemand => "on_demand",
                bursar_model::BillingMode::Reserved => "reserved",
                bursar_model::BillingMode::PerTask => "per_task",
            }),
            bill.and_then(|b| b.region.clone())
        ])
        .map_err(ReportError::sqlite("store a billing charge"))?;
    }
    // The capacity billed per GPU type and hour, for queueing: the card-ms spread evenly over the
    // charge period (a bill line says no more), by the largest remainder like the days.
    if gpu_ms != 0 {
        let mut up = tx
            .prepare_cached(
                "INSERT INTO facts_bill_hour(gpu_type, hour, gpu_ms) VALUES (?1, ?2, ?3)
                 ON CONFLICT(gpu_type, hour) DO UPDATE SET gpu_ms = gpu_ms + excluded.gpu_ms",
            )
            .map_err(ReportError::sqlite("store a billing charge"))?;
        let gpu_type = bill.and_then(|b| b.gpu_type.clone()).unwrap_or_default();
        for (hour, ms) in split_by(gpu_ms, start, end, HOUR_MS) {
            up.execute(params![gpu_type, hour, ms]).map_err(ReportError::sqlite("store a billing charge"))?;
        }
    }
    Ok(())
}

/// Stores the decisions that name GPU-hours a policy kept from being used (`deny`, `defer`,
/// `reclaim`); returns the last decision seq read.
fn prevented(tx: &Transaction<'_>, decisions: &[StoredDecision]) -> Result<Option<i64>> {
    let mut st = tx
        .prepare_cached(
            "INSERT OR IGNORE INTO facts_prevented(decision_seq, decision_id, time, job, project, user, decision,
               dry_run, gpu_hours) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )
        .map_err(ReportError::sqlite("store what policies prevented"))?;
    for d in decisions {
        if let ("deny" | "defer" | "reclaim", Some(gh)) = (d.decision.as_str(), d.gpu_hours) {
            st.execute(params![d.seq, d.decision_id, d.time, d.job, d.project, d.user, d.decision, d.dry_run, gh])
                .map_err(ReportError::sqlite("store what policies prevented"))?;
        }
    }
    Ok(decisions.last().map(|d| d.seq))
}

struct Batch<'a, 'c> {
    tx: &'a Transaction<'c>,
    /// Loaded jobs; None = not in the facts (no admission step seen for it).
    jobs: HashMap<String, Option<JobFacts>>,
    dirty: HashSet<String>,
    configs: HashMap<(String, String), bool>,
    /// (project, GPU type or `""`, region or `""`, hour) → GPU-ms held.
    usage: HashMap<(String, String, String, i64), i64>,
    /// (GPU type or `""`, hour) → GPU-ms waited.
    waiting: HashMap<(String, i64), i64>,
}

impl Batch<'_, '_> {
    fn job(&mut self, id: &str) -> Result<Option<&mut JobFacts>> {
        if !self.jobs.contains_key(id) {
            let state: Option<String> = self
                .tx
                .query_row("SELECT state FROM facts_jobs WHERE job = ?1", [id], |r| r.get(0))
                .optional()
                .map_err(ReportError::sqlite(format!("read the facts of job `{id}`")))?;
            let facts = state.and_then(|s| serde_json::from_str::<JobFacts>(&s).ok());
            self.jobs.insert(id.to_owned(), facts);
        }
        Ok(self.jobs.get_mut(id).and_then(Option::as_mut))
    }

    fn with(&mut self, id: &str, total: &mut CatchUp, f: impl FnOnce(&mut JobFacts) -> bool) -> Result<()> {
        match self.job(id)? {
            None => total.unattributed += 1,
            Some(j) => {
                if f(j) {
                    self.dirty.insert(id.to_owned());
                }
            }
        }
        Ok(())
    }

    /// Applies one of the engine's steps, taken while it applied `ev`.
    fn step(&mut self, st: &StoredStep, ev: &StoredEvent, threshold: f64, total: &mut CatchUp) -> Result<()> {
        let t = st.time;
        match st.step {
            Step::Admitted | Step::Deferred | Step::Held | Step::Denied => {
                // The job's own submission: its facts come from the event the engine admitted (or
                // refused) it on. Later admission steps (an approval, the end of a deferral, an
                // expired request) change nothing but a refusal.
                if ev.kind == "job.submitted"
                    && ev.job.as_deref() == Some(st.job.as_str())
                    && self.job(&st.job)?.is_none_or(|j| j.status.as_deref() == Some("denied"))
                    && let Ok(e) = decode_event(&ev.raw)
                    && let EventKind::JobSubmitted(spec) = &e.kind
                {
                    let rerun = match config_of(spec) {
                        Some(c) => self.config_failed(&spec.project, &c)?,
                        None => false,
                    };
                    let mut facts = JobFacts::submitted(spec, ev.time, rerun);
                    if st.step == Step::Denied {
                        facts.deny();
                    } else {
                        facts.wait(t, st.step);
                    }
                    self.jobs.insert(st.job.clone(), Some(facts));
                    self.dirty.insert(st.job.clone());
                } else if st.step == Step::Denied {
                    self.with(&st.job, total, JobFacts::deny)?;
                } else if st.step == Step::Admitted
                    && matches!(ev.kind.as_str(), "job.started" | "job.requeued")
                    && ev.job.as_deref() == Some(st.job.as_str())
                {
                    // Admitted by a start or a requeue: a task of an array started for the first time
                    // (its facts are its array's), or a finished job runs again (a rerun).
                    self.admitted_by_run(st, ev, total)?;
                } else if self.job(&st.job)?.is_none() {
                    total.unattributed += 1;
                } else {
                    // An approval, the end of a deferral: the wait goes on for another reason.
                    let step = st.step;
                    self.with(&st.job, total, |j| j.wait(t, step))?;
                }
            }
            Step::Started => {
                // The GPUs the scheduler allocated to this run, when the start names them.
                let gpus = if ev.kind == "job.started" && ev.job.as_deref() == Some(st.job.as_str()) {
                    match decode_event(&ev.raw).map(|e| e.kind) {
                        Ok(EventKind::JobStarted { info, .. }) => info.gpus,
                        _ => None,
                    }
                } else {
                    None
                };
                self.with(&st.job, total, |j| j.start(t, gpus))?
            }
            Step::Requeued => self.with(&st.job, total, |j| j.requeue(t, threshold))?,
            Step::Reclaimed => self.with(&st.job, total, |j| j.release(t, "reclaimed", threshold))?,
            Step::Finished(status) => {
                let mut ended: Option<(String, Option<String>)> = None;
                self.with(&st.job, total, |j| {
                    let was_running = j.started.is_some();
                    let changed = j.release(t, status.as_str(), threshold);
                    if changed && was_running {
                        ended = Some((j.project.clone(), j.config.clone()));
                    }
                    changed
                })?;
                // The last finished run of a configuration decides whether the next one is a rerun.
                if let Some((project, Some(config))) = ended {
                    match status {
                        FinishStatus::Failed => self.configs.insert((project, config), true),
                        FinishStatus::Succeeded => self.configs.insert((project, config), false),
                        FinishStatus::Cancelled => None,
                    };
                }
            }
        }
        Ok(())
    }

    /// An admission step the engine took on a `job.started` or `job.requeued`: a new array task takes
    /// its array's facts; a released job runs again with what was written for it loaded back, so its
    /// days add up rather than being replaced.
    fn admitted_by_run(&mut self, st: &StoredStep, ev: &StoredEvent, total: &mut CatchUp) -> Result<()> {
        if self.job(&st.job)?.is_some() {
            let released = self.job(&st.job)?.is_some_and(|j| j.released.is_some());
            if released {
                let days = self.written_days(&st.job)?;
                if let Some(j) = self.job(&st.job)? {
                    j.days = days;
                    j.reopen();
                    j.days_dirty = true;
                }
                self.dirty.insert(st.job.clone());
            }
            return Ok(());
        }
        let parent = match decode_event(&ev.raw).map(|e| e.kind) {
            Ok(EventKind::JobStarted { info, .. }) => info.parent,
            _ => None,
        };
        let Some(parent) = parent else {
            total.unattributed += 1;
            return Ok(());
        };
        let Some(p) = self.job(&parent)? else {
            total.unattributed += 1;
            return Ok(());
        };
        let task = JobFacts {
            project: p.project.clone(),
            user: p.user.clone(),
            tags: p.tags.clone(),
            config: p.config.clone(),
            named_config: p.named_config.clone(),
            gpus: p.gpus,
            gpu_type: p.gpu_type.clone(),
            region: p.region.clone(),
            submitted: p.submitted,
            rerun: p.rerun,
            ..JobFacts::default()
        };
        self.jobs.insert(st.job.clone(), Some(task));
        self.dirty.insert(st.job.clone());
        Ok(())
    }

    /// The per-day split written for `job` so far.
    fn written_days(&self, job: &str) -> Result<BTreeMap<i64, Split>> {
        let mut st = self
            .tx
            .prepare_cached(
                "SELECT day, nominal, productive, idle, failure, held, unmeasured, g_effective, g_low_util, g_data_wait,
                   g_setup, g_idle, g_held, g_interruption, g_unmeasured, g_sm_active FROM facts_job_day WHERE job = ?1",
            )
            .map_err(ReportError::sqlite("read a job's days"))?;
        let rows = st
            .query_map([job], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    Split {
                        nominal: r.get(1)?,
                        productive: r.get(2)?,
                        idle: r.get(3)?,
                        failure: r.get(4)?,
                        held: r.get(5)?,
                        unmeasured: r.get(6)?,
                        gap: gap_at(r, 7)?,
                    },
                ))
            })
            .map_err(ReportError::sqlite("read a job's days"))?;
        let mut days = BTreeMap::new();
        for row in rows {
            let (day, split) = row.map_err(ReportError::sqlite("read a job's days"))?;
            days.insert(day, split);
        }
        Ok(days)
    }

    fn config_failed(&mut self, project: &str, config: &str) -> Result<bool> {
        let key = (project.to_owned(), config.to_owned());
        if let Some(v) = self.configs.get(&key) {
            return Ok(*v);
        }
        let v: Option<bool> = self
            .tx
            .query_row("SELECT failed FROM facts_configs WHERE project = ?1 AND config = ?2", [project, config], |r| {
                r.get(0)
            })
            .optional()
            .map_err(ReportError::sqlite("read a configuration's last outcome"))?;
        let v = v.unwrap_or(false);
        self.configs.insert(key, v);
        Ok(v)
    }

    fn flush(mut self) -> Result<()> {
        let e = || ReportError::sqlite("write the facts");
        let mut up_job = self
            .tx
            .prepare_cached(
                "INSERT INTO facts_jobs(job, project, user, tags, config, gpus, submitted, started, released, status, rerun,
                   queue_wait_ms, unsampled, state, gpu_type, unit, throughput, throughput_samples,
                   wait_approval_ms, wait_off_peak_ms, wait_capacity_ms, wait_readiness_ms, region, named_config)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20,
                   ?21, ?22, ?23, ?24)
                 ON CONFLICT(job) DO UPDATE SET project = excluded.project, user = excluded.user,
                   tags = excluded.tags, config = excluded.config, gpus = excluded.gpus,
                   submitted = excluded.submitted, started = excluded.started, released = excluded.released,
                   status = excluded.status, rerun = excluded.rerun, queue_wait_ms = excluded.queue_wait_ms,
                   unsampled = excluded.unsampled, state = excluded.state, gpu_type = excluded.gpu_type,
                   unit = excluded.unit, throughput = excluded.throughput,
                   throughput_samples = excluded.throughput_samples, wait_approval_ms = excluded.wait_approval_ms,
                   wait_off_peak_ms = excluded.wait_off_peak_ms, wait_capacity_ms = excluded.wait_capacity_ms,
                   wait_readiness_ms = excluded.wait_readiness_ms, region = excluded.region,
                   named_config = excluded.named_config",
            )
            .map_err(e())?;
        let mut up_day = self
            .tx
            .prepare_cached(
                "INSERT OR REPLACE INTO facts_job_day(job, day, nominal, productive, idle, failure, held, unmeasured,
                   g_effective, g_low_util, g_data_wait, g_setup, g_idle, g_held, g_interruption, g_unmeasured, g_sm_active)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
            )
            .map_err(e())?;
        let mut dirty: Vec<String> = self.dirty.drain().collect();
        dirty.sort();
        for id in dirty {
            let Some(Some(j)) = self.jobs.get_mut(&id) else { continue };
            let gpu_type = j.gpu_type.clone().unwrap_or_default();
            let region = j.region.clone().unwrap_or_default();
            for (hour, ms) in std::mem::take(&mut j.usage) {
                *self.usage.entry((j.project.clone(), gpu_type.clone(), region.clone(), hour)).or_insert(0) += ms;
            }
            for (hour, ms) in std::mem::take(&mut j.wait_usage) {
                *self.waiting.entry((gpu_type.clone(), hour)).or_insert(0) += ms;
            }
            if j.days_dirty {
                for (day, s) in &j.days {
                    up_day
                        .execute(params![
                            id,
                            day,
                            s.nominal,
                            s.productive,
                            s.idle,
                            s.failure,
                            s.held,
                            s.unmeasured,
                            s.gap.effective,
                            s.gap.low_util,
                            s.gap.data_wait,
                            s.gap.setup,
                            s.gap.idle,
                            s.gap.held,
                            s.gap.interruption,
                            s.gap.unmeasured,
                            s.gap.sm_active
                        ])
                        .map_err(e())?;
                }
                j.days_dirty = false;
            }
            if j.released.is_some() {
                j.days.clear();
                j.tail.clear();
            }
            let tags: BTreeMap<&str, &str> = j.tags.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let state = serde_json::to_string(&*j).unwrap_or_default();
            up_job
                .execute(params![
                    id,
                    j.project,
                    j.user,
                    serde_json::to_string(&tags).unwrap_or_default(),
                    j.config,
                    j.gpus.as_f64(),
                    j.submitted,
                    j.started,
                    j.released,
                    j.status,
                    j.rerun,
                    j.queue_wait(),
                    j.unsampled,
                    state,
                    j.gpu_type,
                    j.run.rate().map(|_| j.run.unit()),
                    j.run.rate(),
                    j.run.samples(),
                    j.waits.approval,
                    j.waits.off_peak,
                    j.waits.capacity,
                    j.waits.readiness,
                    j.region,
                    j.named_config
                ])
                .map_err(e())?;
        }
        let mut up_usage = self
            .tx
            .prepare_cached(
                "INSERT INTO facts_usage_hour(project, gpu_type, region, hour, gpu_ms) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT(project, gpu_type, region, hour) DO UPDATE SET gpu_ms = gpu_ms + excluded.gpu_ms",
            )
            .map_err(e())?;
        for ((project, gpu_type, region, hour), ms) in &self.usage {
            up_usage.execute(params![project, gpu_type, region, hour, ms]).map_err(e())?;
        }
        let mut up_wait = self
            .tx
            .prepare_cached(
                "INSERT INTO facts_wait_hour(gpu_type, hour, gpu_ms) VALUES (?1, ?2, ?3)
                 ON CONFLICT(gpu_type, hour) DO UPDATE SET gpu_ms = gpu_ms + excluded.gpu_ms",
            )
            .map_err(e())?;
        for ((gpu_type, hour), ms) in &self.waiting {
            up_wait.execute(params![gpu_type, hour, ms]).map_err(e())?;
        }
        let mut up_cfg = self
            .tx
            .prepare_cached("INSERT OR REPLACE INTO facts_configs(project, config, failed) VALUES (?1, ?2, ?3)")
            .map_err(e())?;
        for ((project, config), failed) in &self.configs {
            up_cfg.execute(params![project, config, failed]).map_err(e())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_schema_creates_exactly_the_facts_tables_the_derived_list_names() {
        use bursar_audit::derived::{Check, Owner, derived_tables};
        let created: std::collections::BTreeSet<&str> = super::SCHEMA
            .split("CREATE TABLE IF NOT EXISTS ")
            .skip(1)
            .filter_map(|t| t.split([' ', '(']).next())
            .collect();
        let listed: std::collections::BTreeSet<&str> =
            derived_tables(Owner::Report, Check::Rebuild).map(|t| t.name).collect();
        assert_eq!(
            created, listed,
            "a facts table is missing from bursar_audit::derived::DERIVED_TABLES (or listed but not created)"
        );
    }

    use super::*;

    const H: i64 = HOUR_MS;

    fn job(gpus: u32) -> JobFacts {
        let spec = JobSpec { id: "j".into(), project: "p".into(), gpus: gpus.into(), ..JobSpec::default() };
        JobFacts::submitted(&spec, 0, false)
    }

    #[test]
    fn samples_are_piecewise_constant_and_the_tail_is_held() {
        // 2 GPUs, start at 1h; samples at 2h (0.9), 4h (0.01), 5h (0.8), 6h (0.02); finish at 9h.
        let mut j = job(2);
        j.start(H, None);
        j.sample(2 * H, 0.9, 0.05); // [1h,2h) takes the first sample's value: productive
        j.sample(4 * H, 0.01, 0.05); // [2h,4h) productive
        j.sample(5 * H, 0.8, 0.05); // [4h,5h) idle (work resumes later)
        j.sample(6 * H, 0.02, 0.05); // [5h,6h) productive
        j.release(9 * H, "succeeded", 0.05); // [6h,9h) idle after the last productive stretch: held
        let t = j.total();
        assert_eq!(t.nominal, 2 * 8 * H);
        assert_eq!(t.productive, 2 * 4 * H);
        assert_eq!(t.idle, 2 * H);
        assert_eq!(t.held, 2 * 3 * H);
        assert_eq!(t.failure, 0);
        assert!(t.adds_up());
        assert_eq!(j.queue_wait(), Some(H));
    }

    #[test]
    fn each_run_accrues_on_its_own_gpus_and_the_gap_between_runs_is_free() {
        // Issue 43: a requeued job was charged through its pending gap. Run 1 on 4 GPUs for 2 h,
        // requeued, waits 3 h, run 2 on the 2 GPUs the scheduler then allocated for 1 h.
        let mut j = job(4);
        assert!(j.start(0, None));
        j.sample(H, 0.9, 0.05);
        assert!(j.requeue(2 * H, 0.05));
        assert!(!j.sample(3 * H, 0.9, 0.05), "nothing accrues between runs");
        assert!(!j.requeue(4 * H, 0.05), "a second requeue of a waiting job changes nothing");
        assert!(j.start(5 * H, Some(2.into())));
        assert!(!j.start(5 * H, Some(2.into())), "a repeated start is not a third run");
        j.release(6 * H, "succeeded", 0.05);
        let t = j.total();
        assert_eq!(t.nominal, 4 * 2 * H + 2 * H);
        assert_eq!((t.productive, t.unmeasured), (4 * 2 * H, 2 * H), "run 2 had no sample: not measured");
        assert_eq!(j.unsampled, 2 * H);
        assert_eq!(j.queue_wait(), Some(0), "queue wait is to the first start");
        assert!(t.adds_up());
    }

    #[test]
    fn failure_takes_everything_and_all_idle_is_not_held() {
        let mut j = job(4);
        j.start(0, None);
        j.sample(H, 0.9, 0.05);
        j.release(3 * H, "failed", 0.05);
        let t = j.total();
        assert_eq!((t.nominal, t.failure, t.productive), (12 * H, 12 * H, 0));

        let mut k = job(1);
        k.start(0, None);
        k.sample(H, 0.0, 0.05);
        k.release(2 * H, "cancelled", 0.05);
        let t = k.total();
        assert_eq!((t.idle, t.held), (2 * H, 0));
    }

    #[test]
    fn unsampled_jobs_are_not_measured_not_effective_and_split_across_days() {
        let mut j = job(1);
        j.start(DAY_MS - H, None);
        j.release(DAY_MS + 2 * H, "succeeded", 0.05);
        assert_eq!(j.days.len(), 2);
        assert_eq!((j.days[&0].unmeasured, j.days[&0].productive), (H, 0));
        assert_eq!((j.days[&1].unmeasured, j.days[&1].productive), (2 * H, 0));
        assert_eq!(j.unsampled, 3 * H);
        assert_eq!(j.usage.len(), 3);
        let t = j.total();
        assert!(t.adds_up());
        assert_eq!(t.effective_ratio(), None, "a job without samples is not measured, not effective");
        // A failed one is failure all the same.
        let mut f = job(2);
        f.start(0, None);
        f.release(H, "failed", 0.05);
        let t = f.total();
        assert_eq!((t.failure, t.unmeasured, t.effective_ratio()), (2 * H, 0, Some(0.0)));
    }

    #[test]
    fn reruns_that_do_not_succeed_are_failure() {
        let spec = JobSpec {
            id: "r".into(),
            project: "p".into(),
            gpus: 1.into(),
            config: Some("c".into()),
            ..JobSpec::default()
        };
        let mut j = JobFacts::submitted(&spec, 0, true);
        j.start(0, None);
        j.sample(H / 2, 0.9, 0.05);
        j.release(H, "cancelled", 0.05);
        assert_eq!(j.total().failure, H);
        let mut ok = JobFacts::submitted(&spec, 0, true);
        ok.start(0, None);
        ok.sample(0, 0.9, 0.05);
        ok.release(H, "succeeded", 0.05);
        assert_eq!(ok.total().productive, H);
    }

    #[test]
    fn only_the_engine_starts_a_job() {
        // A sample of a job the engine never started (held, denied, or simply no `started` step)
        // counts nothing: it used to start the job at its first sample.
        let mut j = job(1);
        assert!(!j.sample(H, 0.9, 0.05));
        assert!(!j.sample(2 * H, 0.9, 0.05));
        assert_eq!((j.started, j.total().nominal), (None, 0));
        let mut d = job(1);
        assert!(d.deny());
        assert!(!d.sample(3 * H, 0.9, 0.05));
        assert_eq!((d.total().nominal, d.status.as_deref()), (0, Some("denied")));
        // Once started, the same samples count.
        j.start(2 * H, None);
        assert!(j.sample(3 * H, 0.9, 0.05));
        assert_eq!(j.total().productive, H);
    }

    #[test]
    fn jobs_without_configuration_are_never_reruns() {
        let spec = JobSpec { id: "x".into(), project: "p".into(), ..JobSpec::default() };
        assert_eq!(config_of(&spec), None);
        let spec = JobSpec { image: Some("img".into()), ..spec };
        assert!(config_of(&spec).is_some());
    }
}

#[cfg(test)]
mod gap_tests {
    use proptest::prelude::*;

    use super::*;

    const H: i64 = HOUR_MS;

    fn job(gpus: u32) -> JobFacts {
        let spec = JobSpec { id: "j".into(), project: "p".into(), gpus: gpus.into(), ..JobSpec::default() };
        JobFacts::submitted(&spec, 0, false)
    }

    fn m(util: f64, sm: Option<f64>, wait: Option<f64>) -> Measure {
        Measure { util, sm, wait }
    }

    #[test]
    fn the_gap_by_hand() {
        // 4 GPUs from 0h. [0,1h) 2 % (setup: before the first productive stretch); [1h,3h) 80 % with
        // SM activity 0.5 and 10 % input wait; [3h,4h) 1 % (idle: work resumes); [4h,5h) 90 %;
        // [5h,7h) 2 % then the job succeeds (held after the work).
        let mut j = job(4);
        j.start(0, None);
        j.sample_with(0, m(0.02, None, None), 0.05);
        j.sample_with(H, m(0.8, Some(0.5), Some(0.1)), 0.05);
        j.sample_with(3 * H, m(0.01, None, None), 0.05);
        j.sample_with(4 * H, m(0.9, None, None), 0.05);
        j.sample_with(5 * H, m(0.02, None, None), 0.05);
        j.release(7 * H, "succeeded", 0.05);
        let g = j.total().gap;
        assert_eq!(g.setup, 4 * H);
        // [1h,3h): 8 GPU-h × 0.5 SM = 4 effective; 8 × 0.1 = 0.8 data wait; 3.2 low use.
        // [4h,5h): 4 GPU-h × 0.9 = 3.6 effective, 0.4 low use.
        assert_eq!(g.effective, 4 * H + 36 * H / 10);
        assert_eq!(g.data_wait, 8 * H / 10);
        assert_eq!(g.low_util, 32 * H / 10 + 4 * H / 10);
        assert_eq!((g.idle, g.held, g.interruption, g.unmeasured), (4 * H, 8 * H, 0, 0));
        assert_eq!(g.sm_active, 8 * H);
        assert!(j.total().adds_up());
    }

    #[test]
    fn a_requeued_run_is_interruption_and_a_run_never_productive_is_idle() {
        let mut j = job(2);
        j.start(0, None);
        j.sample(0, 0.9, 0.05);
        j.requeue(3 * H, 0.05); // run 1: 6 GPU-h lost
        j.start(4 * H, None);
        j.sample(4 * H, 0.01, 0.05);
        j.release(6 * H, "cancelled", 0.05); // run 2 never productive: idle, not setup
        let g = j.total().gap;
        assert_eq!((g.interruption, g.idle, g.setup, g.effective), (6 * H, 4 * H, 0, 0));
        assert!(j.total().adds_up());
        let mut f = job(1);
        f.start(0, None);
        f.sample(0, 0.9, 0.05);
        f.release(2 * H, "failed", 0.05);
        assert_eq!(f.total().gap.interruption, 2 * H);
    }

    #[test]
    fn the_queue_wait_by_reason_by_hand() {
        // Submitted at 0 on 4 GPUs, held for approval until 2h, admitted (capacity) until the start at
        // 3h30: 2 h approval, 1.5 h capacity; 3.5 h × 4 GPUs waiting, by hour: 4,4,4,2 GPU-h.
        let mut j = job(4);
        assert!(j.wait(0, Step::Held));
        assert!(j.wait(2 * H, Step::Admitted));
        j.start(3 * H + H / 2, None);
        assert_eq!(j.waits, Waits { approval: 2 * H, capacity: 3 * H / 2, ..Waits::default() });
        assert_eq!(Some(j.waits.total()), j.queue_wait());
        assert_eq!(j.wait_usage.values().copied().collect::<Vec<_>>(), vec![4 * H, 4 * H, 4 * H, 2 * H]);
        assert!(!j.wait(4 * H, Step::Admitted), "a running job no longer waits");
        // Deferred to off-peak at submission (1h), admitted at 5h, started at 6h; and one that declared
        // its data not ready waits for readiness once admitted.
        let spec = JobSpec { id: "d".into(), project: "p".into(), gpus: 1.into(), ..JobSpec::default() };
        let mut d = JobFacts::submitted(&spec, H, false);
        d.wait(H, Step::Deferred);
        d.wait(5 * H, Step::Admitted);
        d.start(6 * H, None);
        assert_eq!(d.waits, Waits { off_peak: 4 * H, capacity: H, ..Waits::default() });
        let mut spec = spec;
        spec.ready.data = Some(false);
        let mut r = JobFacts::submitted(&spec, 0, false);
        r.wait(0, Step::Admitted);
        r.start(2 * H, None);
        assert_eq!(r.waits, Waits { readiness: 2 * H, ..Waits::default() });
        // A denied job's wait is no queue wait.
        let mut x = JobFacts::submitted(&spec, 0, false);
        x.wait(0, Step::Held);
        x.deny();
        assert_eq!((x.waits, x.wait_usage.len()), (Waits::default(), 0));
    }

    #[test]
    fn queueing_by_hand() {
        // H100, three hours: billed 8, 8, 8 GPU-h; held 6, 8, 2; waiting 4, 3, 1.
        // Hour 1: 2 free, 4 waiting: 2 queueing. Hour 2: none free. Hour 3: 6 free, 1 waiting: 1
        // queueing, 5 spare. And an hour held over its bill: billed 2, held 3 → 1 over.
        let mut q = crate::reconcile::QueueRow::default();
        for (b, u, w) in [(8, 6, 4), (8, 8, 3), (8, 2, 1), (2, 3, 5)] {
            q.hour(b * H, u * H, w * H);
        }
        assert_eq!((q.queueing_gpu_ms, q.spare_gpu_ms, q.over_gpu_ms), (3 * H, 5 * H, H));
        assert_eq!((q.billed_gpu_ms, q.held_gpu_ms, q.waiting_gpu_ms), (26 * H, 19 * H, 13 * H));
        assert!(q.adds_up());
    }

    #[test]
    fn split_by_day_adds_up_and_is_proportional() {
        // 100 units over 36 hours from noon: 12 h, 24 h → 33.3 and 66.7 → 33 and 67.
        assert_eq!(split_by_day(100, DAY_MS / 2, 2 * DAY_MS), vec![(0, 33), (1, 67)]);
        assert_eq!(split_by_day(-100, DAY_MS / 2, 2 * DAY_MS), vec![(0, -33), (1, -67)]);
        assert_eq!(split_by_day(7, 5, 5), vec![(0, 7)]);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Wait(i64, u8),
        Sample(i64, f64, Option<f64>, Option<f64>),
        Requeue(i64),
        Start(i64, Option<Gpus>),
    }

    /// Whole GPUs, or MIG shares (sevenths, quarters) with whole ones.
    fn gpus() -> impl Strategy<Value = Gpus> {
        prop_oneof![
            (1u32..64).prop_map(Gpus::whole),
            (1u64..=20, prop_oneof![Just(7u64), Just(4u64)])
                .prop_map(|(n, d)| Gpus::fraction(n, d).unwrap_or(Gpus::ZERO)),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        let frac = prop_oneof![Just(0.0), Just(0.04), Just(0.05), Just(0.5), Just(1.0), 0.0..=1.0f64];
        prop_oneof![
            6 => (1..30 * H, frac.clone(), proptest::option::of(frac.clone()), proptest::option::of(frac.clone()))
                .prop_map(|(d, u, s, w)| Op::Sample(d, u, s, w)),
            1 => (1..10 * H).prop_map(Op::Requeue),
            1 => (0..10 * H, 0u8..4).prop_map(|(d, s)| Op::Wait(d, s)),
            1 => (1..10 * H, proptest::option::of(gpus())).prop_map(|(d, g)| Op::Start(d, g)),
        ]
    }

    proptest! {
        /// The parts add up to nominal, in both splits, for every job and every day, whatever the
        /// stream: samples of any measure, requeues, later runs on other GPU counts, any end.
        #[test]
        fn the_parts_add_up_for_every_job_and_day(
            gpus in gpus(),
            start in 0..3 * DAY_MS,
            ops in proptest::collection::vec(op(), 0..40),
            end in 1..5 * DAY_MS,
            status in prop_oneof![Just("succeeded"), Just("failed"), Just("cancelled"), Just("reclaimed")],
            rerun in any::<bool>(),
            threshold in prop_oneof![Just(0.05), 0.0..1.0f64],
        ) {
            let spec = JobSpec { id: "j".into(), project: "p".into(), gpus, config: Some("c".into()), ..JobSpec::default() };
            let mut j = JobFacts::submitted(&spec, 0, rerun);
            // Before the start: the admission steps (held, deferred, admitted) at any times.
            let mut w = 0;
            for o in &ops {
                if let Op::Wait(d, s) = o {
                    w = (w + d).min(start);
                    let step = [Step::Held, Step::Deferred, Step::Admitted, Step::Denied][usize::from(*s)];
                    if step != Step::Denied {
                        j.wait(w, step);
                    }
                }
            }
            j.start(start, None);
            // The wait's parts add up to the queue wait, and its GPU-ms by hour to GPUs × the wait.
            prop_assert_eq!(Some(j.waits.total()), j.queue_wait());
            // (A share's GPU-ms are rounded once per hour: at most half a GPU-ms an hour.)
            let exact = i128::from(start) * i128::from(gpus.parts()) / i128::from(Gpus::PARTS);
            let hours = i128::from(start / H + 2);
            prop_assert!((i128::from(j.wait_usage.values().sum::<i64>()) - exact).abs() <= hours, "{gpus}");
            if gpus.is_whole() {
                prop_assert_eq!(j.wait_usage.values().sum::<i64>(), i64::from(gpus.floor()) * start);
            }
            let mut t = start;
            for o in ops {
                match o {
                    Op::Wait(..) => {}
                    Op::Sample(d, u, s, w) => { t += d; j.sample_with(t, Measure { util: u, sm: s, wait: w }, threshold); }
                    Op::Requeue(d) => { t += d; j.requeue(t, threshold); }
                    Op::Start(d, g) => { t += d; j.start(t, g); }
                }
            }
            j.release(t + end, status, threshold);
            for (day, s) in &j.days {
                prop_assert!(s.adds_up(), "day {day}: {s:?}");
                prop_assert!(s.gap.effective >= 0 && s.gap.low_util >= 0 && s.gap.setup >= 0 && s.gap.idle >= 0 && s.gap.held >= 0, "{s:?}");
            }
            prop_assert!(j.total().adds_up());
            // Every charge's days add up to the charge, any period, either sign.
        }

        /// Queueing: the bill's card-hours add up, hour by hour and so for any period, whatever is
        /// billed (corrections below zero included), held and waiting.
        #[test]
        fn the_bill_adds_up_with_queueing(hours in proptest::collection::vec((-50i64..500, 0i64..500, 0i64..500), 0..200)) {
            let mut q = crate::reconcile::QueueRow::default();
            for (b, u, w) in &hours {
                q.hour(b * 60_000, u * 60_000, w * 60_000);
            }
            prop_assert!(q.adds_up(), "{q:?}");
            prop_assert!(q.queueing_gpu_ms <= q.waiting_gpu_ms && q.queueing_gpu_ms >= 0 && q.spare_gpu_ms >= 0);
        }

        #[test]
        fn a_charge_split_by_day_adds_up(total in -1_000_000_000_000i64..1_000_000_000_000, a in 0..100 * DAY_MS, len in 0..40 * DAY_MS) {
            let parts = split_by_day(total, a, a + len);
            prop_assert_eq!(parts.iter().map(|p| p.1).sum::<i64>(), total);
            prop_assert!(parts.iter().all(|p| p.1.signum() * total.signum() >= 0));
        }
    }
}
