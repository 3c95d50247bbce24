//! Maintenance while serving (issue 45, item 1): one writer per log, and a prune through serve.
//!
//! - A second `serve`, an `eval --audit` and an `audit prune --db` on the log a serve writes are
//!   refused at start, naming the holder (pid and command): the OS file lock `<db>.lock`.
//! - The lock goes with the process: after a SIGKILL a new serve starts on the log at once.
//! - `bursar audit prune --server` prunes a serving log under admission load: no admission fails,
//!   none waits a second or more (the max and the 99th percentile are printed), the log verifies
//!   while serve runs, and a restart resumes from the snapshot serve took before the prune.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::serve_support::*;

fn text(o: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

const QUOTA: &str = r#"
[[policy]]
id = "quota/monthly"
description = "a budget no test reaches"
kind = "quota"
scope = "project"
period = "month"
gpu_hours = 1_000_000
settle = "runtime"
on_exhaust = "deny"
"#;

/// What one admitting client saw: admissions answered, the failures, every admission's wait.
type Load = (u64, Vec<String>, Vec<Duration>);

/// Admissions from `clients` threads until `stop`, each timed.
fn admit_load(
    addr: std::net::SocketAddr,
    clients: usize,
    tag: &str,
    stop: Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<Load>> {
    (0..clients)
        .map(|c| {
            let stop = stop.clone();
            let tag = tag.to_owned();
            std::thread::spawn(move || {
                let client = bursar_client::Client::new(addr, None).with_timeout(Duration::from_secs(30));
                let (mut ok, mut failed, mut waits) = (0u64, Vec::new(), Vec::new());
                // Bounded in count as well as by `stop`: modest load, two cores shared.
                for i in 0..3000 {
                    if stop.load(Ordering::Relaxed) && i >= 20 {
                        break;
                    }
                    let body = submit(&format!("{tag}-{c}-{i}"), &format!("{tag}-j{c}-{i}"), "nlp", 1, 1.0);
                    let started = Instant::now();
                    let r = client.raw("POST", "/v1/admit", body.as_bytes());
                    waits.push(started.elapsed());
                    match r {
                        Ok(r) if r.status == 200 => ok += 1,
                        Ok(r) => failed.push(format!("HTTP {}: {}", r.status, r.text())),
                        Err(e) => failed.push(e.to_string()),
                    }
                    // A client that thinks between admissions, as a scheduler's hook does.
                    std::thread::sleep(Duration::from_millis(5));
                }
                (ok, failed, waits)
            })
        })
        .collect()
}

#[test]
fn a_serving_log_has_one_writer_and_is_pruned_through_serve_under_admission_load() {
    let scratch = Scratch::new("maintenance");
    scratch.write_policy("quota.toml", QUOTA);
    let db = scratch.audit();
    let db_s = db.display().to_string();
    let server = Server::start(&scratch, &["--snapshot-every", "1h"]);
    let pid = server.child.id();

    // Rows to prune: admissions before the cut.
    for i in 0..200 {
        let r = server.post("/v1/admit", &submit(&format!("old-{i}"), &format!("old-j{i}"), "nlp", 1, 1.0));
        assert_eq!(r.status, 200, "{}", r.text());
    }
    std::thread::sleep(Duration::from_millis(20));
    let cut = now();
    std::thread::sleep(Duration::from_millis(20));
    // A job submitted before the cut that goes on after it: its story loses its start.
    let r = server.post("/v1/events", &job_event("old-start-0", "job.started", "old-j0", ""));
    assert_eq!(r.status, 200, "{}", r.text());

    // One writer per log: every other writer is refused, naming serve.
    let holder = format!("pid {pid} (`");
    let o = bursar(&["audit", "prune", "--db", &db_s, "--before", &cut]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let said = text(&o);
    assert!(said.contains("is being written by another process") && said.contains(&holder), "{said}");
    assert!(said.contains(" serve ") && said.contains("bursar audit prune --server"), "{said}");
    let events = scratch.0.join("events.jsonl");
    std::fs::write(&events, submit("ev-1", "ev-j1", "nlp", 1, 1.0) + "\n").unwrap();
    let o = bursar(&[
        "eval",
        "--policies",
        &scratch.policies().display().to_string(),
        "--events",
        &events.display().to_string(),
        "--audit",
        &db_s,
    ]);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains(&holder), "{}", text(&o));
    let second = Server::try_start_with_audit(&scratch, &db, &[]);
    let log = match second {
        Ok(_) => panic!("a second serve started on a log another serve writes"),
        Err(log) => log,
    };
    assert!(log.contains("is being written by another process") && log.contains(&holder), "{log}");

    // Prune through serve while three clients admit.
    let stop = Arc::new(AtomicBool::new(false));
    let load = admit_load(server.addr, 3, "live", stop.clone());
    std::thread::sleep(Duration::from_millis(300));
    let addr = server.addr.to_string();
    let o = bursar(&["audit", "prune", "--server", &addr, "--before", &cut]);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", text(&o), server.log_text());
    let said = text(&o);
    // The 200 admissions before the cut (and serve's own first input), with their decisions.
    assert!(said.contains("and 200 decisions (through seq 200)"), "{said}");
    // A second prune at the same cut finds nothing more, and changes nothing it should not.
    let o = bursar(&["audit", "prune", "--server", &addr, "--before", &cut]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("pruned 0 events"), "{}", text(&o));
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let (mut ok, mut failed, mut waits) = (0, Vec::new(), Vec::new());
    for h in load {
        let (o, f, w) = h.join().unwrap();
        ok += o;
        failed.extend(f);
        waits.extend(w);
    }
    waits.sort();
    let max = waits.last().copied().unwrap_or_default();
    let p99 = waits.get(waits.len() * 99 / 100).copied().unwrap_or_default();
    eprintln!(
        "serve_maintenance: {ok} admissions during two prunes through serve; max wait {:.1} ms, p99 {:.1} ms",
        max.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3
    );
    assert!(
        failed.is_empty(),
        "{} admissions failed during the prune: {:?}",
        failed.len(),
        &failed[..failed.len().min(5)]
    );
    assert!(ok >= 60, "only {ok} admissions");
    assert!(max < Duration::from_secs(1), "an admission waited {max:?} during the prune");

    // A job whose submission was pruned: explain says why its project is unknown (issue 45: it
    // showed "project ?").
    let o = bursar(&["audit", "explain", "--db", &db_s, "old-j0"]);
    let story = text(&o);
    assert!(story.contains("job old-j0 (project unknown: pruned, user unknown: pruned)"), "{story}");
    assert!(
        story.contains("its submission is not in the log: the events before") && story.contains("old-start-0"),
        "{story}"
    );
    let o = bursar(&["audit", "explain", "--db", &db_s, "old-j1"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("were pruned (through event seq"), "{}", text(&o));
    // The log verifies beside the running serve, which is still healthy and admitting; the schema
    // check (`audit migrate` of a log already of this schema) runs beside it too.
    let o = bursar(&["audit", "verify", "--db", &db_s]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = bursar(&["audit", "migrate", "--db", &db_s]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("nothing to migrate") && text(&o).contains("verifies"), "{}", text(&o));
    let health = server.get("/healthz").unwrap();
    assert_eq!((health.status, health.text()), (200, "ok\n".to_owned()));
    let r = server.post("/v1/admit", &submit("after-1", "after-j1", "nlp", 1, 1.0));
    assert_eq!(r.status, 200, "{}", r.text());
    // Only admin may prune: serve without principals on loopback gives every power; the route is
    // in the admin group (tests/security.rs checks the groups' powers).

    // A restart resumes from the snapshot serve took before the prune (no --replay-after-prune).
    let (st, log) = server.terminate();
    assert!(st.success(), "{log}");
    let server = Server::start_with_audit(&scratch, &db, &[]);
    let job = server.get_json("/v1/jobs/live-j0-0");
    assert_eq!((job["job_id"].as_str(), job["live"].as_bool()), (Some("live-j0-0"), Some(true)), "{job}");
    let old = server.get_json("/v1/jobs/old-j0");
    assert_eq!(old["live"], true, "a job admitted before the prune is forgotten after the restart: {old}");

    // The lock goes with the process: after a SIGKILL a new serve starts on the log at once.
    server.kill9();
    let server = Server::start_with_audit(&scratch, &db, &[]);
    let r = server.post("/v1/admit", &submit("after-2", "after-j2", "nlp", 1, 1.0));
    assert_eq!(r.status, 200, "{}", r.text());
    let (st, log) = server.terminate();
    assert!(st.success(), "{log}");
    // Nobody holds it now: the prune by file works again.
    let o = bursar(&["audit", "prune", "--db", &db_s, "--before", &cut]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
fn prune_through_serve_refuses_a_bad_body() {
    let scratch = Scratch::new("maintenance-body");
    let server = Server::start(&scratch, &[]);
    let r = server.post("/v1/audit/prune", r#"{"before":"yesterday"}"#);
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("not a prune request"), "{}", r.text());
}
