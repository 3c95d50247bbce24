//! Idle warnings through a real Alertmanager (Debian's `prometheus-alertmanager`, started on a
//! loopback port, stopped by PID) to a webhook receiver the test runs: an idle job's alert arrives
//! with a keep-alive link; following it (GET shows the confirmation and changes nothing, POST keeps
//! the job) saves the job from its reclaim; a second idle job nobody answers for is reclaimed, and
//! its alert is resolved in Alertmanager (`GET /api/v2/alerts` no longer lists it).

#![expect(clippy::unwrap_used, clippy::panic, reason = "test helpers: a failure should stop the test with its message")]

use std::time::{Duration, Instant};

use crate::serve_support::*;
use bursar_model::Timestamp;
use bursar_testkit::{Alertmanager, WebhookReceiver};
use serde_json::Value;

const POLICIES: &str = r#"[[policy]]
id = "reclaim/idle"
description = "Alert after 3s under 10% GPU utilisation; reclaim 10s later unless kept alive."
kind = "reclaim"
[policy.idle]
below = 0.1
window = "3s"
grace = "10s"
"#;

/// Every alert of every notification Alertmanager sent to the receiver, in order.
fn notified(hook: &WebhookReceiver) -> Vec<Value> {
    hook.received()
        .iter()
        .filter_map(|r| serde_json::from_str::<Value>(&r.body).ok())
        .flat_map(|v| v["alerts"].as_array().cloned().unwrap_or_default())
        .collect()
}

fn is(a: &Value, alertname: &str, job: &str) -> bool {
    a["labels"]["alertname"] == alertname && a["labels"]["bursar_job"] == job
}

fn wait_notified(hook: &WebhookReceiver, alertname: &str, job: &str, status: &str) -> Value {
    hook.wait_for(Duration::from_secs(30), |_| {
        notified(hook).into_iter().find(|a| is(a, alertname, job) && a["status"] == status)
    })
    .unwrap_or_else(|| panic!("Alertmanager sent no {status} {alertname} for {job}; it sent {:#?}", notified(hook)))
}

fn active(am: &Alertmanager) -> Vec<Value> {
    serde_json::from_str::<Value>(&am.alerts().unwrap()).unwrap().as_array().cloned().unwrap_or_default()
}

#[test]
fn an_idle_jobs_owner_keeps_it_with_one_click_and_the_unanswered_one_is_reclaimed_and_resolved() {
    if Alertmanager::binary().is_none() {
        bursar_testkit::need::missing("prometheus-alertmanager", "scripts/setup.sh");
        return;
    }
    let hook = WebhookReceiver::start().unwrap();
    let am = Alertmanager::start(&hook.url("/alertmanager")).unwrap();
    let s = Scratch::new("notify-am");
    s.write_policy("reclaim.toml", POLICIES);
    let notify = s.0.join("notify.toml");
    std::fs::write(&notify, format!("poll = \"100ms\"\n[alertmanager]\nurl = \"{}\"\n", am.url())).unwrap();
    let server = Server::start(&s, &["--tick", "200ms", "--notify", notify.to_str().unwrap()]);
    let base = format!("http://{}", server.addr);

    for (n, job) in ["j-kept", "j-lost"].iter().enumerate() {
        assert_eq!(server.post("/v1/admit", &submit(&format!("s{n}"), job, "nlp", 4, 2.0)).status, 200);
        let r = server.post(
            "/v1/events",
            &format!(
                "{}\n{}\n",
                job_event(&format!("b{n}"), "job.started", job, ""),
                job_event(&format!("u{n}"), "job.sample", job, r#","gpu_util":0.02"#)
            ),
        );
        assert_eq!(r.json().unwrap()["accepted"], 2, "{}", r.text());
    }

    // Both idle alerts reach the receiver through Alertmanager, each with its owner's link.
    let kept = wait_notified(&hook, "BursarJobIdle", "j-kept", "firing");
    let lost = wait_notified(&hook, "BursarJobIdle", "j-lost", "firing");
    assert_eq!(
        (kept["labels"]["recipient"].as_str(), kept["labels"]["project"].as_str()),
        (Some("alice"), Some("nlp"))
    );
    assert_eq!(kept["labels"]["decision"], "alert");
    assert_eq!(kept["labels"]["policy"], "reclaim/idle");
    assert!(kept["annotations"]["reason"].as_str().unwrap().contains("unless its owner sends a keepalive"), "{kept}");
    let deadline = Timestamp::parse(kept["annotations"]["deadline"].as_str().unwrap()).unwrap();
    let link = kept["annotations"]["keepalive_url"].as_str().unwrap();
    assert!(lost["annotations"]["keepalive_url"].as_str().is_some_and(|l| l != link));
    let path = link.strip_prefix(&base).unwrap_or_else(|| panic!("{link} is not under {base}"));
    assert!(active(&am).iter().any(|a| is(a, "BursarJobIdle", "j-lost")), "{:#?}", active(&am));

    // GET: the confirmation page, and nothing changes.
    let logged = server.decisions(0).len();
    let page = server.get(path).unwrap();
    assert_eq!(page.status, 200, "{}", page.text());
    assert!(
        page.text().contains("Keep job j-kept running?") && page.text().contains("keepalive from alice"),
        "{}",
        page.text()
    );
    assert_eq!(server.decisions(0).len(), logged, "the GET of a link changed something");
    let pending = server.get_json("/v1/pending");
    assert!(pending["idle"].as_array().unwrap().iter().any(|i| i["job_id"] == "j-kept"), "{pending}");
    // POST: kept alive.
    let done = server.post(path, "");
    assert_eq!(done.status, 200, "{}", done.text());
    assert!(
        done.text().contains("job `j-kept` kept alive by alice: the idle reclaim is called off"),
        "{}",
        done.text()
    );
    // The link used again changes nothing and says so (after its deadline it says it expired).
    let again = server.post(path, "");
    assert_eq!(again.status, 409, "{}", again.text());
    assert!(again.text().contains("already done"), "{}", again.text());

    // Nobody answers for j-lost: reclaimed at its deadline. j-kept lives past the same deadline.
    server.wait_for(30, "j-lost reclaimed", || {
        (server.get_json("/v1/jobs/j-lost")["phase"] == "reclaimed").then_some(())
    });
    while Timestamp::wall_clock() < deadline.plus(bursar_model::Duration(500)) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(server.get_json("/v1/jobs/j-kept")["phase"], "running");
    assert!(
        !server.decisions(0).iter().any(|d| d["decision"] == "reclaim" && d["job_id"] == "j-kept"),
        "j-kept was reclaimed after its keepalive"
    );

    // j-lost's idle alert is resolved in Alertmanager (and notified as resolved); its reclaim fires.
    wait_notified(&hook, "BursarJobIdle", "j-lost", "resolved");
    wait_notified(&hook, "BursarJobReclaimed", "j-lost", "firing");
    let started = Instant::now();
    loop {
        let now = active(&am);
        if !now.iter().any(|a| is(a, "BursarJobIdle", "j-lost"))
            && now.iter().any(|a| is(a, "BursarJobReclaimed", "j-lost"))
        {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "Alertmanager still holds {now:#?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // j-kept's first alert was resolved by the keepalive; its link is now past its time.
    let resolved = wait_notified(&hook, "BursarJobIdle", "j-kept", "resolved");
    assert!(resolved["annotations"]["resolution"].as_str().unwrap().contains("keepalive from alice"), "{resolved}");
    assert!(
        resolved["annotations"].get("keepalive_url").is_none(),
        "a resolved alert carries no link that can no longer work: {resolved}"
    );
    let late = server.post(path, "");
    assert_eq!(late.status, 410, "{}", late.text());

    // Decision to delivery, as logged (measured, never asserted).
    for line in server.log_text().lines().filter(|l| l.contains("notice delivered") && l.contains("since_decision_ms="))
    {
        println!("{line}");
    }
}

/// The same road to an Alertmanager whose API is behind `--web.config.file` (TLS with a
/// certificate of a CA made here, basic auth with a bcrypt hash): `[alertmanager]` names
/// `https://`, `ca_file` and `basic_auth` with a `password_file`; the idle job's alert is received
/// over https and routed on to the receiver. With `links = false` it carries no link, only the
/// command that answers it, so nothing that reads Alertmanager holds the power to act.
#[test]
fn notices_reach_an_alertmanager_over_https_with_basic_auth() {
    if Alertmanager::binary().is_none() {
        bursar_testkit::need::missing("prometheus-alertmanager", "scripts/setup.sh");
        return;
    }
    use bursar_testkit::tls::{TestCa, WebConfig};
    let s = Scratch::new("notify-am-tls");
    s.write_policy("reclaim.toml", POLICIES);
    let ca = TestCa::new("bursar test CA").unwrap();
    let ca_file = ca.write(&s.0, "ca").unwrap();
    let web = WebConfig::new(&s.0, &ca, "bursar", "am pass").unwrap();
    let hook = WebhookReceiver::start().unwrap();
    let am = Alertmanager::start_tls(&hook.url("/alertmanager"), &web).unwrap();
    assert!(am.url().starts_with("https://"));
    let password = s.0.join("am.password");
    std::fs::write(&password, "am pass\n").unwrap();
    let notify = s.0.join("notify.toml");
    std::fs::write(
        &notify,
        format!(
            "poll = \"100ms\"\nlinks = false\n[alertmanager]\nurl = \"{}\"\nca_file = \"{}\"\nbasic_auth = {{ username = \"bursar\", password_file = \"{}\" }}\n",
            am.url(),
            ca_file.display(),
            password.display()
        ),
    )
    .unwrap();
    let server = Server::start(&s, &["--tick", "200ms", "--notify", notify.to_str().unwrap()]);
    assert_eq!(server.post("/v1/admit", &submit("s0", "j-tls", "nlp", 4, 2.0)).status, 200);
    let r = server.post(
        "/v1/events",
        &format!(
            "{}\n{}\n",
            job_event("b0", "job.started", "j-tls", ""),
            job_event("u0", "job.sample", "j-tls", r#","gpu_util":0.02"#)
        ),
    );
    assert_eq!(r.json().unwrap()["accepted"], 2, "{}", r.text());
    let firing = wait_notified(&hook, "BursarJobIdle", "j-tls", "firing");
    assert!(firing["annotations"].get("keepalive_url").is_none(), "links are off: {firing}");
    assert_eq!(firing["annotations"]["answer"], "bursar keepalive j-tls", "{firing}");
    let held = active(&am);
    let held = held.iter().find(|a| is(a, "BursarJobIdle", "j-tls")).expect("Alertmanager holds the alert");
    assert!(!held.to_string().contains("/act/"), "no link is readable from Alertmanager's API: {held}");
    assert!(!server.log_text().contains("am pass"), "the password was logged");
}
