//! The HTML report: one self-contained file — inline CSS and inline SVG, no script, no external
//! reference of any kind — so it can be mailed, archived or opened offline.

use std::fmt::Write;

use super::svg::{self, Series, esc, short};
use crate::report::Report;

const PRODUCTIVE: &str = "#2e7d32";
const IDLE: &str = "#f9a825";
const FAILURE: &str = "#c62828";
const HELD: &str = "#6a1b9a";
const UNMEASURED: &str = "#9e9e9e";
const PALETTE: [&str; 8] = ["#1565c0", "#ef6c00", "#2e7d32", "#ad1457", "#00838f", "#6d4c41", "#5e35b1", "#9e9d24"];

const CSS: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:20px;color:#222;max-width:930px}
h1{font-size:22px}h2{font-size:17px;margin-top:28px}table{border-collapse:collapse;font-size:13px}
td,th{padding:3px 8px;border-bottom:1px solid #ddd;text-align:right}td:first-child,th:first-child{text-align:left}
tr.total td{font-weight:600;border-top:2px solid #888}svg{display:block;margin:8px 0;background:#fff}
.ct{font-size:14px;font-weight:600}.tick,.lg,.lb,.val{font-size:11px;fill:#333}.grid{stroke:#e3e3e3}
.frame{fill:none;stroke:#ccc}.nd{font-size:13px;fill:#888}.small{display:flex;flex-wrap:wrap;gap:8px}
.note{color:#555;font-size:12px}";

fn pct(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

/// An effective ratio, or `not measured` when no hour of it had a utilisation sample.
fn effective(v: Option<f64>) -> String {
    v.map_or_else(|| "not measured".to_owned(), pct)
}

/// Chart 5, the cost per unit of work: the on-demand cost per million units of each GPU type at each
/// configuration and GPU count, and the tables.
fn cost_section(o: &mut String, c: &crate::cost::CostPerUnit) {
    use super::sig;
    let cur = c.currency.clone().unwrap_or_default();
    let _ = write!(
        o,
        "<h2>Cost per unit of work</h2><p>{} runs with throughput, by configuration and GPU type{}.</p>",
        c.runs,
        if cur.is_empty() { String::new() } else { format!(" ({})", esc(&cur)) }
    );
    if c.runs_without_config + c.runs_without_gpu_type > 0 {
        let _ = write!(
            o,
            "<p class=\"note\">Not counted: {} runs without a configuration, {} without a GPU type.</p>",
            c.runs_without_config, c.runs_without_gpu_type
        );
    }
    if !c.priced {
        o.push_str("<p class=\"note\">No prices: pass <code>--prices FILE</code> (with <code>[gpu_types]</code>) for costs and the ranking.</p>");
    }
    // The chart: categories are (configuration, GPU count), series the GPU types.
    let mut cats: Vec<String> = Vec::new();
    let mut keys: Vec<(&str, &str, u32)> = Vec::new();
    let mut types: Vec<&str> = Vec::new();
    for cfg in c.configs.iter().take(6) {
        let mut counts: Vec<u32> = cfg.rows.iter().map(|r| r.gpus).collect();
        counts.dedup();
        // Ticks are short: the count first, then the end of the configuration's name.
        let chars: Vec<char> = cfg.config.chars().collect();
        let tail: String = chars[chars.len().saturating_sub(6)..].iter().collect();
        for g in counts {
            cats.push(format!("x{g} {tail}"));
            keys.push((&cfg.config, &cfg.unit, g));
        }
        for r in &cfg.rows {
            if !types.contains(&r.gpu_type.as_str()) {
                types.push(&r.gpu_type);
            }
        }
    }
    cats.truncate(10);
    keys.truncate(10);
    types.truncate(PALETTE.len());
    if c.priced && !cats.is_empty() {
        let series: Vec<Series> = types
            .iter()
            .enumerate()
            .map(|(i, t)| Series {
                name: (*t).to_owned(),
                color: PALETTE[i % PALETTE.len()].into(),
                values: keys
                    .iter()
                    .map(|(cfg, unit, g)| {
                        c.configs
                            .iter()
                            .find(|x| x.config == *cfg && x.unit == *unit)
                            .and_then(|x| x.rows.iter().find(|r| r.gpu_type == *t && r.gpus == *g))
                            .and_then(|r| r.per_1k("on_demand"))
                            .map(|v| v * 1000.0)
                    })
                    .collect(),
            })
            .collect();
        o.push_str(&svg::grouped_bars(
            "cost-per-unit",
            &format!(
                "On-demand cost per million units of work, by GPU count x configuration and GPU type{}",
                if cur.is_empty() { String::new() } else { format!(" ({cur})") }
            ),
            &cats,
            &series,
            format!("{cur} per 1M units").trim(),
        ));
    }
    for cfg in &c.configs {
        let best = cfg.cheapest.as_ref().map_or(String::new(), |b| {
            format!(
                "; cheapest: <b>{}</b> on {} GPU{}, {} per 1k {} on demand",
                esc(&b.gpu_type),
                b.gpus,
                if b.gpus == 1 { "" } else { "s" },
                sig(b.per_1k),
                esc(&cfg.unit)
            )
        });
        let _ = write!(
            o,
            "<p>Configuration <b>{}</b> ({}/s), {} runs{best}</p><table><tr><th>GPU type</th><th>GPUs</th><th>runs</th><th>{}/s per GPU</th><th>min&ndash;max</th><th>sd</th><th>on demand /1k</th><th>reserved /1k</th><th>per task /1k</th><th>rank</th><th>vs cheapest</th><th>scaling</th></tr>",
            esc(&cfg.config),
            esc(&cfg.unit),
            cfg.runs,
            esc(&cfg.unit)
        );
        for r in &cfg.rows {
            let cell = |v: Option<f64>| v.map_or("-".to_owned(), sig);
            let rank = match (r.rank, r.separated) {
                (Some(x), Some(false)) => format!("{x} (overlaps)"),
                (Some(x), _) => x.to_string(),
                (None, _) => "-".into(),
            };
            let scaling = match (r.scaling_efficiency, r.scaling_base_gpus) {
                (Some(e), Some(b)) => format!("{} of {b} GPU{}", pct(e), if b == 1 { "" } else { "s" }),
                _ => "-".into(),
            };
            let _ = write!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}&ndash;{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&r.gpu_type),
                r.gpus,
                r.runs,
                sig(r.throughput_per_gpu),
                sig(r.min_per_gpu),
                sig(r.max_per_gpu),
                sig(r.stddev_per_gpu),
                cell(r.per_1k("on_demand")),
                cell(r.per_1k("reserved")),
                cell(r.per_1k("per_task")),
                rank,
                r.vs_cheapest.map_or("-".into(), |v| format!("{v:.2}&times;")),
                scaling
            );
        }
        o.push_str("</table>");
    }
    o.push_str("<p class=\"note\">Cost per 1k units = rate per GPU-hour &divide; (throughput per GPU &times; 3600) &times; 1000, with the GPU type's rates from the price file. Rank: by on-demand cost at each GPU count; &ldquo;overlaps&rdquo; when the cheapest type's slowest run is not cheaper than the next type's fastest. Scaling: throughput per GPU against the smallest GPU count of the same type. Rules: docs/reports.md.</p>");
}

/// The gap between nominal and effective by cause: stacked bars per group, and the table.
fn gap_section(o: &mut String, r: &Report) {
    let groups: Vec<_> = r.groups.iter().take(25).collect();
    let labels: Vec<String> = groups.iter().map(|g| g.key.clone()).collect();
    let h = |ms: i64| crate::period::hours(ms);
    type Part = (&'static str, &'static str, fn(&crate::facts::Gap) -> i64);
    let parts: [Part; 8] = [
        ("effective (by use)", PRODUCTIVE, |g| g.effective),
        ("low utilisation", "#9ccc65", |g| g.low_util),
        ("waiting for data", "#4fc3f7", |g| g.data_wait),
        ("setup", "#ffb74d", |g| g.setup),
        ("idle", IDLE, |g| g.idle),
        ("held after the work", HELD, |g| g.held),
        ("interruption", FAILURE, |g| g.interruption),
        ("not measured", UNMEASURED, |g| g.unmeasured),
    ];
    let bars: Vec<Series> = parts
        .iter()
        .map(|(name, color, f)| Series {
            name: (*name).into(),
            color: (*color).into(),
            values: groups.iter().map(|g| Some(h(f(&g.exact_gpu_ms.gap)))).collect(),
        })
        .collect();
    let _ = write!(o, "<h2>The gap between nominal and effective, by cause</h2>");
    o.push_str(&svg::stacked_bars(
        "gap",
        &format!("Nominal GPU-hours by {}: effective weighted by use, and the gap by cause", r.by),
        &labels,
        &bars,
        "GPU-h",
    ));
    let _ = write!(
        o,
        "<table><tr><th>{}</th><th>nominal</th><th>effective</th><th>low util</th><th>data wait</th><th>setup</th><th>idle</th><th>held</th><th>interruption</th><th>not measured</th><th>effective %</th></tr>",
        esc(&r.by)
    );
    for (g, cls) in r.groups.iter().map(|g| (g, "")).chain(std::iter::once((&r.total, " class=\"total\""))) {
        let x = &g.exact_gpu_ms.gap;
        let measured = g.exact_gpu_ms.nominal - x.unmeasured;
        let _ = write!(
            o,
            "<tr{cls}><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{}</td></tr>",
            esc(&g.key),
            h(g.exact_gpu_ms.nominal),
            h(x.effective),
            h(x.low_util),
            h(x.data_wait),
            h(x.setup),
            h(x.idle),
            h(x.held),
            h(x.interruption),
            h(x.unmeasured),
            if measured > 0 { pct(x.effective as f64 / measured as f64) } else { "not measured".into() }
        );
    }
    let sm = r.total.exact_gpu_ms.gap.sm_active;
    let _ = write!(
        o,
        "</table><p class=\"note\">Effective = each productive stretch &times; its measured use ({}). The parts are counted in whole GPU-milliseconds and add up to nominal for every job, day and group. Waiting for data only where the job's own input-wait counter says so; interruption = every hour of requeued, preempted or failed runs and of reruns that did not succeed. docs/reports.md has the formulas.</p>",
        if sm > 0 {
            format!("DCGM SM activity for {:.1} GPU-h of them, GPU utilisation for the rest", h(sm))
        } else {
            "GPU utilisation: no sample carried SM activity".to_owned()
        }
    );
}

/// The bill against the hours held: grouped bars per GPU type, the table, the attribution.
fn reconciliation_section(o: &mut String, r: &Report) {
    let Some(rec) = &r.reconciliation else { return };
    let h = |ms: i64| crate::period::hours(ms);
    o.push_str("<h2>The bill against the hours held</h2>");
    let types: Vec<&crate::reconcile::RecRow> = rec.by_gpu_type.iter().take(10).collect();
    let cats: Vec<String> = types.iter().map(|t| t.gpu_type.clone()).collect();
    let series = |name: &str, color: &str, f: &dyn Fn(&crate::reconcile::RecRow) -> i64| Series {
        name: name.into(),
        color: color.into(),
        values: types.iter().map(|t| Some(h(f(t)))).collect(),
    };
    o.push_str(&svg::grouped_bars(
        "reconciliation",
        "Card-hours by GPU type: billed, of which reserved and unused, held by jobs, effective",
        &cats,
        &[
            series("billed", "#1565c0", &|t| t.billed_gpu_ms),
            series("reserved, unused", "#ef6c00", &|t| t.unused_gpu_ms),
            series("held by jobs", "#6d4c41", &|t| t.held_gpu_ms),
            series("effective (by use)", PRODUCTIVE, &|t| t.effective_gpu_ms),
        ],
        "GPU-h",
    ));
    let _ = write!(
        o,
        "<table><tr><th>{}</th><th>GPU type</th><th>lines</th><th>billed GPU-h</th><th>unused reserved</th><th>held</th><th>effective</th><th>billed not held</th><th>held not billed</th><th>billed cost</th><th>effective cost</th><th>paid /GPU-h</th><th>list /GPU-h</th></tr>",
        esc(&r.by)
    );
    for (x, cls) in rec.rows.iter().map(|x| (x, "")).chain(std::iter::once((&rec.total, " class=\"total\""))) {
        let m = |f: &dyn Fn(&crate::reconcile::Money) -> String| {
            if x.money.is_empty() { "-".to_owned() } else { x.money.iter().map(f).collect::<Vec<_>>().join(" + ") }
        };
        let cur = |c: &str| if c.is_empty() { String::new() } else { format!(" {c}") };
        let _ = write!(
            o,
            "<tr{cls}><td>{}</td><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&x.key),
            esc(&x.gpu_type),
            x.lines,
            h(x.billed_gpu_ms),
            h(x.unused_gpu_ms),
            h(x.held_gpu_ms),
            h(x.effective_gpu_ms),
            h(x.billed_not_held_gpu_ms),
            h(x.held_not_billed_gpu_ms),
            esc(&m(&|c| format!("{}{}", super::money2(c.billed), cur(&c.currency)))),
            esc(&m(&|c| format!("{}{}", super::money2(c.effective), cur(&c.currency)))),
            m(&|c| c.paid_per_gpu_hour(x.billed_gpu_ms).map_or("-".into(), |v| format!("{v:.2}"))),
            m(&|c| c.list_per_gpu_hour().map_or("-".into(), |v| format!("{v:.2}")))
        );
    }
    o.push_str("</table><p>");
    let _ = write!(
        o,
        "Attributed: <b>{}</b> of the billed money is charged to a {} other than (unattributed). ",
        rec.attributed_share.map_or("-".into(), pct),
        esc(&r.by)
    );
    for a in &rec.attribution {
        let money = a
            .billed
            .iter()
            .map(|(c, v)| {
                format!("{}{}", super::money2(*v), if c.is_empty() { String::new() } else { format!(" {c}") })
            })
            .collect::<Vec<_>>()
            .join(" + ");
        let _ = write!(o, "By {}: {} lines, {:.1} GPU-h, {}. ", esc(&a.how), a.lines, h(a.gpu_ms), esc(&money));
    }
    o.push_str("</p>");
    if !rec.queueing.is_empty() {
        o.push_str("<h3>Queueing: capacity billed while jobs waited</h3><table><tr><th>GPU type</th><th>billed GPU-h</th><th>held</th><th>waiting</th><th>queueing</th><th>spare</th><th>held over bill</th></tr>");
        for (q, cls) in
            rec.queueing.iter().map(|q| (q, "")).chain(std::iter::once((&rec.queueing_total, " class=\"total\"")))
        {
            let _ = write!(
                o,
                "<tr{cls}><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td></tr>",
                esc(&q.gpu_type),
                h(q.billed_gpu_ms),
                h(q.held_gpu_ms),
                h(q.waiting_gpu_ms),
                h(q.queueing_gpu_ms),
                h(q.spare_gpu_ms),
                h(q.over_gpu_ms)
            );
        }
        o.push_str("</table><p class=\"note\">Per GPU type and hour: queueing = min(max(0, billed &minus; held), waiting), where waiting = the GPUs of the jobs waiting to start; spare = the rest of the capacity billed and not held; held over bill = max(0, held &minus; billed). Billed + held over bill = held + queueing + spare, exactly.</p>");
    }
    o.push_str("<p class=\"note\">Billed: the card-hours of the bill's lines, corrections counted in the period they correct. Unused reserved: the unused part of commitments and capacity reservations. Billed not held = max(0, billed &minus; unused &minus; held) and held not billed = max(0, held &minus; (billed &minus; unused)), per row. Paid per GPU-hour: the effective cost of the GPU lines over their card-hours; list: their list cost over theirs. docs/reports.md has the rules.</p>");
}

/// Renders the whole report as one HTML page.
pub fn html(r: &Report) -> String {
    html_page(r, false)
}

/// Renders the whole report as one HTML page; `served` adds the links of the page `bursar serve`
/// answers at `/report` (back to the pool page, the same report as JSON).
pub fn html_page(r: &Report, served: bool) -> String {
    let mut o = String::with_capacity(64 * 1024);
    let range = match (&r.from, &r.to) {
        (Some(a), Some(b)) => format!("{a} to {b}"),
        _ => "no facts yet".into(),
    };
    let _ = write!(
        o,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>bursar report {}</title><style>{CSS}</style></head><body>",
        esc(&r.period)
    );
    if served {
        let _ = write!(
            o,
            "<p class=\"note\"><a href=\"/\">&larr; The pool</a> &middot; <a href=\"/v1/report?period={}&amp;by={}\">as JSON</a></p>",
            esc(&r.period),
            esc(&r.by)
        );
    }
    let _ = write!(
        o,
        "<h1>Where the GPU-hours went: {}</h1><p>{} &middot; by {} &middot; idle below {} utilisation &middot; {} audit events</p>",
        esc(&r.period),
        esc(&range),
        esc(&r.by),
        pct(r.idle_threshold),
        r.events_covered
    );
    let t = &r.total.gpu_hours;
    let _ = write!(
        o,
        "<p><b>{}</b> nominal GPU-hours, <b>{}</b> effective ({}); idle {}, lost to failure {}, held after the work ended {}{}.</p>",
        short(t.nominal),
        short(t.productive),
        effective(r.total.effective_ratio),
        short(t.idle),
        short(t.failure),
        short(t.held),
        if t.unmeasured > 0.0 {
            format!("; not measured {} (jobs without utilisation samples)", short(t.unmeasured))
        } else {
            String::new()
        }
    );

    // 1. Nominal vs effective.
    let groups: Vec<_> = r.groups.iter().take(25).collect();
    let labels: Vec<String> = groups.iter().map(|g| g.key.clone()).collect();
    let seg = |name: &str, color: &str, f: &dyn Fn(&crate::report::Hours) -> f64| Series {
        name: name.into(),
        color: color.into(),
        values: groups.iter().map(|g| Some(f(&g.gpu_hours))).collect(),
    };
    let bars = [
        seg("productive", PRODUCTIVE, &|h| h.productive),
        seg("idle", IDLE, &|h| h.idle),
        seg("failure", FAILURE, &|h| h.failure),
        seg("held", HELD, &|h| h.held),
        seg("not measured", UNMEASURED, &|h| h.unmeasured),
    ];
    let _ = write!(o, "<h2>Nominal vs effective GPU-hours by {}</h2>", esc(&r.by));
    o.push_str(&svg::stacked_bars(
        "split",
        &format!("Nominal GPU-hours by {}, split into effective (productive) and leaks", r.by),
        &labels,
        &bars,
        "GPU-h",
    ));
    if r.groups.len() > groups.len() {
        let _ = write!(
            o,
            "<p class=\"note\">The {} largest of {} shown; the table below has all.</p>",
            groups.len(),
            r.groups.len()
        );
    }

    // The table.
    let _ = write!(
        o,
        "<table><tr><th>{}</th><th>jobs</th><th>nominal</th><th>productive</th><th>idle</th><th>failure</th><th>held</th><th>not measured</th><th>effective</th><th>queue wait h</th><th>charged</th><th>prevented</th><th>delayed</th><th>dry-run would save</th><th>top leak</th></tr>",
        esc(&r.by)
    );
    for (g, cls) in r.groups.iter().map(|g| (g, "")).chain(std::iter::once((&r.total, " class=\"total\""))) {
        let h = &g.gpu_hours;
        let charged = if g.charged.is_empty() {
            "-".to_owned()
        } else {
            g.charged.iter().map(|c| format!("{:.2} {}", c.amount, c.currency)).collect::<Vec<_>>().join(" + ")
        };
        let leak = g.top_leaks.first().map_or("-".to_owned(), |l| format!("{} {}", l.leak, pct(l.share)));
        let _ = write!(
            o,
            "<tr{cls}><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{}</td><td>{:.1}</td><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{}</td></tr>",
            esc(&g.key),
            g.jobs,
            h.nominal,
            h.productive,
            h.idle,
            h.failure,
            h.held,
            h.unmeasured,
            effective(g.effective_ratio),
            g.queue_wait_hours,
            esc(&charged),
            g.prevented.total(),
            g.prevented.delayed(),
            g.dry_run_would_save.total(),
            esc(&leak)
        );
    }
    o.push_str("</table><p class=\"note\">GPU-hours; nominal = productive + idle + failure + held + not measured (the hours of jobs without utilisation samples; the parts are counted in whole GPU-milliseconds, so they always add up to the total); effective = productive / measured hours. Prevented: GPU-hours that enforced deny, defer and reclaim decisions kept from running (a reclaim only when it ended the job, not the unused reservation of a job that ended on its own), not counting work that ran within 7 days after all; delayed: that work (the denied job itself, its configuration, or the same user's same request ran); dry-run: what dry-run policies would have stopped. docs/reports.md has the rules (installed as /usr/share/doc/bursar/reports.md).</p>");

    queue_wait_section(&mut o, r);

    // 1b. The gap by cause.
    gap_section(&mut o, r);
    // 1c. The bill against the hours held.
    reconciliation_section(&mut o, r);

    // 2. Utilisation over time.
    let days: Vec<String> = r.daily.iter().map(|d| d.day.get(5..).unwrap_or(&d.day).to_owned()).collect();
    let mut util = vec![Series {
        name: "all projects".into(),
        color: "#222".into(),
        values: r
            .daily
            .iter()
            .map(|d| (d.gpu_hours.nominal > 0.0).then(|| d.gpu_hours.productive / d.gpu_hours.nominal))
            .collect(),
    }];
    let mut by_use: Vec<&crate::report::Burndown> = r.burndown.iter().collect();
    by_use.truncate(5);
    for (i, b) in by_use.iter().enumerate() {
        if let Some(v) = r.daily_ratio_by_project.get(&b.project) {
            util.push(Series { name: b.project.clone(), color: PALETTE[i % PALETTE.len()].into(), values: v.clone() });
        }
    }
    o.push_str("<h2>Utilisation over time</h2>");
    o.push_str(&svg::lines(
        "utilisation",
        "Effective share of nominal GPU-hours per day (the pool and its five largest projects)",
        &days,
        &util,
        Some(1.0),
        |v| format!("{:.0}%", v * 100.0),
        (900, 300),
    ));
    let pool = vec![
        Series {
            name: "nominal".into(),
            color: "#1565c0".into(),
            values: r.daily.iter().map(|d| Some(d.gpu_hours.nominal)).collect(),
        },
        Series {
            name: "productive".into(),
            color: PRODUCTIVE.into(),
            values: r.daily.iter().map(|d| Some(d.gpu_hours.productive)).collect(),
        },
    ];
    o.push_str(&svg::lines(
        "daily-hours",
        "GPU-hours per day, nominal and productive",
        &days,
        &pool,
        None,
        short,
        (900, 260),
    ));

    // 3. Quota burn-down.
    o.push_str("<h2>Quota burn-down</h2><div class=\"small\">");
    if r.burndown.is_empty() {
        o.push_str(&svg::lines("burndown", "No project had a job in this period", &[], &[], None, short, (440, 200)));
    }
    for (i, b) in r.burndown.iter().take(12).enumerate() {
        // Budget left goes below zero when the project spent past it (issue 52: it used to stop at 0,
        // so 8,023 of 6,000 read as a flat zero); the dashed line at 0 marks the budget.
        let (title, values, max, mark) = match b.budget_gpu_hours {
            Some(budget) => {
                let last = b.cumulative_gpu_hours.last().copied().unwrap_or(0.0);
                let over = if last > budget { format!(", over by {}", short(last - budget)) } else { String::new() };
                (
                    format!("{}: budget left of {} GPU-h{over}", b.project, short(budget)),
                    b.cumulative_gpu_hours.iter().map(|c| Some(budget - c)).collect::<Vec<_>>(),
                    Some(budget),
                    Some((0.0, "budget spent")),
                )
            }
            None => (
                format!("{}: GPU-h used (no enforced monthly quota)", b.project),
                b.cumulative_gpu_hours.iter().map(|c| Some(*c)).collect(),
                None,
                None,
            ),
        };
        let s = Series { name: b.project.clone(), color: PALETTE[i % PALETTE.len()].into(), values };
        o.push_str(&svg::lines_marked(&format!("burndown-{i}"), &title, &days, &[s], max, mark, short, (440, 200)));
    }
    o.push_str("</div>");
    if !r.burndown.is_empty() && r.burndown.iter().all(|b| b.budget_gpu_hours.is_none()) {
        o.push_str("<p class=\"note\">No budget lines: no enforced monthly quota limits these projects (budgets come from the policies the log was written with, or <code>--policies</code>).</p>");
    } else if r.burndown.first().is_some_and(|b| b.cumulative_gpu_hours.len() > 31) {
        o.push_str("<p class=\"note\">Each month has its own budget: the lines start again at each month.</p>");
    }

    // 4. Billing.
    o.push_str("<h2>Billing modes</h2>");
    match &r.billing {
        None => o.push_str("<p class=\"note\">Pass <code>--prices FILE</code> to compare pay-per-GPU-hour, a reserved block and per-task pricing.</p>"),
        Some(b) => {
            let cur = b.currency.clone().unwrap_or_default();
            let projects: Vec<_> = b.projects.iter().take(15).collect();
            let cats: Vec<String> = projects.iter().map(|p| p.project.clone()).collect();
            let mut series = vec![Series {
                name: "on demand".into(),
                color: "#1565c0".into(),
                values: projects.iter().map(|p| Some(p.comparison.on_demand)).collect(),
            }];
            if b.prices.reserved.is_some() {
                series.push(Series {
                    name: "reserved (best block)".into(),
                    color: "#ef6c00".into(),
                    values: projects.iter().map(|p| p.comparison.reserved.as_ref().map(|r| r.cost)).collect(),
                });
            }
            if b.prices.per_task.is_some() {
                series.push(Series {
                    name: "per task".into(),
                    color: "#2e7d32".into(),
                    values: projects.iter().map(|p| p.comparison.per_task).collect(),
                });
            }
            o.push_str(&svg::grouped_bars("billing", &format!("Cost of each project's usage under each billing mode ({cur})"), &cats, &series, &cur));
            o.push_str("<table><tr><th>project</th><th>GPU-h</th><th>peak GPUs</th><th>on demand</th><th>reserved</th><th>block GPUs</th><th>per task</th><th>cheapest</th><th>saves vs next</th></tr>");
            for p in &b.projects {
                let c = &p.comparison;
                let _ = write!(
                    o,
                    "<tr><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{:.2}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td></tr>",
                    esc(&p.project),
                    c.gpu_hours,
                    c.peak_gpus,
                    c.on_demand,
                    c.reserved.as_ref().map_or("-".into(), |r| format!("{:.2}", r.cost)),
                    c.reserved.as_ref().map_or("-".into(), |r| r.block_gpus.to_string()),
                    c.per_task.map_or("-".into(), |v| format!("{v:.2}")),
                    c.cheapest,
                    c.saving_vs_next
                );
            }
            let _ = write!(
                o,
                "</table><p>Each project on its cheapest mode: <b>{:.2} {}</b>, against {:.2} on demand ({:.2} month(s) of reserved block).</p>",
                b.total_cheapest,
                esc(&cur),
                b.total_on_demand,
                b.months
            );
        }
    }
    if let Some(p) = &r.pool_billing {
        pool_section(&mut o, p);
    }
    if let Some(c) = &r.cost_per_unit {
        cost_section(&mut o, c);
    }
    o.push_str("<p class=\"note\">Generated by bursar report. Rules: docs/reports.md.</p></body></html>\n");
    o
}

/// The queue wait by why the jobs waited: totals and means per group.
fn queue_wait_section(o: &mut String, r: &Report) {
    if r.total.started_jobs == 0 {
        return;
    }
    let _ = write!(
        o,
        "<h3>Queue wait by why the job waited</h3><table><tr><th>{}</th><th>started</th><th>queue wait h</th><th>mean</th>",
        esc(&r.by)
    );
    for (name, _) in r.total.queue_wait_by_reason.parts() {
        let _ = write!(o, "<th>{name} h</th><th>jobs</th><th>mean</th>");
    }
    o.push_str("</tr>");
    for (g, cls) in r.groups.iter().map(|g| (g, "")).chain(std::iter::once((&r.total, " class=\"total\""))) {
        if g.started_jobs == 0 {
            continue;
        }
        let _ = write!(
            o,
            "<tr{cls}><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.1}</td>",
            esc(&g.key),
            g.started_jobs,
            g.queue_wait_hours,
            g.mean_queue_wait_hours
        );
        for (_, p) in g.queue_wait_by_reason.parts() {
            let _ = write!(o, "<td>{:.1}</td><td>{}</td><td>{:.1}</td>", p.hours, p.jobs, p.mean_hours);
        }
        o.push_str("</tr>");
    }
    o.push_str("</table><p class=\"note\">Hours of time from submission to first start: approval = held for a person's yes; off-peak = deferred by a <code>defer</code> decision; capacity = admitted and waiting for GPUs; readiness = admitted while the submission declared its image, data or script not ready. The parts add up to the queue wait; each mean is over the jobs that waited for that reason.</p>");
}

/// The billing modes for the pool per GPU type, the recommendation and its assumptions.
fn pool_section(o: &mut String, p: &crate::pool::PoolBilling) {
    let cur = esc(p.currency.as_deref().unwrap_or(""));
    let _ = write!(
        o,
        "<h2>Billing modes for the pool</h2><p>Per GPU type (and region), {:.2} month(s) of {} hours, {cur}.</p>\
         <table><tr><th>pool</th><th>GPU-h</th><th>peak GPUs</th><th>on demand</th><th>per task</th><th>pool block</th><th>block GPUs</th><th>unused reserved GPU-h</th><th>unused cost</th><th>mixed</th><th>mixed block GPUs</th><th>per project best</th><th>recommended</th></tr>",
        p.months, p.hours
    );
    let opt = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.2}"));
    for r in &p.pools {
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{:.2}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.2}</td><td>{:.2}</td><td>{}</td><td>{:.2}</td><td>{}</td></tr>",
            esc(&r.pool),
            r.gpu_hours,
            r.peak_gpus,
            r.on_demand,
            opt(r.per_task),
            opt(r.block_cost),
            r.block_gpus.map_or("-".into(), |b| b.to_string()),
            r.unused_gpu_hours,
            r.unused_cost,
            r.mix_cost,
            r.mix_block_gpus,
            r.per_project_best,
            r.recommended
        );
    }
    o.push_str("</table><h3>Recommendation</h3><ul>");
    for s in &p.recommendation {
        let _ = write!(o, "<li>{}</li>", esc(s));
    }
    let _ = write!(
        o,
        "</ul><p>In all <b>{:.2} {cur}</b>: saves {:.2} against everything on demand ({:.2}) and {:.2} against each project on its own cheapest mode ({:.2}).</p><p class=\"note\">Assumptions: ",
        p.total_recommended,
        p.saving_vs_on_demand,
        p.total_on_demand,
        p.saving_vs_per_project,
        p.total_per_project_best
    );
    let items: Vec<String> = p.assumptions.iter().map(|a| esc(a)).collect();
    o.push_str(&items.join("; "));
    o.push_str(".</p>");
}
