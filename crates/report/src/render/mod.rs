//! Renderers: a terminal table, CSV (one row per group), JSON (the whole [`Report`]) and one
//! self-contained HTML page with inline SVG charts ([`html`](mod@html), [`svg`]).

pub mod html;
pub mod svg;

use std::fmt::Write;

use crate::report::{Group, Report};

pub use html::html;

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
            pct(g.effective_ratio),
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
        "\nGPU-hours in GPU-hours; nominal = productive + idle + failure + held; effective = productive / nominal."
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
         dry_run_deferred_gpu_h,dry_run_reclaimed_gpu_h\r\n",
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
            g.effective_ratio.to_string(),
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
        ];
        out.push_str(&fields.join(","));
        out.push_str("\r\n");
    }
    out
}
