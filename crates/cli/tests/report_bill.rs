//! The bill, imported and reconciled, end to end (issue 52): `bursar import bill` on the example FOCUS
//! bill (`examples/bill.csv` with `examples/bill-mapping.toml`), `bursar eval --audit` on it and on a
//! day of jobs, `bursar report --format json`; every figure of the reconciliation and of the gap below
//! is computed by hand from the stream in this file and the bill's lines (docs/reports.md, "On the
//! example data", walks through them).
//!
//! The jobs (no policies: every job is admitted as submitted), on 2026-11-02:
//!
//! | job | project | GPUs | type | run | GPU-minutes | samples |
//! |---|---|---|---|---|---|---|
//! | j4 | vision | 8 | H100 | 09:16-10:30 succeeded | 592 | none |
//! | j5 | vision | 64 | H100 | 10:41-20:45 failed | 38,656 | none |
//! | j12 | nlp | 2 | H100 | 11:56-16:45 succeeded | 578 | none |
//! | j1 | nlp | 8 | H200 | 09:01-14:40 succeeded | 2,712 | 0.85 at 09:05, 0.02 at 12:10 |
//! | j15 | nlp | 16 | H200 | 12:30 to 11-09 12:30 succeeded | 161,280 | none |
//! | j6 | speech | 1 | T4 | 10:46-11:20 succeeded | 34 | none |
//! | j8 | nlp | 4 | L4 | 15:00-15:40 succeeded | 160 | none |
//!
//! j1: 09:01-12:10 at 0.85 is 189 min × 8 = 1,512 GPU-min productive, of which 0.85 is effective
//! (1,285.2) and 226.8 low use; 12:10-14:40 at 0.02 is 1,200 GPU-min held after the work. j5 failed:
//! all interruption. The rest has no sample: not measured.
//!
//! Queueing, per GPU type and hour (docs/reports.md): the bill's lines spread evenly over their
//! charge periods — H100 (8 GPUs an instance): the unused reservation 768 card-h over the day = 32 an
//! hour, j4's line 8 an hour in 09-11, j5's 64 an hour in 10-21, nlp's 8 an hour in 11-17. The waits:
//! j4 09:15-09:16 on 8 GPUs (8 GPU-min, hour 9: billed 40 card-h, held 44 min × 8: free), j5 10:35-10:41
//! on 64 (384 GPU-min, hour 10: billed 104, held 30 × 8 + 19 × 64 GPU-min: free), j12 11:55-11:56 on 2
//! (2 GPU-min, hour 11: billed 104, held 64 + 8 GPU-min: free): 394 GPU-min of queueing, all of the
//! wait. H200: j1 waited 8 GPU-min in hour 9 (billed 8 card-h, held 59 × 8 GPU-min: 8 free), j15
//! 12:05-12:30 on 16 = 400 GPU-min in hour 12 (billed 8 + 2,704 / 169 = 24, held 480 + 480 GPU-min: 480
//! free): 408. T4: j6 1 GPU-min in hour 10 (the untagged instance billed 1 an hour, j6 held 14 min): 1.
//! L4: j8 waited 20 GPU-min in hour 14, before its line's hour: 0. The queue wait is 40 min, all for
//! capacity (no policy holds or defers anything).

#![expect(clippy::unwrap_used, clippy::panic, reason = "test helpers: a failure stops the test with its message")]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// GPU-minutes in GPU-ms.
const MIN: i64 = 60_000;
const HOUR: i64 = 60 * MIN;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_bursar")
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn submit(id: &str, t: &str, job: &str, project: &str, gpus: u32, ty: &str) -> String {
    format!(
        r#"{{"id":"{id}","time":"{t}","type":"job.submitted","job":{{"id":"{job}","project":"{project}","user":"u","gpus":{gpus},"gpu_type":"{ty}","requested_hours":200}}}}"#
    )
}

fn ev(id: &str, t: &str, ty: &str, job: &str, extra: &str) -> String {
    format!(r#"{{"id":"{id}","time":"{t}","type":"{ty}","job_id":"{job}"{extra}}}"#)
}

fn events() -> String {
    let d = "2026-11-02T";
    let ok = r#","status":"succeeded""#;
    [
        submit("s1", &format!("{d}09:00:00Z"), "j1", "nlp", 8, "H200"),
        ev("a1", &format!("{d}09:01:00Z"), "job.started", "j1", ""),
        ev("a2", &format!("{d}09:05:00Z"), "job.sample", "j1", r#","gpu_util":0.85"#),
        submit("s4", &format!("{d}09:15:00Z"), "j4", "vision", 8, "H100"),
        ev("a3", &format!("{d}09:16:00Z"), "job.started", "j4", ""),
        ev("a4", &format!("{d}10:30:00Z"), "job.finished", "j4", ok),
        submit("s5", &format!("{d}10:35:00Z"), "j5", "vision", 64, "H100"),
        ev("a5", &format!("{d}10:41:00Z"), "job.started", "j5", ""),
        submit("s6", &format!("{d}10:45:00Z"), "j6", "speech", 1, "T4"),
        ev("a6", &format!("{d}10:46:00Z"), "job.started", "j6", ""),
        ev("a7", &format!("{d}11:20:00Z"), "job.finished", "j6", ok),
        submit("s12", &format!("{d}11:55:00Z"), "j12", "nlp", 2, "H100"),
        ev("a8", &format!("{d}11:56:00Z"), "job.started", "j12", ""),
        ev("a9", &format!("{d}12:10:00Z"), "job.sample", "j1", r#","gpu_util":0.02"#),
        submit("s15", &format!("{d}12:05:00Z"), "j15", "nlp", 16, "H200"),
        ev("a10", &format!("{d}12:30:00Z"), "job.started", "j15", ""),
        ev("a11", &format!("{d}14:40:00Z"), "job.finished", "j1", ok),
        submit("s8", &format!("{d}14:55:00Z"), "j8", "nlp", 4, "L4"),
        ev("a12", &format!("{d}15:00:00Z"), "job.started", "j8", ""),
        ev("a13", &format!("{d}15:40:00Z"), "job.finished", "j8", ok),
        ev("a14", &format!("{d}16:45:00Z"), "job.finished", "j12", ok),
        ev("a15", &format!("{d}20:45:00Z"), "job.finished", "j5", r#","status":"failed""#),
        ev("a16", "2026-11-09T12:30:00Z", "job.finished", "j15", ok),
    ]
    .join("\n")
        + "\n"
}

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("bursar-report-bill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("policies")).unwrap();
    d
}

fn import_bill() -> Vec<u8> {
    let out = Command::new(bin())
        .current_dir(root())
        .args(["import", "bill", "examples/bill.csv", "--mapping", "examples/bill-mapping.toml"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("12 lines, 12 charges written, 0 refused"), "{err}");
    out.stdout
}

fn report(dir: &Path, by: &str) -> Value {
    let out = Command::new(bin())
        .args(["report", "--db"])
        .arg(dir.join("r.db"))
        .args(["--period", "2026-11", "--format", "json", "--by", by])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn row<'a>(rec: &'a Value, key: &str, ty: &str) -> &'a Value {
    rec["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == key && r["gpu_type"] == ty)
        .unwrap_or_else(|| panic!("no row {key} {ty} in {rec:#}"))
}

fn ms(v: &Value, field: &str) -> i64 {
    v[field].as_i64().unwrap_or_else(|| panic!("no {field} in {v}"))
}

fn usd(v: &Value, field: &str) -> i64 {
    v["money"].as_array().unwrap().iter().find(|m| m["currency"] == "USD").map_or(0, |m| m[field].as_i64().unwrap())
}

#[test]
fn the_example_bill_reconciled_by_hand() {
    let d = dir();
    crate::serve_support::eval_into(&d, events().as_bytes());
    let bill = import_bill();
    crate::serve_support::eval_into(&d, &bill);
    // Importing the same bill again changes nothing: the same ids, ignored.
    crate::serve_support::eval_into(&d, &bill);
    let r = report(&d, "project");
    let rec = &r["reconciliation"];

    // nlp's H200: j1's line (6 instance-hours × 8 = 48) and the pool's (338 × 8 = 2,704), against
    // j1's 2,712 GPU-min and j15's 161,280.
    let x = row(rec, "nlp", "H200");
    assert_eq!(ms(x, "lines"), 2);
    assert_eq!(ms(x, "billed_gpu_ms"), 2_752 * HOUR);
    assert_eq!(ms(x, "held_gpu_ms"), (2_712 + 161_280) * MIN);
    assert_eq!(ms(x, "effective_gpu_ms"), 1_512 * MIN * 85 / 100);
    assert_eq!(ms(x, "billed_not_held_gpu_ms"), 2_752 * HOUR - (2_712 + 161_280) * MIN);
    assert_eq!(usd(x, "billed"), (1_920_000_000 + 97_344_000_000));
    // The reservation: its purchase (0 card-hours, 15,360 billed) and its unused part (96 × 8 = 768).
    let x = row(rec, "(unattributed)", "H100");
    assert_eq!((ms(x, "billed_gpu_ms"), ms(x, "unused_gpu_ms"), ms(x, "held_gpu_ms")), (768 * HOUR, 768 * HOUR, 0));
    assert_eq!((usd(x, "billed"), usd(x, "effective")), (15_360_000_000, 7_680_000_000));
    // vision's H100: j4's line (2 × 8) and j5's (88 × 8), against 592 + 38,656 GPU-min.
    let x = row(rec, "vision", "H100");
    assert_eq!(ms(x, "billed_gpu_ms"), 720 * HOUR);
    assert_eq!(ms(x, "held_gpu_ms"), (592 + 38_656) * MIN);
    assert_eq!(ms(x, "billed_not_held_gpu_ms"), 720 * HOUR - (592 + 38_656) * MIN);
    assert_eq!(usd(x, "effective"), 160_000_000 + 7_040_000_000);
    // nlp's H100 instance (6 × 8) held 578 GPU-min by j12.
    let x = row(rec, "nlp", "H100");
    assert_eq!((ms(x, "billed_gpu_ms"), ms(x, "held_gpu_ms")), (48 * HOUR, 578 * MIN));
    // speech's T4 job has no bill line; the untagged T4 instance has no job.
    let x = row(rec, "speech", "T4");
    assert_eq!((ms(x, "billed_gpu_ms"), ms(x, "held_not_billed_gpu_ms")), (0, 34 * MIN));
    let x = row(rec, "(unattributed)", "T4");
    assert_eq!((ms(x, "billed_gpu_ms"), ms(x, "billed_not_held_gpu_ms")), (2 * HOUR, 2 * HOUR));
    // The month's tax is the month's; the October correction is outside the period.
    let x = row(rec, "(unattributed)", "(none)");
    assert_eq!(usd(x, "billed"), 1_617_770_000);

    let t = &rec["total"];
    let billed_total =
        15_360_000_000 + 1_920_000_000 + 97_344_000_000 + 1_050_000 + 4_600_000 + 5_330_000 + 1_617_770_000;
    assert_eq!(usd(t, "billed"), billed_total);
    assert_eq!(ms(t, "unused_gpu_ms"), 768 * HOUR);
    let held = 592 + 38_656 + 578 + 2_712 + 161_280 + 34 + 160;
    assert_eq!(ms(t, "held_gpu_ms"), held * MIN);
    let unattributed = 15_360_000_000 + 1_050_000 + 1_617_770_000;
    let share = rec["attributed_share"].as_f64().unwrap();
    assert!((share - (billed_total - unattributed) as f64 / billed_total as f64).abs() < 1e-12, "{share}");
    let how: Vec<(&str, i64)> =
        rec["attribution"].as_array().unwrap().iter().map(|a| (a["how"].as_str().unwrap(), ms(a, "lines"))).collect();
    assert_eq!(how, vec![("job", 3), ("tag", 4), ("unattributed", 4)]);

    // The gap of the pool: effective 0.85 of j1's productive stretch, the rest low use; j1's tail held;
    // j5 interruption; the others not measured. The parts add up to nominal.
    let g = &r["total"]["exact_gpu_ms"]["gap"];
    assert_eq!(ms(g, "effective"), 1_512 * MIN * 85 / 100);
    assert_eq!(ms(g, "low_util"), 1_512 * MIN - 1_512 * MIN * 85 / 100);
    assert_eq!(ms(g, "held"), 1_200 * MIN);
    assert_eq!(ms(g, "interruption"), 38_656 * MIN);
    assert_eq!(ms(g, "unmeasured"), (592 + 578 + 161_280 + 34 + 160) * MIN);
    assert_eq!((ms(g, "setup"), ms(g, "idle"), ms(g, "data_wait")), (0, 0, 0));
    let parts: i64 = ["effective", "low_util", "data_wait", "setup", "idle", "held", "interruption", "unmeasured"]
        .iter()
        .map(|f| ms(g, f))
        .sum();
    assert_eq!(parts, ms(&r["total"]["exact_gpu_ms"], "nominal"));

    // Queueing, by hand above; the bill adds up: billed + held over bill = held + queueing + spare.
    let q = |ty: &str| {
        rec["queueing"].as_array().unwrap().iter().find(|x| x["gpu_type"] == ty).unwrap_or_else(|| panic!("{ty}"))
    };
    assert_eq!((ms(q("H100"), "waiting_gpu_ms"), ms(q("H100"), "queueing_gpu_ms")), (394 * MIN, 394 * MIN));
    assert_eq!((ms(q("H200"), "waiting_gpu_ms"), ms(q("H200"), "queueing_gpu_ms")), (408 * MIN, 408 * MIN));
    assert_eq!(ms(q("T4"), "queueing_gpu_ms"), MIN);
    assert_eq!((ms(q("L4"), "waiting_gpu_ms"), ms(q("L4"), "queueing_gpu_ms")), (20 * MIN, 0));
    let qt = &rec["queueing_total"];
    assert_eq!(ms(qt, "queueing_gpu_ms"), 803 * MIN);
    assert_eq!(
        ms(qt, "billed_gpu_ms") + ms(qt, "over_gpu_ms"),
        ms(qt, "held_gpu_ms") + ms(qt, "queueing_gpu_ms") + ms(qt, "spare_gpu_ms")
    );
    let w = &r["total"]["queue_wait_by_reason"];
    assert_eq!((ms(&w["capacity"], "ms"), ms(&w["capacity"], "jobs")), (40 * MIN, 7));
    assert_eq!(ms(&w["approval"], "ms") + ms(&w["off_peak"], "ms") + ms(&w["readiness"], "ms"), 0);

    // By user: a line's own user tag groups it when it names no job (henry's H100 instance).
    let u = report(&d, "user");
    let x = row(&u["reconciliation"], "henry", "H100");
    assert_eq!(ms(x, "billed_gpu_ms"), 48 * HOUR);
    let _ = std::fs::remove_dir_all(&d);
}
