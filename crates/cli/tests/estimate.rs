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
