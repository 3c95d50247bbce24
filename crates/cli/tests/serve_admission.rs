//! `bursar serve`: an admission round trip over real HTTP with the audit log on, event batches with
//! per-line outcomes, malformed requests refused with a 400 that changes nothing, the job and project
//! views, `/metrics`, and a clean SIGTERM.

use crate::serve_support::*;

#[test]
fn admission_round_trip_is_durable_and_idempotent() {
    let s = Scratch::new("serve-admit");
    let server = Server::start(&s, &[]);

    let line = submit("e1", "j1", "nlp", 8, 4.0);
    let r = server.post("/v1/admit", &line);
    assert_eq!(r.status, 200, "{}", r.text());
    let d = r.json().unwrap();
    assert_eq!(d["decision"], "allow", "{d}");
    assert_eq!(d["admission"], true);
    assert_eq!(d["job_id"], "j1");
    assert_eq!(d["event_id"], "e1");
    assert_eq!(d["gpu_hours"], 32.0);
    let seq = d["seq"].as_u64().unwrap();
    assert!(seq >= 1);

    // The answer came after the commit: the decision is already in the audit log, readable by a
    // second connection.
    let logged = server.decisions(0);
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert_eq!(logged[0]["seq"].as_u64(), Some(seq));
    assert_eq!(logged[0]["decision_id"], "e1/0");

    // A producer resending after a timeout gets the same decision, and nothing is decided twice.
    let again = server.post("/v1/admit", &line).json().unwrap();
    assert_eq!(again["seq"].as_u64(), Some(seq));
    assert_eq!(again["duplicate"], true);
    assert_eq!(again["decision"], "allow");
    assert_eq!(server.decisions(0).len(), 1);

    // The job is live and its GPU-hours are reserved against the project.
    let job = server.get_json("/v1/jobs/j1");
    assert_eq!(job["phase"], "admitted");
    assert_eq!(job["gpus"], 8);
    let p = server.get_json("/v1/projects/nlp");
    assert_eq!(p["held_gpus"], 8);
    assert_eq!(p["month"]["reserved"], 32.0);
    assert_eq!(server.get("/v1/jobs/nope").unwrap().status, 404);

    // The same event id reused for another job: a 409 that names the real cause (the id is taken), not
    // a pruned log, and nothing is decided.
    let reused = server.post("/v1/admit", &submit("e1", "j2", "nlp", 1, 1.0));
    assert_eq!(reused.status, 409, "{}", reused.text());
    let why = reused.json().unwrap();
    assert_eq!(
        why["error"], "event id `e1` was already used for job `j1`; a new submission needs a new event id",
        "{why}"
    );
    assert_eq!(server.decisions(0).len(), 1);
    assert_eq!(server.get("/v1/jobs/j2").unwrap().status, 404);

    let (status, log) = server.terminate();
    assert!(status.success(), "exit {status:?}\n{log}");
    assert!(log.contains("stopped cleanly"), "{log}");
}

/// `sbatch --test-only` must not reserve (issue 43: a loop of test-only submissions held a whole
/// project's budget): `?test_only=true` answers the decision and records nothing at all.
#[test]
fn a_test_only_admission_answers_and_records_nothing() {
    let s = Scratch::new("serve-test-only");
    let server = Server::start(&s, &[]);
    let line = submit("t1", "probe", "nlp", 8, 4.0);
    for _ in 0..3 {
        let r = server.post("/v1/admit?test_only=true", &line);
        assert_eq!(r.status, 200, "{}", r.text());
        let d = r.json().unwrap();
        assert_eq!(
            (d["decision"].as_str(), d["test_only"].as_bool(), d["seq"].as_u64()),
            (Some("allow"), Some(true), Some(0)),
            "{d}"
        );
        assert_eq!(d["gpu_hours"], 32.0);
    }
    // Nothing is journaled, reserved or remembered: no decision, no job, no usage, and the same event
    // id is still free for the real submission.
    assert!(server.decisions(0).is_empty());
    assert_eq!(server.get("/v1/jobs/probe").unwrap().status, 404);
    let p = server.get_json("/v1/projects/nlp");
    assert_eq!((p["held_gpus"].as_u64(), p["month"]["reserved"].as_f64()), (Some(0), Some(0.0)), "{p}");
    let real = server.post("/v1/admit", &line).json().unwrap();
    assert_eq!((real["decision"].as_str(), real["duplicate"].as_bool()), (Some("allow"), None), "{real}");
    assert!(real["seq"].as_u64().unwrap_or(0) >= 1);
    // Of a known job, a preview says the submission would be refused; a bad query is a 400.
    let known = server.post("/v1/admit?test_only=true", &submit("t2", "probe", "nlp", 8, 4.0));
    assert_eq!(known.status, 409, "{}", known.text());
    assert_eq!(server.post("/v1/admit?dry=1", &submit("t3", "x", "nlp", 1, 1.0)).status, 400);
    let metrics = server.get("/metrics").unwrap().text();
    assert!(metrics.contains("bursar_admission_previews_total 3"), "{metrics}");
}

#[test]
fn event_batches_report_each_line_and_malformed_requests_change_nothing() {
    let s = Scratch::new("serve-events");
    let server = Server::start(&s, &[]);
    assert_eq!(server.post("/v1/admit", &submit("e1", "j1", "nlp", 2, 1.0)).status, 200);

    // Three lines: a good one, a broken one, a duplicate of an earlier event, and a good one.
    let body = format!(
        "{}\n{{\"id\":\"e3\",\"time\":\"not a time\",\"type\":\"job.sample\"}}\n{}\n{}\n",
        job_event("e2", "job.started", "j1", ""),
        submit("e1", "j1", "nlp", 2, 1.0),
        job_event("e4", "job.sample", "j1", r#","gpu_util":0.5"#),
    );
    let r = server.post("/v1/events", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json().unwrap();
    assert_eq!(v["accepted"], 2, "{v}");
    assert_eq!(v["rejected"][0]["line"], 2, "{v}");
    // A rejected line has one shape everywhere, `{"line", "error"}` (HTTP said `reason`, the socket `error`).
    assert!(v["rejected"][0]["error"].as_str().unwrap().contains("time"), "{v}");
    assert_eq!(v["duplicates"][0]["line"], 3, "{v}");
    assert_eq!(v["duplicates"][0]["id"], "e1", "{v}");
    let job = server.get_json("/v1/jobs/j1");
    assert_eq!(job["phase"], "running");
    assert_eq!(job["utilisation"]["samples"], 1);

    let before = server.decisions(0).len();
    let metrics_before = server.get("/metrics").unwrap().text();
    // Malformed requests: not JSON, not UTF-8, the wrong event type for /v1/admit, two events, and a
    // reserved id. Each is a 400 with a reason.
    for (path, body) in [
        ("/v1/admit", b"{not json".to_vec()),
        ("/v1/admit", b"\xff\xfe\xfd".to_vec()),
        ("/v1/admit", job_event("e9", "job.started", "j1", "").into_bytes()),
        (
            "/v1/admit",
            format!("{}\n{}", submit("e10", "j10", "nlp", 1, 1.0), submit("e11", "j11", "nlp", 1, 1.0)).into_bytes(),
        ),
        ("/v1/events", b"garbage\n".to_vec()),
        ("/v1/events", b"".to_vec()),
        ("/v1/events", format!(r#"{{"id":"bursar-tick-1","time":"{}","type":"clock.tick"}}"#, now()).into_bytes()),
    ] {
        let r = server.conn().request("POST", path, &body).unwrap();
        assert_eq!(r.status, 400, "{path} {:?}: {}", String::from_utf8_lossy(&body), r.text());
        assert!(r.json().unwrap()["error"].as_str().is_some_and(|e| !e.is_empty()), "{}", r.text());
    }
    assert_eq!(server.decisions(0).len(), before);
    assert_eq!(server.get("/v1/jobs/j10").unwrap().status, 404);
    let applied =
        |m: &str| m.lines().find(|l| l.starts_with("bursar_events_total{outcome=\"applied\"}")).map(str::to_owned);
    assert_eq!(applied(&server.get("/metrics").unwrap().text()), applied(&metrics_before));

    // The body limit answers 413 and changes nothing either.
    drop(server);
    let server = Server::start(&s, &["--max-body", "1024"]);
    let big = format!("{}{}", submit("e20", "j20", "nlp", 1, 1.0), " ".repeat(4096));
    assert_eq!(server.conn().request("POST", "/v1/admit", big.as_bytes()).unwrap().status, 413);
    assert_eq!(server.get("/v1/jobs/j20").unwrap().status, 404);
}

#[test]
fn metrics_and_health_are_served() {
    let s = Scratch::new("serve-metrics");
    let server = Server::start(&s, &[]);
    assert_eq!(server.post("/v1/admit", &submit("e1", "j1", "nlp", 1, 1.0)).status, 200);
    let h = server.get("/healthz").unwrap();
    assert_eq!((h.status, h.text().trim()), (200, "ok"));
    let m = server.get("/metrics").unwrap();
    assert!(m.header("content-type").is_some_and(|c| c.starts_with("text/plain")));
    let text = m.text();
    for needle in [
        "bursar_events_total{outcome=\"applied\"} 1\n",
        "bursar_admissions_total 1\n",
        "bursar_decisions_total{kind=\"allow\",policy=\"\"} 1\n",
        "bursar_eval_seconds_count 1\n",
        "bursar_admit_seconds_count 1\n",
        "bursar_reloads_total{outcome=\"failed\"} 0\n",
        "bursar_live_jobs 1\n",
    ] {
        assert!(text.contains(needle), "missing `{}` in\n{text}", needle.trim());
    }
    // The writer's own totals: the admission was answered only once durable, so its record is in a
    // committed transaction already.
    let total = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
            .unwrap_or_else(|| panic!("missing `{name}` in\n{text}"))
    };
    let (tx, records) = (total("bursar_audit_transactions_total"), total("bursar_audit_transaction_records_total"));
    assert!(tx >= 1.0 && records >= 1.0 && records >= tx, "transactions {tx}, records {records}");
    assert!(total("bursar_audit_writer_busy_seconds_total") > 0.0);
    // One admission is far from a checkpoint: the counters are there, at zero.
    for name in [
        "bursar_audit_checkpoints_total{by=\"thread\"}",
        "bursar_audit_checkpoints_total{by=\"writer\"}",
        "bursar_audit_checkpoint_failures_total",
    ] {
        assert_eq!(total(name), 0.0, "{name}");
    }
}

/// A WebAssembly policy in force gets its failure counter in `/metrics` (the counting itself, for
/// traps, deadlines, fuel and memory, is tested with hostile guests in `crates/wasm/tests/hostile.rs`).
#[test]
fn metrics_count_webassembly_policy_failures() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let built = std::process::Command::new("bash").arg(root.join("scripts/build-wasm.sh")).status();
    assert!(built.is_ok_and(|s| s.success()), "scripts/build-wasm.sh failed");
    let s = Scratch::new("serve-wasm-metrics");
    std::fs::copy(root.join("policies/wasm/readiness.wasm"), s.policies().join("readiness.wasm")).unwrap();
    std::fs::write(
        s.policies().join("data.toml"),
        "[[policy]]\nid = \"wasm/data-ready\"\ndescription = \"The data must be ready.\"\nkind = \"wasm\"\n\
         component = \"readiness.wasm\"\n\n[policy.limits]\ndeadline_ms = 60000\n\n[policy.config]\nrequire = [\"data\"]\n",
    )
    .unwrap();
    let server = Server::start(&s, &[]);
    let d = server.post("/v1/admit", &submit("e1", "j1", "nlp", 1, 1.0)).json().unwrap();
    assert_eq!(d["policies"][0], "wasm/data-ready", "{d}");
    let text = server.get("/metrics").unwrap().text();
    assert!(text.contains("# TYPE bursar_policy_failures_total counter\n"), "{text}");
    assert!(text.contains("bursar_policy_failures_total{policy=\"wasm/data-ready\"} 0\n"), "{text}");
}
