//! Server-rendered HTML: the pool page (`GET /`: capacity, queue, approvals, idle jobs, projects,
//! deferrals, denies), the page of what waits for a person (`GET
//! /mine`) and the pages of the action links.
//!
//! Every value that comes from outside (job ids, names, reasons) goes through one escape function,
//! the report's ([`bursar_report::render::svg::esc`]); the pages fetch nothing to render (the CSS is
//! inline), and the pool page refreshes itself every [`REFRESH_SECS`] seconds. Only `/mine` has a
//! script: its buttons post the answer as JSON to the API with the page's own credential. The
//! countdowns are rendered from the wall clock of the request.

use std::fmt::Write;

use bursar_model::api::{ActionKind, CapacityLine, PoolView, QueueLine, QuotaLine};
use bursar_model::{Duration, Timestamp};
use bursar_notify::{Claims, JobFacts};
use bursar_report::render::svg::esc;

/// How often the pool page reloads itself.
pub const REFRESH_SECS: u32 = 10;

const STYLE: &str = "body{font:15px/1.45 system-ui,sans-serif;margin:1.5em auto;max-width:70em;padding:0 1em;color:#1d2327}\
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.6em;border-bottom:1px solid #ccd}\
table{border-collapse:collapse;width:100%}table+table{margin-top:1em}th,td{text-align:left;padding:.25em .6em;border-bottom:1px solid #eef;vertical-align:top}\
th{font-weight:600;background:#f4f6fa}td:first-child{white-space:nowrap}td.n{text-align:right;font-variant-numeric:tabular-nums}\
.muted{color:#667}.warn{color:#a04000;font-weight:600}.over{color:#b00020;font-weight:600}\
.box{border:1px solid #ccd;border-radius:6px;padding:1em 1.2em;max-width:40em}\
button{font-size:1em;padding:.45em 1.2em;border-radius:4px;border:1px solid #557;background:#2f5fb3;color:#fff;cursor:pointer}\
textarea{width:100%;min-height:4em;font:inherit}";

fn head(out: &mut String, title: &str, refresh: Option<u32>) {
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">");
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">");
    if let Some(s) = refresh {
        let _ = write!(out, "<meta http-equiv=\"refresh\" content=\"{s}\">");
    }
    let _ = write!(out, "<title>{}</title><style>{STYLE}</style></head><body>", esc(title));
}

/// Time left: `2h 05m`, `4m 10s`, `12s`; `now` for anything not in the future.
pub fn countdown(d: Duration) -> String {
    if d.millis() < 1000 { "now".to_owned() } else { span(d) }
}

/// A length of time: `2d 02h`, `2h 05m`, `4m 10s`, `12s` (`0s` for anything shorter).
pub fn span(d: Duration) -> String {
    match (d.millis() / 1000).max(0) {
        s if s >= 86_400 => format!("{}d {:02}h", s / 86_400, (s % 86_400) / 3600),
        s if s >= 3600 => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
        s if s >= 60 => format!("{}m {:02}s", s / 60, s % 60),
        s => format!("{s}s"),
    }
}

fn gpu_hours(v: f64) -> String {
    bursar_lang::families::fmt_num(v)
}

fn until(now: Timestamp, t: &str) -> String {
    Timestamp::parse(t).map(|t| countdown(t.since(now))).unwrap_or_else(|_| "?".into())
}

fn ago(now: Timestamp, t: &str) -> String {
    Timestamp::parse(t).map(|t| span(now.since(t))).unwrap_or_else(|_| "?".into())
}

fn gpus(n: impl Into<bursar_model::Gpus>) -> String {
    let n = n.into();
    if n.is_whole() { bursar_model::counted(u64::from(n.floor()), "GPU", "GPUs") } else { format!("{n} GPUs") }
}

/// A utilisation (0–1) as a percentage.
fn pct(v: f32) -> String {
    format!("{:.0} %", f64::from(v) * 100.0)
}

/// A job's last utilisation, or why there is none ("no sample" is never shown as 0 %).
fn utilisation_cell(now: Timestamp, util: Option<f32>, last: Option<&str>, no_sample: Option<&str>) -> String {
    let mut o = match (util, last) {
        (Some(u), Some(t)) => {
            format!("<span data-util=\"{u}\">{}</span> <span class=\"muted\">({} ago)</span>", pct(u), ago(now, t))
        }
        (Some(u), None) => format!("<span data-util=\"{u}\">{}</span>", pct(u)),
        (None, _) => "<span class=\"muted\" data-util=\"none\">no sample</span>".to_owned(),
    };
    if let Some(why) = no_sample {
        let _ = write!(o, "<br><span class=\"muted no-sample\">{}</span>", esc(why));
    }
    o
}

fn quota_rows(out: &mut String, lines: &[QuotaLine], with_ledger: bool) {
    out.push_str("<table><tr>");
    if with_ledger {
        out.push_str("<th>ledger</th>");
    }
    out.push_str(
        "<th>quota</th><th>period</th><th>budget</th><th>used</th><th>running so far</th><th>reserved</th>\
         <th>left</th><th>used today</th><th>burn a day</th><th>at that rate</th></tr>",
    );
    for q in lines {
        let _ = write!(out, "<tr data-quota=\"{}\" data-ledger=\"{}\">", esc(&q.policy), esc(&q.ledger));
        if with_ledger {
            let _ = write!(out, "<td>{}</td>", esc(&q.ledger));
        }
        let left_class = if q.left <= 0.0 { " over" } else { "" };
        let _ = write!(
            out,
            "<td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\" data-used=\"{}\">{}</td>\
             <td class=\"n\" data-running=\"{}\">{}</td><td class=\"n\" data-reserved=\"{}\">{}</td>\
             <td class=\"n{left_class}\" data-left=\"{}\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\" data-per-day=\"{}\">{}</td><td data-runs-out=\"{}\">{}</td></tr>",
            esc(&q.policy),
            esc(&q.period),
            gpu_hours(q.limit),
            q.used,
            gpu_hours(q.used),
            q.running,
            gpu_hours(q.running),
            q.reserved,
            gpu_hours(q.reserved),
            q.left,
            gpu_hours(q.left),
            gpu_hours(q.used_today),
            q.per_day,
            gpu_hours(q.per_day),
            esc(q.runs_out.as_deref().unwrap_or("")),
            match (&q.runs_out, q.left <= 0.0) {
                _ if q.limit - q.used - q.running <= 0.0 => "<span class=\"over\">exhausted</span>".to_owned(),
                (_, true) => "<span class=\"over\">fully reserved</span>".to_owned(),
                (Some(d), _) => format!("<span class=\"warn\">runs out {}</span>", esc(d)),
                (None, _) if q.per_day > 0.0 => "lasts the period".to_owned(),
                (None, _) => "<span class=\"muted\">nothing used yet</span>".to_owned(),
            }
        );
    }
    out.push_str("</table>");
    if let Some(q) = lines.first() {
        let _ = write!(
            out,
            "<p class=\"muted how\">GPU-hours. <b>Used</b> is settled: what ended jobs ran (or what billing charged, for a quota settled by billing). \
             <b>Reserved</b> is what admitted and running jobs asked for (GPUs × requested hours) and have not settled: the quota admits against it, \
             but it is not burn. <b>Left</b> = budget − used − reserved. <b>Burn a day</b> = (used + what running jobs have run so far) ÷ the days of \
             the period gone by ({} for {}); <b>at that rate</b> is the day use alone spends the budget (budget − used − running so far, at the burn a day), \
             if that falls inside the period: reservations move <b>left</b>, not this date. Usage counts in the period of the job's submission.</p>",
            gpu_hours(q.days),
            esc(&q.period)
        );
    }
}

/// The buttons of `/mine`: each posts `{"reason": …}` as JSON to `v1/jobs/{job}/{action}` (relative,
/// so a proxy may mount serve under a path), same-origin with the page's credential, and shows what
/// serve answered. A cross-site page can send neither the JSON body without a preflight nor the
/// proxy's SameSite session cookie.
const MINE_SCRIPT: &str = "document.querySelectorAll('button[data-job]').forEach(function(b){b.addEventListener('click',function(){\
var row=b.closest('tr'),said=row.querySelector('.said'),body={};\
if(b.dataset.action==='reject'){var t=row.querySelector('textarea');body.reason=t?t.value:'';}\
b.disabled=true;said.textContent='…';\
fetch('v1/jobs/'+encodeURIComponent(b.dataset.job)+'/'+b.dataset.action,{method:'POST',credentials:'same-origin',\
headers:{'content-type':'application/json'},body:JSON.stringify(body)})\
.then(function(r){return r.json().then(function(j){return [r.ok,j];},function(){return [false,{error:'HTTP '+r.status}];});})\
.then(function(x){said.textContent=x[0]?x[1].message:x[1].error;if(!x[0]){b.disabled=false;}})\
.catch(function(e){said.textContent=String(e);b.disabled=false;});});});";

/// `GET /mine`: what waits for `who` (already filtered, [`crate::people::pending_for`]), with a
/// button per answer.
pub fn mine(who: &str, p: &bursar_model::api::PendingReply, now: Timestamp) -> String {
    let mut o = String::with_capacity(4096);
    head(&mut o, "bursar: waiting for you", None);
    let _ = write!(o, "<h1>Waiting for <span id=\"who\">{}</span></h1>", esc(who));
    o.push_str("<h2>Approvals you may answer</h2>");
    if p.approvals.is_empty() {
        o.push_str("<p class=\"muted\" id=\"no-approvals\">No job waits for your approval.</p>");
    } else {
        o.push_str(
            "<table id=\"approvals\"><tr><th>job</th><th>project / user</th><th>asks</th><th>why</th><th>lapses in</th><th>answer</th></tr>",
        );
        for w in &p.approvals {
            let job = esc(&w.job_id);
            let _ = write!(
                o,
                "<tr data-job=\"{job}\"><td>{job}</td><td>{} / {}</td><td>{} for {} h{}</td><td>{}</td><td>{}</td>\
                 <td><button data-job=\"{job}\" data-action=\"approve\">Approve</button> \
                 <button data-job=\"{job}\" data-action=\"reject\">Reject</button>\
                 <textarea placeholder=\"why (for a rejection)\"></textarea><div class=\"said muted\"></div></td></tr>",
                esc(&w.project),
                esc(&w.user),
                gpus(w.gpus),
                gpu_hours(w.requested_hours),
                w.hold_label().map_or(String::new(), |l| format!(" <span class=\"over\">{}</span>", esc(&l))),
                esc(&w.reason),
                until(now, &w.expires),
            );
        }
        o.push_str("</table>");
    }
    o.push_str("<h2>Your jobs about to be reclaimed as idle</h2>");
    if p.idle.is_empty() {
        o.push_str("<p class=\"muted\" id=\"no-idle\">None of your jobs is under an idle warning.</p>");
    } else {
        o.push_str("<table id=\"idle\"><tr><th>job</th><th>project</th><th>GPUs</th><th>idle since</th><th>reclaimed in</th><th>answer</th></tr>");
        for w in &p.idle {
            let job = esc(&w.job_id);
            let _ = write!(
                o,
                "<tr data-job=\"{job}\"><td>{job}</td><td>{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td>\
                 <td><button data-job=\"{job}\" data-action=\"keepalive\">Keep it running</button><div class=\"said muted\"></div></td></tr>",
                esc(&w.project),
                w.gpus,
                w.idle_since.as_deref().map(|t| format!("{} ago", ago(now, t))).unwrap_or_else(|| "?".into()),
                until(now, &w.reclaim_at),
            );
        }
        o.push_str("</table>");
    }
    if !p.queue.is_empty() {
        queue_section(&mut o, now, &p.queue);
    }
    if !p.capacity.is_empty() {
        capacity_section(&mut o, &p.capacity);
    }
    let _ = write!(
        o,
        "<p class=\"muted\">As of {} (engine clock {}).</p><script>{MINE_SCRIPT}</script></body></html>",
        esc(&now.to_string()),
        esc(&p.engine_time)
    );
    o
}

/// The pool's capacity per region, GPU type and queue: free now and in an hour, what bursar holds.
fn capacity_section(o: &mut String, lines: &[CapacityLine]) {
    o.push_str("<h2 id=\"capacity\">Capacity</h2>");
    if lines.is_empty() {
        o.push_str(
            "<p class=\"muted\">No inventory yet: bursar learns what the pool has from <code>pool.inventory</code> \
             (a scheduler's agent, or <code>[[capacity]]</code> in the site configuration).</p>",
        );
        return;
    }
    o.push_str(
        "<table id=\"capacity-table\"><tr><th>region</th><th>GPU type</th><th>queue</th><th>free now</th>\
         <th>free in an hour</th><th>in service</th><th>allocated</th><th>drained</th><th>waiting (GPUs held)</th>\
         <th>running</th><th>reported</th></tr>",
    );
    for c in lines {
        let _ = write!(
            o,
            "<tr data-partition=\"{}/{}/{}\"><td>{}</td><td>{}</td><td>{}</td><td class=\"n free\">{}</td><td class=\"n free-hour\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n{}\">{}</td><td class=\"n\">{} ({})</td><td class=\"n\">{}</td>\
             <td class=\"muted\">{}{}</td></tr>",
            esc(&c.region),
            esc(&c.gpu_type),
            esc(&c.queue),
            esc(&c.region),
            esc(&c.gpu_type),
            if c.queue.is_empty() { "<span class=\"muted\">any</span>".to_owned() } else { esc(&c.queue) },
            c.free,
            c.free_in_hour,
            c.in_service,
            c.allocated,
            if c.drained > 0 { " warn" } else { "" },
            c.drained,
            c.waiting_jobs,
            c.reserved,
            c.running_jobs,
            esc(&c.reported),
            c.source.as_deref().map(|s| format!(" by {}", esc(s))).unwrap_or_default(),
        );
    }
    o.push_str("</table>");
}

/// The queue: admitted jobs not started, per queue in order, with their place, age, estimated start
/// and why they wait.
fn queue_section(o: &mut String, now: Timestamp, lines: &[QueueLine]) {
    let _ = write!(o, "<h2 id=\"queue\">Queue ({})</h2>", lines.len());
    if lines.is_empty() {
        o.push_str("<p class=\"muted\">No admitted job waits to start.</p>");
        return;
    }
    o.push_str(
        "<table id=\"queue-table\"><tr><th>queue</th><th>#</th><th>job</th><th>project / user</th><th>asks</th>\
         <th>waiting</th><th>expected start</th><th>why it waits</th></tr>",
    );
    for q in lines {
        let start = match &q.start {
            Some(s) => {
                let range =
                    match (q.earliest.as_deref().map(|e| until(now, e)), q.latest.as_deref().map(|l| until(now, l))) {
                        (Some(e), Some(l)) if e != l => format!(" <span class=\"muted\">({e} – {l})</span>"),
                        _ => String::new(),
                    };
                let region = q.region.as_deref().map(|r| format!(" in {}", esc(r))).unwrap_or_default();
                format!("<span data-start=\"{}\">{}</span>{region}{range}", esc(s), starts_in(now, s))
            }
            None => "<span class=\"muted\">unknown</span>".to_owned(),
        };
        let stale = if q.reservation_released {
            " <span class=\"warn\">(reservation released as stale)</span>".to_owned()
        } else {
            q.stale_at
                .as_deref()
                .map(|t| format!(" <span class=\"muted\">(reservation released in {})</span>", until(now, t)))
                .unwrap_or_default()
        };
        let _ = write!(
            o,
            "<tr data-job=\"{}\"><td>{}</td><td class=\"n pos\">{}</td><td>{}</td><td>{} / {}</td><td>{} for {} h</td>\
             <td data-since=\"{}\">{}{stale}</td><td>{start}</td><td>{}</td></tr>",
            esc(&q.job_id),
            if q.queue.is_empty() { "<span class=\"muted\">none</span>".to_owned() } else { esc(&q.queue) },
            q.position,
            esc(&q.job_id),
            esc(&q.project),
            esc(&q.user),
            q.gpu_type.as_deref().map_or_else(|| gpus(q.gpus), |t| format!("{} × {}", q.gpus, esc(t))),
            gpu_hours(q.requested_hours),
            esc(&q.since),
            ago(now, &q.since),
            why_cell(now, q),
        );
    }
    o.push_str("</table>");
}

/// Why a queued job waits: the scheduler's reason (and for how long it has said so) with what the
/// estimate shows, or the estimate's reason alone.
fn why_cell(now: Timestamp, q: &QueueLine) -> String {
    let mut o = if q.scheduler_reason {
        format!("<span class=\"scheduler-reason\">{}</span>", esc(&q.reason))
    } else {
        esc(&q.reason)
    };
    if let Some(t) = &q.reason_since {
        let _ = write!(o, " <span class=\"muted\">(scheduler, for {})</span>", ago(now, t));
    }
    if let Some(n) = &q.estimate_note {
        let _ = write!(o, "<br><span class=\"muted\">{}</span>", esc(n));
    }
    o
}

/// An estimated start for people: `now`, `in 40m 00s`.
pub fn starts_in(now: Timestamp, t: &str) -> String {
    match Timestamp::parse(t) {
        Ok(t) if t > now.plus(Duration(59_999)) => format!("in {}", span(t.since(now))),
        Ok(_) => "now".to_owned(),
        Err(_) => "?".to_owned(),
    }
}

/// The pool page.
pub fn pool(v: &PoolView) -> String {
    let now = Timestamp::parse(&v.now).unwrap_or_else(|_| Timestamp::wall_clock());
    let mut o = String::with_capacity(8192);
    head(&mut o, "bursar: the pool", Some(REFRESH_SECS));
    let _ = write!(
        o,
        "<h1>The GPU pool</h1><p class=\"muted\">As of {} (engine clock {}); this page refreshes every {REFRESH_SECS} s. \
         <a href=\"/report\">Monthly report</a> · <a href=\"/v1/pool\">as JSON</a></p>",
        esc(&v.now),
        esc(&v.engine_time)
    );

    capacity_section(&mut o, &v.capacity);
    queue_section(&mut o, now, &v.queue);

    let _ = write!(o, "<h2 id=\"approvals\">Waiting for approval ({})</h2>", v.approvals.len());
    if v.approvals.is_empty() {
        o.push_str("<p class=\"muted\">No job waits for an approval.</p>");
    } else {
        o.push_str("<table><tr><th>job</th><th>project</th><th>user</th><th>asks for</th><th>waiting</th><th>expires in</th><th>approvers</th><th>why</th></tr>");
        for a in &v.approvals {
            let approvers = if a.approvers.is_empty() { "anyone".to_owned() } else { a.approvers.join(", ") };
            let _ = write!(
                o,
                "<tr data-job=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{} × {} h{}</td><td>{}</td><td class=\"warn\">{}</td><td>{}</td><td>{}</td></tr>",
                esc(&a.job_id),
                esc(&a.job_id),
                esc(&a.project),
                esc(&a.user),
                gpus(a.gpus),
                gpu_hours(a.requested_hours),
                a.hold_label().map_or(String::new(), |l| format!(" <span class=\"over\">{}</span>", esc(&l))),
                ago(now, &a.submitted),
                until(now, &a.expires),
                esc(&approvers),
                esc(&a.reason)
            );
        }
        o.push_str("</table>");
    }

    let _ = write!(o, "<h2 id=\"idle\">Idle, reclaimed unless kept alive ({})</h2>", v.idle.len());
    if v.idle.is_empty() {
        o.push_str("<p class=\"muted\">No job is under an idle warning.</p>");
    } else {
        o.push_str(
            "<table><tr><th>job</th><th>project</th><th>user</th><th>GPUs</th><th>GPU utilisation</th><th>memory</th>\
             <th>idle since</th><th>alerted</th><th>reclaim in</th><th>rule</th></tr>",
        );
        for i in &v.idle {
            let idle_since = match &i.idle_since {
                Some(t) => format!("<span data-idle-since=\"{}\">{} ago</span>", esc(t), ago(now, t)),
                None => "<span class=\"muted\">?</span>".to_owned(),
            };
            let _ = write!(
                o,
                "<tr data-job=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"util\">{}</td><td class=\"mem\">{}</td>\
                 <td>{}</td><td>{} ago</td><td class=\"warn\" data-reclaim-at=\"{}\">{}</td><td>{}</td></tr>",
                esc(&i.job_id),
                esc(&i.job_id),
                esc(&i.project),
                esc(&i.user),
                i.gpus,
                utilisation_cell(now, i.gpu_util, i.last_sample.as_deref(), i.no_sample.as_deref()),
                i.mem_util.map(pct).unwrap_or_else(|| "<span class=\"muted\">not reported</span>".to_owned()),
                idle_since,
                ago(now, &i.alerted),
                esc(&i.reclaim_at),
                until(now, &i.reclaim_at),
                esc(&i.policy)
            );
        }
        o.push_str("</table>");
    }

    o.push_str("<h2 id=\"projects\">Projects</h2>");
    if v.projects.is_empty() {
        o.push_str("<p class=\"muted\">Nothing counted yet.</p>");
    }
    for p in &v.projects {
        let _ = write!(
            o,
            "<h3 data-project=\"{}\">{}</h3><p>{} held, {} running, {}.</p>",
            esc(&p.project),
            esc(&p.project),
            gpus(p.held_gpus),
            p.running_gpus,
            bursar_model::counted(p.live_jobs, "live job", "live jobs")
        );
        if !p.jobs.is_empty() {
            o.push_str("<table class=\"jobs\"><tr><th>job</th><th>user</th><th>GPUs</th><th>phase</th><th>running for</th><th>GPU utilisation</th></tr>");
            for j in &p.jobs {
                let _ = write!(
                    o,
                    "<tr data-job=\"{}\"><td>{}</td><td>{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td><td class=\"util\">{}</td></tr>",
                    esc(&j.job_id),
                    esc(&j.job_id),
                    esc(&j.user),
                    gpus_cell(j),
                    phase_cell(j),
                    j.started.as_deref().map(|t| ago(now, t)).unwrap_or_default(),
                    if j.phase == "running" {
                        utilisation_cell(now, j.gpu_util, j.last_sample.as_deref(), j.no_sample.as_deref())
                    } else {
                        String::new()
                    }
                );
            }
            o.push_str("</table>");
            let shown = p.jobs.len() as u64;
            if p.live_jobs > shown {
                let _ = write!(o, "<p class=\"muted\">… and {} more.</p>", p.live_jobs - shown);
            }
        }
        if p.quotas.is_empty() {
            o.push_str("<p class=\"muted\">No GPU-hour quota applies.</p>");
        } else {
            quota_rows(&mut o, &p.quotas, false);
        }
    }
    if !v.shared_quotas.is_empty() {
        o.push_str("<h2 id=\"shared\">Shared budgets (users, tags)</h2>");
        quota_rows(&mut o, &v.shared_quotas, true);
    }

    let _ = write!(o, "<h2 id=\"deferred\">Deferred ({})</h2>", v.deferred.len());
    if v.deferred.is_empty() {
        o.push_str("<p class=\"muted\">No job is deferred.</p>");
    } else {
        o.push_str("<table><tr><th>job</th><th>project</th><th>user</th><th>GPUs</th><th>may start</th></tr>");
        for d in &v.deferred {
            let _ = write!(
                o,
                "<tr data-job=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td>{} (in {})</td></tr>",
                esc(&d.job_id),
                esc(&d.job_id),
                esc(&d.project),
                esc(&d.user),
                d.gpus,
                esc(&d.until),
                until(now, &d.until)
            );
        }
        o.push_str("</table>");
    }

    let _ = write!(o, "<h2 id=\"denies\">Last denies ({})</h2>", v.denies.len());
    if v.denies.is_empty() {
        o.push_str("<p class=\"muted\">Nothing was denied.</p>");
    } else {
        o.push_str("<table><tr><th>when</th><th>job</th><th>project</th><th>user</th><th>why</th></tr>");
        for d in &v.denies {
            let _ = write!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&d.time),
                esc(d.job_id.as_deref().unwrap_or("")),
                esc(d.project.as_deref().unwrap_or("")),
                esc(d.user.as_deref().unwrap_or("")),
                esc(&d.reason)
            );
        }
        o.push_str("</table>");
    }
    o.push_str("</body></html>\n");
    o
}

/// A page with one message: what happened, or why nothing did.
pub fn message(title: &str, heading: &str, text: &str, event: Option<&str>) -> String {
    let mut o = String::new();
    head(&mut o, title, None);
    let _ = write!(o, "<div class=\"box\"><h1>{}</h1><p id=\"message\">{}</p>", esc(heading), esc(text));
    if let Some(id) = event {
        let _ = write!(o, "<p class=\"muted\">Recorded in the audit log as event <code>{}</code>.</p>", esc(id));
    }
    o.push_str("<p><a href=\"/\">The pool</a></p></div></body></html>\n");
    o
}

/// The confirmation page of a genuine link: exactly what its `POST` will do.
pub fn confirm(c: &Claims, facts: Option<&JobFacts>) -> String {
    let job = &c.job;
    let who = &c.for_user;
    let (heading, button, what) = match c.action {
        ActionKind::Keepalive => {
            let deadline = facts.and_then(|f| f.idle.first()).map(|w| w.reclaim_at.clone());
            (
                format!("Keep job {job} running?"),
                "Keep it running",
                format!(
                    "bursar will record a keepalive from {who} for job {job}{}. The idle reclaim{} is called off, and the job is watched for another idle window.",
                    facts.map(|f| format!(" (project {})", f.project)).unwrap_or_default(),
                    deadline.map(|d| format!(" due at {d}")).unwrap_or_default()
                ),
            )
        }
        ActionKind::Approve | ActionKind::ApproveOverBudget => {
            let w = facts.and_then(|f| f.approval.as_ref());
            let mut what = format!(
                "bursar will record {who}'s approval of job {job}{}. The job may then start.",
                w.map(|w| format!(
                    " (project {}, user {}, {} for {} h; held because: {})",
                    w.project,
                    w.user,
                    gpus(w.gpus),
                    gpu_hours(w.requested_hours),
                    w.reason
                ))
                .unwrap_or_default()
            );
            if c.action == ActionKind::ApproveOverBudget {
                what.push_str(" It runs over the budget that held it: its GPU-hours count beyond that quota.");
            }
            let heading = if c.action == ActionKind::ApproveOverBudget {
                format!("Approve job {job} over budget?")
            } else {
                format!("Approve job {job}?")
            };
            (heading, "Approve", what)
        }
        ActionKind::Reject => (
            format!("Reject job {job}?"),
            "Reject",
            format!(
                "bursar will record {who}'s rejection of job {job}. The job will not run, and its owner is told why."
            ),
        ),
    };
    let mut o = String::new();
    head(&mut o, &format!("bursar: {heading}"), None);
    let _ = write!(
        o,
        "<div class=\"box\"><h1>{}</h1><p id=\"what\">{}</p><form method=\"post\">",
        esc(&heading),
        esc(&what)
    );
    if c.action == ActionKind::Reject {
        o.push_str("<p><label for=\"reason\">Why (kept in the audit log):</label><br><textarea id=\"reason\" name=\"reason\"></textarea></p>");
    }
    let _ = writeln!(
        o,
        "<p><button type=\"submit\">{}</button></p></form><p class=\"muted\">This link is for {} and works until {}. \
         Opening it changes nothing; only the button does.</p></div></body></html>",
        esc(button),
        esc(who),
        esc(&c.expires().to_string())
    );
    o
}

/// A job's GPUs on the pool page: the allocation, with what the admission reserved when the
/// scheduler allocated another number, and for an array the tasks that may run at once.
fn gpus_cell(j: &bursar_model::api::JobLine) -> String {
    let mut s = j.gpus.to_string();
    if let Some(r) = &j.runs {
        if let Some(a) = r.admitted_gpus {
            let _ = write!(
                s,
                " <span class=\"muted\" title=\"the scheduler allocated {} GPUs; the admission reserved {a}\">(admitted {a})</span>",
                j.gpus
            );
        }
        if let Some(a) = &r.array {
            let _ = write!(s, " <span class=\"muted\">× {} at once of {} tasks</span>", a.slots, a.tasks);
        }
    }
    s
}

/// A job's phase on the pool page, with what the scheduler did outside the admission.
fn phase_cell(j: &bursar_model::api::JobLine) -> String {
    let mut s = esc(&j.phase).to_string();
    if let Some(r) = &j.runs {
        if r.reruns > 0 {
            let _ = write!(s, " <span class=\"muted\">(run {})</span>", r.reruns + 1);
        }
        if let Some(a) = &r.array {
            let _ = write!(
                s,
                " <span class=\"muted\">({} of {} tasks started, {} live)</span>",
                a.started, a.tasks, a.live
            );
        }
        if let Some(p) = &r.parent {
            let _ = write!(s, " <span class=\"muted\">(task of {})</span>", esc(p));
        }
        if let Some(who) = &r.released_by {
            let _ = write!(s, " <span class=\"muted\">(released outside bursar by {})</span>", esc(who));
        }
        if r.requeued {
            s.push_str(" <span class=\"muted\">(requeued: waiting to run again, holding no GPUs)</span>");
        }
        if let Some(at) = &r.reclaim_failed {
            let _ = write!(
                s,
                " <strong class=\"warn\">(reclaimed at {} but still running: the scheduler did not stop it)</strong>",
                esc(at)
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn countdowns_read_like_a_clock() {
        assert_eq!(countdown(Duration::seconds(12)), "12s");
        assert_eq!(countdown(Duration::seconds(250)), "4m 10s");
        assert_eq!(countdown(Duration::minutes(125)), "2h 05m");
        assert_eq!(countdown(Duration::hours(50)), "2d 02h");
        assert_eq!(countdown(Duration::seconds(-3)), "now");
        assert_eq!(span(Duration::seconds(-3)), "0s");
    }

    #[test]
    fn outside_text_is_escaped_on_every_page() {
        let c = Claims {
            action: ActionKind::Reject,
            job: "<j>".into(),
            for_user: "\"bob\"".into(),
            expires_ms: 0,
            notice: "n".into(),
            request: None,
        };
        let page = confirm(&c, None);
        assert!(page.contains("Reject job &lt;j&gt;?") && page.contains("&quot;bob&quot;"), "{page}");
        assert!(!page.contains("<j>") && !page.contains("<script"));
        assert!(message("t", "h", "<b>", Some("e<1>")).contains("&lt;b&gt;"));
    }
}
