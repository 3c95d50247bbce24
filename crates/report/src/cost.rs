//! Cost per unit of work: for each job configuration and GPU type with runs that reported throughput,
//! the measured throughput per GPU, what a thousand units of work cost under each billing mode, the
//! ranking of the GPU types, and the scaling efficiency across GPU counts (`bursar report
//! --cost-per-unit`; docs/reports.md has the arithmetic and a worked example).
//!
//! # The arithmetic
//!
//! - **A run** is a job released in the period (its first `finished` or `reclaimed` step) that names
//!   a configuration ([`bursar_model::JobSpec::has_config`]) and a GPU type and whose samples gave a
//!   rate ([`bursar_model::RunRate`]: the mean of its `throughput` samples, else the rate of its
//!   cumulative `progress`). Its **throughput per GPU** is that rate ÷ its GPUs.
//! - **A row** is one configuration, unit, GPU type and GPU count: its throughput per GPU `x` is the
//!   mean over its runs, with the slowest and fastest run and the sample standard deviation.
//! - **Cost per 1,000 units** under a mode = `rate per GPU-hour ÷ (x × 3600) × 1000`, with the
//!   type's rates from the price file ([`crate::Prices::rates`]); the range is the same from the
//!   fastest and the slowest run (without an upper end when the slowest run did no work). A row
//!   whose runs all did no work has no cost.
//! - **Ranking**: at each configuration and GPU count, the GPU types by on-demand cost per unit,
//!   cheapest first (ties by name). The cheapest type is **separated** from the next when even its
//!   slowest run is cheaper per unit than the next type's fastest run: no single noisy run decides.
//! - **Scaling efficiency** of a row = its `x` ÷ the `x` of the same configuration and type at the
//!   smallest GPU count it ran at (1 at that count; none when the type ran at one count only).

use std::collections::BTreeMap;

use rusqlite::{Connection, params};
use serde::Serialize;

use crate::billing::{MODES, Prices, TypeRates};
use crate::error::{ReportError, Result};

/// The cost of a thousand units of work under one billing mode.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UnitCost {
    /// `on_demand`, `reserved` or `per_task`.
    pub mode: &'static str,
    /// The type's rate for a GPU-hour in this mode.
    pub per_gpu_hour: f64,
    /// Cost of 1,000 units at the row's mean throughput.
    pub per_1k: f64,
    /// The same at the fastest run's throughput (the lowest cost).
    pub per_1k_low: f64,
    /// The same at the slowest run's (the highest); none when the slowest run did no work at all.
    pub per_1k_high: Option<f64>,
}

/// One configuration on one GPU type at one GPU count.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CostRow {
    /// GPU type.
    pub gpu_type: String,
    /// GPUs of each run.
    pub gpus: u32,
    /// Runs measured.
    pub runs: u64,
    /// Mean over the runs of the throughput per GPU, units per second.
    pub throughput_per_gpu: f64,
    /// The slowest run's throughput per GPU.
    pub min_per_gpu: f64,
    /// The fastest run's.
    pub max_per_gpu: f64,
    /// Sample standard deviation of the runs' throughput per GPU (0 for one run).
    pub stddev_per_gpu: f64,
    /// Cost per 1,000 units under each mode the type has a rate for (none without a price file).
    pub cost: Vec<UnitCost>,
    /// Place among the GPU types at this configuration and GPU count, by on-demand cost (1 =
    /// cheapest); none without prices.
    pub rank: Option<u32>,
    /// On-demand cost per unit ÷ the cheapest type's at this count (1 for the cheapest).
    pub vs_cheapest: Option<f64>,
    /// For the cheapest of several types: whether its slowest run is still cheaper per unit than the
    /// next type's fastest run.
    pub separated: Option<bool>,
    /// Throughput per GPU ÷ that at `scaling_base_gpus`.
    pub scaling_efficiency: Option<f64>,
    /// The smallest GPU count this configuration ran at on this type, when it ran at several.
    pub scaling_base_gpus: Option<u32>,
}

impl CostRow {
    /// The cost per 1,000 units under `mode`.
    pub fn per_1k(&self, mode: &str) -> Option<f64> {
        self.cost.iter().find(|c| c.mode == mode).map(|c| c.per_1k)
    }
}

/// The cheapest way a configuration ran.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cheapest {
    /// GPU type.
    pub gpu_type: String,
    /// GPU count.
    pub gpus: u32,
    /// On-demand cost of 1,000 units.
    pub per_1k: f64,
}

/// One configuration (and unit of work).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConfigCost {
    /// The configuration key.
    pub config: String,
    /// What is counted (`tokens`), per second.
    pub unit: String,
    /// Runs measured.
    pub runs: u64,
    /// By GPU count, then rank, then GPU type.
    pub rows: Vec<CostRow>,
    /// The row with the lowest on-demand cost per unit.
    pub cheapest: Option<Cheapest>,
}

/// The cost-per-unit section of a report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CostPerUnit {
    /// Currency of the price file.
    pub currency: Option<String>,
    /// Whether a price file was given (without one, throughput and scaling only).
    pub priced: bool,
    /// Runs measured in the period.
    pub runs: u64,
    /// Runs with throughput that name no configuration (not in any row).
    pub runs_without_config: u64,
    /// Runs with throughput and a configuration but no GPU type (not in any row).
    pub runs_without_gpu_type: u64,
    /// By configuration, most runs first.
    pub configs: Vec<ConfigCost>,
}

fn e(context: &'static str) -> impl FnOnce(rusqlite::Error) -> ReportError {
    move |source| ReportError::Sqlite { context: context.to_owned(), source }
}

/// Per-run throughputs per GPU, keyed by (config, unit, gpu type, gpus).
type Runs = BTreeMap<(String, String, String, u32), Vec<f64>>;

/// Builds the section from the facts of runs released in `[tlo, thi)` (ms).
pub fn build(conn: &Connection, tlo: i64, thi: i64, prices: Option<&Prices>) -> Result<CostPerUnit> {
    let mut st = conn
        .prepare(
            "SELECT config, unit, gpu_type, gpus, throughput FROM facts_jobs
             WHERE released IS NOT NULL AND released >= ?1 AND released < ?2 AND throughput IS NOT NULL AND gpus > 0
             ORDER BY job",
        )
        .map_err(e("query measured throughput"))?;
    let rows = st
        .query_map(params![tlo, thi], |r| {
            Ok((
                r.get::<_, Option<String>>(0)?,
                r.get::<_, Option<String>>(1)?,
                r.get::<_, Option<String>>(2)?,
                r.get::<_, u32>(3)?,
                r.get::<_, f64>(4)?,
            ))
        })
        .map_err(e("query measured throughput"))?;
    let mut runs: Runs = BTreeMap::new();
    let (mut without_config, mut without_type) = (0u64, 0u64);
    for row in rows {
        let (config, unit, gpu_type, gpus, rate) = row.map_err(e("read measured throughput"))?;
        match (config, gpu_type) {
            (None, _) => without_config += 1,
            (Some(_), None) => without_type += 1,
            (Some(c), Some(t)) if rate.is_finite() => {
                let unit = unit.unwrap_or_else(|| bursar_model::throughput::DEFAULT_UNIT.to_owned());
                runs.entry((c, unit, t, gpus)).or_default().push(rate / f64::from(gpus));
            }
            _ => {}
        }
    }
    Ok(section(&runs, prices, without_config, without_type))
}

fn stats(v: &[f64]) -> (f64, f64, f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(0.0, f64::max);
    let sd = if v.len() > 1 { (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt() } else { 0.0 };
    (mean, min, max, sd)
}

fn unit_costs(rates: &TypeRates, mean: f64, min: f64, max: f64) -> Vec<UnitCost> {
    let per_1k = |rate: f64, x: f64| rate / (x * 3600.0) * 1000.0;
    MODES
        .iter()
        .filter_map(|m| rates.of(m).map(|r| (*m, r)))
        .filter(|_| mean > 0.0)
        .map(|(mode, r)| UnitCost {
            mode,
            per_gpu_hour: r,
            per_1k: per_1k(r, mean),
            per_1k_low: per_1k(r, max),
            per_1k_high: (min > 0.0).then(|| per_1k(r, min)),
        })
        .collect()
}

fn section(runs: &Runs, prices: Option<&Prices>, without_config: u64, without_type: u64) -> CostPerUnit {
    let mut configs: BTreeMap<(String, String), Vec<CostRow>> = BTreeMap::new();
    for ((config, unit, gpu_type, gpus), v) in runs {
        let (mean, min, max, sd) = stats(v);
        let cost = prices.map(|p| unit_costs(&p.rates(gpu_type), mean, min, max)).unwrap_or_default();
        configs.entry((config.clone(), unit.clone())).or_default().push(CostRow {
            gpu_type: gpu_type.clone(),
            gpus: *gpus,
            runs: v.len() as u64,
            throughput_per_gpu: mean,
            min_per_gpu: min,
            max_per_gpu: max,
            stddev_per_gpu: sd,
            cost,
            rank: None,
            vs_cheapest: None,
            separated: None,
            scaling_efficiency: None,
            scaling_base_gpus: None,
        });
    }
    let mut out: Vec<ConfigCost> = configs
        .into_iter()
        .map(|((config, unit), mut rows)| {
            rank(&mut rows);
            scaling(&mut rows);
            rows.sort_by(|a, b| {
                a.gpus
                    .cmp(&b.gpus)
                    .then(a.rank.unwrap_or(u32::MAX).cmp(&b.rank.unwrap_or(u32::MAX)))
                    .then_with(|| a.gpu_type.cmp(&b.gpu_type))
            });
            let cheapest = rows
                .iter()
                .filter_map(|r| r.per_1k("on_demand").map(|c| (r, c)))
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(r, c)| Cheapest { gpu_type: r.gpu_type.clone(), gpus: r.gpus, per_1k: c });
            ConfigCost { config, unit, runs: rows.iter().map(|r| r.runs).sum(), rows, cheapest }
        })
        .collect();
    out.sort_by(|a, b| b.runs.cmp(&a.runs).then_with(|| a.config.cmp(&b.config)).then_with(|| a.unit.cmp(&b.unit)));
    CostPerUnit {
        currency: prices.and_then(|p| p.currency.clone()),
        priced: prices.is_some(),
        runs: out.iter().map(|c| c.runs).sum(),
        runs_without_config: without_config,
        runs_without_gpu_type: without_type,
        configs: out,
    }
}

/// Ranks the GPU types at each GPU count by on-demand cost per unit.
fn rank(rows: &mut [CostRow]) {
    let mut counts: Vec<u32> = rows.iter().map(|r| r.gpus).collect();
    counts.sort_unstable();
    counts.dedup();
    for g in counts {
        let mut at: Vec<(usize, f64)> = rows
            .iter()
            .enumerate()
            .filter(|(_, r)| r.gpus == g)
            .filter_map(|(i, r)| r.per_1k("on_demand").map(|c| (i, c)))
            .collect();
        at.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| rows[a.0].gpu_type.cmp(&rows[b.0].gpu_type)));
        let Some(&(_, best)) = at.first() else { continue };
        let high =
            |i: usize| rows[i].cost.iter().find(|c| c.mode == "on_demand").map(|c| (c.per_1k_low, c.per_1k_high));
        let separated = match (at.first(), at.get(1)) {
            (Some(&(a, _)), Some(&(b, _))) => match (high(a), high(b)) {
                // A slowest run that did no work costs without bound: never separated.
                (Some((_, a_high)), Some((b_low, _))) => Some(a_high.is_some_and(|h| h < b_low)),
                _ => None,
            },
            _ => None,
        };
        for (place, &(i, c)) in at.iter().enumerate() {
            let r = &mut rows[i];
            r.rank = Some(place as u32 + 1);
            r.vs_cheapest = Some(if best > 0.0 { c / best } else { 1.0 });
            if place == 0 {
                r.separated = separated;
            }
        }
    }
}

/// Scaling efficiency of each row against the same GPU type at its smallest GPU count.
fn scaling(rows: &mut [CostRow]) {
    let mut base: BTreeMap<String, (u32, f64, usize)> = BTreeMap::new();
    for r in rows.iter() {
        let e = base.entry(r.gpu_type.clone()).or_insert((r.gpus, r.throughput_per_gpu, 0));
        if r.gpus < e.0 {
            (e.0, e.1) = (r.gpus, r.throughput_per_gpu);
        }
        e.2 += 1;
    }
    for r in rows.iter_mut() {
        if let Some(&(g, x, n)) = base.get(&r.gpu_type)
            && n > 1
            && x > 0.0
        {
            r.scaling_efficiency = Some(r.throughput_per_gpu / x);
            r.scaling_base_gpus = Some(g);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prices() -> Prices {
        Prices::parse(
            "currency = \"CNY\"\n[on_demand]\nper_gpu_hour = 15.0\n[gpu_types]\n\
             A100 = { on_demand = 12.0, reserved = 7.2 }\nH100 = { on_demand = 30.0, reserved = 18.0 }\n",
            "p.toml",
        )
        .unwrap()
    }

    fn runs(list: &[(&str, u32, &[f64])]) -> Runs {
        list.iter()
            .map(|(t, g, v)| (("llm".to_owned(), "tokens".to_owned(), (*t).to_owned(), *g), v.to_vec()))
            .collect()
    }

    #[test]
    fn hand_computed_costs_ranking_and_scaling() {
        // Per GPU: A100 at 1 GPU 900 and 1,100; at 8 GPUs 800 and 800. H100 at 1 GPU 3,000 twice; at
        // 8 GPUs 1,700 and 1,900.
        let r = runs(&[
            ("A100", 1, &[900.0, 1100.0]),
            ("A100", 8, &[800.0, 800.0]),
            ("H100", 1, &[3000.0, 3000.0]),
            ("H100", 8, &[1700.0, 1900.0]),
        ]);
        let s = section(&r, Some(&prices()), 0, 0);
        let c = &s.configs[0];
        assert_eq!((c.config.as_str(), c.unit.as_str(), c.runs), ("llm", "tokens", 8));
        let row = |t: &str, g: u32| c.rows.iter().find(|r| r.gpu_type == t && r.gpus == g).unwrap();
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        // Cost per 1k tokens on demand = price / (x × 3600) × 1000.
        // A100 @1: 12 / 3,600,000 × 1000 = 0.0033333; H100 @1: 30 / 10,800,000 × 1000 = 0.0027778.
        let (a1, h1, a8, h8) = (row("A100", 1), row("H100", 1), row("A100", 8), row("H100", 8));
        assert!(close(a1.per_1k("on_demand").unwrap(), 12.0 / 3600.0));
        assert!(close(h1.per_1k("on_demand").unwrap(), 30.0 / 10800.0));
        // A100 @8: 12 / (800 × 3.6) / 1000 = 0.0041667; H100 @8: 30 / (1800 × 3.6) / 1000 = 0.0046296.
        assert!(close(a8.per_1k("on_demand").unwrap(), 12.0 / 2880.0));
        assert!(close(h8.per_1k("on_demand").unwrap(), 30.0 / 6480.0));
        // Reserved: A100 @1 7.2 / 3600 = 0.002.
        assert!(close(a1.per_1k("reserved").unwrap(), 0.002));
        // Ranking: H100 first at 1 GPU (A100 1.2× dearer), A100 first at 8 (H100 1.111× dearer).
        assert_eq!((h1.rank, a1.rank, a8.rank, h8.rank), (Some(1), Some(2), Some(1), Some(2)));
        assert!(close(a1.vs_cheapest.unwrap(), 1.2) && close(h8.vs_cheapest.unwrap(), 30.0 / 6480.0 / (12.0 / 2880.0)));
        // Spread: A100 @1's slowest run (900) costs 12/3.24/1000 = 0.003704 > H100 @1's fastest 0.002778:
        // H100's dearest run (3,000: 0.002778) is below A100's cheapest (1,100: 0.003030): separated.
        assert_eq!(h1.separated, Some(true));
        // At 8 GPUs A100's dearest run (800: 0.004167) vs H100's fastest (1,900: 0.004386): separated.
        assert_eq!(a8.separated, Some(true));
        assert!(close(a1.stddev_per_gpu, (2.0f64 * 100.0 * 100.0).sqrt()));
        // Scaling efficiency at 8 GPUs: A100 800 / 1000 = 0.8, H100 1800 / 3000 = 0.6.
        assert!(close(a8.scaling_efficiency.unwrap(), 0.8) && close(h8.scaling_efficiency.unwrap(), 0.6));
        assert_eq!((a1.scaling_efficiency, a8.scaling_base_gpus), (Some(1.0), Some(1)));
        // The cheapest way to run it: H100 on 1 GPU.
        let best = c.cheapest.as_ref().unwrap();
        assert_eq!((best.gpu_type.as_str(), best.gpus), ("H100", 1));
        // Rows by GPU count, then rank.
        let order: Vec<(&str, u32)> = c.rows.iter().map(|r| (r.gpu_type.as_str(), r.gpus)).collect();
        assert_eq!(order, [("H100", 1), ("A100", 1), ("A100", 8), ("H100", 8)]);
    }

    #[test]
    fn a_run_that_did_no_work_lowers_the_mean_and_leaves_the_range_open() {
        let r = runs(&[("A100", 1, &[0.0, 2000.0]), ("H100", 1, &[3000.0, 3000.0])]);
        let s = section(&r, Some(&prices()), 0, 0);
        let a = s.configs[0].rows.iter().find(|r| r.gpu_type == "A100").unwrap();
        // Mean 1,000: 12 / 3.6 / 1000 = 0.003333 per 1k; the fastest run 0.001667; no upper end.
        let od = &a.cost[0];
        assert!((od.per_1k - 12.0 / 3600.0).abs() < 1e-12 && (od.per_1k_low - 12.0 / 7200.0).abs() < 1e-12);
        assert_eq!(od.per_1k_high, None);
        let h = s.configs[0].rows.iter().find(|r| r.gpu_type == "H100").unwrap();
        // H100 is cheaper on the mean (0.002778), but A100's fastest run (0.001667) beats it: overlaps.
        assert_eq!((h.rank, h.separated), (Some(1), Some(false)));
        let none = section(&runs(&[("A100", 1, &[0.0])]), Some(&prices()), 0, 0);
        assert!(none.configs[0].rows[0].cost.is_empty() && none.configs[0].rows[0].rank.is_none());
    }

    #[test]
    fn overlapping_runs_are_not_separated_and_no_prices_means_no_ranking() {
        let r = runs(&[("A100", 1, &[500.0, 1500.0]), ("H100", 1, &[2000.0, 4000.0])]);
        let s = section(&r, Some(&prices()), 2, 1);
        // H100 dearest run 30/(2000×3.6)/1000 = 0.004167; A100 cheapest 12/(1500×3.6)/1000 = 0.002222.
        let h = s.configs[0].rows.iter().find(|r| r.gpu_type == "H100").unwrap();
        assert_eq!((h.rank, h.separated), (Some(1), Some(false)));
        assert_eq!((s.runs_without_config, s.runs_without_gpu_type), (2, 1));
        let bare = section(&r, None, 0, 0);
        assert!(!bare.priced);
        assert!(bare.configs[0].rows.iter().all(|r| r.cost.is_empty() && r.rank.is_none()));
        assert_eq!(bare.configs[0].rows[0].scaling_efficiency, None, "one GPU count: no scaling");
    }
}
