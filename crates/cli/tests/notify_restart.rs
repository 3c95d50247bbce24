//! A restart neither loses nor repeats a notice. `bursar serve` is killed with SIGKILL twice between
//! a decision (durable: its admission was answered) and the delivery of its notice — once before the
//! notifier had even read the decision, once after it stored the notice but while the webhook was
//! refusing it — and after each restart the notice reaches the webhook exactly once, while the
//! notices delivered before the kills are never sent again.

#![expect(clippy::unwrap_used, reason = "test helpers: a failure should stop the test with its message")]

use std::time::Duration;

use crate::serve_support::*;
use bursar_model::api::{NoticeMessage, NoticeStatus};
use bursar_testkit::WebhookReceiver;

const POLICIES: &str = r#"[[policy]]
id = "approval/big"
description = "Jobs over 16 GPUs need bob's yes."
kind = "approval"
gpus_over = 16
approvers = ["bob"]
expires = "1h"
"#;

/// Firing notices about `job` the webhook accepted (answered 2xx).
fn accepted(hook: &WebhookReceiver, job: &str) -> usize {
    hook.received()
        .iter()
        .filter(|r| (200..300).contains(&r.status))
        .filter_map(|r| serde_json::from_str::<NoticeMessage>(&r.body).ok())
        .filter(|m| m.job_id.as_deref() == Some(job) && m.status == NoticeStatus::Firing)
        .count()
}

fn attempts(hook: &WebhookReceiver, job: &str) -> usize {
    hook.received()
        .iter()
        .filter_map(|r| serde_json::from_str::<NoticeMessage>(&r.body).ok())
        .filter(|m| m.job_id.as_deref() == Some(job))
        .count()
}

fn config(s: &Scratch, hook: &WebhookReceiver, poll: &str) -> String {
    let path = s.0.join(format!("notify-{poll}.toml"));
    std::fs::write(
        &path,
        format!(
            "poll = \"{poll}\"\nretry = {{ first = \"100ms\", max = \"200ms\" }}\n[webhook]\nurl = \"{}\"\n",
            hook.url("/hook")
        ),
    )
    .unwrap();
    path.display().to_string()
}

#[test]
fn a_notice_cut_off_by_sigkill_is_delivered_exactly_once_after_the_restart() {
    let hook = WebhookReceiver::start().unwrap();
    let s = Scratch::new("notify-restart");
    s.write_policy("approval.toml", POLICIES);
    let fast = config(&s, &hook, "100ms");
    let args = |cfg: &str| vec!["--tick".to_owned(), "1h".to_owned(), "--notify".to_owned(), cfg.to_owned()];
    let start = |cfg: &str| {
        let a = args(cfg);
        Server::start(&s, &a.iter().map(String::as_str).collect::<Vec<_>>())
    };

    // A notice delivered normally.
    let server = start(&fast);
    assert_eq!(
        server.post("/v1/admit", &submit("e1", "j1", "nlp", 32, 1.0)).json().unwrap()["decision"],
        "require_approval"
    );
    server.wait_for(20, "j1's notice", || (accepted(&hook, "j1") == 1).then_some(()));
    server.kill9();

    // 1. Killed after the decision, before the notifier read it: a notifier that reads the log once
    //    at start and then sleeps for an hour.
    let slow = config(&s, &hook, "1h");
    let server = start(&slow);
    server
        .wait_for(20, "the slow notifier's first pass", || server.log_text().contains("first pass done").then_some(()));
    assert_eq!(
        server.post("/v1/admit", &submit("e2", "j2", "nlp", 32, 1.0)).json().unwrap()["decision"],
        "require_approval"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(attempts(&hook, "j2"), 0, "the slow notifier read the log after its first pass");
    server.kill9();
    let server = start(&fast);
    server.wait_for(20, "j2's notice after the restart", || (accepted(&hook, "j2") == 1).then_some(()));

    // 2. Killed after the notice was stored, while the webhook refused it (503).
    hook.answer_with(503);
    assert_eq!(
        server.post("/v1/admit", &submit("e3", "j3", "nlp", 32, 1.0)).json().unwrap()["decision"],
        "require_approval"
    );
    server.wait_for(20, "a refused attempt for j3", || (attempts(&hook, "j3") >= 2).then_some(()));
    assert_eq!(accepted(&hook, "j3"), 0);
    server.kill9();
    hook.answer_with(200);
    let server = start(&fast);
    server.wait_for(20, "j3's notice after the restart", || (accepted(&hook, "j3") == 1).then_some(()));

    // A few more passes: still exactly once each, and nothing delivered before a kill came again.
    let seen = hook.received().len();
    std::thread::sleep(Duration::from_millis(800)); // eight notifier passes

    assert_eq!(hook.received().len(), seen, "something was sent again: {:#?}", &hook.received()[seen..]);
    for job in ["j1", "j2", "j3"] {
        assert_eq!(accepted(&hook, job), 1, "{job}'s notice was accepted {} times", accepted(&hook, job));
    }
    let ids: Vec<String> = hook
        .received()
        .iter()
        .filter(|r| r.status == 200)
        .filter_map(|r| r.header("idempotency-key").map(str::to_owned))
        .collect();
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), ids.len(), "{ids:?}");
}

/// Notices that still matter are sent when notifications are first turned on: a job held for
/// approval before `--notify` was given is notified once on the first start, a job already answered
/// is not, and the next restart sends nothing again.
#[test]
fn what_waits_when_notify_is_first_turned_on_is_notified_once() {
    let hook = WebhookReceiver::start().unwrap();
    let s = Scratch::new("notify-first-start");
    s.write_policy("approval.toml", POLICIES);

    // No notifications yet: one job waits, another was approved and has gone on.
    let server = Server::start(&s, &["--tick", "1h"]);
    for (e, job) in [("e1", "j-waits"), ("e2", "j-answered")] {
        assert_eq!(
            server.post("/v1/admit", &submit(e, job, "nlp", 32, 1.0)).json().unwrap()["decision"],
            "require_approval"
        );
    }
    let granted = r#"{"id":"g1","time":"TIME","type":"approval.granted","job_id":"j-answered","by":"bob"}"#
        .replace("TIME", &now());
    assert_eq!(server.post("/v1/events", &granted).status, 200);
    let (status, log) = server.terminate();
    assert!(status.success(), "{log}");

    let cfg = config(&s, &hook, "100ms");
    let server = Server::start(&s, &["--tick", "1h", "--notify", &cfg]);
    server.wait_for(20, "j-waits's notice", || (accepted(&hook, "j-waits") == 1).then_some(()));
    assert!(
        server.log_text().contains("first start on this audit log; sending the notices of what already waits"),
        "the start says what it sends: {}",
        server.log_text()
    );
    std::thread::sleep(Duration::from_millis(500)); // five passes
    assert_eq!(attempts(&hook, "j-answered"), 0, "an answered approval was notified");
    let seen = hook.received().len();
    let (status, log) = server.terminate();
    assert!(status.success(), "{log}");

    let server = Server::start(&s, &["--tick", "1h", "--notify", &cfg]);
    server.wait_for(20, "the notifier's first pass", || server.log_text().contains("first pass done").then_some(()));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(hook.received().len(), seen, "a restart sent again: {:#?}", &hook.received()[seen..]);
    assert_eq!(accepted(&hook, "j-waits"), 1);
}
