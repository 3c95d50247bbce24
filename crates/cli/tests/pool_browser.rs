//! The pool page in a real browser: headless Chromium renders `bursar serve`'s `/` and the DOM it
//! built shows the pending approval (with its approver), the idle job's countdown to its reclaim and
//! a project's quota left; the page fetches nothing and logs nothing to the console. The DOM and a
//! screenshot are kept as test artefacts under `target/tmp/pool-page/`.
//!
//! Needs Debian's `chromium`; skips, saying so, without it (fails instead under CI).

mod serve_support;

use std::path::PathBuf;
use std::process::Command;

use serve_support::*;

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

fn chromium() -> Option<PathBuf> {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"].iter().map(PathBuf::from).find(|p| p.is_file())
}

#[test]
fn the_pool_page_shows_what_waits_the_idle_countdown_and_the_quota_left() {
    let Some(chromium) = chromium() else {
        assert!(std::env::var_os("CI").is_none(), "chromium is missing: scripts/setup.sh installs it");
        eprintln!("skipping: chromium is not installed (scripts/setup.sh installs it)");
        return;
    };
    let s = Scratch::new("pool-page");
    s.write_policy("p.toml", POLICIES);
    let server = Server::start(&s, &["--tick", "200ms"]);

    // A job held for approval, an idle job (4 GPUs × 10 h reserved: 960 of 1,000 left), a deny.
    assert_eq!(
        server.post("/v1/admit", &submit("e1", "j-big", "nlp", 32, 2.0)).json().unwrap()["decision"],
        "require_approval"
    );
    assert_eq!(server.post("/v1/admit", &submit("e2", "j-idle", "nlp", 4, 10.0)).json().unwrap()["decision"], "allow");
    let r = server.post(
        "/v1/events",
        &format!(
            "{}\n{}\n",
            job_event("e3", "job.started", "j-idle", ""),
            job_event("e4", "job.sample", "j-idle", r#","gpu_util":0.01"#)
        ),
    );
    assert_eq!(r.json().unwrap()["accepted"], 2);
    assert_eq!(server.post("/v1/admit", &submit("e5", "j-over", "nlp", 8, 200.0)).json().unwrap()["decision"], "deny");
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
    assert!(idle.contains("j-idle"), "{idle}");
    let countdown = idle.split("reclaim in ").nth(1).unwrap_or_else(|| panic!("no countdown in {idle}"));
    assert!(countdown.starts_with("59m") || countdown.starts_with("1h 00m"), "{idle}");
    let projects = section("projects");
    let left =
        projects.split("data-left=\"nlp\">").nth(1).unwrap_or_else(|| panic!("no quota left for nlp in {projects}"));
    assert!(left.starts_with("960<"), "{projects}");
    let denies = section("denies");
    assert!(denies.contains("j-over") && denies.contains("of its 1,000 GPU-hours"), "{denies}");
    assert!(!html.contains("<script") && !html.contains("src=\"http"), "the page loads something");

    let png = std::fs::read(out.join("screenshot.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    println!("pool page: {} bytes of DOM, screenshot {} bytes in {}", html.len(), png.len(), out.display());
}
