//! One-click answers and the terminal commands, against the real `bursar serve` with notices sent to
//! a webhook the test runs: a job held for approval reaches its approver with signed links; the
//! approver's link approves it (GET only shows what it will do, POST does it); the same link twice,
//! an expired link, a forged one and a link for a non-approver each change nothing and say why; and
//! `bursar pending|approve|reject|keepalive` answer with the errors a person expects.

#![expect(clippy::unwrap_used, clippy::panic, reason = "test helpers: a failure should stop the test with its message")]

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use crate::serve_support::*;
use bursar_model::Timestamp;
use bursar_model::api::{ActionKind, NoticeMessage, NoticeStatus};
use bursar_notify::{Claims, LinkKey};
use bursar_testkit::WebhookReceiver;

const POLICIES: &str = r#"[[policy]]
id = "approval/big"
description = "Jobs over 16 GPUs need bob's yes."
kind = "approval"
gpus_over = 16
approvers = ["bob"]
expires = "1h"

[[policy]]
id = "approval/huge"
description = "Jobs over 48 GPUs must be answered within seconds."
kind = "approval"
gpus_over = 48
approvers = ["bob"]
expires = "2s"
"#;

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// The webhook's notices so far, with the status each request was answered with.
fn notices(hook: &WebhookReceiver) -> Vec<(NoticeMessage, u16)> {
    hook.received().iter().map(|r| (serde_json::from_str(&r.body).unwrap(), r.status)).collect()
}

fn notice_for(hook: &WebhookReceiver, job: &str, status: NoticeStatus) -> NoticeMessage {
    hook.wait_for(Duration::from_secs(20), |got| {
        got.iter()
            .filter_map(|r| serde_json::from_str::<NoticeMessage>(&r.body).ok())
            .find(|m| m.job_id.as_deref() == Some(job) && m.status == status)
    })
    .unwrap_or_else(|| panic!("no {status:?} notice about {job}; got {:?}", notices(hook)))
}

fn key(audit: &Path) -> LinkKey {
    let hex = std::fs::read_to_string(format!("{}.link-key", audit.display())).unwrap();
    let hex = hex.trim();
    let mut k = [0u8; 32];
    for (i, b) in k.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
    }
    LinkKey::from_bytes(k)
}

#[test]
fn an_approvers_link_approves_once_and_every_other_use_changes_nothing() {
    let hook = WebhookReceiver::start().unwrap();
    let s = Scratch::new("notify-links");
    s.write_policy("approval.toml", POLICIES);
    let notify = s.0.join("notify.toml");
    std::fs::write(&notify, format!("poll = \"100ms\"\n[webhook]\nurl = \"{}\"\n", hook.url("/hook"))).unwrap();
    // No wall ticks during the test: the lapsed request below stays pending until something moves time.
    let server = Server::start(&s, &["--tick", "1h", "--notify", notify.to_str().unwrap()]);
    let addr = server.addr.to_string();
    let base = format!("http://{addr}");

    let held = server.post("/v1/admit", &submit("e1", "j-big", "nlp", 32, 10.0)).json().unwrap();
    assert_eq!(held["decision"], "require_approval", "{held}");

    // The notice reaches bob with his links.
    let n = notice_for(&hook, "j-big", NoticeStatus::Firing);
    assert_eq!(n.recipients, ["bob"]);
    let approve = n.links.iter().find(|l| l.action == ActionKind::Approve).unwrap();
    assert!(n.links.iter().any(|l| l.action == ActionKind::Reject && l.for_user == "bob"));
    assert!(approve.url.starts_with(&format!("{base}/act/")), "{}", approve.url);
    let path = approve.url.strip_prefix(&base).unwrap().to_owned();
    let token = path.strip_prefix("/act/").unwrap().to_owned();
    let logged = server.decisions(0).len();

    // `bursar pending` shows what waits for whom.
    let p = bursar(&["pending", "--server", &addr]);
    assert!(p.status.success() && text(&p).contains("j-big") && text(&p).contains("bob"), "{}", text(&p));

    // A non-approver is refused up front, by the command and by a genuine link made out to them.
    let m = bursar(&["approve", "j-big", "--as", "mallory", "--server", &addr]);
    assert_eq!(m.status.code(), Some(1), "{}", text(&m));
    assert!(text(&m).contains("`mallory` is not an approver of job `j-big`: only bob"), "{}", text(&m));
    let k = key(&s.audit());
    let claims = |user: &str, expires: Timestamp| Claims {
        action: ActionKind::Approve,
        job: "j-big".into(),
        for_user: user.into(),
        expires_ms: expires.millis(),
        notice: n.id.clone(),
        request: None,
    };
    let soon = Timestamp::wall_clock().plus(bursar_model::Duration::minutes(5));
    let mallory = format!("/act/{}", k.sign(&claims("mallory", soon)));
    let r = server.get(&mallory).unwrap();
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(r.text().contains("is not an approver"), "{}", r.text());
    assert_eq!(server.post(&mallory, "").status, 403);

    // An expired link (genuinely signed, past its time) and a forged one (edited, or signed by
    // another key) do nothing and say why.
    let expired =
        format!("/act/{}", k.sign(&claims("bob", Timestamp::wall_clock().plus(bursar_model::Duration(-1000)))));
    for r in [server.get(&expired).unwrap(), server.post(&expired, "")] {
        assert_eq!(r.status, 410, "{}", r.text());
        assert!(r.text().contains("This link has expired") && r.text().contains("Nothing was done"), "{}", r.text());
    }
    let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
    let mut edited = claims("bob", soon);
    edited.job = "j-other".into();
    parts[1] = bursar_notify::token::b64_encode(serde_json::to_string(&edited).unwrap().as_bytes());
    let forged = [
        format!("/act/{}", parts.join(".")),
        format!("/act/{}", LinkKey::from_bytes([9; 32]).sign(&claims("bob", soon))),
    ];
    for f in &forged {
        for r in [server.get(f).unwrap(), server.post(f, "")] {
            assert_eq!(r.status, 403, "{}", r.text());
            assert!(r.text().contains("not issued by this bursar server"), "{}", r.text());
        }
    }
    assert_eq!(server.decisions(0).len(), logged, "a refused answer reached the engine");
    assert_eq!(server.get_json("/v1/jobs/j-big")["phase"], "pending_approval");

    // The approver's link: GET shows exactly what will happen and changes nothing ...
    let page = server.get(&path).unwrap();
    assert_eq!(page.status, 200, "{}", page.text());
    assert!(
        page.text().contains("Approve job j-big?") && page.text().contains("<form method=\"post\">"),
        "{}",
        page.text()
    );
    assert!(page.text().contains("bob&#39;s approval of job j-big"), "{}", page.text());
    assert_eq!(server.get_json("/v1/jobs/j-big")["phase"], "pending_approval");
    assert_eq!(server.decisions(0).len(), logged);
    // ... and POST approves, as bob, through the ordinary approval.granted event.
    let done = server.post(&path, "");
    assert_eq!(done.status, 200, "{}", done.text());
    assert!(done.text().contains("job `j-big` approved by bob"), "{}", done.text());
    assert_eq!(server.get_json("/v1/jobs/j-big")["phase"], "admitted");
    let after = server.decisions(logged as u64);
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!((after[0]["decision"].as_str(), after[0]["admission"].as_bool()), (Some("allow"), Some(true)));
    assert!(after[0]["reason"].as_str().unwrap().starts_with("approved by bob"), "{}", after[0]);
    assert_eq!(after[0]["event_id"].as_str(), Some(bursar_notify::event_id(&token).as_str()));

    // The same link twice: nothing changes, and the page says it was used.
    for r in [server.post(&path, ""), server.get(&path).unwrap()] {
        assert_eq!(r.status, 409, "{}", r.text());
        assert!(r.text().contains("already done") && r.text().contains("is now admitted"), "{}", r.text());
    }
    assert_eq!(server.decisions(0).len(), logged + 1);
    // The notice is resolved by the approval.
    let resolved = notice_for(&hook, "j-big", NoticeStatus::Resolved);
    assert!(resolved.resolution.as_deref().is_some_and(|r| r.starts_with("approved")), "{resolved:?}");

    // The terminal commands, and the errors a person expects.
    let again = bursar(&["approve", "j-big", "--as", "bob", "--server", &addr]);
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    assert!(text(&again).contains("job `j-big` is not waiting for an approval: it is admitted"), "{}", text(&again));
    let unknown = bursar(&["approve", "j-nope", "--as", "bob", "--server", &addr]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(text(&unknown).contains("bursar knows no job `j-nope`"), "{}", text(&unknown));
    assert_eq!(
        server.post("/v1/admit", &submit("e2", "j-two", "nlp", 24, 1.0)).json().unwrap()["decision"],
        "require_approval"
    );
    let rej = bursar(&["reject", "j-two", "--reason", "split it into 8-GPU runs", "--as", "bob", "--server", &addr]);
    assert!(rej.status.success(), "{}", text(&rej));
    assert!(text(&rej).contains("job `j-two` rejected by bob"), "{}", text(&rej));
    let why = server.decisions(0).into_iter().find(|d| d["job_id"] == "j-two" && d["decision"] == "deny").unwrap();
    assert!(
        why["reason"].as_str().unwrap().starts_with("approval rejected by bob: split it into 8-GPU runs ("),
        "{why}"
    );
    let raw = server.get_json("/v1/jobs/j-big");
    assert_eq!(raw["phase"], "admitted");
    let ka = bursar(&["keepalive", "j-big", "--as", "alice", "--server", &addr]);
    assert!(ka.status.success() && text(&ka).contains("keepalive for job `j-big` recorded by alice"), "{}", text(&ka));
    // A request that lapsed while nothing moved the engine's clock is refused as expired.
    assert_eq!(
        server.post("/v1/admit", &submit("e3", "j-huge", "nlp", 64, 1.0)).json().unwrap()["decision"],
        "require_approval"
    );
    std::thread::sleep(Duration::from_millis(2200));
    let late = bursar(&["approve", "j-huge", "--as", "bob", "--server", &addr]);
    assert_eq!(late.status.code(), Some(1), "{}", text(&late));
    assert!(text(&late).contains("the approval request of job `j-huge` expired at"), "{}", text(&late));
    // serve unreachable: exit 2, with what to check.
    let down = bursar(&["pending", "--server", "127.0.0.1:1"]);
    assert_eq!(down.status.code(), Some(2), "{}", text(&down));
    assert!(text(&down).contains("cannot reach bursar serve at 127.0.0.1:1"), "{}", text(&down));
    let empty = bursar(&["pending", "--server", &addr, "--format", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&empty.stdout).unwrap();
    assert_eq!(v["approvals"].as_array().map(|a| a.len()), Some(1), "{v}"); // j-huge, still held
}

/// A link answers the request it was sent for and no other; a webhook message carries one
/// recipient's links; the outbox keeps no link a reader of the database could lift.
#[test]
fn a_link_is_bound_to_its_request_and_its_recipient() {
    let hook = WebhookReceiver::start().unwrap();
    let s = Scratch::new("notify-bound");
    s.write_policy(
        "approval.toml",
        "[[policy]]\nid = \"approval/big\"\ndescription = \"two approvers\"\nkind = \"approval\"\ngpus_over = 16\napprovers = [\"bob\", \"carol\"]\nexpires = \"1h\"\n",
    );
    let notify = s.0.join("notify.toml");
    std::fs::write(&notify, format!("poll = \"100ms\"\n[webhook]\nurl = \"{}\"\n", hook.url("/hook"))).unwrap();
    let server = Server::start(&s, &["--tick", "1h", "--notify", notify.to_str().unwrap()]);
    let held = server.post("/v1/admit", &submit("e1", "j-two", "nlp", 32, 10.0)).json().unwrap();
    assert_eq!(held["decision"], "require_approval", "{held}");
    // One message per approver, each with only that approver's links.
    let for_each = hook
        .wait_for(Duration::from_secs(20), |got| {
            let ms: Vec<NoticeMessage> = got.iter().filter_map(|r| serde_json::from_str(&r.body).ok()).collect();
            (ms.len() >= 2).then_some(ms)
        })
        .unwrap();
    for m in &for_each {
        assert_eq!(m.recipients.len(), 1, "{m:?}");
        assert!(m.links.iter().all(|l| l.for_user == m.recipients[0]), "{m:?}");
    }
    let bob = for_each.iter().find(|m| m.recipients == ["bob"]).unwrap();
    let link = bob.links.iter().find(|l| l.action == ActionKind::Approve).unwrap();
    let token = link.url.rsplit_once("/act/").unwrap().1.to_owned();
    // The outbox holds the token's hash, not the link.
    let db = std::fs::read(s.audit()).unwrap();
    let needle = token.as_bytes();
    assert!(!db.windows(needle.len()).any(|w| w == needle), "the audit database holds a usable link");

    // The same link, made out for another request (the job id resubmitted bigger), does nothing.
    let k = key(&s.audit());
    let mut claims = k.verify(&token, Timestamp::wall_clock()).unwrap();
    let (_, _, submitted) = claims.request.unwrap();
    claims.request = Some((64.into(), 150.0, submitted));
    let other = format!("/act/{}", k.sign(&claims));
    let r = server.post(&other, "");
    assert_eq!(r.status, 409, "{}", r.text());
    assert!(r.text().contains("was sent for job `j-two` at 64 GPUs for 150 h"), "{}", r.text());
    // The genuine link approves.
    let r = server.post(&format!("/act/{token}"), "");
    assert_eq!(r.status, 200, "{}", r.text());
}

/// Notices to an https webhook (a rustls receiver on a CA made here) with a bearer token read from
/// a file, from a serve that itself speaks TLS: the notice arrives with the token and the URL's own
/// query, and its links name serve at `https://` (no `public_url` set), where they answer.
#[test]
fn notices_reach_an_https_webhook_with_its_token_and_links_name_serve_over_tls() {
    use bursar_testkit::tls::{TestCa, TlsWebhook};
    let s = Scratch::new("notify-https");
    s.write_policy("approval.toml", POLICIES);
    let ca = TestCa::new("bursar test CA").unwrap();
    let ca_file = ca.write(&s.0, "ca").unwrap();
    let hook = TlsWebhook::start(&ca.server().unwrap()).unwrap();
    let token = s.0.join("hook.token");
    std::fs::write(&token, "tok-1\n").unwrap();
    let notify = s.0.join("notify.toml");
    std::fs::write(
        &notify,
        format!(
            "poll = \"100ms\"\n[webhook]\nurl = \"{}\"\nca_file = \"{}\"\nbearer_token_file = \"{}\"\n",
            hook.url("/hook?team=a"),
            ca_file.display(),
            token.display()
        ),
    )
    .unwrap();
    let (cert, key) = ca.server().unwrap().write(&s.0, "serve").unwrap();
    let flags = [
        "--tick",
        "1h",
        "--notify",
        notify.to_str().unwrap(),
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ];
    let server = Server::start_https(&s, &ca_file, None, &flags);
    let held = server.post("/v1/admit", &submit("e1", "j-big", "nlp", 32, 10.0)).json().unwrap();
    assert_eq!(held["decision"], "require_approval", "{held}");

    let got = hook
        .wait_for(Duration::from_secs(20), |got| {
            got.iter()
                .find(|r| {
                    serde_json::from_str::<NoticeMessage>(&r.body).is_ok_and(|m| m.job_id.as_deref() == Some("j-big"))
                })
                .cloned()
        })
        .unwrap_or_else(|| panic!("no notice reached the https webhook; log:\n{}", server.log_text()));
    assert_eq!(got.path, "/hook?team=a");
    assert_eq!(got.header("authorization"), Some("Bearer tok-1"));
    assert_eq!(got.header("idempotency-key").map(|k| k.ends_with("-firing")), Some(true));
    let n: NoticeMessage = serde_json::from_str(&got.body).unwrap();
    let approve = n.links.iter().find(|l| l.action == ActionKind::Approve).unwrap();
    let base = server.url();
    assert!(approve.url.starts_with(&format!("{base}/act/")), "{} under {base}", approve.url);
    let page = server.get(approve.url.strip_prefix(&base).unwrap()).unwrap();
    assert_eq!(page.status, 200, "{}", page.text());
    assert!(!server.log_text().contains("tok-1"), "the token was logged");
}

/// `bursar approve` with no `--as`, no `$USER`/`$LOGNAME` and no credential cannot say who answers:
/// it stops before asking serve, with exit 2 (it could not run) and what to pass.
#[test]
fn approve_without_a_name_says_what_to_pass() {
    let o = Command::new(env!("CARGO_BIN_EXE_bursar"))
        .args(["approve", "j1", "--server", "127.0.0.1:9"])
        .env_remove("USER")
        .env_remove("LOGNAME")
        .env("PATH", "/nonexistent") // no munge to fall back on
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("no name to answer as") && t.contains("--as NAME") && !t.contains("cannot reach"), "{t}");
}
