//! Billing modes for a real pool (issue 52, item 4), end to end, every figure by hand: a small pool of
//! two GPU types, one reserved block, `bursar report --period 2026-11-02 --prices FILE --format json`.
//!
//! Prices: H100 4/GPU-h on demand, 3.5/GPU-h + 2 a job per task, 1,500 a reserved GPU-month; A100 2 on
//! demand and nothing else. One day of November is 1/30 of a month: a reserved H100 costs 50 for the
//! period, and use above the block is paid at 4.
//!
//! Jobs on 2026-11-02 (no policies): `a1` (project a) 4 H100 00:00-20:00 = 80 GPU-h; `b1` (b) 4 H100
//! 00:00-12:00 = 48; `c1` (c) 4 H100 12:00-24:00 = 48; `a2` (a) 2 A100 00:00-10:00 = 20.
//!
//! H100 pool curve: 8 GPUs for 20 hours, 4 for the last 4: 176 GPU-h. On demand 704; per task
//! 3 × 2 + 3.5 × 176 = 622. Pool block of B GPUs: 50 B + 4 × Σ max(0, u − B): B = 8 costs 400 (no
//! overage), B = 7 350 + 80 = 430, B = 4 200 + 320 = 520: the best is 8 GPUs, 400. Its unused
//! reserved GPU-hours: 8 × 24 − 176 = 16, costing 400 × 16 / 192 = 33.33.
//! Each project alone: a 80 GPU-h flat on 4 GPUs (a 4-GPU block: 200; per task 282); b and c 48 each
//! (half a day): on demand 192, per task 2 + 168 = 170, a block never below 192: 170 each. Per project
//! best 200 + 170 + 170 = 540 — the old comparison. The mix (steadiest first: a, then b and c): a
//! alone on a block 200 + 340 = 540; a and b share 392 (B = 4) + 170 = 562; all three 400: the pool
//! block. Recommended: the pool block, 400, saving 304 against on demand and 140 against per project.
//! A100: on demand 40, nothing else priced. In all: 440 against 744 on demand and 580 per project.

use std::process::Command;

use serde_json::Value;

const PRICES: &str = r#"currency = "USD"
[on_demand]
per_gpu_hour = 1.0
[per_task]
per_task = 2.0
per_gpu_hour = 0.9
[gpu_types]
H100 = { on_demand = 4.0, per_task = 3.5, per_gpu_month = 1_500.0 }
A100 = { on_demand = 2.0 }
"#;

fn job(id: &str, project: &str, ty: &str, gpus: u32, start: &str, end: &str) -> String {
    format!(
        "{{\"id\":\"s-{id}\",\"time\":\"{start}\",\"type\":\"job.submitted\",\"job\":{{\"id\":\"{id}\",\"project\":\"{project}\",\"user\":\"u\",\"gpus\":{gpus},\"gpu_type\":\"{ty}\",\"requested_hours\":24}}}}\n\
         {{\"id\":\"t-{id}\",\"time\":\"{start}\",\"type\":\"job.started\",\"job_id\":\"{id}\"}}\n\
         {{\"id\":\"f-{id}\",\"time\":\"{end}\",\"type\":\"job.finished\",\"job_id\":\"{id}\",\"status\":\"succeeded\"}}\n"
    )
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

#[test]
fn the_pool_priced_per_gpu_type_with_one_reserved_block() {
    let dir = std::env::temp_dir().join(format!("bursar-report-pool-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("policies")).unwrap();
    std::fs::write(dir.join("prices.toml"), PRICES).unwrap();
    let d = "2026-11-02T";
    let mut events = String::new();
    events += &job("a2", "a", "A100", 2, &format!("{d}00:00:00Z"), &format!("{d}10:00:00Z"));
    events += &job("a1", "a", "H100", 4, &format!("{d}00:00:00Z"), &format!("{d}20:00:00Z"));
    events += &job("b1", "b", "H100", 4, &format!("{d}00:00:00Z"), &format!("{d}12:00:00Z"));
    events += &job("c1", "c", "H100", 4, &format!("{d}12:00:00Z"), "2026-11-03T00:00:00Z");
    // Time order for the engine.
    let mut lines: Vec<&str> = events.lines().collect();
    lines.sort_by_key(|l| l.split("\"time\":\"").nth(1).map(|t| t[..20].to_owned()));
    crate::serve_support::eval_into(&dir, (lines.join("\n") + "\n").as_bytes());
    let bin = env!("CARGO_BIN_EXE_bursar");

    let out = Command::new(bin)
        .args(["report", "--db"])
        .arg(dir.join("r.db"))
        .args(["--period", "2026-11-02", "--format", "json", "--prices"])
        .arg(dir.join("prices.toml"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = &r["pool_billing"];
    assert!(close(p["months"].as_f64().unwrap(), 1.0 / 30.0), "{p}");
    assert_eq!(p["hours"], 24);
    let pool = |k: &str| p["pools"].as_array().unwrap().iter().find(|x| x["pool"] == k).unwrap();
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or_else(|| panic!("{k} in {v}"));

    let h = pool("H100");
    assert_eq!(h["source"], "type");
    assert!(close(f(h, "gpu_hours"), 176.0) && close(f(h, "peak_gpus"), 8.0), "{h}");
    assert!(close(f(h, "on_demand"), 704.0), "{h}");
    assert!(close(f(h, "per_task"), 622.0), "{h}");
    assert_eq!(h["block_gpus"], 8);
    assert!(close(f(h, "block_cost"), 400.0), "{h}");
    assert!(close(f(h, "unused_gpu_hours"), 16.0), "{h}");
    assert!(close(f(h, "unused_cost"), 400.0 * 16.0 / 192.0), "{h}");
    assert!(close(f(h, "per_project_best"), 540.0), "{h}");
    assert!(close(f(h, "mix_cost"), 400.0) && h["mix_block_gpus"] == 8, "{h}");
    assert_eq!(h["recommended"], "pool_block");
    let order: Vec<&str> = h["projects"].as_array().unwrap().iter().map(|x| x["project"].as_str().unwrap()).collect();
    assert_eq!(order, ["a", "b", "c"], "steadiest first");

    let a = pool("A100");
    assert!(close(f(a, "on_demand"), 40.0) && a["per_task"].is_null() && a["block_gpus"].is_null(), "{a}");
    assert_eq!(a["recommended"], "on_demand");

    assert!(close(f(p, "total_recommended"), 440.0), "{p}");
    assert!(close(f(p, "total_on_demand"), 744.0), "{p}");
    assert!(close(f(p, "saving_vs_on_demand"), 304.0), "{p}");
    assert!(close(f(p, "saving_vs_per_project"), 140.0), "{p}");
    let rec = p["recommendation"][0].as_str().unwrap();
    assert!(rec.starts_with("H100: reserve 8 GPUs for the pool"), "{rec}");
    assert!(p["assumptions"].as_array().unwrap().len() >= 5, "{p}");
    let _ = std::fs::remove_dir_all(&dir);
}
