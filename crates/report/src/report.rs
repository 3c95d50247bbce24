//! [`Report`]: the numbers of one report, read from the facts tables and the audit decisions with a
//! handful of grouped queries, ready for any renderer.

use std::collections::BTreeMap;

use bursar_model::time::civil_from_days;
use rusqlite::{Connection, params};
use serde::Serialize;

use crate::billing::{Comparison, Prices, Usage, compare};
use crate::cost::CostPerUnit;
use crate::error::{ReportError, Result};
use crate::facts::{FactsStore, Split};
use crate::period::{DAY_MS, HOUR_MS, Span, day_label, hours};

/// What the rows are grouped by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupBy {
    /// The job's project.
    Project,
    /// The job's user.
    User,
    /// The value of one tag (`(none)` for jobs without it).
    Tag(String),
    /// The job's `config` (`(no config)` for jobs whose submission names none).
    Config,
}

impl GroupBy {
    /// Parses `project`, `user`, `config` or `tag:KEY`.
    pub fn parse(s: &str) -> Result<GroupBy> {
        match s {
            "project" => Ok(GroupBy::Project),
            "user" => Ok(GroupBy::User),
            "config" => Ok(GroupBy::Config),
            t if t.starts_with("tag:") && t.len() > 4 && !t[4..].contains(['"', '\\', '\'']) => {
                Ok(GroupBy::Tag(t[4..].to_owned()))
            }
            _ => Err(ReportError::Invalid(format!(
                "`--by {s}` is not a grouping\n  help: use `project`, `user` or `tag:KEY` (e.g. `tag:team`), or `config` for the job's configuration"
            ))),
        }
    }

    /// The name shown in headers.
    pub fn label(&self) -> String {
        match self {
            GroupBy::Project => "project".into(),
            GroupBy::User => "user".into(),
            GroupBy::Tag(k) => format!("tag:{k}"),
            GroupBy::Config => "config".into(),
        }
    }

    /// SQL for the group key of a job row under alias `j`.
    pub(crate) fn job_sql(&self) -> String {
        self.sql(None)
    }

    /// SQL for the group key of a charge under alias `c`, its job's facts under `j` (left-joined):
    /// a charge naming a job the facts know is the job's; else its own project, user or tags (from its
    /// bill line); else [`UNATTRIBUTED`] by project, `(none)` otherwise.
    pub(crate) fn charge_sql(&self) -> String {
        match self {
            GroupBy::Project => {
                format!("CASE WHEN j.job IS NOT NULL THEN j.project ELSE COALESCE(c.project, '{UNATTRIBUTED}') END")
            }
            GroupBy::User => "COALESCE(NULLIF(j.user, ''), c.user, '(none)')".into(),
            GroupBy::Tag(k) => {
                format!("COALESCE(json_extract(j.tags, '$.\"{k}\"'), json_extract(c.tags, '$.\"{k}\"'), '(none)')")
            }
            GroupBy::Config => format!("COALESCE(j.named_config, '{NO_CONFIG}')"),
        }
    }

    /// SQL for the group key of a row with job columns under alias `j`; `fallback` names a column used
    /// first (a decision's own project/user).
    fn sql(&self, fallback: Option<&str>) -> String {
        match (self, fallback) {
            (GroupBy::Project, Some(f)) => format!("COALESCE({f}.project, j.project, '(none)')"),
            (GroupBy::Project, None) => "j.project".into(),
            (GroupBy::User, Some(f)) => format!("COALESCE(NULLIF({f}.user, ''), NULLIF(j.user, ''), '(none)')"),
            (GroupBy::User, None) => "COALESCE(NULLIF(j.user, ''), '(none)')".into(),
            (GroupBy::Tag(k), _) => format!("COALESCE(json_extract(j.tags, '$.\"{k}\"'), '(none)')"),
            (GroupBy::Config, _) => format!("COALESCE(j.named_config, '{NO_CONFIG}')"),
        }
    }
}

/// The group of the jobs whose submission names no `config`, under `--by config`. They used to be
/// grouped by the key derived from image, dataset, script and model size, which a trace with a script
/// hash per job made one row per job (1,039 rows, a 315 KB page; issue 52).
pub const NO_CONFIG: &str = "(no config)";

/// The group of charges nobody owns: unattributed bill lines (reserved capacity, untagged lines).
/// No quota limits it.
pub const UNATTRIBUTED: &str = "(unattributed)";

/// GPU-hours split the report's way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Hours {
    /// Start to release.
    pub nominal: f64,
    /// Effective: at or above the idle threshold.
    pub productive: f64,
    /// Under the threshold, before the work ended.
    pub idle: f64,
    /// Failed jobs and unsuccessful reruns.
    pub failure: f64,
    /// Held after the work ended.
    pub held: f64,
    /// Of jobs without any utilisation sample: not known to be productive or idle.
    pub unmeasured: f64,
    /// The same hours in the gap's causes ([`crate::Gap`]).
    pub gap: GapHours,
}

/// [`crate::Gap`] in GPU-hours.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct GapHours {
    /// Effective, weighted by measured use.
    pub effective: f64,
    /// Productive stretches below full use.
    pub low_util: f64,
    /// Waiting for input, by the job's own counters.
    pub data_wait: f64,
    /// Start of a run to its first productive stretch.
    pub setup: f64,
    /// Idle between productive stretches, or in runs never productive.
    pub idle: f64,
    /// After the last productive stretch of a finished job.
    pub held: f64,
    /// Requeued, preempted or failed runs, and reruns that did not succeed.
    pub interruption: f64,
    /// Without samples.
    pub unmeasured: f64,
    /// Of the productive stretches, the hours measured as SM activity (the rest: GPU utilisation).
    pub measured_by_sm_active: f64,
}

impl From<Split> for Hours {
    fn from(s: Split) -> Hours {
        Hours {
            nominal: hours(s.nominal),
            productive: hours(s.productive),
            idle: hours(s.idle),
            failure: hours(s.failure),
            held: hours(s.held),
            unmeasured: hours(s.unmeasured),
            gap: GapHours {
                effective: hours(s.gap.effective),
                low_util: hours(s.gap.low_util),
                data_wait: hours(s.gap.data_wait),
                setup: hours(s.gap.setup),
                idle: hours(s.gap.idle),
                held: hours(s.gap.held),
                interruption: hours(s.gap.interruption),
                unmeasured: hours(s.gap.unmeasured),
                measured_by_sm_active: hours(s.gap.sm_active),
            },
        }
    }
}

/// Money from `billing.charge` events, per currency.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Charged {
    /// Currency (`""` when the charges named none).
    pub currency: String,
    /// Sum of `amount`.
    pub amount: f64,
    /// The same in micro-units (10⁻⁶ of the currency), exact.
    pub amount_micros: i64,
    /// Sum of `gpu_hours` charged.
    pub gpu_hours: f64,
    /// Charges.
    pub charges: u64,
}

/// How long after an enforced denial or deferral the same work may run and still count as *delayed*,
/// not prevented: 7 days (docs/reports.md, "Prevented and delayed").
pub const DELAY_WINDOW_MS: i64 = 7 * DAY_MS;

/// GPU-hours named by deny, defer and reclaim decisions (each job counted once per kind).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Prevented {
    /// Denied admissions (requested GPU-hours) whose work did not run later.
    pub denied: f64,
    /// Deferred admissions whose work did not run later.
    pub deferred: f64,
    /// Denied admissions whose work ran within [`DELAY_WINDOW_MS`] after the denial: the job itself
    /// (submitted again under its id), a job of the same project and configuration, or the same
    /// user's same request (project, GPUs, GPU type). Delayed, not prevented; not in `total`.
    #[serde(default)]
    pub delayed_denied: f64,
    /// Deferred admissions whose work ran later the same way (most do: a deferral delays).
    #[serde(default)]
    pub delayed_deferred: f64,
    /// Reclaimed: GPU-hours still reserved when a reclaim ended the job (not the unused reservation of
    /// a job that ended on its own).
    pub reclaimed: f64,
}

impl Prevented {
    /// The sum of what was truly prevented (delayed work left out).
    pub fn total(&self) -> f64 {
        self.denied + self.deferred + self.reclaimed
    }

    /// What was delayed: denied or deferred work that ran later.
    pub fn delayed(&self) -> f64 {
        self.delayed_denied + self.delayed_deferred
    }
}

/// One leak and its size.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Leak {
    /// `idle`, `failure` or `held`.
    pub leak: &'static str,
    /// GPU-hours.
    pub gpu_hours: f64,
    /// Share of the group's nominal GPU-hours.
    pub share: f64,
}

/// One row: a project, user or tag value (or the total).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Group {
    /// The group's key.
    pub key: String,
    /// Jobs that held GPUs in the period.
    pub jobs: u64,
    /// The split, in GPU-hours.
    pub gpu_hours: Hours,
    /// productive / measured (nominal less the unmeasured hours of jobs without samples); `None`
    /// ("not measured") when no hour was measured, or nothing ran.
    pub effective_ratio: Option<f64>,
    /// The same split in integer GPU-milliseconds: these add up exactly.
    pub exact_gpu_ms: Split,
    /// Jobs without any utilisation sample (their hours are `unmeasured`).
    pub unsampled_jobs: u64,
    /// Jobs that started in the period.
    pub started_jobs: u64,
    /// Their total queue wait (submission to start), hours of time.
    pub queue_wait_hours: f64,
    /// Their mean queue wait, hours.
    pub mean_queue_wait_hours: f64,
    /// The queue wait by why the jobs waited; the parts add up to `queue_wait_hours`.
    pub queue_wait_by_reason: QueueWaitByReason,
    /// Money charged.
    pub charged: Vec<Charged>,
    /// What enforced policies prevented.
    pub prevented: Prevented,
    /// What dry-run policies would have saved.
    pub dry_run_would_save: Prevented,
    /// The GPU-hour leaks, largest first (zero ones left out).
    pub top_leaks: Vec<Leak>,
}

impl Group {
    fn new(key: String) -> Group {
        Group {
            key,
            jobs: 0,
            gpu_hours: Hours::default(),
            effective_ratio: None,
            exact_gpu_ms: Split::default(),
            unsampled_jobs: 0,
            started_jobs: 0,
            queue_wait_hours: 0.0,
            mean_queue_wait_hours: 0.0,
            queue_wait_by_reason: QueueWaitByReason::default(),
            charged: Vec::new(),
            prevented: Prevented::default(),
            dry_run_would_save: Prevented::default(),
            top_leaks: Vec::new(),
        }
    }

    fn finish(&mut self) {
        self.gpu_hours = self.exact_gpu_ms.into();
        self.effective_ratio = self.exact_gpu_ms.effective_ratio();
        self.mean_queue_wait_hours =
            if self.started_jobs > 0 { self.queue_wait_hours / self.started_jobs as f64 } else { 0.0 };
        self.queue_wait_by_reason.finish();
        let h = self.gpu_hours;
        let mut leaks: Vec<Leak> = [("idle", h.idle), ("failure", h.failure), ("held", h.held)]
            .into_iter()
            .filter(|(_, v)| *v > 0.0)
            .map(|(leak, v)| Leak { leak, gpu_hours: v, share: if h.nominal > 0.0 { v / h.nominal } else { 0.0 } })
            .collect();
        leaks.sort_by(|a, b| b.gpu_hours.total_cmp(&a.gpu_hours));
        self.top_leaks = leaks;
    }

    fn absorb(&mut self, o: &Group) {
        self.jobs += o.jobs;
        self.exact_gpu_ms.add(&o.exact_gpu_ms);
        self.unsampled_jobs += o.unsampled_jobs;
        self.started_jobs += o.started_jobs;
        self.queue_wait_hours += o.queue_wait_hours;
        self.queue_wait_by_reason.absorb(&o.queue_wait_by_reason);
        for c in &o.charged {
            match self.charged.iter_mut().find(|x| x.currency == c.currency) {
                Some(x) => {
                    x.amount_micros += c.amount_micros;
                    x.amount = x.amount_micros as f64 / 1e6;
                    x.gpu_hours += c.gpu_hours;
                    x.charges += c.charges;
                }
                None => self.charged.push(c.clone()),
            }
        }
        for (a, b) in [(&mut self.prevented, &o.prevented), (&mut self.dry_run_would_save, &o.dry_run_would_save)] {
            a.denied += b.denied;
            a.deferred += b.deferred;
            a.reclaimed += b.reclaimed;
            a.delayed_denied += b.delayed_denied;
            a.delayed_deferred += b.delayed_deferred;
        }
    }
}

/// The queue wait of one reason: a total and a mean.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct WaitPart {
    /// Hours of time the jobs waited for this reason.
    pub hours: f64,
    /// The same in ms, exact.
    pub ms: i64,
    /// Started jobs that waited for this reason at all.
    pub jobs: u64,
    /// `hours ÷ jobs`: how long a job that waited for this reason waited for it (0 with no job).
    pub mean_hours: f64,
}

impl WaitPart {
    fn absorb(&mut self, o: &WaitPart) {
        self.ms += o.ms;
        self.jobs += o.jobs;
    }

    fn finish(&mut self) {
        self.hours = hours(self.ms);
        self.mean_hours = if self.jobs > 0 { self.hours / self.jobs as f64 } else { 0.0 };
    }
}

/// The queue wait (submission to first start) by why the job waited, from the engine's steps:
/// `held` → approval, `deferred` → off-peak, `admitted` → capacity, or readiness when the submission
/// declared its image, data or script not ready. The parts add up to the queue wait.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct QueueWaitByReason {
    /// Held for approval.
    pub approval: WaitPart,
    /// Deferred (off-peak).
    pub off_peak: WaitPart,
    /// Waiting for GPUs.
    pub capacity: WaitPart,
    /// Waiting for image, data or script.
    pub readiness: WaitPart,
}

impl QueueWaitByReason {
    /// The parts with their names, in the order tables show them.
    pub fn parts(&self) -> [(&'static str, &WaitPart); 4] {
        [
            ("approval", &self.approval),
            ("off-peak", &self.off_peak),
            ("capacity", &self.capacity),
            ("readiness", &self.readiness),
        ]
    }

    fn absorb(&mut self, o: &QueueWaitByReason) {
        self.approval.absorb(&o.approval);
        self.off_peak.absorb(&o.off_peak);
        self.capacity.absorb(&o.capacity);
        self.readiness.absorb(&o.readiness);
    }

    fn finish(&mut self) {
        self.approval.finish();
        self.off_peak.finish();
        self.capacity.finish();
        self.readiness.finish();
    }
}

/// One day of the whole pool (or one project).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DayPoint {
    /// `2026-11-02`.
    pub day: String,
    /// The split that day, GPU-hours.
    pub gpu_hours: Hours,
}

/// A project's cumulative use through the period against its monthly budget.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Burndown {
    /// Project.
    pub project: String,
    /// Monthly budget from the enforced quota policies (none: no enforced monthly quota limits the
    /// project).
    pub budget_gpu_hours: Option<f64>,
    /// Nominal GPU-hours used through the end of each day of the period, counted from the start of
    /// that day's month: a period of several months starts again at each month (the budget is a
    /// month's), so its burn-down draws each month's budget as a step.
    pub cumulative_gpu_hours: Vec<f64>,
}

/// The billing comparison of one project.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProjectBilling {
    /// Project.
    pub project: String,
    /// The comparison.
    #[serde(flatten)]
    pub comparison: Comparison,
}

/// The billing section.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Billing {
    /// Currency of the price file.
    pub currency: Option<String>,
    /// Months the period covers, pro rata by days (a whole calendar month is 1; the block is paid for
    /// each).
    pub months: f64,
    /// The rates used.
    pub prices: Prices,
    /// Per project, largest use first.
    pub projects: Vec<ProjectBilling>,
    /// The sum of each project's cheapest mode, against the sum on demand.
    pub total_cheapest: f64,
    /// Everything on demand.
    pub total_on_demand: f64,
}

/// A whole report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The database.
    pub db: String,
    /// The period asked for.
    pub period: String,
    /// First day covered (`2026-11-01`), when the period or the data has one.
    pub from: Option<String>,
    /// Last day covered, inclusive.
    pub to: Option<String>,
    /// The grouping.
    pub by: String,
    /// Utilisation under this is idle.
    pub idle_threshold: f64,
    /// Audit events the facts cover.
    pub events_covered: i64,
    /// One row per group, largest nominal first.
    pub groups: Vec<Group>,
    /// All groups together.
    pub total: Group,
    /// The largest leaks across groups: (group, leak), largest first, at most 10.
    pub top_leaks: Vec<(String, Leak)>,
    /// The whole pool per day.
    pub daily: Vec<DayPoint>,
    /// Effective ratio per project per day (same days as `daily`; None when the project held nothing).
    pub daily_ratio_by_project: BTreeMap<String, Vec<Option<f64>>>,
    /// Quota burn-down per project.
    pub burndown: Vec<Burndown>,
    /// The billing comparison, with `--prices`.
    pub billing: Option<Billing>,
    /// The billing modes for the pool, per GPU type (and region), with `--prices`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool_billing: Option<crate::pool::PoolBilling>,
    /// Cost per unit of work by configuration and GPU type, with `--cost-per-unit`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_per_unit: Option<CostPerUnit>,
    /// The bill beside the hours held, when the period has charges.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reconciliation: Option<crate::reconcile::Reconciliation>,
}

/// What to report.
#[derive(Debug, Clone)]
pub struct Options {
    /// The period.
    pub span: Span,
    /// The grouping.
    pub by: GroupBy,
    /// Rates for the billing comparison (and, per GPU type, for the cost per unit of work).
    pub prices: Option<Prices>,
    /// Add the cost-per-unit section.
    pub cost_per_unit: bool,
}

fn e(context: &str) -> impl FnOnce(rusqlite::Error) -> ReportError + '_ {
    move |source| ReportError::Sqlite { context: context.to_owned(), source }
}

/// The first and last day with facts, if any.
fn data_days(conn: &Connection) -> Result<Option<(i64, i64)>> {
    conn.query_row("SELECT min(day), max(day) FROM facts_job_day", [], |r| {
        Ok(r.get::<_, Option<i64>>(0)?.zip(r.get::<_, Option<i64>>(1)?))
    })
    .map_err(e("read the facts"))
}

/// Builds the report from an up-to-date [`FactsStore`] (call [`FactsStore::catch_up`] first).
pub fn build(store: &FactsStore, opts: &Options) -> Result<Report> {
    let conn = store.connection();
    let (lo, hi) = opts.span.sql_bounds();
    let (tlo, thi) = (lo.saturating_mul(DAY_MS), hi.saturating_mul(DAY_MS));
    let mut groups: BTreeMap<String, Group> = BTreeMap::new();
    let by = &opts.by;

    // The split.
    let sql = format!(
        "SELECT {k} AS k, count(DISTINCT d.job), sum(d.nominal), sum(d.productive), sum(d.idle), sum(d.failure), sum(d.held), sum(d.unmeasured), sum(d.g_effective), sum(d.g_low_util), sum(d.g_data_wait), sum(d.g_setup), sum(d.g_idle), sum(d.g_held), sum(d.g_interruption), sum(d.g_unmeasured), sum(d.g_sm_active)
         FROM facts_job_day d JOIN facts_jobs j ON j.job = d.job WHERE d.day >= ?1 AND d.day < ?2 GROUP BY k",
        k = by.sql(None)
    );
    let mut st = conn.prepare(&sql).map_err(e("query the split"))?;
    let rows = st.query_map(params![lo, hi], key_count_split).map_err(e("query the split"))?;
    for row in rows {
        let (k, jobs, split) = row.map_err(e("read the split"))?;
        let g = groups.entry(k.clone()).or_insert_with(|| Group::new(k));
        g.jobs = jobs as u64;
        g.exact_gpu_ms = split;
    }

    // Unsampled jobs and queue waits, by the day the job started.
    let sql = format!(
        "SELECT {k} AS k, count(*), sum(queue_wait_ms), sum(unsampled > 0),
           sum(wait_approval_ms), sum(wait_approval_ms > 0), sum(wait_off_peak_ms), sum(wait_off_peak_ms > 0),
           sum(wait_capacity_ms), sum(wait_capacity_ms > 0), sum(wait_readiness_ms), sum(wait_readiness_ms > 0)
         FROM facts_jobs j WHERE started IS NOT NULL AND started >= ?1 AND started < ?2 GROUP BY k",
        k = by.sql(None)
    );
    let mut st = conn.prepare(&sql).map_err(e("query queue waits"))?;
    let rows = st
        .query_map(params![tlo, thi], |r| {
            let part = |i: usize| -> rusqlite::Result<WaitPart> {
                Ok(WaitPart { ms: r.get(i)?, jobs: r.get::<_, i64>(i + 1)? as u64, ..WaitPart::default() })
            };
            let by_reason =
                QueueWaitByReason { approval: part(4)?, off_peak: part(6)?, capacity: part(8)?, readiness: part(10)? };
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, Option<i64>>(2)?,
                r.get::<_, i64>(3)?,
                by_reason,
            ))
        })
        .map_err(e("query queue waits"))?;
    for row in rows {
        let (k, n, wait, unsampled, by_reason) = row.map_err(e("read queue waits"))?;
        let g = groups.entry(k.clone()).or_insert_with(|| Group::new(k));
        g.started_jobs = n as u64;
        g.queue_wait_hours = hours(wait.unwrap_or(0));
        g.unsampled_jobs = unsampled as u64;
        g.queue_wait_by_reason = by_reason;
    }

    // Money: billed (micro-units), by currency; a charge is the job's when it names one.
    let sql = format!(
        "SELECT {k} AS k, COALESCE(c.currency, ''), sum(c.billed), sum(c.gpu_ms), count(DISTINCT c.event_seq)
         FROM facts_charges c LEFT JOIN facts_jobs j ON j.job = c.job WHERE c.day >= ?1 AND c.day < ?2
         GROUP BY k, 2 ORDER BY k, 2",
        k = by.charge_sql()
    );
    let mut st = conn.prepare(&sql).map_err(e("query charges"))?;
    let rows = st
        .query_map(params![lo, hi], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Option<i64>>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, i64>(4)?,
            ))
        })
        .map_err(e("query charges"))?;
    for row in rows {
        let (k, currency, amount, gpu_ms, n) = row.map_err(e("read charges"))?;
        let g = groups.entry(k.clone()).or_insert_with(|| Group::new(k));
        g.charged.push(Charged {
            currency,
            amount: amount.unwrap_or(0) as f64 / 1e6,
            amount_micros: amount.unwrap_or(0),
            gpu_hours: hours(gpu_ms),
            charges: n as u64,
        });
    }

    // What policies prevented and would have prevented: one amount per job and kind (the largest).
    // A reclaim prevented something only when it ended the job (its release was the reclaim): the
    // reclaim a finished job's release sends names the unused part of its reservation, which the
    // job gave back by ending, not a policy (issue 45). A dry-run reclaim would have saved only
    // while the job went on running after it, and at most what it then ran. A job without facts (a
    // log from before the job steps) cannot tell and is counted as the decision says.
    // An enforced denial or deferral whose work ran within the delay window after it (the job itself,
    // the same project's configuration, or the same user's same request) delayed the work, it did not
    // prevent it (issue 52): counted apart as delayed.
    let sql = format!(
        "SELECT k, decision, dry_run, delayed, sum(gh) FROM (
           SELECT {k} AS k, d.decision AS decision, d.dry_run AS dry_run,
             max(CASE WHEN d.decision = 'reclaim' AND d.dry_run AND j.released IS NOT NULL
                 THEN min(d.gpu_hours, j.gpus * (j.released - d.time) / 3600000.0) ELSE d.gpu_hours END) AS gh,
             max(CASE WHEN NOT d.dry_run AND d.decision IN ('deny', 'defer') AND j.job IS NOT NULL AND (
                   (j.started >= d.time AND j.started < d.time + ?3)
                   OR EXISTS (SELECT 1 FROM facts_jobs o WHERE o.project = j.project AND o.job != j.job
                        AND o.started >= d.time AND o.started < d.time + ?3
                        AND ((j.config IS NOT NULL AND o.config = j.config)
                             OR (o.user = j.user AND o.gpus = j.gpus AND o.gpu_type IS j.gpu_type))))
                 THEN 1 ELSE 0 END) AS delayed
           FROM facts_prevented d LEFT JOIN facts_jobs j ON j.job = d.job
           WHERE d.time >= ?1 AND d.time < ?2
             AND (d.decision != 'reclaim' OR j.job IS NULL
                  OR (NOT d.dry_run AND j.status = 'reclaimed')
                  OR (d.dry_run AND (j.released IS NULL OR j.released > d.time)))
           GROUP BY COALESCE(d.job, d.decision_id), d.decision, d.dry_run
         ) GROUP BY k, decision, dry_run, delayed",
        k = by.sql(Some("d"))
    );
    let mut st = conn.prepare(&sql).map_err(e("query decisions"))?;
    let rows = st
        .query_map(params![tlo, thi, DELAY_WINDOW_MS], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, bool>(2)?,
                r.get::<_, bool>(3)?,
                r.get::<_, f64>(4)?,
            ))
        })
        .map_err(e("query decisions"))?;
    for row in rows {
        let (k, kind, dry, delayed, gh) = row.map_err(e("read decisions"))?;
        let g = groups.entry(k.clone()).or_insert_with(|| Group::new(k));
        let p = if dry { &mut g.dry_run_would_save } else { &mut g.prevented };
        match (kind.as_str(), delayed) {
            ("deny", false) => p.denied += gh,
            ("deny", true) => p.delayed_denied += gh,
            ("defer", false) => p.deferred += gh,
            ("defer", true) => p.delayed_deferred += gh,
            _ => p.reclaimed += gh,
        }
    }

    let mut total = Group::new("(total)".into());
    let mut rows: Vec<Group> = groups.into_values().collect();
    for g in &mut rows {
        g.finish();
        total.absorb(g);
    }
    // A job counted in two groups cannot happen (one key per job), so the sum of jobs is right.
    total.finish();
    rows.sort_by(|a, b| b.exact_gpu_ms.nominal.cmp(&a.exact_gpu_ms.nominal).then_with(|| a.key.cmp(&b.key)));
    let mut top_leaks: Vec<(String, Leak)> =
        rows.iter().flat_map(|g| g.top_leaks.iter().map(|l| (g.key.clone(), l.clone()))).collect();
    top_leaks.sort_by(|a, b| b.1.gpu_hours.total_cmp(&a.1.gpu_hours));
    top_leaks.truncate(10);

    // Days covered: the period's, clipped to the data for open spans.
    let data = data_days(conn)?;
    let first = opts.span.from_day.or(data.map(|d| d.0));
    let last = opts.span.to_day.map(|t| t - 1).or(data.map(|d| d.1));
    let days: Vec<i64> = match (first, last) {
        (Some(a), Some(b)) if b >= a && b - a < 3700 => (a..=b).collect(),
        _ => Vec::new(),
    };
    let (daily, ratio, per_project_day) = daily_series(conn, &days)?;
    let mut burndown = burndown(store, opts, &days, &per_project_day);
    // A project whose jobs hold no GPU-hours yet (admitted, running without a sample, waiting) still
    // has the budget its policies give it, from its first event on (issue 45: before any job ended,
    // the page said no quota limited the projects).
    let mut st = conn
        .prepare(
            "SELECT DISTINCT project FROM facts_jobs WHERE (submitted >= ?1 AND submitted < ?2)
               OR (started >= ?1 AND started < ?2) ORDER BY project",
        )
        .map_err(e("query the projects"))?;
    let projects = st
        .query_map(params![tlo, thi], |r| r.get::<_, String>(0))
        .map_err(e("query the projects"))?
        .collect::<rusqlite::Result<Vec<String>>>()
        .map_err(e("read the projects"))?;
    for p in projects {
        if !burndown.iter().any(|b| b.project == p) {
            let budget_gpu_hours = store.hints().monthly_budget(&p);
            burndown.push(Burndown { project: p, budget_gpu_hours, cumulative_gpu_hours: vec![0.0; days.len()] });
        }
    }
    let billing = match &opts.prices {
        Some(p) => Some(billing(conn, &days, p)?),
        None => None,
    };
    let pool_billing = match &opts.prices {
        Some(p) => crate::pool::build(conn, &days, p, months_in(&days))?,
        None => None,
    };
    let cost_per_unit =
        if opts.cost_per_unit { Some(crate::cost::build(conn, tlo, thi, opts.prices.as_ref())?) } else { None };
    let reconciliation = crate::reconcile::build(conn, by, lo, hi)?;
    let events_covered = conn
        .query_row("SELECT value FROM facts_meta WHERE key = 'event_cursor'", [], |r| r.get::<_, String>(0))
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    Ok(Report {
        db: store.path().to_owned(),
        period: opts.span.label.clone(),
        from: days.first().map(|d| day_label(*d)),
        to: days.last().map(|d| day_label(*d)),
        by: by.label(),
        idle_threshold: store.idle_threshold(),
        events_covered,
        groups: rows,
        total,
        top_leaks,
        daily,
        daily_ratio_by_project: ratio,
        burndown,
        billing,
        pool_billing,
        cost_per_unit,
        reconciliation,
    })
}

type PerProjectDay = BTreeMap<String, BTreeMap<i64, Split>>;
/// The pool per day, each project's effective ratio per day, and each project's split per day.
type DailySeries = (Vec<DayPoint>, BTreeMap<String, Vec<Option<f64>>>, PerProjectDay);

fn daily_series(conn: &Connection, days: &[i64]) -> Result<DailySeries> {
    let (Some(a), Some(b)) = (days.first(), days.last()) else {
        return Ok((Vec::new(), BTreeMap::new(), BTreeMap::new()));
    };
    let mut st = conn
        .prepare(
            "SELECT j.project, d.day, sum(d.nominal), sum(d.productive), sum(d.idle), sum(d.failure), sum(d.held),
               sum(d.unmeasured), sum(d.g_effective), sum(d.g_low_util), sum(d.g_data_wait), sum(d.g_setup), sum(d.g_idle), sum(d.g_held), sum(d.g_interruption), sum(d.g_unmeasured), sum(d.g_sm_active)
             FROM facts_job_day d JOIN facts_jobs j ON j.job = d.job WHERE d.day >= ?1 AND d.day <= ?2
             GROUP BY j.project, d.day",
        )
        .map_err(e("query the daily series"))?;
    let rows = st.query_map(params![a, b], key_count_split).map_err(e("query the daily series"))?;
    let mut per: PerProjectDay = BTreeMap::new();
    let mut all: BTreeMap<i64, Split> = BTreeMap::new();
    for row in rows {
        let (p, day, s) = row.map_err(e("read the daily series"))?;
        all.entry(day).or_default().add(&s);
        per.entry(p).or_default().insert(day, s);
    }
    let daily = days
        .iter()
        .map(|d| DayPoint { day: day_label(*d), gpu_hours: all.get(d).copied().unwrap_or_default().into() })
        .collect();
    let ratio = per
        .iter()
        .map(|(p, m)| {
            let v = days.iter().map(|d| m.get(d).and_then(Split::effective_ratio)).collect();
            (p.clone(), v)
        })
        .collect();
    Ok((daily, ratio, per))
}

/// The months `days` cover, pro rata: each calendar month counts the share of its days among `days`
/// (a whole month is exactly 1, the first half of November 0.5). It used to count every calendar month
/// touched as a whole one, so a month of events from the 15th to the 14th paid two months of reserved
/// block, and the 72 days of the Philly excerpt three: the block never paid off (issue 52).
pub(crate) fn months_in(days: &[i64]) -> f64 {
    if days.is_empty() {
        return 1.0;
    }
    let mut per: BTreeMap<(i64, u32), u32> = BTreeMap::new();
    for d in days {
        let (y, m, _) = civil_from_days(*d);
        *per.entry((y, m)).or_insert(0) += 1;
    }
    per.iter()
        .map(|(&(y, m), &n)| {
            let next = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
            let len =
                bursar_model::time::days_from_civil(next.0, next.1, 1) - bursar_model::time::days_from_civil(y, m, 1);
            f64::from(n) / len as f64
        })
        .sum()
}

fn burndown(store: &FactsStore, _opts: &Options, days: &[i64], per: &PerProjectDay) -> Vec<Burndown> {
    let month_of = |d: i64| Span::month_of(d).from_day;
    let mut out: Vec<Burndown> = per
        .iter()
        .map(|(p, m)| {
            let mut acc = 0i64;
            let mut month = None;
            let cumulative = days
                .iter()
                .map(|d| {
                    // A month's budget is for that month: the count starts again with each one.
                    if month != month_of(*d) {
                        month = month_of(*d);
                        acc = 0;
                    }
                    acc += m.get(d).map_or(0, |s| s.nominal);
                    hours(acc)
                })
                .collect();
            let budget = store.hints().monthly_budget(p);
            Burndown { project: p.clone(), budget_gpu_hours: budget, cumulative_gpu_hours: cumulative }
        })
        .collect();
    out.sort_by(|a, b| {
        let la = a.cumulative_gpu_hours.last().copied().unwrap_or(0.0);
        let lb = b.cumulative_gpu_hours.last().copied().unwrap_or(0.0);
        lb.total_cmp(&la).then_with(|| a.project.cmp(&b.project))
    });
    out
}

fn billing(conn: &Connection, days: &[i64], prices: &Prices) -> Result<Billing> {
    let months = months_in(days);
    let mut usage: BTreeMap<String, Usage> = BTreeMap::new();
    if let (Some(a), Some(b)) = (days.first(), days.last()) {
        let (hlo, hhi) = (a * 24, (b + 1) * 24);
        let mut st = conn
            .prepare(
                "SELECT project, sum(gpu_ms) FROM facts_usage_hour WHERE hour >= ?1 AND hour < ?2 GROUP BY project, hour",
            )
            .map_err(e("query the usage curve"))?;
        let rows = st
            .query_map(params![hlo, hhi], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
            .map_err(e("query the usage curve"))?;
        for row in rows {
            let (p, ms) = row.map_err(e("read the usage curve"))?;
            usage
                .entry(p)
                .or_insert_with(|| Usage { months, ..Usage::default() })
                .hourly
                .push(ms as f64 / HOUR_MS as f64);
        }
        let mut st = conn
            .prepare(
                "SELECT j.project, sum(d.nominal) FROM facts_job_day d JOIN facts_jobs j ON j.job = d.job
                 WHERE d.day >= ?1 AND d.day <= ?2 GROUP BY d.job HAVING sum(d.nominal) > 0",
            )
            .map_err(e("query job usage"))?;
        let rows = st
            .query_map(params![a, b], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
            .map_err(e("query job usage"))?;
        for row in rows {
            let (p, ms) = row.map_err(e("read job usage"))?;
            usage.entry(p).or_insert_with(|| Usage { months, ..Usage::default() }).jobs.push(hours(ms));
        }
    }
    let mut projects: Vec<ProjectBilling> =
        usage.into_iter().map(|(project, u)| ProjectBilling { project, comparison: compare(&u, prices) }).collect();
    projects.sort_by(|a, b| {
        b.comparison.gpu_hours.total_cmp(&a.comparison.gpu_hours).then_with(|| a.project.cmp(&b.project))
    });
    let total_cheapest = projects.iter().map(|p| p.comparison.ranking[0].cost).sum();
    let total_on_demand = projects.iter().map(|p| p.comparison.on_demand).sum();
    Ok(Billing {
        currency: prices.currency.clone(),
        months,
        prices: prices.clone(),
        projects,
        total_cheapest,
        total_on_demand,
    })
}

/// Reads a `(key, count, nominal, productive, idle, failure, held, unmeasured, g_… ×9)` row, the shape
/// of every split query.
fn key_count_split(r: &rusqlite::Row<'_>) -> rusqlite::Result<(String, i64, Split)> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        Split {
            nominal: r.get(2)?,
            productive: r.get(3)?,
            idle: r.get(4)?,
            failure: r.get(5)?,
            held: r.get(6)?,
            unmeasured: r.get(7)?,
            gap: crate::facts::gap_at(r, 8)?,
        },
    ))
}

#[cfg(test)]
mod tests {
    use bursar_model::time::days_from_civil;

    #[test]
    fn months_are_pro_rata_by_day() {
        let nov: Vec<i64> = (days_from_civil(2026, 11, 1)..days_from_civil(2026, 12, 1)).collect();
        assert_eq!(super::months_in(&nov), 1.0, "a whole month is exactly one");
        // A month of events from the 15th to the 14th: 16/30 + 14/31, not two months.
        let shifted: Vec<i64> = (days_from_civil(2026, 11, 15)..days_from_civil(2026, 12, 15)).collect();
        let m = super::months_in(&shifted);
        assert!((m - (16.0 / 30.0 + 14.0 / 31.0)).abs() < 1e-12, "{m}");
        assert_eq!(super::months_in(&[]), 1.0);
    }
}
