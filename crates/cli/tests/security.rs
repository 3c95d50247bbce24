//! Every caller is someone, every power is granted (docs/security.md), through the real `bursar
//! serve` on loopback with a real configuration file and a real SQLite audit log.
//!
//! `every_route_by_every_role_and_credential` runs the table in `tests/security/routes.toml`: each
//! route with no credential, a wrong token, an expired token, and each role's valid token, and
//! checks that nothing refused was journaled. The other tests are named after the attacks a
//! security review reproduced against the previous version (issue 34), each pinned here.

#![expect(clippy::unwrap_used, reason = "tests: a failure stops the test")]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;

use crate::serve_support::*;

const ROLES: [&str; 7] = ["scheduler", "producer", "billing", "approver", "user", "reader", "admin"];

fn token_of(role: &str) -> String {
    format!("bursar_test-{role}-token")
}

/// A configuration with one principal per role (`p-<role>`, token `bursar_test-<role>-token`),
/// one whose token expired, and `extra` appended.
fn config(s: &Scratch, extra: &str) -> std::path::PathBuf {
    let mut text = String::from("[clock]\nmax_skew = \"5m\"\n\n[auth]\npeople = []\n\n");
    for role in ROLES {
        let hash = bursar_auth::TokenHash::of(&token_of(role)).to_text();
        text.push_str(&format!("[[principal]]\nname = \"p-{role}\"\nroles = [\"{role}\"]\ntokens = [\"{hash}\"]\n\n"));
    }
    let expired = bursar_auth::TokenHash::of("bursar_test-expired-token").to_text();
    text.push_str(&format!(
        "[[principal]]\nname = \"p-old\"\nroles = {ROLES:?}\ntokens = [{{ sha256 = \"{expired}\", expires = \"2020-01-01T00:00:00Z\" }}]\n\n"
    ));
    text.push_str(extra);
    let path = s.0.join("bursar.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// One request with exactly these headers; the status, the headers and the body.
fn http(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, head.to_ascii_lowercase(), body.to_owned())
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

fn as_role(addr: SocketAddr, role: &str, method: &str, path: &str, body: &str) -> (u16, String, String) {
    let auth = bearer(&token_of(role));
    http(addr, method, path, &[("authorization", &auth)], body)
}

fn journaled(audit: &Path) -> usize {
    bursar_audit::AuditLog::open_read(audit).unwrap().events_since(0, 10_000_000).unwrap().len()
}

fn approval_policy(s: &Scratch, approvers: &str) {
    s.write_policy(
        "approval.toml",
        &format!(
            "[[policy]]\nid = \"approval/big\"\ndescription = \"big jobs need approval\"\nkind = \"approval\"\ngpus_over = 16\napprovers = {approvers}\nexpires = \"2h\"\n"
        ),
    );
}

fn job_line(id: &str, job: &str, user: &str, gpus: u32, time: &str) -> String {
    format!(
        r#"{{"id":"{id}","time":"{time}","type":"job.submitted","job":{{"id":"{job}","project":"nlp","user":"{user}","gpus":{gpus},"requested_hours":1,"ready":{{"image":true,"data":true,"script":true}}}}}}"#
    )
}

#[derive(serde::Deserialize)]
struct Table {
    route: Vec<Route>,
}

#[derive(serde::Deserialize)]
struct Route {
    method: String,
    path: String,
    #[serde(default)]
    body: String,
    roles: Vec<String>,
    ok: u16,
}

#[test]
fn every_route_by_every_role_and_credential() {
    let s = Scratch::new("security-table");
    approval_policy(&s, "[\"p-approver\"]");
    let cfg = config(&s, "");
    let server = Server::start(&s, &["--config", cfg.to_str().unwrap()]);
    let addr = server.addr;
    for (id, job, user) in [("held", "lab-held", "alice"), ("mine", "lab-mine", "p-user")] {
        let (st, _, body) = as_role(addr, "scheduler", "POST", "/v1/admit", &job_line(id, job, user, 1, &now()));
        assert_eq!(st, 200, "{body}");
    }

    let table: Table =
        toml::from_str(&std::fs::read_to_string(repo().join("tests/security/routes.toml")).unwrap()).unwrap();
    let mut n = 0;
    let mut fill = |body: &str, caller: &str| {
        n += 1;
        body.replace("{n}", &n.to_string()).replace("{now}", &now()).replace("{caller}", caller)
    };
    let mut checked = 0;
    for r in &table.route {
        let open = r.roles.iter().any(|x| x == "*");
        for (what, header) in [
            ("no credential", None),
            ("a wrong token", Some(bearer("bursar_test-guessed-token"))),
            ("an expired token", Some(bearer("bursar_test-expired-token"))),
        ] {
            let before = journaled(&server_audit(&s));
            let headers: Vec<(&str, &str)> = header.iter().map(|h| ("authorization", h.as_str())).collect();
            let (st, head, body) = http(addr, &r.method, &r.path, &headers, &fill(&r.body, "p-old"));
            let want = if open { r.ok } else { 401 };
            assert_eq!(st, want, "{} {} with {what}: {body}", r.method, r.path);
            if !open {
                assert!(head.contains("www-authenticate: bearer"), "{} {}: {head}", r.method, r.path);
                assert_eq!(
                    journaled(&server_audit(&s)),
                    before,
                    "{} {} with {what} journaled something",
                    r.method,
                    r.path
                );
            }
            checked += 1;
        }
        for role in ROLES {
            let before = journaled(&server_audit(&s));
            let (st, _, body) = as_role(addr, role, &r.method, &r.path, &fill(&r.body, &format!("p-{role}")));
            let allowed = open || r.roles.iter().any(|x| x == role);
            if allowed {
                assert_eq!(st, r.ok, "{} {} as {role}: {body}", r.method, r.path);
            } else {
                assert_eq!(st, 403, "{} {} as {role}: {body}", r.method, r.path);
                assert!(body.contains(&format!("`p-{role}`")), "a 403 names the principal: {body}");
                assert_eq!(
                    journaled(&server_audit(&s)),
                    before,
                    "{} {} as {role} journaled something",
                    r.method,
                    r.path
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= table.route.len() * 10, "{checked} checks");
}

fn server_audit(s: &Scratch) -> std::path::PathBuf {
    s.audit()
}

/// A request that names another answerer than its credential (`bursar approve --as bob` with
/// alice's token) is refused; so is a raw `approval.granted` with another `by`, and one with a
/// forged `"via": "link"`.
#[test]
fn approvers_are_whoever_their_credential_says() {
    let s = Scratch::new("security-approvers");
    approval_policy(&s, "[\"p-approver\"]");
    let alice_hash = bursar_auth::TokenHash::of("hello").to_text();
    let cfg = config(
        &s,
        &format!("[[principal]]\nname = \"alice\"\nroles = [\"approver\", \"user\"]\ntokens = [\"{alice_hash}\"]\n"),
    );
    let server = Server::start(&s, &["--config", cfg.to_str().unwrap()]);
    let addr = server.addr;
    let (st, _, body) =
        as_role(addr, "scheduler", "POST", "/v1/admit", &job_line("e1", "lab-big", "alice", 32, &now()));
    assert_eq!(st, 200, "{body}");
    assert!(body.contains("require_approval"), "{body}");
    let alice = [("authorization", "Bearer hello")];
    let (st, _, body) = http(addr, "POST", "/v1/jobs/lab-big/approve", &alice, r#"{"by":"p-approver"}"#);
    assert_eq!(st, 403, "{body}");
    assert!(body.contains("answers as `p-approver` but the credential is `alice`'s"), "{body}");
    let (st, _, body) = http(addr, "POST", "/v1/jobs/lab-big/approve", &alice, "{}");
    assert_eq!(st, 403, "{body}");
    assert!(body.contains("`alice` is not an approver of job `lab-big`: only p-approver"), "{body}");
    let raw = format!(
        r#"{{"id":"g1","time":"{}","type":"approval.granted","job_id":"lab-big","by":"p-approver","via":"link"}}"#,
        now()
    );
    let (st, _, body) = http(addr, "POST", "/v1/events", &alice, &raw);
    assert_eq!(st, 403, "{body}");
    // The approver approves; the log records who and how.
    let (st, _, body) = as_role(addr, "approver", "POST", "/v1/jobs/lab-big/approve", "{}");
    assert_eq!(st, 200, "{body}");
    drop(server);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_bursar"))
        .args(["audit", "--db", s.audit().to_str().unwrap(), "explain", "lab-big"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("p-approver (token"), "explain shows who approved and how: {text}");
    assert!(text.contains("p-scheduler (token"), "{text}");
}

/// Issue 53: an approver runs `bursar pending` (`GET /v1/pending` without the `read` power) and sees
/// what they may answer; a user their own jobs in the queue; a reader everything.
#[test]
fn an_approver_runs_bursar_pending_and_sees_what_they_may_answer() {
    let s = Scratch::new("security-pending");
    approval_policy(&s, "[\"p-approver\"]");
    let cfg = config(&s, "");
    let server = Server::start(&s, &["--config", cfg.to_str().unwrap()]);
    let addr = server.addr;
    for (id, job, user, gpus) in
        [("e1", "lab-big", "alice", 32), ("e2", "lab-mine", "p-user", 1), ("e3", "lab-other", "bob", 1)]
    {
        let (st, _, body) = as_role(addr, "scheduler", "POST", "/v1/admit", &job_line(id, job, user, gpus, &now()));
        assert_eq!(st, 200, "{body}");
    }
    let token = s.0.join("approver.token");
    std::fs::write(&token, token_of("approver")).unwrap();
    let out = crate::serve_support::bursar(&[
        "pending",
        "--server",
        &addr.to_string(),
        "--token-file",
        token.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("what waits for p-approver") && text.contains("lab-big"), "{text}");
    assert!(!text.contains("lab-mine") && !text.contains("lab-other"), "not their jobs: {text}");

    let (st, _, body) = as_role(addr, "user", "GET", "/v1/pending", "");
    assert_eq!(st, 200, "{body}");
    let mine: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(mine["for_user"], "p-user", "{body}");
    assert_eq!(mine["approvals"].as_array().map(Vec::len), Some(0), "{body}");
    let queued: Vec<&str> = mine["queue"].as_array().unwrap().iter().filter_map(|q| q["job_id"].as_str()).collect();
    assert_eq!(queued, ["lab-mine"], "their own job, not bob's: {body}");

    let (st, _, body) = as_role(addr, "reader", "GET", "/v1/pending", "");
    assert_eq!(st, 200, "{body}");
    let all: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(all["for_user"].is_null(), "{body}");
    assert_eq!(all["approvals"].as_array().map(Vec::len), Some(1), "{body}");
    assert_eq!(all["queue"].as_array().map(Vec::len), Some(2), "{body}");
    let (st, _, body) = as_role(addr, "billing", "GET", "/v1/pending", "");
    assert_eq!(st, 403, "{body}");
    assert!(body.contains("needs the `read` power (everything), or `answer` or `keepalive`"), "{body}");
}

/// A job's own user cannot approve their own job, even as a named approver, unless the policy says
/// `self_approval = true`.
#[test]
fn a_user_cannot_approve_their_own_job() {
    let s = Scratch::new("security-self");
    approval_policy(&s, "[\"p-approver\", \"p-user\"]");
    let cfg = config(&s, "");
    let server = Server::start(&s, &["--config", cfg.to_str().unwrap()]);
    let (st, _, body) =
        as_role(server.addr, "scheduler", "POST", "/v1/admit", &job_line("e1", "lab-mine", "p-user", 32, &now()));
    assert_eq!(st, 200, "{body}");
    // p-user has no `answer` power at all; give the job to p-approver instead to test the rule.
    let (st, _, body) =
        as_role(server.addr, "scheduler", "POST", "/v1/admit", &job_line("e2", "lab-own", "p-approver", 32, &now()));
    assert_eq!(st, 200, "{body}");
    let (st, _, body) = as_role(server.addr, "approver", "POST", "/v1/jobs/lab-own/approve", "{}");
    assert_eq!(st, 403, "{body}");
    assert!(body.contains("submitted job `lab-own` and may not answer its approval"), "{body}");
    let raw =
        format!(r#"{{"id":"g2","time":"{}","type":"approval.granted","job_id":"lab-own","by":"p-approver"}}"#, now());
    let (st, _, body) = as_role(server.addr, "approver", "POST", "/v1/events", &raw);
    assert_eq!(st, 403, "{body}");
    assert!(body.contains("may not answer its approval"), "{body}");
}

/// Re-submitting a running job's id under a new event id is refused (409), never a `deny` with
/// `admission: true` that `slurm enforce` would turn into an `scancel` of the running job; a
/// producer cannot finish a job it does not speak for.
#[test]
fn an_admission_cannot_cancel_someone_elses_job() {
    let s = Scratch::new("security-resubmit");
    let cfg = config(
        &s,
        &format!(
            "[[principal]]\nname = \"k8s-agent\"\nroles = [\"producer\"]\njobs = [\"k8s-*\"]\ntokens = [\"{}\"]\n",
            bursar_auth::TokenHash::of("bursar_test-k8s-token").to_text()
        ),
    );
    let server = Server::start(&s, &["--config", cfg.to_str().unwrap()]);
    let addr = server.addr;
    assert_eq!(as_role(addr, "scheduler", "POST", "/v1/admit", &job_line("e1", "lab-1", "alice", 1, &now())).0, 200);
    let started = format!(r#"{{"id":"st1","time":"{}","type":"job.started","job_id":"lab-1"}}"#, now());
    assert_eq!(as_role(addr, "producer", "POST", "/v1/events", &started).0, 200);
    let (st, _, body) = as_role(addr, "scheduler", "POST", "/v1/admit", &job_line("e2", "lab-1", "mallory", 1, &now()));
    assert_eq!(st, 409, "{body}");
    assert!(body.contains("job id `lab-1` is already known (running"), "{body}");
    let finished =
        format!(r#"{{"id":"f1","time":"{}","type":"job.finished","job_id":"lab-1","status":"failed"}}"#, now());
    let k8s = [("authorization", "Bearer bursar_test-k8s-token")];
    let (st, _, body) = http(addr, "POST", "/v1/events", &k8s, &finished);
    assert_eq!(st, 403, "{body}");
    assert!(body.contains("may not speak for job `lab-1`"), "{body}");
    let (_, _, body) = as_role(addr, "reader", "GET", "/v1/jobs/lab-1", "");
    assert!(body.contains("\"phase\":\"running\""), "the job runs on: {body}");
    let (_, _, stream) = as_role(addr, "reader", "GET", "/v1/decisions?follow=false", "");
    assert!(!stream.contains("\"deny\""), "no deny was made: {stream}");
}

/// An event dated far in the future is refused with its line and the bound; it reclaims nothing,
/// and the events after it are applied.
#[test]
fn a_far_future_tick_breaks_nothing() {
    let s = Scratch::new("security-clock");
    s.write_policy(
        "reclaim.toml",
        "[[policy]]\nid = \"reclaim/r\"\ndescription = \"at most 3h\"\nkind = \"reclaim\"\nmax_runtime = \"3h\"\n",
    );
    let cfg = config(&s, "");
    let server = Server::start(&s, &["--config", cfg.to_str().unwrap()]);
    let addr = server.addr;
    assert_eq!(as_role(addr, "scheduler", "POST", "/v1/admit", &job_line("e1", "lab-1", "alice", 1, &now())).0, 200);
    let body = format!(
        "{}\n{{\"id\":\"t1\",\"time\":\"9999-12-31T00:00:00Z\",\"type\":\"clock.tick\"}}\n{}\n",
        format_args!(r#"{{"id":"st1","time":"{}","type":"job.started","job_id":"lab-1"}}"#, now()),
        format_args!(r#"{{"id":"sa1","time":"{}","type":"job.sample","job_id":"lab-1","gpu_util":0.9}}"#, now())
    );
    let (st, _, reply) = as_role(addr, "producer", "POST", "/v1/events", &body);
    assert_eq!(st, 200, "{reply}");
    let v: serde_json::Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(v["accepted"], 2, "{reply}");
    assert_eq!(v["rejected"][0]["line"], 2, "{reply}");
    let why = v["rejected"][0]["error"].as_str().unwrap();
    assert!(
        why.contains("event time 9999-12-31T00:00:00Z is about") && why.contains("more than the 5m allowed"),
        "{why}"
    );
    // A wall tick or two later, nothing was reclaimed, and a restart keeps the real clock.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let (_, _, stream) = as_role(addr, "reader", "GET", "/v1/decisions?follow=false", "");
    assert!(!stream.contains("\"decision\":\"reclaim\""), "{stream}");
    let (_, _, job) = as_role(addr, "reader", "GET", "/v1/jobs/lab-1", "");
    assert!(job.contains("\"phase\":\"running\""), "{job}");
    let log = bursar_audit::AuditLog::open_read(s.audit()).unwrap();
    let refused = log.refusals(0, None, 10).unwrap();
    assert_eq!(refused.len(), 1, "the refusal is journaled");
    assert!(refused[0].sender.as_deref().unwrap_or("").contains("p-producer"), "{:?}", refused[0]);
}

/// A producer's `clock.tick` with an `enforcement` field (older versions' shape of an action
/// record) is refused: it would move the clock live and be read back as an action after a restart.
#[test]
fn a_tick_with_an_enforcement_field_is_refused() {
    let s = Scratch::new("security-enforcement");
    let cfg = config(&s, "");
    let server = Server::start(&s, &["--config", cfg.to_str().unwrap()]);
    let line = format!(
        r#"{{"id":"x1","time":"{}","type":"clock.tick","enforcement":{{"decision_id":"d","action":"scancel","outcome":"done"}}}}"#,
        now()
    );
    let (st, _, body) = as_role(server.addr, "producer", "POST", "/v1/events", &line);
    assert_eq!(st, 400, "{body}");
    assert!(body.contains("`enforcement` field"), "{body}");
}

/// One producer cannot squat another's predictable event id: ids are kept per principal.
#[test]
fn event_ids_are_namespaced_by_principal() {
    let s = Scratch::new("security-ids");
    let cfg = config(
        &s,
        &format!(
            "[[principal]]\nname = \"rogue\"\nroles = [\"producer\"]\njobs = [\"rogue-*\"]\ntokens = [\"{}\"]\n",
            bursar_auth::TokenHash::of("bursar_test-rogue-token").to_text()
        ),
    );
    let server = Server::start(&s, &["--config", cfg.to_str().unwrap()]);
    let addr = server.addr;
    assert_eq!(as_role(addr, "scheduler", "POST", "/v1/admit", &job_line("e1", "lab-7", "alice", 1, &now())).0, 200);
    // The rogue posts the id the real watcher will use, on a job of its own.
    let squat = format!(r#"{{"id":"lab-7-finished","time":"{}","type":"clock.tick"}}"#, now());
    let rogue = [("authorization", "Bearer bursar_test-rogue-token")];
    assert_eq!(http(addr, "POST", "/v1/events", &rogue, &squat).0, 200);
    let real = format!(
        r#"{{"id":"lab-7-finished","time":"{}","type":"job.finished","job_id":"lab-7","status":"succeeded"}}"#,
        now()
    );
    let (st, _, body) = as_role(addr, "producer", "POST", "/v1/events", &real);
    assert_eq!(st, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!((v["accepted"].as_u64(), v["duplicates"].as_array().map(Vec::len)), (Some(1), Some(0)), "{body}");
    let (_, _, job) = as_role(addr, "reader", "GET", "/v1/jobs/lab-7", "");
    assert!(job.contains("\"phase\":\"finished\""), "the job released its GPUs: {job}");
}

/// Names are bounded and printable: a look-alike id, a terminal escape, a fake row, a 2 MiB
/// project name are refused with the field.
#[test]
fn names_are_bounded_and_printable() {
    let s = Scratch::new("security-names");
    let cfg = config(&s, "");
    let server = Server::start(&s, &["--config", cfg.to_str().unwrap()]);
    for (job, project, want) in [
        ("lab-1\\u202e", "nlp", "bidirectional"),
        ("lab-2", "nlp\\u001b[2J", "escape"),
        ("lab-3", "nlp\\nlab-9  running", "newline"),
        ("lab\\u200b4", "nlp", "invisible"),
    ] {
        let line = job_line("n", job, "alice", 1, &now()).replace("\"nlp\"", &format!("\"{project}\""));
        let (st, _, body) = as_role(server.addr, "scheduler", "POST", "/v1/admit", &line);
        assert_eq!(st, 400, "{job}: {body}");
        assert!(body.contains(want), "{body}");
    }
    let big = "p".repeat(2 * 1024 * 1024);
    let line = job_line("n2", "lab-5", "alice", 1, &now()).replace("\"nlp\"", &format!("\"{big}\""));
    let (st, _, body) = as_role(server.addr, "scheduler", "POST", "/v1/admit", &line);
    assert_eq!(st, 400, "{}", &body[..body.len().min(300)]);
    assert!(
        body.contains("`job.project` is 2097152 bytes long, above the 256 bytes"),
        "{}",
        &body[..300.min(body.len())]
    );
    assert_eq!(journaled(&s.audit()), 0, "nothing refused was journaled");
}

/// Every page and answer carries the security headers: no framing, no sniffing, no referrer (a
/// link's token is in its URL), a content security policy.
#[test]
fn every_page_has_security_headers() {
    let s = Scratch::new("security-headers");
    let cfg = config(&s, "");
    let server = Server::start(&s, &["--config", cfg.to_str().unwrap()]);
    for (path, role) in
        [("/", "reader"), ("/report", "reader"), ("/healthz", "reader"), ("/v1/pool", "reader"), ("/nowhere", "reader")]
    {
        let (_, head, _) = as_role(server.addr, role, "GET", path, "");
        for h in [
            "x-frame-options: deny",
            "x-content-type-options: nosniff",
            "referrer-policy: no-referrer",
            "content-security-policy: default-src 'none'",
        ] {
            assert!(head.contains(h), "{path} lacks `{h}`:\n{head}");
        }
    }
    let (st, head, _) = http(server.addr, "GET", "/", &[], "");
    assert_eq!(st, 401);
    assert!(head.contains("x-frame-options: deny"), "{head}");
}

/// The audit log and its WAL are not readable by every local user, and a token never comes from
/// the command line.
#[test]
fn the_audit_log_is_private_and_secrets_stay_off_argv() {
    use std::os::unix::fs::PermissionsExt;
    let s = Scratch::new("security-files");
    let cfg = config(&s, "");
    let server = Server::start(&s, &["--config", cfg.to_str().unwrap()]);
    assert_eq!(
        as_role(server.addr, "scheduler", "POST", "/v1/admit", &job_line("e1", "lab-1", "alice", 1, &now())).0,
        200
    );
    for f in ["audit.db", "audit.db-wal"] {
        let mode = std::fs::metadata(s.0.join(f)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & 0o007, 0, "{f} is readable by others: {mode:o}");
    }
    drop(server);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_bursar"))
        .args([
            "serve",
            "--policies",
            s.policies().to_str().unwrap(),
            "--audit",
            s.audit().to_str().unwrap(),
            "--token",
            "x",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unexpected argument '--token'"));
}

/// Rotating a token takes a reload, not a restart: the new token works and the old one stops.
#[test]
fn tokens_rotate_without_a_restart() {
    let s = Scratch::new("security-rotate");
    let cfg = config(&s, "");
    let server = Server::start(&s, &["--config", cfg.to_str().unwrap()]);
    assert_eq!(as_role(server.addr, "reader", "GET", "/v1/policies", "").0, 200);
    let text = std::fs::read_to_string(&cfg).unwrap();
    let old = bursar_auth::TokenHash::of(&token_of("reader")).to_text();
    let new = bursar_auth::TokenHash::of("bursar_test-rotated-token").to_text();
    std::fs::write(&cfg, text.replace(&old, &new)).unwrap();
    let (st, _, body) = as_role(server.addr, "admin", "POST", "/v1/reload", "");
    assert_eq!(st, 200, "{body}");
    assert!(body.contains("principal(s) in force"), "{body}");
    assert_eq!(as_role(server.addr, "reader", "GET", "/v1/policies", "").0, 401);
    let (st, _, _) =
        http(server.addr, "GET", "/v1/policies", &[("authorization", "Bearer bursar_test-rotated-token")], "");
    assert_eq!(st, 200);
    // A broken file keeps the principals in force and says why.
    std::fs::write(&cfg, "[[principal]]\nname = \"x\"\nroles = [\"raeder\"]\n").unwrap();
    let (st, _, body) = as_role(server.addr, "admin", "POST", "/v1/reload", "");
    assert_eq!(st, 422, "{body}");
    assert!(body.contains("did you mean `reader`"), "{body}");
    let (st, _, _) =
        http(server.addr, "GET", "/v1/policies", &[("authorization", "Bearer bursar_test-rotated-token")], "");
    assert_eq!(st, 200);
}

/// A restart after `kill -9` reaches the state the live server had, on a stream with every input
/// type, refusals included (a refused input is journaled as a refusal, never replayed as an input).
#[test]
fn a_restart_after_kill_9_reaches_the_live_state() {
    let s = Scratch::new("security-restart");
    approval_policy(&s, "[\"p-approver\"]");
    s.write_policy(
        "reclaim.toml",
        "[[policy]]\nid = \"reclaim/idle\"\ndescription = \"idle\"\nkind = \"reclaim\"\n\n[policy.idle]\nbelow = 0.10\nwindow = \"30m\"\ngrace = \"15m\"\n",
    );
    let cfg = config(&s, "");
    let flags = ["--config", cfg.to_str().unwrap(), "--snapshot-every", "1h"];
    let server = Server::start(&s, &flags);
    let addr = server.addr;
    let t = now();
    let line = |id: &str, kind: &str, rest: &str| format!(r#"{{"id":"{id}","time":"{t}","type":"{kind}"{rest}}}"#);
    for (job, gpus) in [("lab-1", 4), ("lab-2", 32), ("lab-3", 32), ("lab-4", 2)] {
        let (st, _, body) =
            as_role(addr, "scheduler", "POST", "/v1/admit", &job_line(&format!("sub-{job}"), job, "alice", gpus, &t));
        assert_eq!(st, 200, "{body}");
    }
    // A second submission of a known job, and an event far ahead: refused, journaled as refusals.
    assert_eq!(as_role(addr, "scheduler", "POST", "/v1/admit", &job_line("sub-again", "lab-1", "bob", 1, &t)).0, 409);
    let steps: [(&str, String); 9] = [
        ("producer", line("st1", "job.started", r#","job_id":"lab-1""#)),
        ("producer", line("sa1", "job.sample", r#","job_id":"lab-1","gpu_util":0.02"#)),
        ("producer", line("st4", "job.started", r#","job_id":"lab-4""#)),
        ("producer", line("fi4", "job.finished", r#","job_id":"lab-4","status":"succeeded""#)),
        ("billing", line("bi4", "billing.charge", r#","project":"nlp","job_id":"lab-4","gpu_hours":1.5"#)),
        ("approver", line("ok2", "approval.granted", r#","job_id":"lab-2","by":"p-approver""#)),
        ("approver", line("no3", "approval.rejected", r#","job_id":"lab-3","by":"p-approver","reason":"split it""#)),
        (
            "producer",
            line(
                "as1",
                "asset.registered",
                r#","project":"nlp","asset":{"kind":"dataset","fingerprint":"fp1","uri":"s3://x"}"#,
            ),
        ),
        ("producer", line("ac1", "action.executed", r#","decision_id":"d1","job_id":"lab-4","action":"none""#)),
    ];
    for (role, l) in &steps {
        let (st, _, body) = as_role(addr, role, "POST", "/v1/events", l);
        assert_eq!(st, 200, "{l}: {body}");
    }
    let far = r#"{"id":"far","time":"9999-01-01T00:00:00Z","type":"clock.tick"}"#;
    let (_, _, body) = as_role(addr, "producer", "POST", "/v1/events", far);
    assert!(body.contains("refused"), "{body}");
    let keep = format!(r#"{{"id":"ka1","time":"{t}","type":"job.keepalive","job_id":"lab-1","by":"p-producer"}}"#);
    assert_eq!(as_role(addr, "producer", "POST", "/v1/events", &keep).0, 200);
    let tick = format!(r#"{{"id":"tk1","time":"{t}","type":"clock.tick"}}"#);
    assert_eq!(as_role(addr, "producer", "POST", "/v1/events", &tick).0, 200);

    let views = |addr: SocketAddr| -> Vec<String> {
        // What the wall clock moves on its own (the engine's time, a running job's runtime so far)
        // differs between two readings; everything the inputs decided must not.
        let steady = |text: String| {
            let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
            if let Some(o) = v.as_object_mut() {
                o.remove("engine_time");
                o.remove("runtime_gpu_hours");
            }
            v.to_string()
        };
        let mut v: Vec<String> = ["lab-1", "lab-2", "lab-3", "lab-4"]
            .iter()
            .map(|j| steady(as_role(addr, "reader", "GET", &format!("/v1/jobs/{j}"), "").2))
            .collect();
        v.push(steady(as_role(addr, "reader", "GET", "/v1/projects/nlp", "").2));
        let pending: serde_json::Value =
            serde_json::from_str(&as_role(addr, "reader", "GET", "/v1/pending", "").2).unwrap();
        v.push(pending["approvals"].to_string());
        v.push(pending["idle"].to_string());
        v.push(pending["engine_time"].as_str().unwrap_or_default().get(..4).unwrap_or_default().to_owned());
        v
    };
    let live = views(addr);
    assert!(live[0].contains("\"phase\":\"running\"") && live[1].contains("\"phase\":\"admitted\""), "{live:?}");
    assert_ne!(live.last().map(String::as_str), Some("9999"), "the far tick moved nothing");
    server.kill9();
    let server = Server::start(&s, &flags);
    let restarted = views(server.addr);
    assert_eq!(live, restarted, "the restart reached another state");
    let log = bursar_audit::AuditLog::open_read(s.audit()).unwrap();
    assert_eq!(log.refusals(0, None, 100).unwrap().len(), 2, "both refusals are on record");
}

/// A connection from `source` (another loopback address than the 127.0.0.1 every other test
/// uses: the per-address limits tell them apart) to `addr`, as a blocking std stream.
fn connect_from(source: &str, addr: SocketAddr) -> TcpStream {
    let rt = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
    let stream = rt.block_on(async {
        let s = tokio::net::TcpSocket::new_v4().unwrap();
        s.bind(format!("{source}:0").parse().unwrap()).unwrap();
        s.connect(addr).await.unwrap()
    });
    let std = stream.into_std().unwrap();
    std.set_nonblocking(false).unwrap();
    std
}

/// [`http`] over a connection from `source`, waiting at most `wait` for the answer.
fn http_from(source: &str, addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    let mut s = connect_from(source, addr);
    s.set_read_timeout(Some(std::time::Duration::from_secs(2))).unwrap();
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut out = Vec::new();
    if let Err(e) = s.read_to_end(&mut out) {
        return (0, format!("no answer within 2 s: {e}"));
    }
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0), body.to_owned())
}

fn metrics(addr: SocketAddr) -> String {
    as_role(addr, "reader", "GET", "/metrics", "").2
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Issue 46: a `job.keepalive` with a 4 MiB `note` was accepted and journaled (9 MB of log for one
/// request). Every field of every event is bounded now, the fields v1 does not define included,
/// and nothing refused is journaled.
#[test]
fn every_text_field_of_every_event_is_bounded() {
    let s = Scratch::new("security-bounds");
    let cfg = config(&s, "");
    let server = Server::start(&s, &["--config", cfg.to_str().unwrap(), "--max-body", "33554432"]);
    let addr = server.addr;
    assert_eq!(as_role(addr, "scheduler", "POST", "/v1/admit", &job_line("e1", "lab-1", "p-user", 1, &now())).0, 200);
    let before = journaled(&s.audit());
    let keepalive = |id: &str, note: &str| {
        format!(
            r#"{{"id":"{id}","time":"{}","type":"job.keepalive","job_id":"lab-1","by":"p-user","note":"{note}"}}"#,
            now()
        )
    };
    let (st, _, body) = as_role(addr, "user", "POST", "/v1/events", &keepalive("k1", &"n".repeat(4 * 1024 * 1024)));
    assert_eq!(st, 400, "{}", &body[..body.len().min(300)]);
    assert!(body.contains("`note` is 4194") && body.contains("above the 4096 bytes"), "{}", &body[..300]);
    // 5,000 such lines: every one refused, none journaled.
    let lines: String = (0..5000).map(|n| keepalive(&format!("k{n}"), &"n".repeat(5000)) + "\n").collect();
    let (st, _, body) = as_role(addr, "user", "POST", "/v1/events", &lines);
    assert_eq!(st, 400, "{}", &body[..body.len().min(300)]);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!((v["accepted"].as_u64(), v["rejected"].as_array().map(Vec::len)), (Some(0), Some(5000)));
    // A job's own fields, its readiness and its tags are bounded too.
    let fat = job_line("e2", "lab-2", "alice", 1, &now())
        .replace(r#""gpus":1"#, &format!(r#""gpus":1,"x":"{}""#, "y".repeat(5000)));
    let (st, _, body) = as_role(addr, "scheduler", "POST", "/v1/admit", &fat);
    assert_eq!(st, 400, "{body}");
    assert!(body.contains("`job.x`"), "{body}");
    assert_eq!(journaled(&s.audit()), before, "nothing refused was journaled");
    // A note of a few words is kept, as any field a producer adds.
    assert_eq!(as_role(addr, "user", "POST", "/v1/events", &keepalive("k-ok", "back at five")).0, 200);
}

/// Issue 46: keepalives and answers for a job bursar does not know were journaled, so anyone with
/// the keepalive power could grow the log with ids of their choosing. They are refused (404 when
/// every line is one), and nothing is journaled; docs/security.md says why.
#[test]
fn keepalives_and_answers_for_unknown_jobs_are_refused_not_journaled() {
    let s = Scratch::new("security-unknown");
    approval_policy(&s, "[\"p-approver\"]");
    let cfg = config(&s, "");
    let server = Server::start(&s, &["--config", cfg.to_str().unwrap()]);
    let addr = server.addr;
    let before = journaled(&s.audit());
    let lines: String = (0..50)
        .map(|n| {
            format!(
                r#"{{"id":"k{n}","time":"{}","type":"job.keepalive","job_id":"ghost-{n}","by":"p-producer"}}"#,
                now()
            ) + "\n"
        })
        .collect();
    let (st, _, body) = as_role(addr, "producer", "POST", "/v1/events", &lines);
    assert_eq!(st, 404, "{body}");
    assert!(body.contains("bursar knows no job `ghost-0`") && body.contains("is not kept"), "{body}");
    let answer =
        format!(r#"{{"id":"a1","time":"{}","type":"approval.granted","job_id":"ghost","by":"p-approver"}}"#, now());
    assert_eq!(as_role(addr, "approver", "POST", "/v1/events", &answer).0, 404);
    assert_eq!(as_role(addr, "approver", "POST", "/v1/jobs/ghost/approve", "{}").0, 404);
    assert_eq!(as_role(addr, "user", "POST", "/v1/jobs/ghost/keepalive", "{}").0, 404);
    assert_eq!(journaled(&s.audit()), before, "nothing about unknown jobs was journaled");
}

/// Issue 46: every local user had the `user` role through MUNGE, and nothing bounded how much a
/// person (or a principal) writes: 13 requests filled a 48 MiB disk. Now each caller writes at
/// most its budget a minute, a request over it is refused whole (429, `Retry-After`), the first
/// refusal of each minute is journaled with its sender (one row, however many refusals),
/// `/metrics` counts them, and a caller over its budget is refused before its body is read.
#[test]
fn write_budgets_keep_any_one_caller_from_filling_the_disk() {
    let s = Scratch::new("security-budget");
    let cfg = config(
        &s,
        "[budget]\nperson_events_per_minute = 5\nperson_bytes_per_minute = 100000\n\n[auth.proxy]\naddresses = [\"127.0.0.1\"]\nheader = \"X-Forwarded-User\"\n\n[[person]]\nname = \"erin\"\nroles = [\"user\"]\n",
    );
    // A principal with a budget of its own.
    let text = std::fs::read_to_string(&cfg).unwrap().replace(
        "name = \"p-producer\"\nroles = [\"producer\"]",
        "name = \"p-producer\"\nroles = [\"producer\"]\nevents_per_minute = 20",
    );
    std::fs::write(&cfg, text).unwrap();
    let server = Server::start(&s, &["--config", cfg.to_str().unwrap()]);
    let addr = server.addr;
    assert_eq!(as_role(addr, "scheduler", "POST", "/v1/admit", &job_line("e1", "lab-1", "erin", 1, &now())).0, 200);
    let erin = [("x-forwarded-user", "erin"), ("content-type", "application/json")];
    let keepalive =
        |n: u32| format!(r#"{{"id":"k{n}","time":"{}","type":"job.keepalive","job_id":"lab-1","by":"erin"}}"#, now());
    for n in 0..5 {
        let (st, _, body) = http(addr, "POST", "/v1/events", &erin, &keepalive(n));
        assert_eq!(st, 200, "keepalive {n}: {body}");
    }
    let before = journaled(&s.audit());
    let (st, head, body) = http(addr, "POST", "/v1/events", &erin, &keepalive(5));
    assert_eq!(st, 429, "{body}");
    assert!(head.contains("retry-after:"), "{head}");
    assert!(body.contains("the person `erin` may write 5 events"), "{body}");
    // A body of 5,000 lines is refused whole; so is everything else this minute.
    let many: String = (100..5100).map(|n| keepalive(n) + "\n").collect();
    assert_eq!(http(addr, "POST", "/v1/events", &erin, &many).0, 429);
    assert_eq!(http(addr, "POST", "/v1/jobs/lab-1/keepalive", &erin, "{}").0, 429);
    assert_eq!(journaled(&s.audit()), before, "nothing over the budget was applied");
    // The refusal is kept by the engine's next commit, after the 429 is answered.
    let log = bursar_audit::AuditLog::open_read(s.audit()).unwrap();
    let refused = server
        .wait_for(10, "the refusal journaled", || Some(log.refusals(0, None, 100).unwrap()).filter(|r| !r.is_empty()));
    std::thread::sleep(std::time::Duration::from_millis(300));
    let refused = log.refusals(0, None, 100).unwrap_or(refused);
    assert_eq!(refused.len(), 1, "one refusal journaled for the minute, not one per request: {refused:?}");
    assert!(refused[0].reason.contains("write budget spent"), "{:?}", refused[0]);
    assert!(refused[0].sender.as_deref().unwrap_or("").contains("erin"), "{:?}", refused[0]);
    // A principal's own budget; another caller is not held back by erin's.
    let lines: String = (0..21)
        .map(|n| {
            format!(r#"{{"id":"s{n}","time":"{}","type":"job.sample","job_id":"lab-1","gpu_util":0.5}}"#, now()) + "\n"
        })
        .collect();
    let (st, _, body) = as_role(addr, "producer", "POST", "/v1/events", &lines);
    assert_eq!(st, 429, "{body}");
    assert!(body.contains("the principal `p-producer` may write 20 events"), "{body}");
    let (st, _, body) =
        as_role(addr, "producer", "POST", "/v1/events", &lines.lines().take(20).collect::<Vec<_>>().join("\n"));
    assert_eq!(st, 200, "{body}");
    let m = metrics(addr);
    assert!(m.contains("bursar_write_budget_refused_total{kind=\"person\"} 3"), "{m}");
    assert!(m.contains("bursar_write_budget_refused_total{kind=\"principal\"} 1"), "{m}");
}

/// Issue 46: bodies were read before the caller was authenticated: 64 connections each sending an
/// 8 MiB body (minus a byte) to `/healthz` held 614 MiB. Now a request that fails authentication
/// is answered from its head alone, and a route that takes no body never reads one.
#[test]
fn bodies_are_not_read_before_authentication() {
    let s = Scratch::new("security-body");
    let cfg = config(&s, "");
    // Every connection here is from 127.0.0.1: the per-address limits are out of the way.
    let server = Server::start(
        &s,
        &[
            "--config",
            cfg.to_str().unwrap(),
            "--max-unfinished-per-address",
            "1000",
            "--max-connections-per-address",
            "1000",
        ],
    );
    let addr = server.addr;
    let before = rss_kib(server.child.id());
    let mut held = Vec::new();
    let chunk = vec![b'x'; 1024 * 1024];
    for n in 0..64 {
        let (method, path) = if n % 2 == 0 { ("GET", "/healthz") } else { ("POST", "/v1/events") };
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
        c.set_write_timeout(Some(std::time::Duration::from_secs(2))).unwrap();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            8 * 1024 * 1024
        );
        c.write_all(head.as_bytes()).unwrap();
        // The answer comes before the body does: nothing waited for it.
        let mut first = [0u8; 12];
        c.read_exact(&mut first).unwrap();
        let want: &[u8] = if n % 2 == 0 { b"HTTP/1.1 200" } else { b"HTTP/1.1 401" };
        assert_eq!(&first, want, "{method} {path}");
        // Sending the body anyway (as much as the server still takes) buffers nothing.
        for _ in 0..7 {
            if c.write_all(&chunk).is_err() {
                break;
            }
        }
        held.push(c);
    }
    let after = rss_kib(server.child.id());
    assert!(after < before + 64 * 1024, "serve grew from {before} KiB to {after} KiB on unauthenticated bodies");
    drop(held);
    // An authenticated caller's body is read as ever.
    assert_eq!(as_role(addr, "scheduler", "POST", "/v1/admit", &job_line("e1", "lab-1", "alice", 1, &now())).0, 200);
}

/// Issue 46: 520 requests whose head never finishes, from one address, reopened as they are cut,
/// left 1 admission of many answered over 12 s, on the main listener and on `--admit-listen`. Each
/// address now holds at most `--max-unfinished-per-address` unfinished connections (and
/// `--max-connections-per-address` open ones) on every listener: admissions from any other address
/// are answered throughout.
#[test]
fn half_open_requests_from_one_address_cannot_starve_admissions() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let s = Scratch::new("security-halfopen");
    let admit: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let server = Server::start(&s, &["--admit-listen", &admit.to_string()]);
    let main = server.addr;
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let counts: Vec<std::sync::Arc<AtomicUsize>> = (0..2).map(|_| std::sync::Arc::default()).collect();
    let attackers: Vec<_> = [main, admit]
        .into_iter()
        .zip(counts.clone())
        .map(|(target, opened)| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let head = b"POST /v1/admit HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n";
                let mut open: Vec<TcpStream> = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    // Reopen whatever was cut (or refused), up to 520 at once.
                    open.retain(|c| {
                        let mut b = [0u8; 1];
                        c.set_nonblocking(true).is_ok()
                            && matches!((&*c).read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
                    });
                    while open.len() < 520 && !stop.load(Ordering::Relaxed) {
                        let Ok(mut c) = TcpStream::connect(target) else { break };
                        let _ = c.write_all(head);
                        open.push(c);
                        opened.fetch_add(1, Ordering::Relaxed);
                    }
                    std::thread::sleep(std::time::Duration::from_millis(200));
                }
            })
        })
        .collect();
    // The attack is in full swing on both listeners (520 heads each, refused ones reopened).
    server.wait_for(60, "the attack to open 1,040 connections on each listener", || {
        counts.iter().all(|c| c.load(Ordering::Relaxed) >= 1040).then_some(())
    });
    // From another address, on both listeners, every admission is answered within the hook's 2 s.
    for (n, target) in (0..40).map(|n| (n, if n % 2 == 0 { main } else { admit })) {
        let line = job_line(&format!("h{n}"), &format!("lab-h{n}"), "alice", 1, &now());
        let (st, body) = http_from("127.0.0.2", target, "/v1/admit", &[], &line);
        assert_eq!(st, 200, "admission {n} on {target}: {body}\n{}", server.log_text());
    }
    stop.store(true, Ordering::Relaxed);
    for a in attackers {
        a.join().unwrap();
    }
    let m = server.get("/metrics").unwrap().text();
    for listener in ["main", "admit"] {
        let key = format!("bursar_http_refused_total{{listener=\"{listener}\",reason=\"unfinished\"}} ");
        let n: u64 = m.lines().find_map(|l| l.strip_prefix(&key)).and_then(|v| v.parse().ok()).unwrap_or(0);
        assert!(n > 0, "the {listener} listener refused none of the attack's connections: {m}");
    }
}

/// Issue 46: a POST to `/v1/jobs/X/approve` carrying the authenticating proxy's user header with
/// `Origin: https://evil.example`, `Sec-Fetch-Site: cross-site` and `Content-Type: text/plain`
/// approved the job as that user. Every state-changing route now refuses a cross-site request and a
/// body that is not declared JSON; the server's own page (same origin) and `[serve] origins` pass.
#[test]
fn cross_site_requests_through_the_proxy_are_refused() {
    let s = Scratch::new("security-csrf");
    approval_policy(&s, "[\"erin\"]");
    let cfg = config(
        &s,
        "[serve]\norigins = [\"https://bursar.example.org\"]\n\n[auth.proxy]\naddresses = [\"127.0.0.1\"]\nheader = \"X-Forwarded-User\"\n\n[[person]]\nname = \"erin\"\nroles = [\"approver\", \"user\", \"reader\"]\n",
    );
    let server = Server::start(&s, &["--config", cfg.to_str().unwrap()]);
    let addr = server.addr;
    let host = format!("127.0.0.1:{}", addr.port());
    for job in ["lab-1", "lab-2"] {
        let (st, _, body) = as_role(addr, "scheduler", "POST", "/v1/admit", &job_line(job, job, "alice", 32, &now()));
        assert_eq!(st, 200, "{body}");
    }
    let before = journaled(&s.audit());
    let approve = |headers: &[(&str, &str)]| {
        let mut h = vec![("x-forwarded-user", "erin")];
        h.extend_from_slice(headers);
        http(addr, "POST", "/v1/jobs/lab-1/approve", &h, "{}")
    };
    // The attack as the review sent it.
    let (st, _, body) = approve(&[
        ("origin", "https://evil.example"),
        ("sec-fetch-site", "cross-site"),
        ("content-type", "text/plain"),
    ]);
    assert_eq!(st, 403, "{body}");
    // Each defence on its own.
    let json = ("content-type", "application/json");
    let (st, _, body) = approve(&[("sec-fetch-site", "cross-site"), json]);
    assert_eq!(st, 403, "{body}");
    let (st, _, body) = approve(&[("sec-fetch-site", "same-site"), json]);
    assert_eq!(st, 403, "{body}");
    let (st, _, body) = approve(&[("origin", "https://evil.example"), json]);
    assert_eq!(st, 403, "{body}");
    assert!(body.contains("`https://evil.example` may not change anything here"), "{body}");
    let (st, _, body) = approve(&[("sec-fetch-site", "same-origin"), ("content-type", "text/plain")]);
    assert_eq!(st, 415, "{body}");
    let (st, _, body) = approve(&[]);
    assert_eq!(st, 415, "no type with a credential a browser sends on its own: {body}");
    // So for every other state-changing route the proxy's person can reach.
    let keep = format!(r#"{{"id":"x1","time":"{}","type":"job.keepalive","job_id":"lab-2","by":"erin"}}"#, now());
    let (st, _, body) = http(
        addr,
        "POST",
        "/v1/events",
        &[("x-forwarded-user", "erin"), ("sec-fetch-site", "cross-site"), json],
        &keep,
    );
    assert_eq!(st, 403, "{body}");
    assert_eq!(journaled(&s.audit()), before, "nothing cross-site was applied");
    // The server's own page, and the proxy's public origin, may.
    let origin = format!("http://{host}");
    let (st, _, body) = approve(&[("origin", &origin), ("sec-fetch-site", "same-origin"), json]);
    assert_eq!(st, 200, "{body}");
    let (st, _, body) = http(
        addr,
        "POST",
        "/v1/jobs/lab-2/reject",
        &[("x-forwarded-user", "erin"), ("origin", "https://bursar.example.org"), json],
        r#"{"reason":"no"}"#,
    );
    assert_eq!(st, 200, "{body}");
    // A tool with its own credential in `Authorization` needs no content type.
    assert_eq!(http(addr, "POST", "/v1/reload", &[("authorization", &bearer(&token_of("admin")))], "").0, 200);
    assert!(metrics(addr).contains("reason=\"cross_site\"} 7"), "{}", metrics(addr));
}

/// Issue 46: a job held by two policies, one naming bob, one naming bob or carol: carol's approval
/// admitted it. Each policy's request is now answered by the approvers it names, and the job is
/// admitted once each is granted (docs/security.md and docs/policy-language.md say so).
#[test]
fn an_approver_answers_only_the_requests_of_policies_that_name_them() {
    let s = Scratch::new("security-per-policy");
    s.write_policy(
        "approval.toml",
        "[[policy]]\nid = \"approval/big\"\ndescription = \"big\"\nkind = \"approval\"\ngpus_over = 16\napprovers = [\"p-approver\"]\n\n[[policy]]\nid = \"approval/long\"\ndescription = \"long\"\nkind = \"approval\"\ngpus_over = 16\napprovers = [\"p-approver\", \"carol\"]\n",
    );
    let hash = |t: &str| bursar_auth::TokenHash::of(t).to_text();
    let cfg = config(
        &s,
        &format!(
            "[[principal]]\nname = \"carol\"\nroles = [\"approver\"]\ntokens = [\"{}\"]\n\n[[principal]]\nname = \"dave\"\nroles = [\"approver\"]\ntokens = [\"{}\"]\n",
            hash("bursar_test-carol"),
            hash("bursar_test-dave")
        ),
    );
    let server = Server::start(&s, &["--config", cfg.to_str().unwrap()]);
    let addr = server.addr;
    for job in ["lab-1", "lab-2"] {
        let (st, _, body) = as_role(addr, "scheduler", "POST", "/v1/admit", &job_line(job, job, "alice", 32, &now()));
        assert_eq!(st, 200, "{body}");
        assert!(body.contains("require_approval"), "{body}");
    }
    let as_ = |t: &str| bearer(t);
    let carol = as_("bursar_test-carol");
    let (st, _, body) = http(addr, "POST", "/v1/jobs/lab-1/approve", &[("authorization", &carol)], "{}");
    assert_eq!(st, 200, "{body}");
    assert!(
        body.contains("recorded for approval/long; it still waits for approval/big (p-approver)"),
        "carol answers only the policy that names her: {body}"
    );
    let (_, _, job) = as_role(addr, "reader", "GET", "/v1/jobs/lab-1", "");
    assert!(job.contains("\"phase\":\"pending_approval\""), "still held: {job}");
    // Carol again, and dave (named by neither): refused, nothing journaled.
    let before = journaled(&s.audit());
    let (st, _, body) = http(addr, "POST", "/v1/jobs/lab-1/approve", &[("authorization", &carol)], "{}");
    assert_eq!(st, 403, "{body}");
    let dave = as_("bursar_test-dave");
    let (st, _, body) = http(addr, "POST", "/v1/jobs/lab-2/approve", &[("authorization", &dave)], "{}");
    assert_eq!(st, 403, "{body}");
    assert!(body.contains("`dave` is not an approver of job `lab-2`"), "{body}");
    let raw = format!(r#"{{"id":"g9","time":"{}","type":"approval.granted","job_id":"lab-2","by":"dave"}}"#, now());
    assert_eq!(http(addr, "POST", "/v1/events", &[("authorization", &dave)], &raw).0, 403);
    assert_eq!(journaled(&s.audit()), before);
    // The approver both name admits lab-1 now, and lab-2 at once.
    let (st, _, body) = as_role(addr, "approver", "POST", "/v1/jobs/lab-1/approve", "{}");
    assert_eq!(st, 200, "{body}");
    assert!(body.contains("approved by p-approver") && body.contains("it may start now"), "{body}");
    let (st, _, body) = as_role(addr, "approver", "POST", "/v1/jobs/lab-2/approve", "{}");
    assert_eq!(st, 200, "{body}");
    let (_, _, stream) = as_role(addr, "reader", "GET", "/v1/decisions?follow=false", "");
    assert!(
        stream.contains("approved by p-approver (approval/big), carol (approval/long)"),
        "the admission names who answered which policy: {stream}"
    );
}

/// Issue 51: authentication is read in one place, once. A request with a good `Authorization`
/// header and a second, wrong one was served (only the first was read); docs/security.md makes mixed
/// credentials a 401. So is a repeated proxy or Slurm header, one with a byte that is not visible
/// ASCII beside a good token (it was ignored), and an oversized one, which is neither echoed nor
/// logged whole.
#[test]
fn repeated_or_unreadable_credentials_are_401() {
    let s = Scratch::new("security-mixed");
    let cfg = config(
        &s,
        "[auth.proxy]\naddresses = [\"127.0.0.1\"]\nheader = \"X-Forwarded-User\"\n\n[[person]]\nname = \"erin\"\nroles = [\"reader\"]\n",
    );
    let server = Server::start(&s, &["--config", cfg.to_str().unwrap()]);
    let addr = server.addr;
    let good = bearer(&token_of("reader"));
    assert_eq!(http(addr, "GET", "/v1/policies", &[("authorization", &good)], "").0, 200);
    let (st, head, body) =
        http(addr, "GET", "/v1/policies", &[("authorization", &good), ("authorization", "Bearer wrong")], "");
    assert_eq!(st, 401, "{body}");
    assert!(head.contains("www-authenticate"), "{head}");
    assert!(body.contains("more than once"), "{body}");
    // The same header twice, both good: still one credential too many.
    assert_eq!(http(addr, "GET", "/v1/policies", &[("authorization", &good), ("authorization", &good)], "").0, 401);
    let proxied = [("x-forwarded-user", "erin"), ("x-forwarded-user", "p-admin")];
    assert_eq!(http(addr, "GET", "/v1/policies", &proxied, "").0, 401);
    assert_eq!(http(addr, "GET", "/v1/policies", &[("x-forwarded-user", "erin")], "").0, 200);
    // A Slurm token header that cannot be read beside a good bearer token.
    let mut raw = TcpStream::connect(addr).unwrap();
    let mut request = format!(
        "GET /v1/policies HTTP/1.1\r\nhost: x\r\nconnection: close\r\nauthorization: {good}\r\nx-slurm-user-token: "
    )
    .into_bytes();
    request.extend_from_slice(b"\xc3\xa9t\r\n\r\n");
    raw.write_all(&request).unwrap();
    let mut out = Vec::new();
    raw.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 401"), "{text}");
    // 300 KB of user name in a header is refused unread: the answer and the log stay small.
    let huge = "a".repeat(300 * 1024);
    let (st, _, body) =
        http(addr, "GET", "/v1/policies", &[("authorization", &good), ("x-slurm-user-name", &huge)], "");
    assert!(st == 401 || st == 431, "{st}");
    assert!(body.len() < 2048, "the answer echoes {} bytes", body.len());
    assert!(server.log_text().len() < 200 * 1024, "the log holds {} bytes", server.log_text().len());
}

/// Issue 51: a producer's `jobs` patterns are checked before the engine looks a job up, so a
/// producer outside them learns nothing of whether a job exists (a keepalive for an unknown job was
/// 404, for a known one 403).
#[test]
fn a_producer_outside_its_patterns_cannot_probe_for_jobs() {
    let s = Scratch::new("security-probe");
    let hash = bursar_auth::TokenHash::of("bursar_test-lab-token").to_text();
    let cfg = config(
        &s,
        &format!("[[principal]]\nname = \"lab\"\nroles = [\"producer\"]\njobs = [\"lab-*\"]\ntokens = [\"{hash}\"]\n"),
    );
    let server = Server::start(&s, &["--config", cfg.to_str().unwrap()]);
    let addr = server.addr;
    assert_eq!(as_role(addr, "scheduler", "POST", "/v1/admit", &job_line("s1", "other-1", "alice", 1, &now())).0, 200);
    let keepalive = |id: &str, job: &str| {
        format!(r#"{{"id":"{id}","time":"{}","type":"job.keepalive","job_id":"{job}","by":"lab"}}"#, now())
    };
    let lab = bearer("bursar_test-lab-token");
    let known = http(addr, "POST", "/v1/events", &[("authorization", &lab)], &keepalive("k1", "other-1"));
    let unknown = http(addr, "POST", "/v1/events", &[("authorization", &lab)], &keepalive("k2", "other-ghost"));
    assert_eq!((known.0, unknown.0), (403, 403), "{} / {}", known.2, unknown.2);
    // Inside its patterns, an unknown job is still told as such.
    assert_eq!(http(addr, "POST", "/v1/events", &[("authorization", &lab)], &keepalive("k3", "lab-ghost")).0, 404);
}

/// A configuration for issue 56's people: the role principals of [`config`] and a proxy on
/// loopback, with `[auth] people` as given (the roles every person a credential names gets).
fn people_config(s: &Scratch, people: &str, extra: &str) -> std::path::PathBuf {
    let path =
        config(s, &format!("[auth.proxy]\naddresses = [\"127.0.0.1\"]\nheader = \"X-Forwarded-User\"\n\n{extra}"));
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("[auth]\npeople = []\n", &format!("[auth]\npeople = {people}\n"));
    std::fs::write(&path, text).unwrap();
    path
}

/// Issue 56 (high): people and service principals shared one id space, so a person named like a
/// principal (a local user `p-producer`) sent a keepalive whose id was the producer's next one, and
/// the producer's real `job.finished` was answered `duplicates` and dropped: the job stayed
/// running. Ids are now kept per kind of sender: `~<person>:<id>` beside `<principal>:<id>`.
#[test]
fn a_person_named_like_a_principal_cannot_take_its_event_ids() {
    let s = Scratch::new("security-id-space");
    let cfg = people_config(&s, "[\"user\"]", "");
    let server = Server::start(&s, &["--config", cfg.to_str().unwrap()]);
    let addr = server.addr;
    let sub = job_line("s1", "lab-1", "p-producer", 1, &now());
    assert_eq!(as_role(addr, "scheduler", "POST", "/v1/admit", &sub).0, 200);
    let started = format!(r#"{{"id":"lab-1-start","time":"{}","type":"job.started","job_id":"lab-1"}}"#, now());
    assert_eq!(as_role(addr, "producer", "POST", "/v1/events", &started).0, 200);
    // The person `p-producer` (through the proxy) sends the producer's next id first.
    let keepalive = format!(
        r#"{{"id":"lab-1-finished","time":"{}","type":"job.keepalive","job_id":"lab-1","by":"p-producer"}}"#,
        now()
    );
    let json = ("content-type", "application/json");
    let (st, _, body) = http(addr, "POST", "/v1/events", &[("x-forwarded-user", "p-producer"), json], &keepalive);
    assert_eq!(st, 200, "{body}");
    let finished = format!(
        r#"{{"id":"lab-1-finished","time":"{}","type":"job.finished","job_id":"lab-1","status":"succeeded"}}"#,
        now()
    );
    let (st, _, body) = as_role(addr, "producer", "POST", "/v1/events", &finished);
    assert_eq!(st, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["accepted"], 1, "the producer's event was dropped as a duplicate: {v}");
    let (_, _, job) = as_role(addr, "reader", "GET", "/v1/jobs/lab-1", "");
    assert!(job.contains("\"phase\":\"finished\""), "{job}");
    drop(server);
    let log = bursar_audit::AuditLog::open_read(s.audit()).unwrap();
    assert!(log.event_by_id("~p-producer:lab-1-finished").unwrap().is_some(), "the person's id has its own namespace");
    assert!(log.event_by_id("p-producer:lab-1-finished").unwrap().is_some());
    // A person whose name holds the separator would make two senders' ids one: refused.
    let server = Server::start(&s, &["--config", cfg.to_str().unwrap()]);
    let (st, _, body) = http(server.addr, "GET", "/v1/pending/mine", &[("x-forwarded-user", "agents:lab")], "");
    assert_eq!(st, 401, "{body}");
}

/// Issue 56 (medium): an approval policy with no `approvers` let every person the `[auth] people`
/// roles make an approver (every local user, through MUNGE) approve. Such a request is answered by
/// the approvers and admins the configuration names; `bursar check` says which policies those are.
#[test]
fn a_policy_naming_no_approvers_is_answered_by_named_approvers_only() {
    let s = Scratch::new("security-unnamed");
    approval_policy(&s, "[]");
    let cfg = people_config(&s, "[\"approver\", \"user\"]", "[[person]]\nname = \"erin\"\nroles = [\"approver\"]\n");
    let check = bursar(&["check", s.policies().to_str().unwrap()]);
    let said = String::from_utf8_lossy(&check.stderr);
    assert!(
        check.status.success() && said.contains("`approval/big`") && said.contains("names no `approvers`"),
        "{said}"
    );
    let server = Server::start(&s, &["--config", cfg.to_str().unwrap()]);
    let addr = server.addr;
    assert_eq!(as_role(addr, "scheduler", "POST", "/v1/admit", &job_line("s1", "big-1", "alice", 32, &now())).0, 200);
    let (st, _, body) = http(
        addr,
        "POST",
        "/v1/jobs/big-1/approve",
        &[("x-forwarded-user", "frank"), ("content-type", "application/json")],
        "{}",
    );
    assert_eq!(st, 403, "a person with the default roles approved: {body}");
    assert!(body.contains("name no approvers"), "{body}");
    let (st, _, body) = http(
        addr,
        "POST",
        "/v1/jobs/big-1/approve",
        &[("x-forwarded-user", "erin"), ("content-type", "application/json")],
        "{}",
    );
    assert_eq!(st, 200, "{body}");
}

/// Issue 56 (medium): `"requested_hours": -0.0` made `audit verify` report an edited decision row
/// from then on (the JSON kept `-0.0`, the SQLite column `0.0`), and every prune was refused.
/// Numbers are normalised once, at decode.
#[test]
fn a_negative_zero_leaves_the_audit_log_verifiable() {
    let s = Scratch::new("security-negzero");
    approval_policy(&s, "[\"p-approver\"]");
    let server = Server::start(&s, &[]);
    let line = submit("z1", "zero-1", "nlp", 2, 1.0).replace("\"requested_hours\":1", "\"requested_hours\":-0.0");
    assert!(line.contains("-0.0"), "{line}");
    let r = server.post("/v1/admit", &line);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("\"gpu_hours\":0.0") && !r.text().contains("-0.0"), "{}", r.text());
    drop(server);
    let out = bursar(&["audit", "--db", s.audit().to_str().unwrap(), "verify"]);
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

/// Issue 56 (medium): the event socket had no connection cap (256 connections of 8 MiB without a
/// newline took serve from 116 MB to 2.38 GB). It has the listeners' caps, per peer UID.
#[test]
fn the_event_socket_caps_connections_and_unfinished_lines_per_uid() {
    let s = Scratch::new("security-socket-cap");
    let sock = s.0.join("events.sock");
    let server = Server::start(
        &s,
        &[
            "--socket",
            sock.to_str().unwrap(),
            "--max-connections-per-address",
            "4",
            "--max-unfinished-per-address",
            "2",
        ],
    );
    let read_line = |c: &std::os::unix::net::UnixStream| {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(c), &mut line).unwrap();
        line
    };
    // Two connections each holding half a line: the third is closed with why.
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut c = std::os::unix::net::UnixStream::connect(&sock).unwrap();
        c.write_all(b"{\"id\":\"half").unwrap();
        held.push(c);
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut third = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    third.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
    third.write_all(b"{\"id\":\"half").unwrap();
    let why = read_line(&third);
    assert!(why.contains("not yet ended") && why.contains("--max-unfinished-per-address"), "{why}");
    // The third is gone; two more make 4 open, the cap: the next is refused at once.
    let _fourth = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    let _fifth = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let sixth = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    sixth.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
    let why = read_line(&sixth);
    assert!(why.contains("--max-connections-per-address"), "{why}");
    // Once the peers go, their places are free again.
    drop(held);
    drop(sixth);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut ok = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    ok.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
    ok.write_all(format!("{}\n", submit("c1", "cap-1", "nlp", 1, 1.0)).as_bytes()).unwrap();
    let answer = read_line(&ok);
    assert!(answer.contains("\"accepted\":true"), "{answer}");
    drop(server);
}

/// Issue 56 (medium-low): 401s were free, and echoed and logged what the caller sent whole. Each
/// address may fail authentication 120 times a minute; then it is answered 429 before anything is
/// checked or logged.
#[test]
fn failed_authentications_are_budgeted_per_address() {
    let s = Scratch::new("security-401-budget");
    let cfg = config(&s, "");
    let server = Server::start(&s, &["--config", cfg.to_str().unwrap()]);
    let addr = server.addr;
    let wrong = bearer("bursar_wrong");
    let statuses: Vec<u16> =
        (0..125).map(|_| http(addr, "GET", "/v1/policies", &[("authorization", &wrong)], "").0).collect();
    // (Starting the server may have cost one: its readiness probe asks without a credential.)
    let failed = statuses.iter().take_while(|s| **s == 401).count();
    assert!((119..=120).contains(&failed), "{statuses:?}");
    assert!(statuses[failed..].iter().all(|s| *s == 429), "{statuses:?}");
    let (st, head, _) = http(addr, "GET", "/v1/policies", &[("authorization", &bearer(&token_of("reader")))], "");
    assert_eq!(st, 429, "the address is refused whatever it sends until the minute ends");
    assert!(head.contains("retry-after"), "{head}");
}

/// Issue 56 (low): a reader of serve's report saw the audit log's path on the server.
#[test]
fn the_served_report_does_not_show_the_audit_path() {
    let s = Scratch::new("security-report-path");
    let cfg = config(&s, "");
    let server = Server::start(&s, &["--config", cfg.to_str().unwrap()]);
    let (st, _, body) = as_role(server.addr, "reader", "GET", "/v1/report", "");
    assert_eq!(st, 200, "{body}");
    assert!(!body.contains(s.audit().to_str().unwrap()), "{body}");
    assert!(body.contains("the server's audit log"), "{body}");
}

/// Issue 56 (low): a socket peer whose UID has no user on the host was named `uid-54321`, a name a
/// real login could have. It is refused with why.
#[test]
fn a_socket_peer_without_a_user_is_refused_not_named() {
    if !bursar_testkit::need::root("it connects as a UID with no user, through setpriv") {
        return;
    }
    let s = Scratch::new("security-uid");
    let cfg = config(&s, "");
    let sock = s.0.join("events.sock");
    let server = Server::start(
        &s,
        &["--config", cfg.to_str().unwrap(), "--socket", sock.to_str().unwrap(), "--socket-mode", "0666"],
    );
    // The scratch folder must be reachable by that UID.
    std::fs::set_permissions(&s.0, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    // Perl's IO::Socket::UNIX is in Debian's perl-base: on every machine, reachable by any UID.
    // A refused peer is answered at once and closed: the client must not die of SIGPIPE writing.
    let client = "$SIG{PIPE} = 'IGNORE'; use IO::Socket::UNIX; my $c = IO::Socket::UNIX->new(Peer => $ARGV[0]) or die $!; print $c \"$ARGV[1]\\n\"; print scalar <$c>;";
    let out = std::process::Command::new("setpriv")
        .args(["--reuid", "54321", "--regid", "54321", "--clear-groups", "perl", "-e", client])
        .arg(&sock)
        .arg(submit("u1", "uid-1", "nlp", 1, 1.0))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("uid 54321 has no user name"), "{said}{}", String::from_utf8_lossy(&out.stderr));
    drop(server);
}
