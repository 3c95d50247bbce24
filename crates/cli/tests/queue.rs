//! The queue and the capacity as people see them (issue 53, items 2 and 5): `GET /v1/pool`, the
//! pool page and `bursar pending` against a running serve, computed by hand.
//!
//! Every event is dated at one instant T, the wall clock at the test's start to the second (the
//! engine's clock; an older T would find the reservations stale). cn-north has 8 H100s in queue `gpu`,
//! all allocated, and 4 A100s in service with 4 free (4 more drained). alice's 8-GPU H100 job runs
//! with a 2 h limit (no history: its limit is its prediction), so it ends at T + 2 h. Waiting, in
//! submission order: bob's 4 H100 (1 h), carol's 4 H100 (1 h), dan's 2 A100 (1 h), all in queue
//! `gpu`; erin's 1 GPU names no type.
//!
//! - bob: position 1, starts at T + 2 h when alice's job ends, "waits for 4 GPUs to be free".
//! - carol: position 2, starts at T + 2 h beside bob (8 GPUs then), "1 job ahead of it".
//! - dan: position 3 in `gpu` (the queue holds every type), starts now (the engine's clock, which
//!   serve's tick may have moved past T): his A100s are free.
//! - erin: position 1 in her own queue, no estimate: she names no GPU type.
//! - H100 free in an hour: 0 (alice runs until T + 2 h); reserved 8 (bob's and carol's 4 + 4).
//! - A100 free in an hour: 4 (dan's job starts at T and, at its 1 h limit, has ended by T + 1 h).

use crate::serve_support::{Scratch, Server, bursar};

use bursar_model::{Duration, Timestamp};

/// A job: id, user, GPUs, GPU type, queue, hours.
type Ask<'a> = (&'a str, &'a str, u32, Option<&'a str>, &'a str, f64);

fn submit(t: &str, id: &str, (job, user, gpus, gpu_type, queue, hours): Ask<'_>) -> String {
    let ty = gpu_type.map(|t| format!(r#","gpu_type":"{t}""#)).unwrap_or_default();
    format!(
        r#"{{"id":"{id}","time":"{t}","type":"job.submitted","job":{{"id":"{job}","project":"nlp","user":"{user}","gpus":{gpus}{ty},"queue":"{queue}","requested_hours":{hours}}}}}"#
    )
}

#[test]
fn the_queue_shows_each_jobs_place_its_start_and_why_it_waits() {
    let s = Scratch::new("queue-view");
    let t0 = Timestamp(Timestamp::wall_clock().millis() / 1000 * 1000);
    let at = |h: i64| t0.plus(Duration::hours(h)).to_string();
    let now = at(0);
    let t = now.as_str();
    let server = Server::start(&s, &["--tick", "1h"]);
    let inventory = format!(
        r#"{{"id":"inv-1","time":"{t}","type":"pool.inventory","source":"slurm:lab","capacity":[{{"region":"cn-north","gpu_type":"H100","queue":"gpu","in_service":8,"allocated":8,"free":0}},{{"region":"cn-north","gpu_type":"A100","queue":"gpu","in_service":4,"allocated":0,"free":4,"drained":4}}]}}"#
    );
    assert_eq!(server.post("/v1/events", &format!("{inventory}\n")).status, 200);
    for line in [
        submit(t, "e1", ("j1", "alice", 8, Some("H100"), "gpu", 2.0)),
        submit(t, "e2", ("j2", "bob", 4, Some("H100"), "gpu", 1.0)),
        submit(t, "e3", ("j3", "carol", 4, Some("H100"), "gpu", 1.0)),
        submit(t, "e4", ("j4", "dan", 2, Some("A100"), "gpu", 1.0)),
        submit(t, "e5", ("j5", "erin", 1, None, "cpu", 1.0)),
    ] {
        let r = server.post("/v1/admit", &line);
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let started = format!(r#"{{"id":"e6","time":"{t}","type":"job.started","job_id":"j1"}}"#);
    assert_eq!(server.post("/v1/events", &format!("{started}\n")).status, 200);

    let v = server.get_json("/v1/pool");
    let cap = v["capacity"].as_array().unwrap_or_else(|| panic!("{v}"));
    let row = |ty: &str| cap.iter().find(|c| c["gpu_type"] == ty).unwrap_or_else(|| panic!("{ty}: {v}"));
    let (a100, h100) = (row("A100"), row("H100"));
    assert_eq!((h100["free"].as_u64(), h100["free_in_hour"].as_u64()), (Some(0), Some(0)), "{h100}");
    assert_eq!((h100["reserved"].as_u64(), h100["waiting_jobs"].as_u64()), (Some(8), Some(2)), "{h100}");
    assert_eq!(h100["running_jobs"], 1, "{h100}");
    assert_eq!((a100["free"].as_u64(), a100["free_in_hour"].as_u64()), (Some(4), Some(4)), "{a100}");
    assert_eq!((a100["drained"].as_u64(), a100["source"].as_str()), (Some(4), Some("slurm:lab")), "{a100}");

    let queue = v["queue"].as_array().unwrap_or_else(|| panic!("{v}"));
    let order: Vec<(&str, &str, u64)> = queue
        .iter()
        .map(|q| {
            (
                q["queue"].as_str().unwrap_or("?"),
                q["job_id"].as_str().unwrap_or("?"),
                q["position"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(order, [("cpu", "j5", 1), ("gpu", "j2", 1), ("gpu", "j3", 2), ("gpu", "j4", 3)], "{v}");
    let job = |id: &str| queue.iter().find(|q| q["job_id"] == id).unwrap_or_else(|| panic!("{id}: {v}"));
    assert_eq!(job("j2")["start"], at(2), "alice's 2 h limit ends: {v}");
    assert_eq!(job("j2")["latest"], at(2), "{v}");
    assert_eq!(job("j2")["region"], "cn-north", "{v}");
    assert_eq!(job("j2")["reason"], "waits for 4 GPUs to be free", "{v}");
    assert_eq!(job("j3")["start"], at(2), "beside bob: {v}");
    assert_eq!(job("j3")["reason"], "waits for 4 GPUs: 1 job ahead of it in the queue", "{v}");
    assert_eq!(job("j4")["start"], v["engine_time"], "now, on the engine's clock: {v}");
    assert_eq!(job("j4")["reason"], "its GPUs are free: waiting for the scheduler to start it", "{v}");
    assert!(job("j5")["start"].is_null(), "{v}");
    assert!(job("j5")["reason"].as_str().unwrap_or_default().contains("names no GPU type"), "{v}");
    // Its wait counts from its admission on the engine's clock (T, or later if serve's tick had
    // moved the clock past T), and its reservation goes stale 7 days (the default) after that.
    let since =
        Timestamp::parse(job("j2")["since"].as_str().unwrap_or_default()).unwrap_or_else(|e| panic!("{e}: {v}"));
    assert!(since >= t0, "{v}");
    assert_eq!(job("j2")["stale_at"], since.plus(Duration::hours(7 * 24)).to_string(), "{v}");

    // The page renders the same view; bursar pending prints it.
    let page = server.get("/").unwrap().text();
    for needle in ["id=\"capacity\"", "id=\"queue\"", "data-job=\"j3\"", "1 job ahead of it in the queue", "slurm:lab"]
    {
        assert!(page.contains(needle), "{needle}: {page}");
    }
    let addr = server.addr.to_string();
    let out = bursar(&["pending", "--server", &addr]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("queue, admitted and not started (4):"), "{text}");
    assert!(text.contains("waits for 4 GPUs: 1 job ahead of it in the queue"), "{text}");
    assert!(text.contains("capacity (GPUs):") && text.contains("cn-north"), "{text}");
    let json = bursar(&["pending", "--server", &addr, "--format", "json"]);
    let reply: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap_or_default();
    assert_eq!(reply["queue"], v["queue"], "one view model for the page, the API and the CLI");

    // The scheduler's own reason (job.queued's `reason`, v1.x) comes first, the estimate's beside it.
    let queued = format!(r#"{{"id":"e7","time":"{t}","type":"job.queued","job_id":"j3","reason":"Priority"}}"#);
    assert_eq!(server.post("/v1/events", &format!("{queued}\n")).status, 200);
    let v = server.wait_for(5, "the scheduler's reason", || {
        let v = server.get_json("/v1/pool");
        let q = v["queue"].as_array()?.iter().find(|q| q["job_id"] == "j3")?.clone();
        (q["reason"] == "Priority").then_some(q)
    });
    assert_eq!((v["scheduler_reason"].as_bool(), v["reason_since"].as_str()), (Some(true), Some(t)), "{v}");
    assert_eq!(v["estimate_note"], "waits for 4 GPUs: 1 job ahead of it in the queue", "{v}");
}

/// Item 1: where no scheduler's agent reports, the site's `[[capacity]]` says what is in service;
/// bursar counts its own running jobs there as allocated. An inventory of the same partition takes
/// its place.
#[test]
fn capacity_from_the_site_configuration_until_an_agent_reports() {
    let s = Scratch::new("queue-capacity-config");
    let cfg = s.path("bursar.toml");
    std::fs::write(
        &cfg,
        format!(
            "[serve]\npolicies = {:?}\naudit = {:?}\n\n[[capacity]]\nregion = \"cn-east\"\ngpu_type = \"H100\"\nqueue = \"gpu\"\ngpus = 16\ndrained = 2\n",
            s.policies(),
            s.audit()
        ),
    )
    .unwrap();
    let check = bursar(&["config", "check", cfg.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.status.success() && said.contains("1 capacity row(s), 16 GPUs"),
        "{said}{}",
        String::from_utf8_lossy(&check.stderr)
    );

    let server = Server::start(&s, &["--config", cfg.to_str().unwrap(), "--tick", "1h"]);
    let t0 = Timestamp(Timestamp::wall_clock().millis() / 1000 * 1000);
    let t = t0.to_string();
    let r = server.post("/v1/admit", &submit(&t, "e1", ("j1", "alice", 8, Some("H100"), "gpu", 4.0)));
    assert_eq!(r.status, 200, "{}", r.text());
    let started = format!(r#"{{"id":"e2","time":"{t}","type":"job.started","job_id":"j1"}}"#);
    assert_eq!(server.post("/v1/events", &format!("{started}\n")).status, 200);

    let v = server.get_json("/v1/pool");
    let c = &v["capacity"][0];
    assert_eq!(c["source"], "config", "{v}");
    assert_eq!(
        (c["in_service"].as_u64(), c["allocated"].as_u64(), c["free"].as_u64()),
        (Some(16), Some(8), Some(8)),
        "{v}"
    );
    assert_eq!(c["drained"], 2, "{v}");
    let e = server.get_json("/v1/estimate?gpus=8&gpu_type=H100&hours=1");
    assert_eq!(
        (e["partitions"][0]["region"].as_str(), e["partitions"][0]["wait_s"].as_i64()),
        (Some("cn-east"), Some(0)),
        "{e}"
    );

    let inventory = format!(
        r#"{{"id":"inv-1","time":"{t}","type":"pool.inventory","source":"slurm:east","capacity":[{{"region":"cn-east","gpu_type":"H100","queue":"gpu","in_service":16,"allocated":16,"free":0}}]}}"#
    );
    assert_eq!(server.post("/v1/events", &format!("{inventory}\n")).status, 200);
    let v = server.wait_for(5, "the agent's row", || {
        let v = server.get_json("/v1/pool");
        (v["capacity"][0]["source"] == "slurm:east").then_some(v)
    });
    assert_eq!(v["capacity"].as_array().map(Vec::len), Some(1), "one row per partition: {v}");
    assert_eq!(v["capacity"][0]["free"], 0, "{v}");
}
