//! GPU utilisation from Prometheus, end to end: a real Prometheus (Debian's, started here on a loopback
//! port, stopped by PID pass or fail) scrapes a dcgm-exporter stand-in every second whose `hpc_job`
//! labels come from mapping files written by `integrations/slurm/prolog-dcgm.sh`; `bursar serve
//! --utilisation` reads only from Prometheus.
//!
//! - an idle job is alerted after the window and reclaimed after the grace; a second idle job's owner
//!   sends a keepalive and keeps it; a busy job is never alerted;
//! - `bursar serve` is killed and restarted in the middle: the busy job's samples in the audit log
//!   have no duplicate and no gap;
//! - an error value (4294967295), a stale series (a GPU gone from the target) and a Prometheus restart
//!   raise no false alert, and `/metrics` counts what was dropped.
//!
//! - the same over TLS with basic auth (a second test, with its own Prometheus behind
//!   `--web.config.file`): the idle job is alerted and reclaimed from samples read over https.
//!
//! Without `/usr/bin/prometheus` the tests are skipped, unless `CI` is set (`scripts/setup.sh` installs it).

#![expect(clippy::unwrap_used, reason = "integration test helpers: a failed step fails the test")]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::serve_support::{Scratch, Server, job_event, submit};
use bursar_testkit::tls::{TestCa, WebConfig};
use bursar_testkit::{FakeDcgm, FakeNode, Field, Prometheus, TempDir};
use serde_json::Value;

const POLICIES: &str = r#"
[[policy]]
id = "reclaim/idle"
description = "Alert after 4 s under 10 % (3 samples at least), reclaim 4 s later without a keepalive."
kind = "reclaim"

[policy.idle]
below = 0.10
window = "4s"
grace = "4s"
min_samples = 3
"#;

/// Slurm device d is NVML index PERM[d] on this fake node.
const PERM: [u32; 4] = [1, 0, 3, 2];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn decisions_about(server: &Server, job: &str, kind: &str) -> Vec<Value> {
    server.decisions(0).into_iter().filter(|d| d["job_id"] == job && d["decision"] == kind).collect()
}

/// The value of counter `name{reason="…"}` on `/metrics`.
fn counter(server: &Server, name: &str, reason: &str) -> u64 {
    let text = server.get("/metrics").unwrap().text();
    let want = format!("{name}{{reason=\"{reason}\"}} ");
    text.lines().find_map(|l| l.strip_prefix(&want)?.parse().ok()).unwrap_or(0)
}

/// The evaluation times (ms) of the Prometheus samples of `job` in the audit log, in order.
fn sample_times(s: &Scratch, job: &str) -> Vec<i64> {
    let log = bursar_audit::AuditLog::open_read(s.audit()).unwrap();
    log.events_since(0, 1_000_000)
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "job.sample" && e.job.as_deref() == Some(job) && e.event_id.starts_with("prom-"))
        .map(|e| e.time)
        .collect()
}

#[test]
fn prometheus_feeds_the_idle_rule_with_nothing_for_the_site_to_write() {
    if Prometheus::binary().is_none() {
        bursar_testkit::need::missing("prometheus", "scripts/setup.sh");
        return;
    }
    let tmp = TempDir::new("serve-utilisation").unwrap();
    let map = tmp.path().join("dcgm-job-map");
    let node = FakeNode::new(&tmp.path().join("driver"), &PERM).unwrap();
    let prolog = root().join("integrations/slurm/prolog-dcgm.sh");
    // Slurm jobs 201..203 on Slurm GPUs 0..2, bursar's ids lab-busy, lab-idle, lab-keep.
    let jobs = [("201", "lab-busy", "0"), ("202", "lab-idle", "1"), ("203", "lab-keep", "2")];
    for (slurm, _, gpus) in jobs {
        node.run(&prolog, &map, slurm, gpus).unwrap();
    }
    let dcgm = FakeDcgm::start("node1", 4, Some(map.clone())).unwrap();
    dcgm.set_load(PERM[0], 0.9, 60_000.0);
    dcgm.set_load(PERM[1], 0.02, 30_000.0);
    dcgm.set_load(PERM[2], 0.03, 20_000.0);
    let mut prom = Prometheus::start(&[dcgm.addr()], Duration::from_secs(1)).unwrap();

    let s = Scratch::new("serve-utilisation");
    s.write_policy("reclaim.toml", POLICIES);
    let cfg = s.0.join("utilisation.toml");
    std::fs::write(
        &cfg,
        format!(
            "[prometheus]\nserver = \"{}\"\ninterval = \"1s\"\nlag = \"1s\"\nmax_age = \"3s\"\ntimeout = \"2s\"\n\n[jobs]\nkeys = \"slurm\"\nslurm_cluster = \"lab\"\n",
            prom.url()
        ),
    )
    .unwrap();
    let flags = ["--tick", "200ms", "--snapshot-every", "1s", "--utilisation", cfg.to_str().unwrap()];
    let server = Server::start(&s, &flags);
    for (n, (slurm, bursar, _)) in jobs.iter().enumerate() {
        assert_eq!(server.post("/v1/admit", &submit(&format!("s{n}"), bursar, "nlp", 1, 1.0)).status, 200);
        let started = job_event(
            &format!("slurm-lab-{slurm}-started"),
            "job.started",
            bursar,
            &format!(r#","slurm_job_id":"{slurm}","slurm_cluster":"lab""#),
        );
        assert_eq!(server.post("/v1/events", &started).status, 200);
    }

    // A running job whose start named no Slurm job id gets no sample, and says why (never "0 %").
    assert_eq!(server.post("/v1/admit", &submit("s-nokey", "lab-nokey", "nlp", 1, 1.0)).status, 200);
    assert_eq!(server.post("/v1/events", &job_event("nokey-started", "job.started", "lab-nokey", "")).status, 200);
    let why = server.wait_for(20, "the reason lab-nokey has no sample", || {
        let v = server.get_json("/v1/jobs/lab-nokey");
        v["utilisation"]["no_sample"].as_str().filter(|w| w.contains("last poll")).map(str::to_owned)
    });
    let v = server.get_json("/v1/jobs/lab-nokey");
    assert!(v["utilisation"]["gpu_util"].is_null() && v["utilisation"]["samples"] == 0, "{v}");
    assert!(why.contains("no Slurm job id is known for it") && why.contains("slurm_cluster = \"lab\""), "{why}");
    let busy = server.wait_for(20, "a sample of lab-busy", || {
        let v = server.get_json("/v1/jobs/lab-busy");
        v["utilisation"]["gpu_util"].as_f64().is_some().then_some(v)
    });
    assert!(busy["utilisation"]["no_sample"].is_null(), "a job with samples has no reason: {busy}");

    // The idle jobs are alerted; lab-keep's owner answers; lab-idle is reclaimed.
    server
        .wait_for(40, "the idle alert of lab-keep", || decisions_about(&server, "lab-keep", "alert").first().cloned());
    let keepalive = job_event("k1", "job.keepalive", "lab-keep", r#","by":"alice""#);
    assert_eq!(server.post("/v1/events", &keepalive).status, 200);
    dcgm.set_load(PERM[2], 0.8, 20_000.0); // and it gets to work
    server.wait_for(40, "lab-idle reclaimed", || decisions_about(&server, "lab-idle", "reclaim").first().cloned());

    // kill -9 in the middle, then go on: no busy sample duplicated or skipped.
    std::thread::sleep(Duration::from_millis(1500));
    server.kill9();
    std::thread::sleep(Duration::from_millis(1500)); // evaluation times pass while it is down
    let server = Server::start(&s, &flags);
    let before = sample_times(&s, "lab-busy").len();
    server
        .wait_for(20, "samples after the restart", || (sample_times(&s, "lab-busy").len() >= before + 3).then_some(()));
    let times = sample_times(&s, "lab-busy");
    let mut sorted = times.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), times.len(), "a sample was journaled twice: {times:?}");
    for w in sorted.windows(2) {
        assert_eq!(w[1] - w[0], 1000, "a sample was skipped across the restart: {sorted:?}");
    }

    // Bad data is not idleness: an error value, a GPU gone from the answer, Prometheus restarted.
    dcgm.set(PERM[0], Field::GrEngineActive, Some(4_294_967_295.0));
    dcgm.set(PERM[0], Field::GpuUtil, Some(4_294_967_295.0));
    server.wait_for(20, "the error value counted", || {
        (counter(&server, "bursar_prometheus_series_rejected_total", "bad_value") > 0).then_some(())
    });
    dcgm.set_load(PERM[0], 0.9, 60_000.0);
    dcgm.show_gpu(PERM[0], false);
    server.wait_for(20, "the missing GPU counted", || {
        (counter(&server, "bursar_prometheus_jobs_skipped_total", "no_series") > 0).then_some(())
    });
    let why = server.wait_for(20, "the reason lab-busy has no sample", || {
        let v = server.get_json("/v1/jobs/lab-busy");
        v["utilisation"]["no_sample"].as_str().filter(|w| w.contains("no series")).map(str::to_owned)
    });
    assert!(
        why.starts_with("the utilisation source's last poll at ")
            && why.contains("Prometheus has no series for the job's key"),
        "{why}"
    );
    dcgm.show_gpu(PERM[0], true);
    // Down for longer than max_age: Prometheus keeps no staleness markers across a shutdown, so the
    // evaluation times of the gap, polled once it is back, find samples too old to count.
    prom.stop().unwrap();
    server.wait_for(20, "Prometheus unreachable counted", || {
        (counter(&server, "bursar_prometheus_poll_failures_total", "unreachable") > 0).then_some(())
    });
    std::thread::sleep(Duration::from_secs(4));
    prom.start_again().unwrap();
    server.wait_for(30, "the stale samples of the gap counted", || {
        (counter(&server, "bursar_prometheus_jobs_skipped_total", "stale") > 0).then_some(())
    });
    let resumed = sample_times(&s, "lab-busy").len();
    server.wait_for(30, "samples again", || (sample_times(&s, "lab-busy").len() > resumed + 2).then_some(()));

    // Wait out a full window and grace after the last disturbance: the busy job was never alerted
    // (nor reclaimed), and lab-keep, busy since its keepalive, was not reclaimed.
    let settle = Instant::now();
    while settle.elapsed() < Duration::from_secs(9) {
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(decisions_about(&server, "lab-busy", "alert").is_empty(), "a busy job was alerted");
    assert!(decisions_about(&server, "lab-busy", "reclaim").is_empty());
    assert!(decisions_about(&server, "lab-keep", "reclaim").is_empty(), "the kept-alive job was reclaimed");
    let (status, log) = server.terminate();
    assert!(status.success(), "{log}");
    assert!(
        log.contains("utilisation: no sample for a running job") && log.contains("lab-nokey"),
        "the reason is logged at info: {log}"
    );
    drop(prom);
}

/// The same road over TLS: a real Prometheus whose API is behind `--web.config.file` (TLS with a
/// certificate of a CA made here, basic auth with a bcrypt hash) feeds the idle rule of `bursar
/// serve --utilisation`, whose file names `https://`, `ca_file` and `basic_auth` with a
/// `password_file`. A token written inline stops the start with where it goes instead.
#[test]
fn prometheus_over_tls_with_basic_auth_feeds_the_idle_rule() {
    if Prometheus::binary().is_none() {
        bursar_testkit::need::missing("prometheus", "scripts/setup.sh");
        return;
    }
    let tmp = TempDir::new("serve-utilisation-tls").unwrap();
    let map = tmp.path().join("dcgm-job-map");
    let node = FakeNode::new(&tmp.path().join("driver"), &PERM).unwrap();
    let prolog = root().join("integrations/slurm/prolog-dcgm.sh");
    let jobs = [("301", "tls-busy", "0"), ("302", "tls-idle", "1")];
    for (slurm, _, gpus) in jobs {
        node.run(&prolog, &map, slurm, gpus).unwrap();
    }
    let dcgm = FakeDcgm::start("node1", 4, Some(map.clone())).unwrap();
    dcgm.set_load(PERM[0], 0.9, 60_000.0);
    dcgm.set_load(PERM[1], 0.02, 30_000.0);
    let ca = TestCa::new("bursar test CA").unwrap();
    let ca_file = ca.write(tmp.path(), "ca").unwrap();
    let web = WebConfig::new(tmp.path(), &ca, "bursar", "s3cret pass").unwrap();
    let prom = Prometheus::start_tls(&[dcgm.addr()], Duration::from_secs(1), &web).unwrap();
    let password = tmp.path().join("prometheus.password");
    std::fs::write(&password, "s3cret pass\n").unwrap();

    let s = Scratch::new("serve-utilisation-tls");
    s.write_policy("reclaim.toml", POLICIES);
    let cfg = s.0.join("utilisation.toml");
    let settings = |auth: &str| {
        format!(
            "[prometheus]\nserver = \"{}\"\nca_file = \"{}\"\n{auth}\ninterval = \"1s\"\nlag = \"1s\"\nmax_age = \"3s\"\ntimeout = \"2s\"\n\n[jobs]\nkeys = \"slurm\"\nslurm_cluster = \"lab\"\n",
            prom.url(),
            ca_file.display()
        )
    };
    std::fs::write(&cfg, settings("bearer_token = \"inline-secret\"")).unwrap();
    let flags = ["--tick", "200ms", "--utilisation", cfg.to_str().unwrap()];
    let refused = Server::try_start(&s, &flags).err().unwrap_or_default();
    assert!(refused.contains("set `bearer_token_file"), "{refused}");
    assert!(!refused.contains("inline-secret"), "the secret was printed: {refused}");

    let auth = format!("basic_auth = {{ username = \"bursar\", password_file = \"{}\" }}", password.display());
    std::fs::write(&cfg, settings(&auth)).unwrap();
    let server = Server::start(&s, &flags);
    for (n, (slurm, bursar, _)) in jobs.iter().enumerate() {
        assert_eq!(server.post("/v1/admit", &submit(&format!("t{n}"), bursar, "nlp", 1, 1.0)).status, 200);
        let started = job_event(
            &format!("slurm-lab-{slurm}-started"),
            "job.started",
            bursar,
            &format!(r#","slurm_job_id":"{slurm}","slurm_cluster":"lab""#),
        );
        assert_eq!(server.post("/v1/events", &started).status, 200);
    }
    server.wait_for(40, "tls-idle alerted", || decisions_about(&server, "tls-idle", "alert").first().cloned());
    server.wait_for(40, "tls-idle reclaimed", || decisions_about(&server, "tls-idle", "reclaim").first().cloned());
    assert!(sample_times(&s, "tls-busy").len() >= 3, "the busy job's samples came over TLS too");
    assert!(decisions_about(&server, "tls-busy", "alert").is_empty(), "a busy job was alerted");
    assert_eq!(counter(&server, "bursar_prometheus_poll_failures_total", "error"), 0);
    let (status, log) = server.terminate();
    assert!(status.success(), "{log}");
    drop(prom);
}
