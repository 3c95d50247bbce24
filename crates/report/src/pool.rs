//! The billing modes for a real pool (issue 52, item 4): what the period's usage would cost when a
//! platform team buys GPUs the way teams do — per GPU type (and region), a reserved block sized for
//! the *pool's* usage curve, not for each project's; the per-task mode; modes mixed by project (the
//! steady projects share the block, the bursty ones pay per use); the cost of the reserved capacity
//! the block leaves unused; and a recommendation with its saving and the assumptions it rests on.
//!
//! # The arithmetic (docs/reports.md, "Billing modes for the pool")
//!
//! For each pool `k` (a GPU type, or a type in a region), `u_h` = the GPU-hours its jobs held in hour
//! `h` (= the average GPUs held), over the `H` hours of the period; `months` = the period in months
//! pro rata ([`crate::report::months_in`]); rates from the price file's row for `k`, or the bill's:
//!
//! - **On demand** = `on_demand × Σ u_h`.
//! - **Per task** = `Σ over k's jobs (per_task fee + per_task rate × the job's GPU-hours)`.
//! - **Pool block** of `B` GPUs = `B × per_gpu_month × months + overage × Σ max(0, u_h − B)`, the best
//!   whole `B` ([`crate::billing::best_block`]); **unused** reserved GPU-hours `= Σ_h max(0, B − u_h)`
//!   over all `H` hours (hours without use count `B`), costing `unused ÷ (B × H)` of the block.
//! - **Mixed**: the projects sorted by their load factor (`Σ u ÷ (peak × H)`, steadiest first); for
//!   each `n` from 0 to all of them, the first `n` share a block sized for their combined curve and the
//!   others each pay the cheaper of on demand and per task; the cheapest `n` is the mix.
//! - **Per project** (for comparison): each project alone on its own cheapest mode, its own block
//!   included — the old comparison, which a pool should beat.
//!
//! The recommendation is, per pool, the cheapest of on demand, per task, the pool block and the mix;
//! its saving is against everything on demand and against the per-project best.

use std::collections::BTreeMap;

use rusqlite::{Connection, params};
use serde::Serialize;

use crate::billing::{HOURS_PER_MONTH, Prices, Reserved, TypeRates, best_block};
use crate::error::{ReportError, Result};
use crate::period::HOUR_MS;

/// Where a pool's rates came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RateSource {
    /// The price file's row for the type in its region (`H100@us-east-1`).
    TypeInRegion,
    /// The price file's row for the type.
    Type,
    /// The imported bill of the period (`from_bill = true`).
    Bill,
    /// The price file's `default` row.
    Default,
    /// The price file's flat rates.
    Flat,
}

/// One project's share of a pool and how the mix bills it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolProject {
    /// Project.
    pub project: String,
    /// GPU-hours it held in the pool.
    pub gpu_hours: f64,
    /// Its busiest hour (average GPUs).
    pub peak_gpus: f64,
    /// `gpu_hours ÷ (peak × hours of the period)`: 1 is a flat curve.
    pub load_factor: f64,
    /// In the mix: `reserved` (shares the block), `on_demand` or `per_task`.
    pub mode: &'static str,
}

/// The billing modes of one pool.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolRow {
    /// `H100`, or `H100@us-east-1` when the jobs name a region; `(none)` for jobs with no GPU type.
    pub pool: String,
    /// GPU type.
    pub gpu_type: String,
    /// Region, when the jobs name one.
    pub region: Option<String>,
    /// The rates used and where they came from.
    pub rates: TypeRates,
    /// Where the rates came from.
    pub source: RateSource,
    /// GPU-hours held.
    pub gpu_hours: f64,
    /// The busiest hour, average GPUs.
    pub peak_gpus: f64,
    /// Everything on demand.
    pub on_demand: f64,
    /// Everything per task (with a per-task rate).
    pub per_task: Option<f64>,
    /// The best block for the pool's curve (with a reserved price).
    pub block_gpus: Option<u32>,
    /// Its cost: the block and the overage.
    pub block_cost: Option<f64>,
    /// Reserved GPU-hours the block leaves unused.
    pub unused_gpu_hours: f64,
    /// What they cost (their share of the block's price).
    pub unused_cost: f64,
    /// The mix: GPUs of the block the steadiest projects share (0: no block).
    pub mix_block_gpus: u32,
    /// The mix's cost.
    pub mix_cost: f64,
    /// Each project alone on its own cheapest mode (its own block included), summed.
    pub per_project_best: f64,
    /// The cheapest plan: `on_demand`, `per_task`, `pool_block` or `mixed`.
    pub recommended: &'static str,
    /// Its cost.
    pub recommended_cost: f64,
    /// The projects, steadiest first, with their mode in the mix.
    pub projects: Vec<PoolProject>,
}

/// The pool section: one row per pool and the recommendation over all of them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolBilling {
    /// Currency of the rates (the price file's).
    pub currency: Option<String>,
    /// Hours in the period.
    pub hours: u32,
    /// Months in the period, pro rata.
    pub months: f64,
    /// One row per pool, largest use first.
    pub pools: Vec<PoolRow>,
    /// Σ on demand.
    pub total_on_demand: f64,
    /// Σ each project alone on its cheapest mode.
    pub total_per_project_best: f64,
    /// Σ the recommended plan of each pool.
    pub total_recommended: f64,
    /// `total_on_demand − total_recommended`.
    pub saving_vs_on_demand: f64,
    /// `total_per_project_best − total_recommended`.
    pub saving_vs_per_project: f64,
    /// A sentence per pool: what to buy.
    pub recommendation: Vec<String>,
    /// What the figures assume.
    pub assumptions: Vec<String>,
}

fn e(context: &'static str) -> impl FnOnce(rusqlite::Error) -> ReportError {
    ReportError::sqlite(context)
}

/// The usage of one pool: per project, GPU-ms per hour; and each job's GPU-hours.
#[derive(Debug, Default)]
struct PoolUse {
    gpu_type: String,
    region: Option<String>,
    projects: BTreeMap<String, BTreeMap<i64, i64>>,
    jobs: BTreeMap<String, Vec<f64>>,
}

fn pool_key(gpu_type: &str, region: &str) -> String {
    let t = if gpu_type.is_empty() { "(none)" } else { gpu_type };
    if region.is_empty() { t.to_owned() } else { format!("{t}@{region}") }
}

/// The bill's rates per pool key, from the charges of days `[lo, hi)`.
fn bill_rates(conn: &Connection, lo: i64, hi: i64) -> Result<BTreeMap<String, TypeRates>> {
    let mut st = conn
        .prepare(
            "SELECT COALESCE(gpu_type, ''), COALESCE(region, ''),
               sum(CASE WHEN list IS NOT NULL THEN list ELSE 0 END), sum(CASE WHEN list IS NOT NULL THEN gpu_ms ELSE 0 END),
               sum(CASE WHEN mode = 'reserved' THEN COALESCE(effective, 0) ELSE 0 END),
               sum(CASE WHEN mode = 'reserved' THEN gpu_ms ELSE 0 END)
             FROM facts_charges WHERE day >= ?1 AND day < ?2 AND gpu_ms != 0 AND NOT correction AND gpu_type IS NOT NULL
             GROUP BY 1, 2",
        )
        .map_err(e("query the bill's rates"))?;
    let mut q = st.query(params![lo, hi]).map_err(e("query the bill's rates"))?;
    let mut out = BTreeMap::new();
    while let Some(r) = q.next().map_err(e("read the bill's rates"))? {
        let read = || -> rusqlite::Result<(String, String, i64, i64, i64, i64)> {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?))
        };
        let (t, region, list, list_ms, res, res_ms) = read().map_err(e("read the bill's rates"))?;
        let per_hour = |money: i64, ms: i64| (ms > 0).then(|| money as f64 / 1e6 / (ms as f64 / HOUR_MS as f64));
        let Some(on_demand) = per_hour(list, list_ms) else { continue };
        let month = per_hour(res, res_ms).map(|h| h * HOURS_PER_MONTH);
        let rates = TypeRates { on_demand, reserved: None, per_task: None, per_gpu_month: month };
        // A type's own row from its regions: the first region's (the bill rarely mixes them).
        out.entry(pool_key(&t, "")).or_insert(rates);
        if !region.is_empty() {
            out.insert(pool_key(&t, &region), rates);
        }
    }
    Ok(out)
}

/// The rates of a pool and where they came from.
fn resolve(
    prices: &Prices,
    bill: &BTreeMap<String, TypeRates>,
    t: &str,
    region: Option<&str>,
) -> (TypeRates, RateSource) {
    if let Some(r) = region.and_then(|r| prices.gpu_types.get(&format!("{t}@{r}"))) {
        return (*r, RateSource::TypeInRegion);
    }
    if let Some(r) = prices.gpu_types.get(t) {
        return (*r, RateSource::Type);
    }
    if prices.from_bill {
        let key = pool_key(t, region.unwrap_or(""));
        if let Some(r) = bill.get(&key).or_else(|| bill.get(&pool_key(t, ""))) {
            let mut r = *r;
            // The bill has no per-task mode: the file's flat per-task rate, if any.
            r.per_task = prices.per_task.as_ref().map(|p| p.per_gpu_hour);
            return (r, RateSource::Bill);
        }
    }
    if let Some(r) = prices.gpu_types.get("default") {
        return (*r, RateSource::Default);
    }
    (prices.flat(), RateSource::Flat)
}

/// A curve (GPU-ms per hour) as GPU-hours per hour.
fn hourly(curve: &BTreeMap<i64, i64>) -> Vec<f64> {
    curve.values().map(|ms| *ms as f64 / HOUR_MS as f64).collect()
}

/// Builds the pool section for days `days` (consecutive) with `prices`.
pub fn build(conn: &Connection, days: &[i64], prices: &Prices, months: f64) -> Result<Option<PoolBilling>> {
    let (Some(a), Some(b)) = (days.first(), days.last()) else { return Ok(None) };
    let hours_total = u32::try_from(days.len() * 24).unwrap_or(u32::MAX);
    let (hlo, hhi) = (a * 24, (b + 1) * 24);
    let mut pools: BTreeMap<(String, String), PoolUse> = BTreeMap::new();
    let mut st = conn
        .prepare(
            "SELECT gpu_type, region, project, hour, sum(gpu_ms) FROM facts_usage_hour WHERE hour >= ?1 AND hour < ?2
             GROUP BY 1, 2, 3, 4",
        )
        .map_err(e("query the usage curve"))?;
    let mut q = st.query(params![hlo, hhi]).map_err(e("query the usage curve"))?;
    while let Some(r) = q.next().map_err(e("read the usage curve"))? {
        let read = || -> rusqlite::Result<(String, String, String, i64, i64)> {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        };
        let (t, region, project, hour, ms) = read().map_err(e("read the usage curve"))?;
        let p = pools.entry((t.clone(), region.clone())).or_insert_with(|| PoolUse {
            gpu_type: if t.is_empty() { "(none)".into() } else { t },
            region: (!region.is_empty()).then_some(region),
            ..PoolUse::default()
        });
        *p.projects.entry(project).or_default().entry(hour).or_insert(0) += ms;
    }
    drop(q);
    let mut st = conn
        .prepare(
            "SELECT COALESCE(j.gpu_type, ''), COALESCE(j.region, ''), j.project, sum(d.nominal)
             FROM facts_job_day d JOIN facts_jobs j ON j.job = d.job WHERE d.day >= ?1 AND d.day <= ?2
             GROUP BY d.job HAVING sum(d.nominal) > 0",
        )
        .map_err(e("query job usage"))?;
    let mut q = st.query(params![a, b]).map_err(e("query job usage"))?;
    while let Some(r) = q.next().map_err(e("read job usage"))? {
        let read =
            || -> rusqlite::Result<(String, String, String, i64)> { Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)) };
        let (t, region, project, ms) = read().map_err(e("read job usage"))?;
        if let Some(p) = pools.get_mut(&(t, region)) {
            p.jobs.entry(project).or_default().push(ms as f64 / HOUR_MS as f64);
        }
    }
    drop(q);
    if pools.is_empty() {
        return Ok(None);
    }
    let bill = if prices.from_bill { bill_rates(conn, *a, b + 1)? } else { BTreeMap::new() };
    let fee = prices.per_task.as_ref().map_or(0.0, |t| t.per_task);
    let overage_flat = prices.reserved.as_ref().and_then(|r| r.overage_per_gpu_hour);
    let h = f64::from(hours_total);

    let mut rows = Vec::new();
    for p in pools.into_values() {
        let (rates, source) = resolve(prices, &bill, &p.gpu_type, p.region.as_deref());
        let od = rates.on_demand;
        // A row's overage is its own on-demand rate; the flat rates keep `[reserved] overage_per_gpu_hour`.
        let overage = if source == RateSource::Flat { overage_flat.unwrap_or(od) } else { od };
        let reserved = rates.gpu_month().map(|m| Reserved { per_gpu_month: m, overage_per_gpu_hour: Some(overage) });
        let task_cost = |jobs: &[f64]| rates.per_task.map(|r| jobs.iter().map(|g| fee + r * g).sum::<f64>());
        let mut pool_curve: BTreeMap<i64, i64> = BTreeMap::new();
        for c in p.projects.values() {
            for (hour, ms) in c {
                *pool_curve.entry(*hour).or_insert(0) += ms;
            }
        }
        let curve = hourly(&pool_curve);
        let gpu_hours: f64 = pool_curve.values().sum::<i64>() as f64 / HOUR_MS as f64;
        let peak_gpus = curve.iter().copied().fold(0.0, f64::max);
        let on_demand = od * gpu_hours;
        let all_jobs: Vec<f64> = p.jobs.values().flatten().copied().collect();
        let per_task = task_cost(&all_jobs);
        let block = reserved.as_ref().map(|r| best_block(&curve, months, r, od));
        let (unused_gpu_hours, unused_cost) = match &block {
            Some(q) if q.block_gpus > 0 => {
                let bg = f64::from(q.block_gpus);
                let used: f64 = curve.iter().map(|u| u.min(bg)).sum();
                let unused = (bg * h - used).max(0.0);
                (unused, q.block_cost * unused / (bg * h))
            }
            _ => (0.0, 0.0),
        };

        // Each project alone, and the projects steadiest first.
        struct Proj {
            name: String,
            gh: f64,
            peak: f64,
            lf: f64,
            alone_payg: f64,
            alone_payg_mode: &'static str,
            alone_best: f64,
        }
        let mut projs: Vec<Proj> = p
            .projects
            .iter()
            .map(|(name, c)| {
                let hc = hourly(c);
                let gh: f64 = c.values().sum::<i64>() as f64 / HOUR_MS as f64;
                let peak = hc.iter().copied().fold(0.0, f64::max);
                let lf = if peak > 0.0 && h > 0.0 { gh / (peak * h) } else { 0.0 };
                let odc = od * gh;
                let ptc = task_cost(p.jobs.get(name).map_or(&[][..], Vec::as_slice));
                let (alone_payg, alone_payg_mode) = match ptc {
                    Some(t) if t < odc => (t, "per_task"),
                    _ => (odc, "on_demand"),
                };
                let own_block = reserved.as_ref().map(|r| best_block(&hc, months, r, od).cost);
                let alone_best = own_block.map_or(alone_payg, |b| b.min(alone_payg));
                Proj { name: name.clone(), gh, peak, lf, alone_payg, alone_payg_mode, alone_best }
            })
            .collect();
        projs.sort_by(|x, y| y.lf.total_cmp(&x.lf).then_with(|| x.name.cmp(&y.name)));
        let per_project_best: f64 = projs.iter().map(|x| x.alone_best).sum();

        // The mix: the first n share a block, the rest pay per use.
        let mut best_mix = (0usize, 0u32, projs.iter().map(|x| x.alone_payg).sum::<f64>());
        if let Some(r) = &reserved {
            let mut shared: BTreeMap<i64, i64> = BTreeMap::new();
            let mut rest: f64 = best_mix.2;
            for (i, x) in projs.iter().enumerate() {
                if let Some(c) = p.projects.get(&x.name) {
                    for (hour, ms) in c {
                        *shared.entry(*hour).or_insert(0) += ms;
                    }
                }
                rest -= x.alone_payg;
                let q = best_block(&hourly(&shared), months, r, od);
                let total = q.cost + rest.max(0.0);
                if total < best_mix.2 - 1e-9 {
                    best_mix = (i + 1, q.block_gpus, total);
                }
            }
        }
        let projects = projs
            .iter()
            .enumerate()
            .map(|(i, x)| PoolProject {
                project: x.name.clone(),
                gpu_hours: x.gh,
                peak_gpus: x.peak,
                load_factor: x.lf,
                mode: if i < best_mix.0 { "reserved" } else { x.alone_payg_mode },
            })
            .collect();

        let mut plans: Vec<(&'static str, f64)> = vec![("on_demand", on_demand)];
        if let Some(t) = per_task {
            plans.push(("per_task", t));
        }
        if let Some(q) = &block {
            plans.push(("pool_block", q.cost));
        }
        plans.push(("mixed", best_mix.2));
        // Stable: on a tie the simpler plan (listed first) stays.
        plans.sort_by(|x, y| x.1.total_cmp(&y.1));
        let (recommended, recommended_cost) = plans[0];
        rows.push(PoolRow {
            pool: pool_key(if p.gpu_type == "(none)" { "" } else { &p.gpu_type }, p.region.as_deref().unwrap_or("")),
            gpu_type: p.gpu_type,
            region: p.region,
            rates,
            source,
            gpu_hours,
            peak_gpus,
            on_demand,
            per_task,
            block_gpus: block.as_ref().map(|q| q.block_gpus),
            block_cost: block.as_ref().map(|q| q.cost),
            unused_gpu_hours,
            unused_cost,
            mix_block_gpus: best_mix.1,
            mix_cost: best_mix.2,
            per_project_best,
            recommended,
            recommended_cost,
            projects,
        });
    }
    rows.sort_by(|x, y| y.gpu_hours.total_cmp(&x.gpu_hours).then_with(|| x.pool.cmp(&y.pool)));
    let total_on_demand: f64 = rows.iter().map(|r| r.on_demand).sum();
    let total_per_project_best: f64 = rows.iter().map(|r| r.per_project_best).sum();
    let total_recommended: f64 = rows.iter().map(|r| r.recommended_cost).sum();
    let recommendation = rows.iter().map(sentence).collect();
    let mut assumptions = vec![
        "the period's usage repeats: each pool's hourly curve is the one to buy for".to_owned(),
        format!(
            "a reserved GPU is paid for every hour of the period, used or not, pro rata: {months:.2} month(s) of {hours_total} hours"
        ),
        "use above a block is paid at the pool's on-demand rate".to_owned(),
        "one pool per GPU type (and region): any project's job can run on any reserved GPU of its type".to_owned(),
        "the hours held are the hours bought: a queue a bigger pool would have removed is not modelled".to_owned(),
    ];
    if fee > 0.0 {
        assumptions.push(format!("per task: a fee of {fee} per job plus its GPU-hours at the per-task rate"));
    }
    let sources: Vec<String> = rows.iter().map(|r| format!("{} from {}", r.pool, source_text(r.source))).collect();
    assumptions.push(format!("rates: {}", sources.join(", ")));
    Ok(Some(PoolBilling {
        currency: prices.currency.clone(),
        hours: hours_total,
        months,
        saving_vs_on_demand: total_on_demand - total_recommended,
        saving_vs_per_project: total_per_project_best - total_recommended,
        pools: rows,
        total_on_demand,
        total_per_project_best,
        total_recommended,
        recommendation,
        assumptions,
    }))
}

fn source_text(s: RateSource) -> &'static str {
    match s {
        RateSource::TypeInRegion => "its row in the price file (type and region)",
        RateSource::Type => "its row in the price file",
        RateSource::Bill => "the imported bill (list price; commitments' effective cost × 730 a month)",
        RateSource::Default => "the price file's default row",
        RateSource::Flat => "the price file's flat rates",
    }
}

/// What to buy for one pool, in a sentence.
fn sentence(r: &PoolRow) -> String {
    let saving = r.on_demand - r.recommended_cost;
    match r.recommended {
        "pool_block" => format!(
            "{}: reserve {} GPUs for the pool ({:.2}, of which {:.1} GPU-hours reserved and unused cost {:.2}), the rest on demand: saves {saving:.2} against on demand",
            r.pool,
            r.block_gpus.unwrap_or(0),
            r.recommended_cost,
            r.unused_gpu_hours,
            r.unused_cost
        ),
        "mixed" if r.mix_block_gpus == 0 => format!(
            "{}: no block; each project on the cheaper of on demand and per task ({:.2}), saves {saving:.2} against on demand",
            r.pool, r.recommended_cost
        ),
        "mixed" => {
            let on_block: Vec<&str> =
                r.projects.iter().filter(|p| p.mode == "reserved").map(|p| p.project.as_str()).collect();
            format!(
                "{}: reserve {} GPUs shared by {} ({} steadiest), the other projects per use: {:.2}, saves {saving:.2} against on demand",
                r.pool,
                r.mix_block_gpus,
                on_block.join(", "),
                on_block.len(),
                r.recommended_cost
            )
        }
        "per_task" => format!("{}: per task ({:.2}), saves {saving:.2} against on demand", r.pool, r.recommended_cost),
        _ => format!("{}: on demand ({:.2}); no block or per-task plan is cheaper", r.pool, r.recommended_cost),
    }
}
