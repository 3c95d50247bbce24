//! Savings that are true (issue 52, item 5), end to end: `bursar eval --audit` with a concurrent-GPU
//! cap, then `bursar report --format json`. "Prevented" counts only work that did not run later; a
//! denied job whose work ran within the delay window (7 days) is *delayed*.
//!
//! The policy: project `p` may hold 8 GPUs at once, over it a job is denied. Computed by hand:
//!
//! | job | user | submitted (11-02 unless said) | GPUs × requested h | config | type | what happens |
//! |---|---|---|---|---|---|---|
//! | j1 | alice | 00:00 | 8 × 10 | A | - | admitted, runs 00:00-10:00 |
//! | j2 | alice | 01:00 | 8 × 5 = 40 | B | - | denied (j1 holds 8); config B runs at 11:00 (j3): **delayed** |
//! | j3 | alice | 11:00 | 8 × 5 | B | - | admitted, runs 11:00-16:00 |
//! | j4 | bob | 02:00 | 8 × 2 = 16 | - | H100 | denied; bob's same request (8 H100) runs 11-03 (j5): **delayed** |
//! | j5 | bob | 11-03 00:00 | 8 × 3 | - | H100 | admitted, runs 00:00-03:00 |
//! | j6 | carol | 03:00 | 8 × 4 = 32 | C | - | denied; nothing like it runs: **prevented** |
//! | j7 | dave | 04:00 | 8 × 1 = 8 | D | - | denied; config D runs 11-20 (j8), after the window: **prevented** |
//! | j8 | dave | 11-20 00:00 | 8 × 1 | D | - | admitted, runs 00:00-01:00 |
//!
//! Prevented (denied) = 32 + 8 = 40 GPU-hours; delayed = 40 + 16 = 56; the decisions name 96.

#![expect(clippy::unwrap_used, reason = "test helpers: a failure stops the test with its message")]

use std::process::Command;

use serde_json::Value;

const POLICY: &str = r#"
[[policy]]
id = "quota/cap"
description = "At most 8 GPUs at once per project."
kind = "quota"
max_gpus = 8
on_exhaust = "deny"
"#;

fn submit(t: &str, job: &str, user: &str, hours: u32, config: Option<&str>, ty: Option<&str>) -> String {
    // A job without `config` has a script of its own (a trace with a hash per job).
    let config = config.map_or(format!(r#","script_hash":"sha256:{job}""#), |c| format!(r#","config":"{c}""#));
    let ty = ty.map_or(String::new(), |t| format!(r#","gpu_type":"{t}""#));
    format!(
        r#"{{"id":"s-{job}","time":"{t}","type":"job.submitted","job":{{"id":"{job}","project":"p","user":"{user}","gpus":8,"requested_hours":{hours}{config}{ty}}}}}"#
    )
}

fn step(t: &str, job: &str, ty: &str) -> String {
    let status = if ty == "job.finished" { r#","status":"succeeded""# } else { "" };
    format!(r#"{{"id":"{ty}-{job}","time":"{t}","type":"{ty}","job_id":"{job}"{status}}}"#)
}

fn events() -> String {
    let d = "2026-11-02T";
    let at = |h: &str| format!("{d}{h}:00Z");
    [
        submit(&at("00:00"), "j1", "alice", 10, Some("A"), None),
        step(&at("00:00"), "j1", "job.started"),
        submit(&at("01:00"), "j2", "alice", 5, Some("B"), None),
        submit(&at("02:00"), "j4", "bob", 2, None, Some("H100")),
        submit(&at("03:00"), "j6", "carol", 4, Some("C"), None),
        submit(&at("04:00"), "j7", "dave", 1, Some("D"), None),
        step(&at("10:00"), "j1", "job.finished"),
        submit(&at("11:00"), "j3", "alice", 5, Some("B"), None),
        step(&at("11:00"), "j3", "job.started"),
        step(&at("16:00"), "j3", "job.finished"),
        submit("2026-11-03T00:00:00Z", "j5", "bob", 3, None, Some("H100")),
        step("2026-11-03T00:00:00Z", "j5", "job.started"),
        step("2026-11-03T03:00:00Z", "j5", "job.finished"),
        submit("2026-11-20T00:00:00Z", "j8", "dave", 1, Some("D"), None),
        step("2026-11-20T00:00:00Z", "j8", "job.started"),
        step("2026-11-20T01:00:00Z", "j8", "job.finished"),
    ]
    .join("\n")
        + "\n"
}

fn run(args: &[&str]) -> Vec<u8> {
    let out = Command::new(env!("CARGO_BIN_EXE_bursar")).args(args).output().unwrap();
    assert!(out.status.success(), "bursar {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

fn setup(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("bursar-report-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("policies")).unwrap();
    std::fs::write(dir.join("policies/cap.toml"), POLICY).unwrap();
    std::fs::write(dir.join("events.jsonl"), events()).unwrap();
    dir
}

#[test]
fn prevented_counts_only_work_that_did_not_run_later() {
    let dir = setup("savings");
    let p = |rel: &str| dir.join(rel).to_str().unwrap().to_owned();
    let out = run(&["eval", "--policies", &p("policies"), "--events", &p("events.jsonl"), "--audit", &p("r.db")]);
    let denied: Vec<String> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|d| d["decision"] == "deny")
        .map(|d| d["job_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(denied, ["j2", "j4", "j6", "j7"], "the cap denies the four submitted while j1 runs");

    let r: Value =
        serde_json::from_slice(&run(&["report", "--db", &p("r.db"), "--period", "2026-11", "--format", "json"]))
            .unwrap();
    let pr = &r["total"]["prevented"];
    assert_eq!(pr["denied"].as_f64(), Some(40.0), "{pr}");
    assert_eq!(pr["delayed_denied"].as_f64(), Some(56.0), "{pr}");
    assert_eq!((pr["deferred"].as_f64(), pr["delayed_deferred"].as_f64()), (Some(0.0), Some(0.0)));

    // The table shows both.
    let table = String::from_utf8(run(&["report", "--db", &p("r.db"), "--period", "2026-11"])).unwrap();
    let head = table.lines().nth(1).unwrap();
    assert!(head.contains("prevented") && head.contains("delayed"), "{table}");
    let total = table.lines().find(|l| l.starts_with("(total)")).unwrap();
    assert!(total.contains("40.0") && total.contains("56.0"), "{total}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 52: `--by config` made one row per job for jobs without a `config` (their key derived from a
/// script hash of their own). They group under `(no config)`.
#[test]
fn jobs_without_a_config_group_under_no_config() {
    let dir = setup("by-config");
    let p = |rel: &str| dir.join(rel).to_str().unwrap().to_owned();
    run(&["eval", "--policies", &p("policies"), "--events", &p("events.jsonl"), "--audit", &p("r.db")]);
    let r: Value = serde_json::from_slice(&run(&[
        "report",
        "--db",
        &p("r.db"),
        "--period",
        "2026-11",
        "--by",
        "config",
        "--format",
        "json",
    ]))
    .unwrap();
    let keys: Vec<&str> = r["groups"].as_array().unwrap().iter().map(|g| g["key"].as_str().unwrap()).collect();
    // A ran 10 h, B 5 h, D 1 h on 8 GPUs; bob's j5 (no config, 3 h) is the one row of its kind; the
    // denied j4, j6 and j7 hold no hours but keep their rows for what they prevented.
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, ["(no config)", "A", "B", "C", "D"], "{keys:?}");
    let g = r["groups"].as_array().unwrap().iter().find(|g| g["key"] == "(no config)").unwrap();
    assert_eq!(g["exact_gpu_ms"]["nominal"].as_i64(), Some(8 * 3 * 3_600_000));
    let _ = std::fs::remove_dir_all(&dir);
}
