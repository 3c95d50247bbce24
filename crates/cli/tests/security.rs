//! Every caller is someone, every power is granted (docs/security.md), through the real `bursar
//! serve` on loopback with a real configuration file and a real SQLite audit log.
//!
//! `every_route_by_every_role_and_credential` runs the table in `tests/security/routes.toml`: each
//! route with no credential, a wrong token, an expired token, and each role's valid token, and
//! checks that nothing refused was journaled. The other tests are named after the attacks a
//! security review reproduced against the previous version (issue 34), each pinned here.

#![expect(clippy::unwrap_used, reason = "tests: a failure stops the test")]

mod serve_support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;

use serve_support::*;

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

fn repo() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
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
