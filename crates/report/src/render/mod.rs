//! Renderers: a terminal table, CSV (one row per group), JSON (the whole [`Report`]) and one
//! self-contained HTML page with inline SVG charts ([`html`](mod@html), [`svg`]).

pub mod html;
pub mod svg;

use std::fmt::Write;

use crate::cost::CostPerUnit;
use crate::report::{Group, Report};

pub use html::{html, html_page};

/// The whole report as pretty JSON.
pub fn json(r: &Report) -> String {
    let mut s = serde_json::to_string_pretty(r).unwrap_or_default();
    s.push('\n');
    s
}

fn money(g: &Group) -> String {
    if g.charged.is_empty() {
        return "-".into();
    }
    g.charged
        .iter()
        .map(
            |c| {
                if c.currency.is_empty() {
                    format!("{:.2}", c.amount)
                } else {
                    format!("{:.2} {}", c.amount, c.currency)
                }
            },
        )
        .collect::<Vec<_>>()
        .join(" + ")
}

/// Rounds for display: one decimal.
fn h(v: f64) -> String {
    format!("{v:.1}")
}

fn pct(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

/// An effective ratio, or `not measured` when no hour of it had a utilisation sample.
fn effective(v: Option<f64>) -> String {
    v.map_or_else(|| "not measured".to_owned(), pct)
}

/// A plain-text table for a terminal.
pub fn table(r: &Report) -> String {
    let mut out = String::new();
    let range = match (&r.from, &r.to) {
        (Some(a), Some(b)) => format!(" ({a} to {b})"),
        _ => " (no facts)".into(),
    };
    let _ = writeln!(
        out,
        "GPU-hours by {} for {}{range}; idle below {} utilisation",
        r.by,
        r.period,
        pct(r.idle_threshold)
    );
    let header = [
        r.by.as_str(),
        "jobs",
        "nominal",
        "productive",
        "idle",
        "failure",
        "held",
        "unmeasured",
        "effective",
        "queue wait h",
        "charged",
        "prevented",
        "dry-run would save",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| (*s).to_owned()).collect()];
    for g in r.groups.iter().chain(std::iter::once(&r.total)) {
        let x = &g.gpu_hours;
        rows.push(vec![
            g.key.clone(),
            g.jobs.to_string(),
            h(x.nominal),
            h(x.productive),
            h(x.idle),
            h(x.failure),
            h(x.held),
            h(x.unmeasured),
            effective(g.effective_ratio),
            h(g.queue_wait_hours),
            money(g),
            h(g.prevented.total()),
            h(g.dry_run_would_save.total()),
        ]);
    }
    let widths: Vec<usize> =
        (0..header.len()).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    let last = rows.len() - 1;
    for (i, row) in rows.iter().enumerate() {
        if i == last {
            let _ = writeln!(out, "{}", widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>().join("  "));
        }
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(c, (v, w))| if c == 0 { format!("{v:<w$}") } else { format!("{v:>w$}") })
            .collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
    }
    let _ = writeln!(
        out,
        "\nGPU-hours; nominal = productive + idle + failure + held + unmeasured (jobs without utilisation samples);\n\
         effective = productive / (nominal - unmeasured), `not measured` when no hour had a sample. Prevented:\n\
         what enforced deny, defer and reclaim decisions kept from running (a reclaim only when it ended the job)."
    );
    if !r.top_leaks.is_empty() {
        let _ = writeln!(out, "\nTop leaks:");
        for (k, l) in &r.top_leaks {
            let _ = writeln!(
                out,
                "  {k:<20} {:<8} {:>12} GPU-h  {:>6} of its nominal",
                l.leak,
                h(l.gpu_hours),
                pct(l.share)
            );
        }
    }
    if let Some(b) = &r.billing {
        let cur = b.currency.clone().unwrap_or_default();
        let _ = writeln!(out, "\nBilling modes ({cur}, {} month(s)):", b.months);
        let _ = writeln!(
            out,
            "  {:<20} {:>12} {:>12} {:>20} {:>12}  {:<10} {:>12}",
            "project", "GPU-h", "on demand", "reserved (block)", "per task", "cheapest", "saves"
        );
        for p in &b.projects {
            let c = &p.comparison;
            let res = c.reserved.as_ref().map_or("-".into(), |r| format!("{:.2} ({} GPUs)", r.cost, r.block_gpus));
            let task = c.per_task.map_or("-".into(), |v| format!("{v:.2}"));
            let _ = writeln!(
                out,
                "  {:<20} {:>12} {:>12.2} {:>20} {:>12}  {:<10} {:>12.2}",
                p.project,
                h(c.gpu_hours),
                c.on_demand,
                res,
                task,
                c.cheapest,
                c.saving_vs_next
            );
        }
        let _ = writeln!(
            out,
            "  each project on its cheapest mode: {:.2} {cur}, against {:.2} {cur} on demand",
            b.total_cheapest, b.total_on_demand
        );
    }
    if let Some(c) = &r.cost_per_unit {
        cost_table(&mut out, c);
    }
    out
}

/// Three significant digits (`0.00278`, `4.17`, `1,234`): costs per unit are small numbers.
pub fn sig(v: f64) -> String {
    if !v.is_finite() || v == 0.0 {
        return format!("{v}");
    }
    let mag = v.abs().log10().floor();
    if mag >= 3.0 {
        return thousands(v.round());
    }
    let decimals = (2.0 - mag).clamp(0.0, 12.0) as usize;
    format!("{v:.decimals$}")
}

fn thousands(v: f64) -> String {
    let digits = format!("{:.0}", v.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if v < 0.0 { format!("-{out}") } else { out }
}

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "-".to_owned(), f)
}

fn gpus(n: u32) -> String {
    if n == 1 { "1 GPU".into() } else { format!("{n} GPUs") }
}

fn cost_table(out: &mut String, c: &CostPerUnit) {
    let cur = c.currency.clone().unwrap_or_default();
    let _ = writeln!(
        out,
        "\nCost per unit of work by configuration and GPU type{}: {} runs with throughput",
        if cur.is_empty() { String::new() } else { format!(" ({cur})") },
        c.runs
    );
    if c.runs_without_config + c.runs_without_gpu_type > 0 {
        let _ = writeln!(
            out,
            "  not counted: {} runs without a configuration, {} without a GPU type",
            c.runs_without_config, c.runs_without_gpu_type
        );
    }
    if !c.priced {
        let _ = writeln!(out, "  no prices: pass --prices FILE (with [gpu_types]) for costs and the ranking");
    }
    for cfg in &c.configs {
        let best = cfg.cheapest.as_ref().map_or(String::new(), |b| {
            format!("; cheapest: {} on {} at {} per 1k {} on demand", b.gpu_type, gpus(b.gpus), sig(b.per_1k), cfg.unit)
        });
        let _ = writeln!(out, "\n  configuration {} ({}/s), {} runs{best}", cfg.config, cfg.unit, cfg.runs);
        let header = [
            "GPU type".to_owned(),
            "GPUs".into(),
            "runs".into(),
            format!("{}/s per GPU", cfg.unit),
            "min-max".into(),
            "sd".into(),
            "on demand /1k".into(),
            "reserved /1k".into(),
            "per task /1k".into(),
            "rank".into(),
            "vs cheapest".into(),
            "scaling".into(),
        ];
        let mut rows: Vec<Vec<String>> = vec![header.to_vec()];
        for row in &cfg.rows {
            let rank = match (row.rank, row.separated) {
                (Some(r), Some(false)) => format!("{r} (overlaps)"),
                (Some(r), _) => r.to_string(),
                (None, _) => "-".into(),
            };
            rows.push(vec![
                row.gpu_type.clone(),
                row.gpus.to_string(),
                row.runs.to_string(),
                sig(row.throughput_per_gpu),
                format!("{}-{}", sig(row.min_per_gpu), sig(row.max_per_gpu)),
                sig(row.stddev_per_gpu),
                opt(row.per_1k("on_demand"), sig),
                opt(row.per_1k("reserved"), sig),
                opt(row.per_1k("per_task"), sig),
                rank,
                opt(row.vs_cheapest, |v| format!("{v:.2}x")),
                match (row.scaling_efficiency, row.scaling_base_gpus) {
                    (Some(e), Some(b)) => format!("{} of {}", pct(e), gpus(b)),
                    _ => "-".into(),
                },
            ]);
        }
        let widths: Vec<usize> =
            (0..header.len()).map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
        for row in &rows {
            let cells: Vec<String> = row
                .iter()
                .zip(&widths)
                .enumerate()
                .map(|(i, (v, w))| if i == 0 { format!("{v:<w$}") } else { format!("{v:>w$}") })
                .collect();
            let _ = writeln!(out, "    {}", cells.join("  ").trim_end());
        }
    }
    let _ = writeln!(
        out,
        "\nCost per 1k units = rate per GPU-hour / (throughput per GPU x 3600) x 1000; rank by on-demand cost at each GPU count \
         (\"overlaps\": the cheapest type's slowest run is not cheaper than the next type's fastest); scaling = throughput per GPU \
         against the smallest GPU count of the same type."
    );
}

/// RFC 4180 CSV of the cost-per-unit section (`--cost-per-unit --format csv`): one row per
/// configuration, unit, GPU type and GPU count.
pub fn cost_csv(r: &Report) -> String {
    let mut out = String::from(
        "period,config,unit,gpu_type,gpus,runs,throughput_per_gpu,min_per_gpu,max_per_gpu,stddev_per_gpu,\
         on_demand_per_1k,reserved_per_1k,per_task_per_1k,rank,vs_cheapest,separated,scaling_efficiency,scaling_base_gpus\r\n",
    );
    let Some(c) = &r.cost_per_unit else { return out };
    let o = |v: Option<f64>| v.map_or(String::new(), |v| v.to_string());
    for cfg in &c.configs {
        for row in &cfg.rows {
            let fields = [
                csv_field(&r.period),
                csv_field(&cfg.config),
                csv_field(&cfg.unit),
                csv_field(&row.gpu_type),
                row.gpus.to_string(),
                row.runs.to_string(),
                row.throughput_per_gpu.to_string(),
                row.min_per_gpu.to_string(),
                row.max_per_gpu.to_string(),
                row.stddev_per_gpu.to_string(),
                o(row.per_1k("on_demand")),
                o(row.per_1k("reserved")),
                o(row.per_1k("per_task")),
                row.rank.map_or(String::new(), |v| v.to_string()),
                o(row.vs_cheapest),
                row.separated.map_or(String::new(), |v| v.to_string()),
                o(row.scaling_efficiency),
                row.scaling_base_gpus.map_or(String::new(), |v| v.to_string()),
            ];
            out.push_str(&fields.join(","));
            out.push_str("\r\n");
        }
    }
    out
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_owned() }
}

/// RFC 4180 CSV: a header and one row per group, then the total row (key `(total)`).
pub fn csv(r: &Report) -> String {
    let mut out = String::from(
        "period,group_by,key,jobs,nominal_gpu_h,productive_gpu_h,idle_gpu_h,failure_gpu_h,held_gpu_h,effective_ratio,\
         nominal_gpu_ms,productive_gpu_ms,idle_gpu_ms,failure_gpu_ms,held_gpu_ms,started_jobs,queue_wait_h,\
         charged,prevented_denied_gpu_h,prevented_deferred_gpu_h,prevented_reclaimed_gpu_h,dry_run_denied_gpu_h,\
         dry_run_deferred_gpu_h,dry_run_reclaimed_gpu_h,unmeasured_gpu_h,unmeasured_gpu_ms\r\n",
    );
    for g in r.groups.iter().chain(std::iter::once(&r.total)) {
        let x = &g.gpu_hours;
        let s = &g.exact_gpu_ms;
        let charged = g
            .charged
            .iter()
            .map(|c| format!("{} {}", c.amount, c.currency).trim().to_owned())
            .collect::<Vec<_>>()
            .join("; ");
        let fields = [
            csv_field(&r.period),
            csv_field(&r.by),
            csv_field(&g.key),
            g.jobs.to_string(),
            x.nominal.to_string(),
            x.productive.to_string(),
            x.idle.to_string(),
            x.failure.to_string(),
            x.held.to_string(),
            g.effective_ratio.map(|v| v.to_string()).unwrap_or_default(),
            s.nominal.to_string(),
            s.productive.to_string(),
            s.idle.to_string(),
            s.failure.to_string(),
            s.held.to_string(),
            g.started_jobs.to_string(),
            g.queue_wait_hours.to_string(),
            csv_field(&charged),
            g.prevented.denied.to_string(),
            g.prevented.deferred.to_string(),
            g.prevented.reclaimed.to_string(),
            g.dry_run_would_save.denied.to_string(),
            g.dry_run_would_save.deferred.to_string(),
            g.dry_run_would_save.reclaimed.to_string(),
            x.unmeasured.to_string(),
            s.unmeasured.to_string(),
        ];
        out.push_str(&fields.join(","));
        out.push_str("\r\n");
    }
    out
}
