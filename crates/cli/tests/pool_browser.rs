//! The pool page in a real browser: headless Chromium renders `bursar serve`'s `/` and the DOM it
//! built shows the pending approval (with its approver); the idle job's GPU utilisation, memory,
//! idle-since and countdown to its reclaim; a project's live jobs; and its quota with used and
//! reserved apart and an exhaustion date computed from use alone (a large reservation does not move
//! it); the capacity per region, GPU type and queue (free now and in an hour) and the queue (a job's
//! place, its expected start and why it waits, issue 53). The page fetches nothing and logs nothing to the console. The DOM and a screenshot are kept
//! as test artefacts under `target/tmp/pool-page/`.
//!
//! Needs Debian's `chromium`; skips, saying so, without it (fails instead under CI).

#![expect(clippy::panic, reason = "test helpers: a missing row fails the test with the page")]

use std::path::PathBuf;
use std::process::Command;

use crate::serve_support::*;
use bursar_model::Timestamp;

const POLICIES: &str = r#"[[policy]]
id = "quota/monthly"
description = "nlp may use 1,000 GPU-hours a month."
kind = "quota"
scope = "project"
period = "month"
gpu_hours = 1_000
on_exhaust = "deny"

[[policy]]
id = "approval/big"
description = "Jobs over 16 GPUs need bob's yes."
kind = "approval"
gpus_over = 16
approvers = ["bob"]
expires = "24h"

[[policy]]
id = "reclaim/idle"
description = "Alert after 1s idle; reclaim 1h later unless kept alive."
kind = "reclaim"
[policy.idle]
below = 0.1
window = "1s"
grace = "1h"
"#;

/// The `<tr …>` row whose opening tag carries `marker`, up to its `</tr>`.
fn tag_row(html: &str, marker: &str) -> String {
    let at = html.find(marker).unwrap_or_else(|| panic!("no row with {marker} in {html}"));
    let start = html[..at].rfind("<tr").unwrap_or(at);
    let end = html[at..].find("</tr>").map_or(html.len(), |e| at + e);
    html[start..end].to_owned()
}

/// The first value of attribute `name` in `html`.
fn attr(html: &str, name: &str) -> Option<String> {
    let rest = html.split(&format!("{name}=\"")).nth(1)?;
    Some(rest[..rest.find('"')?].to_owned())
}

fn chromium() -> Option<PathBuf> {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"].iter().map(PathBuf::from).find(|p| p.is_file())
}

#[test]
fn the_pool_page_shows_what_waits_the_idle_countdown_and_the_quota_left() {
    let Some(chromium) = chromium() else {
        bursar_testkit::need::missing("chromium", "scripts/setup.sh");
        return;
    };
    let s = Scratch::new("pool-page");
    s.write_policy("p.toml", POLICIES);
    let server = Server::start(&s, &["--tick", "200ms"]);

    // A job that ran 16 GPUs for up to 10 h earlier this month: used, not reserved.
    let now = wall_ms();
    let month_start = {
        let (y, m, _) = bursar_model::time::civil_from_days(Timestamp(now).day());
        bursar_model::time::days_from_civil(y, m, 1) * 86_400_000
    };
    let began = (now - 10 * 3_600_000).max(month_start + 1_000);
    let ended = now - 1_000;
    let at = |ms: i64| Timestamp(ms).to_string();
    let done = format!(
        r#"{{"id":"e0","time":"{}","type":"job.submitted","job":{{"id":"j-done","project":"nlp","user":"alice","gpus":16,"requested_hours":10,"ready":{{"image":true,"data":true,"script":true}}}}}}"#,
        at(began)
    );
    assert_eq!(server.post("/v1/admit", &done).json().unwrap()["decision"], "allow");
    let (b, e) = (at(began), at(ended));
    let lines = format!(
        "{{\"id\":\"e0s\",\"time\":\"{b}\",\"type\":\"job.started\",\"job_id\":\"j-done\"}}\n\
         {{\"id\":\"e0f\",\"time\":\"{e}\",\"type\":\"job.finished\",\"job_id\":\"j-done\",\"status\":\"succeeded\"}}\n"
    );
    let r = server.post("/v1/events", &lines);
    assert_eq!(r.json().unwrap()["accepted"], 2, "{:?}", r.body);

    // A job held for approval, an idle job (4 GPUs × 10 h reserved), a big reservation that has not
    // started (16 × 40 h), and a deny.
    assert_eq!(
        server.post("/v1/admit", &submit("e1", "j-big", "nlp", 32, 2.0)).json().unwrap()["decision"],
        "require_approval"
    );
    assert_eq!(server.post("/v1/admit", &submit("e2", "j-idle", "nlp", 4, 10.0)).json().unwrap()["decision"], "allow");
    assert_eq!(
        server.post("/v1/admit", &submit("e2b", "j-queued", "nlp", 16, 40.0)).json().unwrap()["decision"],
        "allow"
    );
    let r = server.post(
        "/v1/events",
        &format!(
            "{}\n{}\n",
            job_event("e3", "job.started", "j-idle", ""),
            job_event("e4", "job.sample", "j-idle", r#","gpu_util":0.01,"mem_util":0.5"#)
        ),
    );
    assert_eq!(r.json().unwrap()["accepted"], 2);
    assert_eq!(server.post("/v1/admit", &submit("e5", "j-over", "nlp", 8, 200.0)).json().unwrap()["decision"], "deny");
    // Issue 53: the capacity and the queue. cn-north has 8 H100s in queue `gpu`, all held by cv's
    // j-run (2 h limit); j-wait (8 H100s) is next, expected when j-run ends, about 2 h after its
    // start; nothing is free now or in an hour.
    let t0 = Timestamp(wall_ms() / 1000 * 1000);
    let (t, t2) = (t0.to_string(), t0.plus(bursar_model::Duration::hours(2)).to_string());
    let inventory = format!(
        r#"{{"id":"inv","time":"{t}","type":"pool.inventory","source":"slurm:lab","capacity":[{{"region":"cn-north","gpu_type":"H100","queue":"gpu","in_service":8,"allocated":8,"free":0}}]}}"#
    );
    let h100 = |id: &str, job: &str, hours: u32| {
        format!(
            r#"{{"id":"{id}","time":"{t}","type":"job.submitted","job":{{"id":"{job}","project":"cv","user":"carol","gpus":8,"gpu_type":"H100","queue":"gpu","requested_hours":{hours},"ready":{{"image":true,"data":true,"script":true}}}}}}"#
        )
    };
    assert_eq!(server.post("/v1/events", &format!("{inventory}\n")).json().unwrap()["accepted"], 1);
    assert_eq!(server.post("/v1/admit", &h100("q1", "j-run", 2)).json().unwrap()["decision"], "allow");
    assert_eq!(server.post("/v1/admit", &h100("q2", "j-wait", 1)).json().unwrap()["decision"], "allow");
    let started = format!(r#"{{"id":"q3","time":"{t}","type":"job.started","job_id":"j-run"}}"#);
    assert_eq!(server.post("/v1/events", &format!("{started}\n")).json().unwrap()["accepted"], 1);

    server.wait_for(20, "the idle alert", || {
        server.get_json("/v1/pending")["idle"].as_array().is_some_and(|i| !i.is_empty()).then_some(())
    });

    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pool-page");
    std::fs::create_dir_all(&out).unwrap();
    let url = format!("http://{}/", server.addr);
    let flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--enable-logging=stderr",
        "--v=0",
    ];
    let profile = s.0.join("chromium-profile");
    let dom = Command::new(&chromium)
        .args(flags)
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(&url)
        .output()
        .unwrap();
    assert!(dom.status.success(), "chromium --dump-dom failed: {}", String::from_utf8_lossy(&dom.stderr));
    let html = String::from_utf8_lossy(&dom.stdout).into_owned();
    std::fs::write(out.join("dom.html"), &html).unwrap();
    let shot = Command::new(&chromium)
        .args(flags)
        .arg(format!("--user-data-dir={}", s.0.join("chromium-profile-2").display()))
        .arg("--window-size=1200,1400")
        .arg(format!("--screenshot={}", out.join("screenshot.png").display()))
        .arg(&url)
        .output()
        .unwrap();
    assert!(shot.status.success(), "chromium --screenshot failed: {}", String::from_utf8_lossy(&shot.stderr));
    let log = format!("{}{}", String::from_utf8_lossy(&dom.stderr), String::from_utf8_lossy(&shot.stderr));
    assert!(!log.contains("CONSOLE") && !log.contains("Uncaught"), "chromium logged: {log}");

    // The DOM Chromium built: the sections and their rows.
    let section = |id: &str| {
        let start = html.find(&format!("id=\"{id}\"")).unwrap_or_else(|| panic!("no section {id} in {html}"));
        let rest = &html[start..];
        let end = rest[1..].find("<h2").map_or(rest.len(), |e| e + 1);
        rest[..end].to_owned()
    };
    let approvals = section("approvals");
    assert!(
        approvals.contains("Waiting for approval (1)") && approvals.contains("j-big") && approvals.contains("bob"),
        "{approvals}"
    );
    let idle = section("idle");
    let row = tag_row(&idle, "data-job=\"j-idle\"");
    assert_eq!(attr(&row, "data-util").as_deref(), Some("0.01"), "{row}");
    assert!(row.contains(">1 %<") && row.contains(">50 %<"), "utilisation and memory: {row}");
    let since = attr(&row, "data-idle-since").unwrap_or_else(|| panic!("no idle-since in {row}"));
    let since = Timestamp::parse(&since).unwrap().millis();
    assert!(since >= began && since <= wall_ms(), "idle since {since}: {row}");
    let reclaim_at = Timestamp::parse(&attr(&row, "data-reclaim-at").unwrap()).unwrap().millis();
    assert!((reclaim_at - since - 3_601_000).abs() < 60_000, "reclaimed an hour after the alert: {row}");
    let countdown = row.split("data-reclaim-at=\"").nth(1).and_then(|c| c.split_once("\">")).map(|(_, c)| c);
    let countdown = countdown.unwrap_or_else(|| panic!("no countdown in {row}"));
    assert!(countdown.starts_with("59m") || countdown.starts_with("1h 00m"), "{row}");

    let projects = section("projects");
    assert!(
        projects.contains("data-job=\"j-idle\"") && projects.contains("data-job=\"j-queued\""),
        "live jobs: {projects}"
    );
    let quota = tag_row(&projects, "data-quota=\"quota/monthly\" data-ledger=\"nlp\"");
    let num =
        |name: &str| -> f64 { attr(&quota, name).unwrap_or_else(|| panic!("no {name} in {quota}")).parse().unwrap() };
    let (used, running, reserved, left, per_day) =
        (num("data-used"), num("data-running"), num("data-reserved"), num("data-left"), num("data-per-day"));
    let ran = 16.0 * (ended - began) as f64 / 3_600_000.0;
    assert!((used - ran).abs() < 0.01, "used {used}, ran {ran}: {quota}");
    assert!((reserved - (4.0 * 10.0 + 16.0 * 40.0)).abs() < 0.01, "reserved {reserved}: {quota}");
    assert!((left - (1_000.0 - used - reserved)).abs() < 0.01, "left {left}: {quota}");
    // The burn is use over the days gone; the date is when use alone spends the budget.
    let days = ((wall_ms() - month_start) as f64 / 86_400_000.0).max(1.0 / 24.0);
    assert!(((used + running) / per_day - days).abs() < 0.01, "burn {per_day} a day over {days} days: {quota}");
    let runs_out = attr(&quota, "data-runs-out").unwrap_or_default();
    let by_use = now + ((1_000.0 - used - running) / per_day * 86_400_000.0) as i64;
    let next_month = {
        let (y, m, _) = bursar_model::time::civil_from_days(Timestamp(now).day());
        let (y, m) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
        bursar_model::time::days_from_civil(y, m, 1) * 86_400_000
    };
    if by_use < next_month - 86_400_000 {
        let day = Timestamp(by_use).to_string()[..10].to_owned();
        assert_eq!(runs_out, day, "runs out by use: {quota}");
        assert!(quota.contains(&format!("runs out {day}")), "{quota}");
    } else if by_use >= next_month + 86_400_000 {
        assert_eq!(runs_out, "", "{quota}");
        assert!(quota.contains("lasts the period"), "{quota}");
    }
    assert!(projects.contains("reservations move <b>left</b>, not this date"), "the page says how: {projects}");
    let capacity = section("capacity");
    let part = tag_row(&capacity, "data-partition=\"cn-north/H100/gpu\"");
    let cell = |class: &str| -> String {
        let rest =
            part.split(&format!("class=\"n {class}\">")).nth(1).unwrap_or_else(|| panic!("no {class} in {part}"));
        rest[..rest.find('<').unwrap_or(0)].to_owned()
    };
    assert_eq!((cell("free"), cell("free-hour")), ("0".to_owned(), "0".to_owned()), "{part}");
    assert!(part.contains("slurm:lab"), "who reported it: {part}");
    let queue = section("queue");
    assert!(queue.contains("Queue ("), "{queue}");
    let wait = tag_row(&queue, "data-job=\"j-wait\"");
    // j-run's runtime is predicted from the pool's history: j-done ran its 10 h limit less a second,
    // so j-run is expected a fraction of a second before its 2 h limit ends.
    let start =
        Timestamp::parse(&attr(&wait, "data-start").unwrap_or_default()).unwrap_or_else(|e| panic!("{e}: {wait}"));
    let limit_end = Timestamp::parse(&t2).unwrap();
    assert!(start <= limit_end && limit_end.since(start).millis() < 60_000, "when j-run ends: {wait}");
    assert!(wait.contains("waits for 8 GPUs to be free") && wait.contains(" in cn-north"), "{wait}");
    assert!(wait.contains("class=\"n pos\">1<"), "first in queue gpu: {wait}");
    let denies = section("denies");
    assert!(denies.contains("j-over") && denies.contains("of its 1,000 GPU-hours"), "{denies}");
    assert!(!html.contains("<script") && !html.contains("src=\"http"), "the page loads something");

    let png = std::fs::read(out.join("screenshot.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    println!("pool page: {} bytes of DOM, screenshot {} bytes in {}", html.len(), png.len(), out.display());
}
