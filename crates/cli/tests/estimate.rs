//! `pool.inventory`, `GET /v1/estimate` and `bursar estimate` against a running serve: two regions
//! of H100s, one full and one free; the request starts now where GPUs are free, and where they are
//! not, when the running job's limit ends (no history yet: the limit is the prediction).

use crate::serve_support::{Scratch, Server, bursar, job_event, now};

fn inventory() -> String {
    format!(
        r#"{{"id":"inv-1","time":"{}","type":"pool.inventory","source":"test","capacity":[{{"region":"cn-north","gpu_type":"H100","queue":"gpu","in_service":8,"allocated":8,"free":0,"drained":0}},{{"region":"cn-east","gpu_type":"H100","queue":"gpu","in_service":16,"allocated":8,"free":8,"drained":0}}]}}"#,
        now()
    )
}

#[test]
fn an_estimate_names_the_region_that_starts_it_soonest() {
    let s = Scratch::new("estimate");
    let server = Server::start(&s, &["--tick", "1h"]);
    let none = server.get_json("/v1/estimate?gpus=8&gpu_type=H100&hours=12");
    assert!(none["note"].as_str().unwrap_or_default().contains("no inventory yet"), "{none}");

    let r = server.post("/v1/events", &format!("{}\n", inventory()));
    assert_eq!(r.status, 200, "{}", r.text());
    let submit = format!(
        r#"{{"id":"e1","time":"{}","type":"job.submitted","job":{{"id":"j1","project":"nlp","user":"alice","gpus":8,"gpu_type":"H100","queue":"gpu","requested_hours":4.0}}}}"#,
        now()
    );
    assert_eq!(server.post("/v1/admit", &submit).status, 200);
    assert_eq!(server.post("/v1/events", &job_event("e2", "job.started", "j1", "")).status, 200);

    let v = server.get_json("/v1/estimate?gpus=8&gpu_type=H100&hours=12");
    let parts = v["partitions"].as_array().unwrap_or_else(|| panic!("{v}"));
    assert_eq!(parts.len(), 2, "{v}");
    assert_eq!((parts[0]["region"].as_str(), parts[0]["wait_s"].as_i64()), (Some("cn-east"), Some(0)), "{v}");
    assert_eq!(parts[1]["region"], "cn-north", "{v}");
    let wait = parts[1]["wait_s"].as_i64().unwrap_or_default();
    assert!((4 * 3600 - 120..=4 * 3600).contains(&wait), "the running job's 4 h limit ends first: {v}");
    assert_eq!(parts[1]["running_jobs"], 1, "{v}");

    // A region asked for; a request larger than any partition; a bad query.
    let north = server.get_json("/v1/estimate?gpus=8&gpu_type=H100&hours=12&region=cn-north");
    assert_eq!(north["partitions"].as_array().map(Vec::len), Some(1), "{north}");
    let big = server.get_json("/v1/estimate?gpus=64&gpu_type=H100&hours=1");
    assert!(big["partitions"][0]["reason"].as_str().unwrap_or_default().contains("64 GPUs asked"), "{big}");
    let bad = server.get("/v1/estimate?gpus=0&gpu_type=H100&hours=1").unwrap();
    assert_eq!(bad.status, 400);
    assert!(bad.text().contains("`gpus`"), "{}", bad.text());

    let addr = server.addr.to_string();
    let out = bursar(&["estimate", "--gpus", "8", "--gpu-type", "H100", "--hours", "12", "--server", &addr]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let east = text.find("cn-east / gpu: now").unwrap_or_else(|| panic!("{text}"));
    let north = text.find("cn-north / gpu: in about 4 h").unwrap_or_else(|| panic!("{text}"));
    assert!(east < north, "soonest first: {text}");

    // Issue 53, item 5: an admission asked with `?estimate=true` says when the job is expected to
    // start (what the Slurm hook and the Kubernetes check tell the user), itself not counted ahead of
    // itself: in cn-east, now.
    let second = format!(
        r#"{{"id":"e3","time":"{}","type":"job.submitted","job":{{"id":"j2","project":"nlp","user":"bob","gpus":8,"gpu_type":"H100","queue":"gpu","requested_hours":2.0}}}}"#,
        now()
    );
    let r = server.post("/v1/admit?estimate=true", &second);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json().unwrap();
    assert_eq!(v["decision"], "allow", "{v}");
    assert_eq!((v["estimate"]["region"].as_str(), v["estimate"]["wait_s"].as_i64()), (Some("cn-east"), Some(0)), "{v}");
    // Without the parameter, the answer is as before; a preview estimates too.
    let third = second.replace("\"e3\"", "\"e4\"").replace("\"j2\"", "\"j3\"");
    let plain = server.post("/v1/admit", &third).json().unwrap();
    assert!(plain.get("estimate").is_none(), "{plain}");
    let fourth = second.replace("\"e3\"", "\"e5\"").replace("\"j2\"", "\"j4\"");
    let preview = server.post("/v1/admit?test_only=true&estimate=true", &fourth).json().unwrap();
    assert!(preview["estimate"]["start"].is_string(), "{preview}");
    let bad = server.post("/v1/admit?estimat=true", &fourth);
    assert_eq!(bad.status, 400);
    assert!(bad.text().contains("`estimate=true`"), "{}", bad.text());
}

/// Issue 53, item 4: a request naming its dataset, in a pool whose placement policy places work
/// across regions. cn-east has room now and no copy (a 1 h copy first); cn-north is full for the
/// running job's 4 h and has the copy. The estimate counts the copy; an admission that may run
/// anywhere is placed where it can start now, with the reason, and then counts only there.
#[test]
fn a_dataset_without_a_copy_waits_for_it_and_placement_picks_the_region() {
    let s = Scratch::new("estimate-dataset");
    s.write_policy(
        "placement.toml",
        r#"
[[policy]]
id = "placement/regions"
description = "work that may run anywhere goes where it can start now, near its data"
kind = "placement"

[policy.cross_region]
copy_hours = 1
"#,
    );
    let server = Server::start(&s, &["--tick", "1h"]);
    let asset = |id: &str, region: &str| {
        format!(
            r#"{{"id":"{id}","time":"{}","type":"asset.registered","project":"nlp","asset":{{"kind":"dataset","fingerprint":"ds-web","uri":"s3://{region}/ds-web","region":"{region}"}}}}"#,
            now()
        )
    };
    let r = server.post("/v1/events", &format!("{}\n{}\n", inventory(), asset("a1", "cn-north")));
    assert_eq!(r.status, 200, "{}", r.text());
    let running = format!(
        r#"{{"id":"e1","time":"{}","type":"job.submitted","job":{{"id":"j1","project":"nlp","user":"alice","gpus":8,"gpu_type":"H100","queue":"gpu","requested_hours":4.0,"region":"cn-north"}}}}"#,
        now()
    );
    assert_eq!(server.post("/v1/admit", &running).status, 200);
    assert_eq!(server.post("/v1/events", &job_event("e2", "job.started", "j1", "")).status, 200);

    let v = server.get_json("/v1/estimate?gpus=8&gpu_type=H100&hours=12&dataset=ds-web");
    let parts = v["partitions"].as_array().unwrap_or_else(|| panic!("{v}"));
    assert_eq!(parts.len(), 2, "{v}");
    assert_eq!(parts[0]["region"], "cn-east", "the copy (1 h) is sooner than the running job's end (4 h): {v}");
    let wait = parts[0]["wait_s"].as_i64().unwrap_or_default();
    assert!((3600 - 120..=3600).contains(&wait), "it starts once the copy is made: {v}");
    assert!(parts[0]["dataset"].as_str().unwrap_or_default().starts_with("no copy here"), "{v}");
    assert_eq!(parts[1]["dataset"], "has a copy here", "{v}");
    // Without the dataset, cn-east starts it now.
    let plain = server.get_json("/v1/estimate?gpus=8&gpu_type=H100&hours=12");
    assert_eq!(plain["partitions"][0]["wait_s"], 0, "{plain}");
    assert!(plain["partitions"][0].get("dataset").is_none(), "{plain}");
    // A second copy in cn-east: now.
    assert_eq!(server.post("/v1/events", &format!("{}\n", asset("a2", "cn-east"))).status, 200);
    let both = server.get_json("/v1/estimate?gpus=8&gpu_type=H100&hours=12&dataset=ds-web");
    assert_eq!(
        (both["partitions"][0]["region"].as_str(), both["partitions"][0]["wait_s"].as_i64()),
        (Some("cn-east"), Some(0)),
        "{both}"
    );

    // Placement: a job that may run anywhere goes to cn-east, where it can start now.
    let anywhere = format!(
        r#"{{"id":"e3","time":"{}","type":"job.submitted","job":{{"id":"j2","project":"nlp","user":"bob","gpus":8,"gpu_type":"H100","queue":"gpu","requested_hours":2.0,"dataset":"ds-web","region":"any"}}}}"#,
        now()
    );
    let r = server.post("/v1/admit", &anywhere);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json().unwrap();
    assert_eq!(v["hints"]["region"], "cn-east", "{v}");
    assert!(
        v["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("region cn-east: 8 H100 free now, where dataset `ds-web` has a copy"),
        "{v}"
    );
    // Counted in cn-east only: cn-north's estimate has no one waiting ahead.
    let after = server.get_json("/v1/estimate?gpus=8&gpu_type=H100&hours=12&region=cn-north");
    assert_eq!(after["partitions"][0]["waiting_jobs"], 0, "{after}");
    let east = server.get_json("/v1/estimate?gpus=8&gpu_type=H100&hours=12&region=cn-east");
    assert_eq!(east["partitions"][0]["waiting_jobs"], 1, "{east}");

    let addr = server.addr.to_string();
    let out = bursar(&[
        "estimate",
        "--gpus",
        "8",
        "--gpu-type",
        "H100",
        "--hours",
        "12",
        "--dataset",
        "ds-web",
        "--region",
        "cn-north",
        "--server",
        &addr,
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("dataset: has a copy here"), "{text}");
}

/// Issue 55, item 7: a partition of MIG slices is counted exactly. One A100 cut into seven
/// `1g.10gb`, five of them held by a running job bursar admitted (2 h limit): two sevenths are
/// free. A request for two slices starts now; one for three waits for the running job's end; the
/// pool shows the shares, and `bursar estimate` takes one.
#[test]
fn mig_slices_are_placed_as_their_share() {
    let s = Scratch::new("estimate-mig");
    let server = Server::start(&s, &["--tick", "1h"]);
    let inventory = format!(
        r#"{{"id":"inv-mig","time":"{}","type":"pool.inventory","source":"slurm:lab","capacity":[{{"region":"lab","gpu_type":"1G.10GB","queue":"mig","in_service":1,"allocated":"5/7","free":"2/7"}}]}}"#,
        now()
    );
    let r = server.post("/v1/events", &format!("{inventory}\n"));
    assert_eq!(r.status, 200, "{}", r.text());
    let submit = format!(
        r#"{{"id":"e1","time":"{}","type":"job.submitted","job":{{"id":"j1","project":"cv","user":"alice","gpus":"5/7","gpu_type":"1G.10GB","queue":"mig","requested_hours":2.0}}}}"#,
        now()
    );
    assert_eq!(server.post("/v1/admit", &submit).status, 200);
    assert_eq!(server.post("/v1/events", &job_event("e2", "job.started", "j1", "")).status, 200);

    let two = server.get_json("/v1/estimate?gpus=2/7&gpu_type=1G.10GB&hours=1");
    let p = &two["partitions"][0];
    assert_eq!((two["gpus"].as_str(), p["wait_s"].as_i64()), (Some("2/7"), Some(0)), "two slices are free: {two}");
    assert_eq!(
        (p["in_service"].as_u64(), p["free"].as_str(), p["allocated"].as_str()),
        (Some(1), Some("2/7"), Some("5/7"))
    );
    let three = server.get_json("/v1/estimate?gpus=3%2F7&gpu_type=1G.10GB&hours=1");
    let wait = three["partitions"][0]["wait_s"].as_i64().unwrap_or_else(|| panic!("{three}"));
    assert!((2 * 3600 - 120..=2 * 3600).contains(&wait), "the third slice is free when the running job ends: {three}");
    let bad = server.get("/v1/estimate?gpus=1/11&gpu_type=1G.10GB&hours=1").unwrap();
    assert_eq!(bad.status, 400);
    assert!(bad.text().contains("840ths"), "{}", bad.text());

    let pool = server.get_json("/v1/pool");
    let c = &pool["capacity"][0];
    assert_eq!((c["free"].as_str(), c["in_service"].as_u64()), (Some("2/7"), Some(1)), "{pool}");
    assert_eq!(c["free_in_hour"], "2/7", "the running job's 2 h limit has not ended in an hour: {pool}");

    let addr = server.addr.to_string();
    let out = bursar(&["estimate", "--gpus", "2/7", "--gpu-type", "1G.10GB", "--hours", "1", "--server", &addr]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.starts_with("2/7 × 1G.10GB") && text.contains("lab / mig: now"), "{text}");
    assert!(text.contains("2/7 free of 1 in service (5/7 allocated"), "{text}");
}
