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

/// Micro-units as an exact decimal (`48947.12`, `-0.000001`): no float noise, no unit inside.
pub fn decimal(micros: i64) -> String {
    let neg = micros < 0;
    let a = micros.unsigned_abs();
    let (int, frac) = (a / 1_000_000, a % 1_000_000);
    let mut s = if neg { format!("-{int}") } else { int.to_string() };
    if frac != 0 {
        s.push('.');
        s.push_str(format!("{frac:06}").trim_end_matches('0'));
    }
    s
}

/// Micro-units for a table: two decimals, thousands separated (`48,947.12`).
pub fn money2(micros: i64) -> String {
    let cents = (i128::from(micros) + if micros >= 0 { 5_000 } else { -5_000 }) / 10_000;
    let neg = cents < 0;
    let a = cents.unsigned_abs();
    let int = thousands((a / 100) as f64);
    format!("{}{int}.{:02}", if neg { "-" } else { "" }, a % 100)
}

fn ms_h(ms: i64) -> String {
    h(crate::period::hours(ms))
}

/// The gap of every group and the total, as table rows.
fn gap_table(out: &mut String, r: &Report) {
    let _ = writeln!(out, "\nWhere the nominal GPU-hours went, by cause (effective weighted by measured use):");
    let header = [
        r.by.as_str(),
        "nominal",
        "effective",
        "low util",
        "data wait",
        "setup",
        "idle",
        "held",
        "interruption",
        "unmeasured",
        "effective %",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| (*s).to_owned()).collect()];
    for g in r.groups.iter().chain(std::iter::once(&r.total)) {
        let x = &g.exact_gpu_ms.gap;
        let measured = g.exact_gpu_ms.nominal - x.unmeasured;
        rows.push(vec![
            g.key.clone(),
            ms_h(g.exact_gpu_ms.nominal),
            ms_h(x.effective),
            ms_h(x.low_util),
            ms_h(x.data_wait),
            ms_h(x.setup),
            ms_h(x.idle),
            ms_h(x.held),
            ms_h(x.interruption),
            ms_h(x.unmeasured),
            if measured > 0 { pct(x.effective as f64 / measured as f64) } else { "not measured".into() },
        ]);
    }
    aligned(out, &rows, true);
    let sm = r.total.exact_gpu_ms.gap.sm_active;
    let _ = writeln!(
        out,
        "effective = productive stretches x their use ({}); the parts add up to nominal in whole GPU-milliseconds.",
        if sm > 0 {
            format!("DCGM SM activity for {} GPU-h of them, GPU utilisation for the rest", ms_h(sm))
        } else {
            "GPU utilisation: no sample carried SM activity".to_owned()
        }
    );
}

/// The queue wait of every group and the total by why the jobs waited: total hours, jobs, mean.
fn queue_wait_table(out: &mut String, r: &Report) {
    if r.total.started_jobs == 0 {
        return;
    }
    let _ = writeln!(out, "\nQueue wait by why the job waited (hours of time, submission to first start):");
    let mut header = vec![r.by.clone(), "started".into(), "queue wait".into(), "mean".into()];
    for (name, _) in r.total.queue_wait_by_reason.parts() {
        header.extend([format!("{name} h"), "jobs".into(), "mean".into()]);
    }
    let mut rows: Vec<Vec<String>> = vec![header];
    for g in r.groups.iter().chain(std::iter::once(&r.total)) {
        if g.started_jobs == 0 {
            continue;
        }
        let mut row =
            vec![g.key.clone(), g.started_jobs.to_string(), h(g.queue_wait_hours), h(g.mean_queue_wait_hours)];
        for (_, p) in g.queue_wait_by_reason.parts() {
            row.extend([h(p.hours), p.jobs.to_string(), h(p.mean_hours)]);
        }
        rows.push(row);
    }
    aligned(out, &rows, true);
    let _ = writeln!(
        out,
        "approval = held for a person's yes; off-peak = deferred by a `defer` decision; capacity = admitted, waiting\n\
         for GPUs; readiness = admitted while the submission declared its image, data or script not ready. The\n\
         parts add up to the queue wait; each mean is over the jobs that waited for that reason."
    );
}

/// Queueing per GPU type: the capacity billed while jobs waited.
fn queueing_table(out: &mut String, rec: &crate::reconcile::Reconciliation) {
    if rec.queueing.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nQueueing: capacity billed, not held, while jobs waited to start (per GPU type and hour):");
    let header = ["GPU type", "billed", "held", "waiting", "queueing", "spare", "held over bill"];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| (*s).to_owned()).collect()];
    for q in rec.queueing.iter().chain(std::iter::once(&rec.queueing_total)) {
        rows.push(vec![
            q.gpu_type.clone(),
            ms_h(q.billed_gpu_ms),
            ms_h(q.held_gpu_ms),
            ms_h(q.waiting_gpu_ms),
            ms_h(q.queueing_gpu_ms),
            ms_h(q.spare_gpu_ms),
            ms_h(q.over_gpu_ms),
        ]);
    }
    aligned(out, &rows, true);
    let _ = writeln!(
        out,
        "per hour: queueing = min(max(0, billed - held), waiting), spare = the rest of max(0, billed - held),\n\
         held over bill = max(0, held - billed); billed + held over bill = held + queueing + spare, exactly."
    );
}

/// Rows of cells, left-aligned first column, a rule before the last row when `total`.
fn aligned(out: &mut String, rows: &[Vec<String>], total: bool) {
    let n = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> =
        (0..n).map(|c| rows.iter().map(|r| r.get(c).map_or(0, |v| v.chars().count())).max().unwrap_or(0)).collect();
    let last = rows.len().saturating_sub(1);
    for (i, row) in rows.iter().enumerate() {
        if total && i == last && i > 0 {
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
}

/// The reconciliation as tables.
fn reconciliation_table(out: &mut String, r: &Report) {
    let Some(rec) = &r.reconciliation else { return };
    let _ = writeln!(out, "\nThe bill against the hours held (card-hours = GPU-hours):");
    let header = [
        r.by.as_str(),
        "GPU type",
        "lines",
        "billed",
        "unused reserved",
        "held",
        "effective",
        "billed not held",
        "held not billed",
        "billed cost",
        "effective cost",
        "paid /GPU-h",
        "list /GPU-h",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| (*s).to_owned()).collect()];
    let cell = |x: &crate::reconcile::RecRow| -> Vec<String> {
        let m = |f: &dyn Fn(&crate::reconcile::Money) -> String| {
            if x.money.is_empty() { "-".to_owned() } else { x.money.iter().map(f).collect::<Vec<_>>().join(" + ") }
        };
        let cur = |c: &str| if c.is_empty() { String::new() } else { format!(" {c}") };
        vec![
            x.key.clone(),
            x.gpu_type.clone(),
            x.lines.to_string(),
            ms_h(x.billed_gpu_ms),
            ms_h(x.unused_gpu_ms),
            ms_h(x.held_gpu_ms),
            ms_h(x.effective_gpu_ms),
            ms_h(x.billed_not_held_gpu_ms),
            ms_h(x.held_not_billed_gpu_ms),
            m(&|c| format!("{}{}", money2(c.billed), cur(&c.currency))),
            m(&|c| format!("{}{}", money2(c.effective), cur(&c.currency))),
            m(&|c| c.paid_per_gpu_hour(x.billed_gpu_ms).map_or("-".into(), |v| format!("{v:.2}"))),
            m(&|c| c.list_per_gpu_hour().map_or("-".into(), |v| format!("{v:.2}"))),
        ]
    };
    for x in rec.rows.iter().chain(std::iter::once(&rec.total)) {
        rows.push(cell(x));
    }
    aligned(out, &rows, true);
    queueing_table(out, rec);
    if rec.by_gpu_type.len() > 1 {
        let _ = writeln!(out, "\n  by GPU type:");
        let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| (*s).to_owned()).collect()];
        for x in &rec.by_gpu_type {
            rows.push(cell(x));
        }
        aligned(out, &rows, false);
    }
    let share = rec.attributed_share.map_or("-".into(), pct);
    let _ =
        writeln!(out, "\nAttributed: {share} of the billed money is charged to a {} other than (unattributed):", r.by);
    for a in &rec.attribution {
        let money = a
            .billed
            .iter()
            .map(|(c, v)| format!("{}{}", money2(*v), if c.is_empty() { String::new() } else { format!(" {c}") }))
            .collect::<Vec<_>>()
            .join(" + ");
        let _ = writeln!(out, "  by {:<14} {:>8} lines  {:>12} GPU-h  {money}", a.how, a.lines, ms_h(a.gpu_ms));
    }
    let _ = writeln!(
        out,
        "billed = the lines' card-hours (corrections counted in the period they correct); unused reserved = the unused\n\
         part of commitments and capacity reservations; billed not held = max(0, billed - unused - held) and held not\n\
         billed = max(0, held - (billed - unused)), per row; paid /GPU-h = effective cost of the GPU lines / billed\n\
         card-hours; list /GPU-h = their list cost / their card-hours. docs/reports.md has the rules."
    );
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
        "delayed",
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
            h(g.prevented.delayed()),
            h(g.dry_run_would_save.total()),
        ]);
    }
    aligned(&mut out, &rows, true);
    let _ = writeln!(
        out,
        "\nGPU-hours; nominal = productive + idle + failure + held + unmeasured (jobs without utilisation samples);\n\
         effective = productive / (nominal - unmeasured), `not measured` when no hour had a sample. Prevented:\n\
         what enforced deny, defer and reclaim decisions kept from running (a reclaim only when it ended the job);\n\
         delayed: denied or deferred work that ran within 7 days after all (the job, its configuration, or the\n\
         same user's same request), so it was not prevented."
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
    queue_wait_table(&mut out, r);
    gap_table(&mut out, r);
    reconciliation_table(&mut out, r);
    if let Some(b) = &r.billing {
        let cur = b.currency.clone().unwrap_or_default();
        let _ = writeln!(out, "\nBilling modes per project ({cur}, {:.2} month(s)):", b.months);
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
    if let Some(p) = &r.pool_billing {
        pool_table(&mut out, p);
    }
    if let Some(c) = &r.cost_per_unit {
        cost_table(&mut out, c);
    }
    out
}

/// The billing modes for the pool, the recommendation and its assumptions.
fn pool_table(out: &mut String, p: &crate::pool::PoolBilling) {
    let cur = p.currency.clone().unwrap_or_default();
    let _ = writeln!(
        out,
        "\nBilling modes for the pool, per GPU type ({cur}, {:.2} month(s), {} hours):",
        p.months, p.hours
    );
    let header = [
        "pool",
        "GPU-h",
        "peak",
        "on demand",
        "per task",
        "pool block",
        "GPUs",
        "unused GPU-h",
        "unused cost",
        "mixed",
        "GPUs",
        "per project",
        "recommended",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| (*s).to_owned()).collect()];
    let o = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.2}"));
    for r in &p.pools {
        rows.push(vec![
            r.pool.clone(),
            h(r.gpu_hours),
            h(r.peak_gpus),
            format!("{:.2}", r.on_demand),
            o(r.per_task),
            o(r.block_cost),
            r.block_gpus.map_or("-".into(), |b| b.to_string()),
            h(r.unused_gpu_hours),
            format!("{:.2}", r.unused_cost),
            format!("{:.2}", r.mix_cost),
            r.mix_block_gpus.to_string(),
            format!("{:.2}", r.per_project_best),
            r.recommended.to_owned(),
        ]);
    }
    aligned(out, &rows, false);
    let _ = writeln!(out, "Recommendation:");
    for s in &p.recommendation {
        let _ = writeln!(out, "  - {s}");
    }
    let _ = writeln!(
        out,
        "  in all {:.2} {cur}: saves {:.2} against everything on demand ({:.2}) and {:.2} against each project on its\n  own cheapest mode ({:.2}).",
        p.total_recommended,
        p.saving_vs_on_demand,
        p.total_on_demand,
        p.saving_vs_per_project,
        p.total_per_project_best
    );
    let _ = writeln!(out, "Assumptions:");
    for a in &p.assumptions {
        let _ = writeln!(out, "  - {a}");
    }
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
         dry_run_deferred_gpu_h,dry_run_reclaimed_gpu_h,unmeasured_gpu_h,unmeasured_gpu_ms,currency,\
         effective_gpu_ms,low_util_gpu_ms,data_wait_gpu_ms,setup_gpu_ms,gap_idle_gpu_ms,gap_held_gpu_ms,interruption_gpu_ms,\
         gap_unmeasured_gpu_ms,wait_approval_h,wait_off_peak_h,wait_capacity_h,wait_readiness_h,\
         delayed_denied_gpu_h,delayed_deferred_gpu_h\r\n",
    );
    for g in r.groups.iter().chain(std::iter::once(&r.total)) {
        let x = &g.gpu_hours;
        let s = &g.exact_gpu_ms;
        // One currency per row: a group charged in two currencies has a row per currency (the hours
        // repeated), so every amount cell is a plain decimal number.
        let charged = g.charged.first();
        let more: Vec<&crate::report::Charged> = g.charged.iter().skip(1).collect();

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
            charged.map_or(String::new(), |c| decimal(c.amount_micros)),
            g.prevented.denied.to_string(),
            g.prevented.deferred.to_string(),
            g.prevented.reclaimed.to_string(),
            g.dry_run_would_save.denied.to_string(),
            g.dry_run_would_save.deferred.to_string(),
            g.dry_run_would_save.reclaimed.to_string(),
            x.unmeasured.to_string(),
            s.unmeasured.to_string(),
            csv_field(charged.map_or("", |c| c.currency.as_str())),
            s.gap.effective.to_string(),
            s.gap.low_util.to_string(),
            s.gap.data_wait.to_string(),
            s.gap.setup.to_string(),
            s.gap.idle.to_string(),
            s.gap.held.to_string(),
            s.gap.interruption.to_string(),
            s.gap.unmeasured.to_string(),
            g.queue_wait_by_reason.approval.hours.to_string(),
            g.queue_wait_by_reason.off_peak.hours.to_string(),
            g.queue_wait_by_reason.capacity.hours.to_string(),
            g.queue_wait_by_reason.readiness.hours.to_string(),
            g.prevented.delayed_denied.to_string(),
            g.prevented.delayed_deferred.to_string(),
        ];
        out.push_str(&fields.join(","));
        out.push_str("\r\n");
        for c in more {
            let mut f = fields.clone();
            let n = f.len();
            f[17] = decimal(c.amount_micros);
            f[n - 15] = csv_field(&c.currency);
            out.push_str(&f.join(","));
            out.push_str("\r\n");
        }
    }
    out
}
