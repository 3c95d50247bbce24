//! The billing-mode comparison: what a project's actual usage curve would have cost under each mode,
//! from rates in a small TOML price file.
//!
//! ```toml
//! currency = "CNY"
//! [on_demand]
//! per_gpu_hour = 15.0            # every GPU-hour used
//! [reserved]
//! per_gpu_month = 6_000.0        # a block of B GPUs, paid for every month whether used or not
//! overage_per_gpu_hour = 15.0    # use above the block (default: the on-demand rate)
//! [per_task]
//! per_task = 2.0                 # a fixed fee per job
//! per_gpu_hour = 14.0            # plus the job's GPU-hours
//! ```
//!
//! # The arithmetic
//!
//! The usage curve is the project's nominal GPU-hours per clock hour, `u_h` (= the average number of
//! GPUs held in hour h), over every hour of the period, idle hours included as 0.
//!
//! - **On demand**: `per_gpu_hour × Σ u_h`.
//! - **Reserved block of B GPUs**: `B × per_gpu_month × months + overage × Σ max(0, u_h − B)`, where
//!   `months` is the number of calendar months the period covers. The best B is found by trying every
//!   whole B from 0 to `ceil(max u_h)` (the cost is convex in B, and a block above the peak only adds
//!   cost; only 0 and the floors and ceilings of the curve's values need pricing, since the cost is
//!   linear between them); ties go to the smaller block. B = 0 is "no block": everything at the overage rate.
//! - **Per task**: `Σ over jobs (per_task + per_gpu_hour × job GPU-hours in the period)`.
//!
//! The cheapest mode wins; the saving is reported against the next cheapest and against on demand.
//! Sections other than `[on_demand]` are optional: a mode without rates is left out.
//!
//! # Rates per GPU type
//!
//! For the cost per unit of work (`bursar report --cost-per-unit`), rates per GPU-hour by GPU type and
//! billing mode, with a `default` row for types not listed:
//!
//! ```toml
//! [gpu_types]
//! default = { on_demand = 15.0, reserved = 9.0, per_task = 13.5 }
//! A100 = { on_demand = 12.0, reserved = 7.2, per_task = 10.8 }
//! H100 = { on_demand = 30.0, reserved = 18.0, per_task = 27.0 }
//! ```
//!
//! `on_demand` is required in a row, the others optional (a mode without a rate is not priced for that
//! type). `reserved` is the cost of a reserved GPU-hour that is used (the block's monthly price over
//! the hours it is used); `per_task` is the per-task mode's GPU-hour rate (its fixed fee per job is not
//! a rate and is left out of cost per unit). Without a `default` row, a type not listed takes the flat
//! rates: `[on_demand] per_gpu_hour` and `[per_task] per_gpu_hour` (a reserved block has no hourly rate).
//!
//! Every error names the file, line and column: `prices.toml:7:15: …`.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{ReportError, Result};

/// A price file.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Prices {
    /// Currency of every rate, shown beside the amounts.
    #[serde(default)]
    pub currency: Option<String>,
    /// Pay per GPU-hour.
    pub on_demand: OnDemand,
    /// A monthly reserved block.
    #[serde(default)]
    pub reserved: Option<Reserved>,
    /// Per-task pricing.
    #[serde(default)]
    pub per_task: Option<PerTask>,
    /// Per-GPU-hour rates by GPU type (`H100`), GPU type in a region (`H100@us-east-1`) and a
    /// `default` row: for the cost per unit of work and the pool's billing modes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub gpu_types: BTreeMap<String, TypeRates>,
    /// Types (and regions) without a row of their own take their rates from the imported bill of the
    /// period, where it has them: the list price per card-hour as on demand, the effective cost per
    /// card-hour of its commitment and capacity-reservation lines × 730 as a reserved GPU-month.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub from_bill: bool,
}

/// One row of `[gpu_types]`: what a GPU-hour of this type costs under each billing mode.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TypeRates {
    /// A GPU-hour on demand.
    pub on_demand: f64,
    /// A used GPU-hour of a reserved block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved: Option<f64>,
    /// A GPU-hour under per-task pricing (without the per-task fee).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_task: Option<f64>,
    /// One reserved GPU of this type for a calendar month, used or not (the pool's reserved block);
    /// without it, `reserved × 730`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_gpu_month: Option<f64>,
}

/// Hours in the month a reserved GPU-month is priced over: 365 × 24 / 12.
pub const HOURS_PER_MONTH: f64 = 730.0;

impl TypeRates {
    /// The rate of `mode` (`on_demand`, `reserved`, `per_task`).
    pub fn of(&self, mode: &str) -> Option<f64> {
        match mode {
            "on_demand" => Some(self.on_demand),
            "reserved" => self.reserved,
            "per_task" => self.per_task,
            _ => None,
        }
    }

    /// What one reserved GPU costs for a month: `per_gpu_month`, else the used-hour rate × 730.
    pub fn gpu_month(&self) -> Option<f64> {
        self.per_gpu_month.or(self.reserved.map(|r| r * HOURS_PER_MONTH))
    }
}

/// The billing modes, in the order reports list them.
pub const MODES: [&str; 3] = ["on_demand", "reserved", "per_task"];

/// Byte span of the value at `path` (`["gpu_types", "H100", "on_demand"]`) in a TOML text, as deep
/// as the path exists.
fn locate(text: &str, path: &[&str]) -> Option<Range<usize>> {
    let doc = toml::de::DeTable::parse(text).ok()?;
    let mut table = doc.get_ref();
    let mut span = None;
    for key in path {
        let v = table.get(*key)?;
        span = Some(v.span());
        match v.get_ref() {
            toml::de::DeValue::Table(t) => table = t,
            _ => break,
        }
    }
    span
}

/// The dotted key (`on_demand.per_gpu_hour`) of the value that holds byte `offset`, if any (a
/// table's own span may cover only its header, so every value is searched).
fn key_at(text: &str, offset: usize) -> Option<String> {
    fn find(table: &toml::de::DeTable<'_>, offset: usize, path: &mut Vec<String>) -> bool {
        for (k, v) in table.iter() {
            path.push(k.get_ref().to_string());
            let hit = match v.get_ref() {
                toml::de::DeValue::Table(t) => find(t, offset, path),
                _ => {
                    let span = v.span();
                    span.start <= offset && offset < span.end.max(span.start + 1)
                }
            };
            if hit {
                return true;
            }
            path.pop();
        }
        false
    }
    let doc = toml::de::DeTable::parse(text).ok()?;
    let mut path = Vec::new();
    find(doc.get_ref(), offset, &mut path).then(|| path.join("."))
}

/// 1-based line and column (in characters) of byte `offset` of `text`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let mut start = offset;
    while start > 0 && !text.is_char_boundary(start) {
        start -= 1;
    }
    let before = text.get(..start).unwrap_or("");
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before.get(line_start..).map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// `[on_demand]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OnDemand {
    /// Price of one GPU-hour.
    pub per_gpu_hour: f64,
}

/// `[reserved]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Reserved {
    /// Price of one reserved GPU for one calendar month.
    pub per_gpu_month: f64,
    /// Price of a GPU-hour above the block; the on-demand rate when absent.
    #[serde(default)]
    pub overage_per_gpu_hour: Option<f64>,
}

/// `[per_task]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PerTask {
    /// Fixed fee per job.
    #[serde(default)]
    pub per_task: f64,
    /// Price of one GPU-hour of a task.
    pub per_gpu_hour: f64,
}

impl Prices {
    /// Parses a price file; `path` names it in errors, with the line and column of the value.
    pub fn parse(text: &str, path: &str) -> Result<Prices> {
        let at = |span: Option<Range<usize>>, message: String| {
            let (line, column) = span.map_or((1, 1), |s| line_col(text, s.start));
            ReportError::Prices { path: path.to_owned(), line, column, message }
        };
        let prices: Prices = toml::from_str(text).map_err(|e| {
            let message = e.message().trim_end();
            let key = e.span().and_then(|s| key_at(text, s.start));
            let message = match key {
                Some(k) if !message.contains(&format!("`{k}`")) => format!("`{k}`: {message}"),
                _ => message.to_owned(),
            };
            at(e.span(), message)
        })?;
        let check = |keys: &[&str], v: f64| {
            if v.is_finite() && v >= 0.0 {
                Ok(())
            } else {
                Err(at(
                    locate(text, keys),
                    format!("`{}` must be a finite number of at least 0, got {v}", keys.join(".")),
                ))
            }
        };
        check(&["on_demand", "per_gpu_hour"], prices.on_demand.per_gpu_hour)?;
        if let Some(r) = &prices.reserved {
            check(&["reserved", "per_gpu_month"], r.per_gpu_month)?;
            if let Some(o) = r.overage_per_gpu_hour {
                check(&["reserved", "overage_per_gpu_hour"], o)?;
            }
        }
        if let Some(t) = &prices.per_task {
            check(&["per_task", "per_task"], t.per_task)?;
            check(&["per_task", "per_gpu_hour"], t.per_gpu_hour)?;
        }
        for (name, row) in &prices.gpu_types {
            if let Some(v) = row.per_gpu_month
                && !(v.is_finite() && v > 0.0)
            {
                return Err(at(
                    locate(text, &["gpu_types", name, "per_gpu_month"]),
                    format!("`gpu_types.{name}.per_gpu_month` must be a price greater than 0, got {v}"),
                ));
            }
            for mode in MODES {
                if let Some(v) = row.of(mode)
                    && !(v.is_finite() && v > 0.0)
                {
                    return Err(at(
                        locate(text, &["gpu_types", name, mode]),
                        format!("`gpu_types.{name}.{mode}` must be a price greater than 0, got {v}"),
                    ));
                }
            }
        }
        Ok(prices)
    }

    /// The rates of a GPU-hour of `gpu_type`: its `[gpu_types]` row, else the `default` row, else
    /// the flat on-demand and per-task GPU-hour rates.
    pub fn rates(&self, gpu_type: &str) -> TypeRates {
        self.gpu_types.get(gpu_type).or_else(|| self.gpu_types.get("default")).copied().unwrap_or_else(|| self.flat())
    }

    /// The flat rates: `[on_demand] per_gpu_hour`, `[per_task] per_gpu_hour`, `[reserved] per_gpu_month`.
    pub fn flat(&self) -> TypeRates {
        TypeRates {
            on_demand: self.on_demand.per_gpu_hour,
            reserved: None,
            per_task: self.per_task.as_ref().map(|t| t.per_gpu_hour),
            per_gpu_month: self.reserved.as_ref().map(|r| r.per_gpu_month),
        }
    }

    /// Reads and parses a price file.
    pub fn from_file(path: &Path) -> Result<Prices> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ReportError::Read { path: shown.clone(), source })?;
        Prices::parse(&text, &shown)
    }
}

/// A project's usage in the period, as the comparison needs it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Usage {
    /// GPU-hours per clock hour, one entry per hour that had any use (hours without use are zeros
    /// and need not be listed).
    pub hourly: Vec<f64>,
    /// Months the period covers, pro rata (the reserved block is paid for each): each calendar month
    /// counts the share of its days in the period, so a whole month is 1.
    pub months: f64,
    /// GPU-hours of each job in the period.
    pub jobs: Vec<f64>,
}

/// The best reserved block for a curve.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReservedQuote {
    /// GPUs in the block.
    pub block_gpus: u32,
    /// What the block costs for the period.
    pub block_cost: f64,
    /// GPU-hours above the block.
    pub overage_gpu_hours: f64,
    /// What they cost.
    pub overage_cost: f64,
    /// The total.
    pub cost: f64,
}

/// One mode's cost.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModeCost {
    /// `on_demand`, `reserved` or `per_task`.
    pub mode: &'static str,
    /// Total for the period.
    pub cost: f64,
}

/// The comparison for one project.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// GPU-hours used.
    pub gpu_hours: f64,
    /// Highest hourly use (average GPUs held in the busiest hour).
    pub peak_gpus: f64,
    /// Pay per GPU-hour.
    pub on_demand: f64,
    /// The best reserved block, if the price file has `[reserved]`.
    pub reserved: Option<ReservedQuote>,
    /// Per-task pricing, if the price file has `[per_task]`.
    pub per_task: Option<f64>,
    /// Every available mode, cheapest first.
    pub ranking: Vec<ModeCost>,
    /// The cheapest mode.
    pub cheapest: &'static str,
    /// How much cheaper it is than the next cheapest mode (0 with a single mode).
    pub saving_vs_next: f64,
    /// How much cheaper it is than on demand.
    pub saving_vs_on_demand: f64,
}

/// The cost of a block of `b` GPUs over the sorted curve `asc` with suffix sums `suffix`.
fn block_cost(b: u32, asc: &[f64], suffix: &[f64], per_block: f64, overage: f64) -> (f64, f64) {
    let bf = f64::from(b);
    let idx = asc.partition_point(|u| *u <= bf);
    let above = suffix.get(idx).copied().unwrap_or(0.0) - bf * (asc.len() - idx) as f64;
    let above = above.max(0.0);
    (bf * per_block + overage * above, above)
}

fn clamp_u32(v: f64) -> u32 {
    if v.is_finite() { v.clamp(0.0, f64::from(u32::MAX)) as u32 } else { 0 }
}

/// The best reserved block for `hourly` over `months` months.
pub fn best_block(hourly: &[f64], months: f64, r: &Reserved, on_demand: f64) -> ReservedQuote {
    let overage = r.overage_per_gpu_hour.unwrap_or(on_demand);
    let per_block = r.per_gpu_month * months;
    let mut asc: Vec<f64> = hourly.iter().copied().filter(|u| *u > 0.0).collect();
    asc.sort_by(f64::total_cmp);
    let mut suffix = vec![0.0; asc.len() + 1];
    for i in (0..asc.len()).rev() {
        suffix[i] = suffix[i + 1] + asc[i];
    }
    // The cost is convex and piecewise linear in B with its kinks at the curve's values, so the best
    // whole B is 0 or the floor or ceiling of one of them: price only those (in ascending order, so a
    // tie keeps the smaller block).
    let mut candidates: Vec<u32> =
        std::iter::once(0).chain(asc.iter().flat_map(|u| [clamp_u32(u.floor()), clamp_u32(u.ceil())])).collect();
    candidates.sort_unstable();
    candidates.dedup();
    let mut best = (0u32, f64::INFINITY, 0.0);
    for b in candidates {
        let (cost, above) = block_cost(b, &asc, &suffix, per_block, overage);
        if cost < best.1 - 1e-9 {
            best = (b, cost, above);
        }
    }
    let block = f64::from(best.0) * per_block;
    ReservedQuote {
        block_gpus: best.0,
        block_cost: block,
        overage_gpu_hours: best.2,
        overage_cost: best.1 - block,
        cost: best.1,
    }
}

/// Compares the modes for one project's usage.
pub fn compare(usage: &Usage, prices: &Prices) -> Comparison {
    let gpu_hours: f64 = usage.hourly.iter().sum();
    let peak_gpus = usage.hourly.iter().copied().fold(0.0, f64::max);
    let od = prices.on_demand.per_gpu_hour;
    let on_demand = od * gpu_hours;
    let reserved = prices
        .reserved
        .as_ref()
        .map(|r| best_block(&usage.hourly, if usage.months > 0.0 { usage.months } else { 1.0 }, r, od));
    let per_task =
        prices.per_task.as_ref().map(|t| usage.jobs.iter().map(|h| t.per_task + t.per_gpu_hour * h).sum::<f64>());
    let mut ranking = vec![ModeCost { mode: "on_demand", cost: on_demand }];
    if let Some(r) = &reserved {
        ranking.push(ModeCost { mode: "reserved", cost: r.cost });
    }
    if let Some(c) = per_task {
        ranking.push(ModeCost { mode: "per_task", cost: c });
    }
    // Stable: on a tie the earlier (simpler) mode stays first.
    ranking.sort_by(|a, b| a.cost.total_cmp(&b.cost));
    let cheapest = ranking[0].mode;
    let best = ranking[0].cost;
    let saving_vs_next = ranking.get(1).map_or(0.0, |n| n.cost - best);
    Comparison {
        gpu_hours,
        peak_gpus,
        on_demand,
        reserved,
        per_task,
        saving_vs_on_demand: on_demand - best,
        ranking,
        cheapest,
        saving_vs_next,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prices() -> Prices {
        Prices::parse(
            r#"
currency = "CNY"
[on_demand]
per_gpu_hour = 10.0
[reserved]
per_gpu_month = 30.0
overage_per_gpu_hour = 12.0
[per_task]
per_task = 5.0
per_gpu_hour = 9.0
"#,
            "p.toml",
        )
        .unwrap()
    }

    #[test]
    fn hand_computed_steady_curve_prefers_the_block() {
        // 4 GPUs busy for 10 hours, 2 GPUs for 10 more: 60 GPU-hours, two jobs of 40 and 20.
        let mut hourly = vec![4.0; 10];
        hourly.extend([2.0; 10]);
        let usage = Usage { hourly, months: 1.0, jobs: vec![40.0, 20.0] };
        let c = compare(&usage, &prices());
        // on demand: 60 × 10 = 600.
        assert_eq!(c.on_demand, 600.0);
        // B=0: 60×12=720; B=1: 30 + 40×12=510; B=2: 60 + 20×12=300; B=3: 90 + 10×12=210;
        // B=4: 120 + 0 = 120. Best: 4 GPUs, 120.
        let r = c.reserved.clone().unwrap();
        assert_eq!((r.block_gpus, r.cost, r.block_cost, r.overage_gpu_hours), (4, 120.0, 120.0, 0.0));
        // per task: 2×5 + 60×9 = 550.
        assert_eq!(c.per_task, Some(550.0));
        assert_eq!(c.cheapest, "reserved");
        assert_eq!(c.saving_vs_next, 430.0);
        assert_eq!(c.saving_vs_on_demand, 480.0);
    }

    #[test]
    fn hand_computed_spiky_curve_prefers_paying_per_use() {
        // One 8-GPU hour and one 1-GPU hour in a two-month period: block months = 2, so each GPU of
        // block costs 60. B=0: 9×12=108; B=1: 60 + 7×12=144. On demand: 9×10 = 90.
        let usage = Usage { hourly: vec![8.0, 1.0], months: 2.0, jobs: vec![8.0, 1.0] };
        let c = compare(&usage, &prices());
        let r = c.reserved.clone().unwrap();
        assert_eq!((r.block_gpus, r.cost), (0, 108.0));
        assert_eq!(c.on_demand, 90.0);
        // per task: 2×5 + 9×9 = 91.
        assert_eq!(c.per_task, Some(91.0));
        assert_eq!(c.cheapest, "on_demand");
        assert_eq!(c.saving_vs_next, 1.0);
        assert_eq!(c.saving_vs_on_demand, 0.0);
        assert_eq!(c.peak_gpus, 8.0);
    }

    #[test]
    fn fractional_hours_and_the_block_optimum() {
        // 2.5 GPUs average for 100 hours; block 60/month, overage 1: each block GPU saves 100 hours ×1
        // = 100 > 60 while the curve is above it. B=2: 120 + 0.5×100 = 170; B=3: 180. Best B=2.
        let r = best_block(&[2.5; 100], 1.0, &Reserved { per_gpu_month: 60.0, overage_per_gpu_hour: Some(1.0) }, 1.0);
        assert_eq!((r.block_gpus, r.cost), (2, 170.0));
    }

    #[test]
    fn the_candidate_search_agrees_with_trying_every_block() {
        let r = Reserved { per_gpu_month: 37.0, overage_per_gpu_hour: Some(1.3) };
        let mut x: u64 = 7;
        for _ in 0..50 {
            let hourly: Vec<f64> = (0..60)
                .map(|_| {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    (x >> 40) as f64 / (1u64 << 24) as f64 * 12.0
                })
                .collect();
            let q = best_block(&hourly, 1.0, &r, 2.0);
            let total = |b: u32| -> f64 {
                f64::from(b) * 37.0 + 1.3 * hourly.iter().map(|u| (u - f64::from(b)).max(0.0)).sum::<f64>()
            };
            let brute = (0..=13).map(total).fold(f64::INFINITY, f64::min);
            assert!((q.cost - brute).abs() < 1e-6, "{} vs {brute}", q.cost);
            assert!((total(q.block_gpus) - q.cost).abs() < 1e-6);
        }
    }

    #[test]
    fn rates_per_gpu_type_with_a_default_row() {
        let text = "currency = \"CNY\"\n[on_demand]\nper_gpu_hour = 15.0\n[per_task]\nper_gpu_hour = 13.5\n";
        let flat = Prices::parse(text, "p.toml").unwrap();
        assert_eq!(
            flat.rates("H100"),
            TypeRates { on_demand: 15.0, reserved: None, per_task: Some(13.5), per_gpu_month: None }
        );
        let rows = format!(
            "{text}[gpu_types]\ndefault = {{ on_demand = 14.0 }}\nH100 = {{ on_demand = 30.0, reserved = 18.0, per_task = 27.0 }}\n"
        );
        let p = Prices::parse(&rows, "p.toml").unwrap();
        assert_eq!(p.rates("H100").of("reserved"), Some(18.0));
        assert_eq!(p.rates("A100"), TypeRates { on_demand: 14.0, reserved: None, per_task: None, per_gpu_month: None });
        let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/prices.toml");
        let ex = Prices::from_file(&example).unwrap();
        assert!(ex.gpu_types.contains_key("default") && ex.gpu_types.len() > 2, "{:?}", ex.gpu_types);
    }

    #[test]
    fn price_file_errors_have_file_line_and_column() {
        let e = Prices::parse("[on_demand]\nper_gpu_hour = -1.0\n", "x.toml").unwrap_err().to_string();
        assert!(e.starts_with("x.toml:2:16: price file: `on_demand.per_gpu_hour` must be"), "{e}");
        let text = "[on_demand]\nper_gpu_hour = 1.0\n[gpu_types]\nH100 = { on_demand = 30.0, reserved = 0 }\n";
        let e = Prices::parse(text, "x.toml").unwrap_err().to_string();
        assert!(
            e.starts_with("x.toml:4:39: price file: `gpu_types.H100.reserved` must be a price greater than 0, got 0"),
            "{e}"
        );
        let text = "[on_demand]\nper_gpu_hour = 1.0\n[gpu_types]\nH100 = { on_demand = 30.0, reservd = 1.0 }\n";
        let e = Prices::parse(text, "x.toml").unwrap_err().to_string();
        assert!(e.starts_with("x.toml:4:28: price file: unknown field `reservd`"), "{e}");
        let e = Prices::parse("[on_demand]\nper_gpu_hour = \"ten\"\n", "x.toml").unwrap_err().to_string();
        assert!(e.starts_with("x.toml:2:16: price file: `on_demand.per_gpu_hour`: invalid type"), "{e}");
    }

    #[test]
    fn price_file_errors_name_the_key() {
        let e = Prices::parse("[on_demand]\nper_gpu_hour = -1.0\n", "x.toml").unwrap_err().to_string();
        assert!(e.contains("`on_demand.per_gpu_hour`") && e.contains("x.toml"), "{e}");
        let e = Prices::parse("[on_demand]\nper_gpu_hour = 1.0\n[reservd]\n", "x.toml").unwrap_err().to_string();
        assert!(e.contains("reservd"), "{e}");
        let e = Prices::parse("[reserved]\nper_gpu_month = 1.0\n", "x.toml").unwrap_err().to_string();
        assert!(e.contains("on_demand"), "{e}");
        let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/prices.toml");
        let p = Prices::from_file(&example).unwrap();
        assert!(p.reserved.is_some() && p.per_task.is_some());
    }
}
