//! [`Reconciliation`]: the bill set beside the hours jobs held — per group (the report's grouping)
//! and GPU type, for the period: billed card-hours and money, card-hours the scheduler allocated
//! (held), effective card-hours, and what does not meet: capacity billed as reserved and unused,
//! capacity billed and used but held by no job, hours held with no bill line, and the price paid per
//! card-hour against the list price. With how much of the bill was attributed, and how. And
//! **queueing**: per GPU type, the capacity billed but held by no job while jobs of that type waited
//! to start ([`QueueRow`]).
//!
//! Every amount is an integer — card-hours in GPU-milliseconds, money in micro-units — summed from
//! the facts (`facts_charges`: a charge per day of its charge period; `facts_job_day`), so the rows
//! add up to the total exactly. docs/reports.md has each formula.

use std::collections::BTreeMap;

use rusqlite::{Connection, params};
use serde::Serialize;

use crate::error::{ReportError, Result};
use crate::report::GroupBy;

/// Money of one currency, in micro-units.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Money {
    /// Currency (`""` when the lines named none).
    pub currency: String,
    /// Σ `amount` (FOCUS `BilledCost`): what the invoice charges.
    pub billed: i64,
    /// Σ `bill.effective_cost` (the amortised cost; the billed cost where a line has none).
    pub effective: i64,
    /// Effective cost of the lines with card-hours (the GPU part of the bill).
    pub gpu_effective: i64,
    /// Σ `bill.list_cost` of the lines with card-hours that have one.
    pub gpu_list: i64,
    /// Card-ms of the lines with card-hours that have a list cost (the list price's denominator).
    pub list_gpu_ms: i64,
}

impl Money {
    fn add(&mut self, o: &Money) {
        self.billed += o.billed;
        self.effective += o.effective;
        self.gpu_effective += o.gpu_effective;
        self.gpu_list += o.gpu_list;
        self.list_gpu_ms += o.list_gpu_ms;
    }

    /// Effective cost per card-hour paid: `gpu_effective ÷ billed card-hours` (micro-units).
    pub fn paid_per_gpu_hour(&self, billed_gpu_ms: i64) -> Option<f64> {
        (billed_gpu_ms > 0).then(|| self.gpu_effective as f64 / 1e6 / (billed_gpu_ms as f64 / 3_600_000.0))
    }

    /// List price per card-hour: `gpu_list ÷ card-hours of the lines with a list cost`.
    pub fn list_per_gpu_hour(&self) -> Option<f64> {
        (self.list_gpu_ms > 0).then(|| self.gpu_list as f64 / 1e6 / (self.list_gpu_ms as f64 / 3_600_000.0))
    }
}

/// One row: a group and GPU type (or a total).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RecRow {
    /// The group (project, user, tag value or configuration; `(unattributed)` for charges nobody owns).
    pub key: String,
    /// GPU type (`(none)` when the line or the job names none).
    pub gpu_type: String,
    /// Bill lines counted.
    pub lines: u64,
    /// Card-ms billed (corrections included, with their sign).
    pub billed_gpu_ms: i64,
    /// Of which the unused part of commitments and capacity reservations.
    pub unused_gpu_ms: i64,
    /// Card-ms the scheduler allocated to jobs (nominal).
    pub held_gpu_ms: i64,
    /// Of which productive (at or above the idle threshold).
    pub productive_gpu_ms: i64,
    /// Of which effective weighted by use.
    pub effective_gpu_ms: i64,
    /// `max(0, billed − unused − held)`: capacity billed as used that no job of the group held.
    pub billed_not_held_gpu_ms: i64,
    /// `max(0, held − (billed − unused))`: hours held that no bill line of the group covers.
    pub held_not_billed_gpu_ms: i64,
    /// Money by currency.
    pub money: Vec<Money>,
    /// Corrections of earlier billing periods among the lines.
    pub corrections: u64,
}

impl RecRow {
    fn finish(&mut self) {
        let used = self.billed_gpu_ms - self.unused_gpu_ms;
        self.billed_not_held_gpu_ms = (used - self.held_gpu_ms).max(0);
        self.held_not_billed_gpu_ms = (self.held_gpu_ms - used).max(0);
    }

    fn absorb(&mut self, o: &RecRow) {
        self.lines += o.lines;
        self.billed_gpu_ms += o.billed_gpu_ms;
        self.unused_gpu_ms += o.unused_gpu_ms;
        self.held_gpu_ms += o.held_gpu_ms;
        self.productive_gpu_ms += o.productive_gpu_ms;
        self.effective_gpu_ms += o.effective_gpu_ms;
        self.corrections += o.corrections;
        for m in &o.money {
            match self.money.iter_mut().find(|x| x.currency == m.currency) {
                Some(x) => x.add(m),
                None => self.money.push(m.clone()),
            }
        }
    }
}

/// How charges found their owner.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AttributionLine {
    /// `job`, `tag`, `resource`, `unattributed`, `named` (a charge that names its project itself),
    /// or `job not found` (a line naming a job this log has no facts for: its tag's project, if any).
    pub how: String,
    /// Lines.
    pub lines: u64,
    /// Card-ms.
    pub gpu_ms: i64,
    /// Billed money, micro-units, by currency.
    pub billed: BTreeMap<String, i64>,
}

/// Queueing for one GPU type over the period (issue 52): capacity billed while jobs waited for it.
///
/// Per clock hour `h`, with `b` the card-ms billed for the type (each bill line spread evenly over its
/// charge period), `u` the card-ms jobs of the type held (nominal) and `w` the card-ms jobs of the type
/// waited (requested GPUs × the time from submission to first start):
///
/// - `queueing = min(max(0, b − u), w)`: billed, not held, while that much demand waited;
/// - `spare = max(0, b − u) − queueing`: billed, not held, and nobody waiting for it;
/// - `over = max(0, u − b)`: held beyond what the bill covers that hour.
///
/// Summed over the hours they add up exactly: `billed + over = held + queueing + spare`, and `held`
/// is the nominal the gap splits, so the bill's card-hours are split all the way down.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct QueueRow {
    /// GPU type (`(none)` for lines and jobs that name none); `(all)` for the total.
    pub gpu_type: String,
    /// Card-ms billed.
    pub billed_gpu_ms: i64,
    /// Card-ms held by jobs (nominal).
    pub held_gpu_ms: i64,
    /// Card-ms jobs waited to start (requested GPUs × wait).
    pub waiting_gpu_ms: i64,
    /// Billed and not held while jobs waited.
    pub queueing_gpu_ms: i64,
    /// Billed and not held with nobody waiting.
    pub spare_gpu_ms: i64,
    /// Held beyond the hour's bill.
    pub over_gpu_ms: i64,
}

impl QueueRow {
    /// Adds one hour: `b` billed, `u` held, `w` waiting (GPU-ms).
    pub fn hour(&mut self, b: i64, u: i64, w: i64) {
        let free = (b - u).max(0);
        let q = free.min(w.max(0));
        self.billed_gpu_ms += b;
        self.held_gpu_ms += u;
        self.waiting_gpu_ms += w;
        self.queueing_gpu_ms += q;
        self.spare_gpu_ms += free - q;
        self.over_gpu_ms += (u - b).max(0);
    }

    fn absorb(&mut self, o: &QueueRow) {
        self.billed_gpu_ms += o.billed_gpu_ms;
        self.held_gpu_ms += o.held_gpu_ms;
        self.waiting_gpu_ms += o.waiting_gpu_ms;
        self.queueing_gpu_ms += o.queueing_gpu_ms;
        self.spare_gpu_ms += o.spare_gpu_ms;
        self.over_gpu_ms += o.over_gpu_ms;
    }

    /// `billed + over == held + queueing + spare`.
    pub fn adds_up(&self) -> bool {
        self.billed_gpu_ms + self.over_gpu_ms == self.held_gpu_ms + self.queueing_gpu_ms + self.spare_gpu_ms
    }
}

/// Queueing per GPU type for the hours of days `[lo, hi)`, and the pool's total.
pub fn queueing(conn: &Connection, lo: i64, hi: i64) -> Result<(Vec<QueueRow>, QueueRow)> {
    let (hlo, hhi) = (lo.saturating_mul(24), hi.saturating_mul(24));
    // (type, hour) → [billed, held, waiting]
    let mut hours: BTreeMap<(String, i64), [i64; 3]> = BTreeMap::new();
    for (i, sql) in [
        "SELECT gpu_type, hour, sum(gpu_ms) FROM facts_bill_hour WHERE hour >= ?1 AND hour < ?2 GROUP BY 1, 2",
        "SELECT gpu_type, hour, sum(gpu_ms) FROM facts_usage_hour WHERE hour >= ?1 AND hour < ?2 GROUP BY 1, 2",
        "SELECT gpu_type, hour, sum(gpu_ms) FROM facts_wait_hour WHERE hour >= ?1 AND hour < ?2 GROUP BY 1, 2",
    ]
    .into_iter()
    .enumerate()
    {
        let mut st = conn.prepare(sql).map_err(e("query the hourly capacity"))?;
        let mut q = st.query(params![hlo, hhi]).map_err(e("query the hourly capacity"))?;
        while let Some(r) = q.next().map_err(e("read the hourly capacity"))? {
            let read = || -> rusqlite::Result<(String, i64, i64)> { Ok((r.get(0)?, r.get(1)?, r.get(2)?)) };
            let (t, h, ms) = read().map_err(e("read the hourly capacity"))?;
            hours.entry((t, h)).or_default()[i] += ms;
        }
    }
    let mut types: BTreeMap<String, QueueRow> = BTreeMap::new();
    for ((t, _), [b, u, w]) in hours {
        let name = if t.is_empty() { "(none)".to_owned() } else { t };
        types.entry(name.clone()).or_insert_with(|| QueueRow { gpu_type: name, ..QueueRow::default() }).hour(b, u, w);
    }
    let mut total = QueueRow { gpu_type: "(all)".into(), ..QueueRow::default() };
    for r in types.values() {
        total.absorb(r);
    }
    Ok((types.into_values().collect(), total))
}

/// The reconciliation of one report.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Reconciliation {
    /// Queueing per GPU type: capacity billed while jobs waited ([`QueueRow`]).
    pub queueing: Vec<QueueRow>,
    /// The pool's queueing, all types.
    pub queueing_total: QueueRow,
    /// One row per group and GPU type, largest billed first.
    pub rows: Vec<RecRow>,
    /// The sum of the rows, per GPU type.
    pub by_gpu_type: Vec<RecRow>,
    /// The sum of all rows: the pool.
    pub total: RecRow,
    /// How the charges were attributed.
    pub attribution: Vec<AttributionLine>,
    /// Share of the billed money (all currencies) charged to a group other than `(unattributed)`.
    pub attributed_share: Option<f64>,
}

fn e(context: &'static str) -> impl FnOnce(rusqlite::Error) -> ReportError {
    ReportError::sqlite(context)
}

/// Builds the reconciliation for days `[lo, hi)`, grouped by `by`; `None` when the period has no
/// charge at all (nothing to reconcile).
pub fn build(conn: &Connection, by: &GroupBy, lo: i64, hi: i64) -> Result<Option<Reconciliation>> {
    let k = by.charge_sql();
    let any: i64 = conn
        .query_row("SELECT count(*) FROM facts_charges WHERE day >= ?1 AND day < ?2", params![lo, hi], |r| r.get(0))
        .map_err(e("count the charges"))?;
    if any == 0 {
        return Ok(None);
    }
    let mut rows: BTreeMap<(String, String), RecRow> = BTreeMap::new();
    // The bill side.
    let sql = format!(
        "SELECT {k} AS k, COALESCE(c.gpu_type, '(none)') AS t, COALESCE(c.currency, '') AS cur,
           count(DISTINCT c.event_seq), sum(c.gpu_ms), sum(CASE WHEN c.unused THEN c.gpu_ms ELSE 0 END),
           sum(COALESCE(c.billed, 0)), sum(COALESCE(c.effective, 0)),
           sum(CASE WHEN c.gpu_ms != 0 THEN COALESCE(c.effective, 0) ELSE 0 END),
           sum(CASE WHEN c.gpu_ms != 0 AND c.list IS NOT NULL THEN c.list ELSE 0 END),
           sum(CASE WHEN c.gpu_ms != 0 AND c.list IS NOT NULL THEN c.gpu_ms ELSE 0 END),
           count(DISTINCT CASE WHEN c.correction THEN c.event_seq END)
         FROM facts_charges c LEFT JOIN facts_jobs j ON j.job = c.job
         WHERE c.day >= ?1 AND c.day < ?2 GROUP BY k, t, cur"
    );
    let mut st = conn.prepare(&sql).map_err(e("query the bill"))?;
    let mut q = st.query(params![lo, hi]).map_err(e("query the bill"))?;
    while let Some(r) = q.next().map_err(e("read the bill"))? {
        let key: String = r.get(0).map_err(e("read the bill"))?;
        let t: String = r.get(1).map_err(e("read the bill"))?;
        let g = |i: usize| r.get::<_, Option<i64>>(i).map(|v| v.unwrap_or(0));
        let x =
            rows.entry((key.clone(), t.clone())).or_insert_with(|| RecRow { key, gpu_type: t, ..RecRow::default() });
        let read = || -> rusqlite::Result<(i64, i64, i64, Money, i64)> {
            Ok((
                g(3)?,
                g(4)?,
                g(5)?,
                Money {
                    currency: r.get(2)?,
                    billed: g(6)?,
                    effective: g(7)?,
                    gpu_effective: g(8)?,
                    gpu_list: g(9)?,
                    list_gpu_ms: g(10)?,
                },
                g(11)?,
            ))
        };
        let (lines, ms, unused, money, corrections) = read().map_err(e("read the bill"))?;
        x.lines += lines as u64;
        x.billed_gpu_ms += ms;
        x.unused_gpu_ms += unused;
        x.corrections += corrections as u64;
        x.money.push(money);
    }
    drop(q);

    // The held side: every job with hours in the period, by its group and GPU type.
    let sql = format!(
        "SELECT {k} AS k, COALESCE(j.gpu_type, '(none)') AS t, sum(d.nominal), sum(d.productive), sum(d.g_effective)
         FROM facts_job_day d JOIN facts_jobs j ON j.job = d.job WHERE d.day >= ?1 AND d.day < ?2 GROUP BY k, t",
        k = by.job_sql()
    );
    let mut st = conn.prepare(&sql).map_err(e("query the hours held"))?;
    let mut q = st.query(params![lo, hi]).map_err(e("query the hours held"))?;
    while let Some(r) = q.next().map_err(e("read the hours held"))? {
        let read = || -> rusqlite::Result<(String, String, i64, i64, i64)> {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        };
        let (key, t, held, productive, effective) = read().map_err(e("read the hours held"))?;
        let x =
            rows.entry((key.clone(), t.clone())).or_insert_with(|| RecRow { key, gpu_type: t, ..RecRow::default() });
        x.held_gpu_ms += held;
        x.productive_gpu_ms += productive;
        x.effective_gpu_ms += effective;
    }
    drop(q);

    let mut out = Reconciliation::default();
    let mut types: BTreeMap<String, RecRow> = BTreeMap::new();
    out.total.key = "(total)".into();
    out.total.gpu_type = "(all)".into();
    for (_, mut r) in rows {
        r.finish();
        out.total.absorb(&r);
        types
            .entry(r.gpu_type.clone())
            .or_insert_with(|| RecRow { key: "(all)".into(), gpu_type: r.gpu_type.clone(), ..RecRow::default() })
            .absorb(&r);
        out.rows.push(r);
    }
    // The total's "not held" and "not billed" are the sums of the rows' (a group's capacity does not
    // cover another group's hours), not the netting of the pool's totals.
    let (bnh, hnb) =
        out.rows.iter().fold((0, 0), |a, r| (a.0 + r.billed_not_held_gpu_ms, a.1 + r.held_not_billed_gpu_ms));
    out.total.billed_not_held_gpu_ms = bnh;
    out.total.held_not_billed_gpu_ms = hnb;
    out.by_gpu_type = types
        .into_values()
        .map(|mut t| {
            let (b, h) = out
                .rows
                .iter()
                .filter(|r| r.gpu_type == t.gpu_type)
                .fold((0, 0), |a, r| (a.0 + r.billed_not_held_gpu_ms, a.1 + r.held_not_billed_gpu_ms));
            t.billed_not_held_gpu_ms = b;
            t.held_not_billed_gpu_ms = h;
            t
        })
        .collect();
    out.rows.sort_by(|a, b| {
        b.billed_gpu_ms
            .cmp(&a.billed_gpu_ms)
            .then(b.held_gpu_ms.cmp(&a.held_gpu_ms))
            .then_with(|| a.key.cmp(&b.key))
            .then_with(|| a.gpu_type.cmp(&b.gpu_type))
    });

    // How the charges were attributed.
    let mut st = conn
        .prepare(
            "SELECT CASE WHEN c.attribution = 'job' AND j.job IS NULL THEN 'job not found' ELSE c.attribution END AS how,
               COALESCE(c.currency, ''), count(DISTINCT c.event_seq), sum(c.gpu_ms), sum(COALESCE(c.billed, 0))
             FROM facts_charges c LEFT JOIN facts_jobs j ON j.job = c.job
             WHERE c.day >= ?1 AND c.day < ?2 GROUP BY how, 2 ORDER BY how, 2",
        )
        .map_err(e("query the attribution"))?;
    let mut q = st.query(params![lo, hi]).map_err(e("query the attribution"))?;
    while let Some(r) = q.next().map_err(e("read the attribution"))? {
        let read = || -> rusqlite::Result<(String, String, i64, i64, i64)> {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        };
        let (how, cur, lines, ms, billed) = read().map_err(e("read the attribution"))?;
        match out.attribution.iter_mut().find(|a| a.how == how) {
            Some(a) => {
                a.lines += lines as u64;
                a.gpu_ms += ms;
                *a.billed.entry(cur).or_insert(0) += billed;
            }
            None => out.attribution.push(AttributionLine {
                how,
                lines: lines as u64,
                gpu_ms: ms,
                billed: BTreeMap::from([(cur, billed)]),
            }),
        }
    }
    let all: i64 = out.rows.iter().flat_map(|r| r.money.iter()).map(|m| m.billed.abs()).sum();
    let owned: i64 = out
        .rows
        .iter()
        .filter(|r| r.key != crate::report::UNATTRIBUTED)
        .flat_map(|r| r.money.iter())
        .map(|m| m.billed.abs())
        .sum();
    out.attributed_share = (all > 0).then(|| owned as f64 / all as f64);
    (out.queueing, out.queueing_total) = queueing(conn, lo, hi)?;
    Ok(Some(out))
}
