//! `bursar report --by config --cost-per-unit` end to end on the trials of the table-driven case
//! `tests/cases/cost-per-unit-advice` (two GPU types, trials at 1 and 8 GPUs), with a price table:
//! the real binary, a real audit log written by `bursar eval --audit`, every number computed by hand.

#![expect(clippy::unwrap_used, clippy::panic, reason = "test helpers: a failure stops the test with its message")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// Rates per GPU-hour by type and mode; the flat `[on_demand]` rate is not used by these types.
const PRICES: &str = r#"currency = "CNY"
[on_demand]
per_gpu_hour = 15.0
[gpu_types]
A100 = { on_demand = 12.0, reserved = 7.2, per_task = 10.8 }
H100 = { on_demand = 30.0, reserved = 18.0, per_task = 27.0 }
"#;

fn case() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/cases/cost-per-unit-advice")
}

fn run(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_bursar")).args(args).output().unwrap();
    assert!(out.status.success(), "bursar {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    out
}

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn audit(name: &str) -> (Dir, String, String) {
    let dir = std::env::temp_dir().join(format!("bursar-report-cost-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("a.db").display().to_string();
    let prices = dir.join("prices.toml");
    std::fs::write(&prices, PRICES).unwrap();
    let c = case();
    let (p, e) = (c.join("policies").display().to_string(), c.join("events.jsonl").display().to_string());
    let out = run(&["eval", "--policies", &p, "--events", &e, "--audit", &db]);
    let decisions = String::from_utf8(out.stdout).unwrap();
    // The advice fires on the dearer type at each count, not on the cheaper one.
    let alerted: Vec<&str> = decisions
        .lines()
        .filter(|l| l.contains(r#""decision":"alert""#))
        .map(|l| {
            if l.contains(r#""job_id":"q1""#) {
                "q1"
            } else if l.contains(r#""job_id":"q3""#) {
                "q3"
            } else {
                "?"
            }
        })
        .collect();
    assert_eq!(alerted, ["q1", "q3", "q3"], "{decisions}");
    (Dir(dir), db, prices.display().to_string())
}

fn row<'a>(cfg: &'a Value, ty: &str, gpus: u64) -> &'a Value {
    cfg["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["gpu_type"] == ty && r["gpus"] == gpus)
        .unwrap_or_else(|| panic!("no row {ty} x{gpus} in {cfg}"))
}

fn cost(r: &Value, mode: &str) -> f64 {
    r["cost"].as_array().unwrap().iter().find(|c| c["mode"] == mode).unwrap()["per_1k"].as_f64().unwrap()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12 * b.abs().max(1.0)
}

/// Hand computation. The runs' throughput per GPU (tokens/s):
/// - A100, 1 GPU: a1 samples 800 and 1,000 → 900; a2 progress 660,000 → 1,320,000 tokens over the
///   600 s between its samples → 1,100. Mean 1,000, sd √((100² + 100²) / 1) = 141.42.
/// - A100, 8 GPUs: 6,400 / 8 = 800 twice. H100, 1 GPU: 3,000 twice. H100, 8 GPUs: 13,600 / 8 =
///   1,700 and 15,200 / 8 = 1,900, mean 1,800.
///
/// Cost per 1k tokens = rate / (throughput per GPU × 3600) × 1000:
///
/// | | on demand | reserved | per task |
/// |---|---|---|---|
/// | A100 ×1 | 12 / 3,600 = 0.0033333 | 7.2 / 3,600 = 0.002 | 10.8 / 3,600 = 0.003 |
/// | H100 ×1 | 30 / 10,800 = 0.0027778 | 18 / 10,800 = 0.0016667 | 27 / 10,800 = 0.0025 |
/// | A100 ×8 | 12 / 2,880 = 0.0041667 | 7.2 / 2,880 = 0.0025 | 10.8 / 2,880 = 0.00375 |
/// | H100 ×8 | 30 / 6,480 = 0.0046296 | 18 / 6,480 = 0.0027778 | 27 / 6,480 = 0.0041667 |
///
/// Ranking: at 1 GPU H100 (A100 1.2× dearer), at 8 GPUs A100 (H100 0.0046296 / 0.0041667 = 1.111×).
/// Scaling efficiency at 8 GPUs: A100 800 / 1,000 = 0.8, H100 1,800 / 3,000 = 0.6. The cheapest way to
/// run `llm-7b`: H100 on 1 GPU at 0.0027778 per 1k tokens.
#[test]
fn cost_per_thousand_tokens_ranking_and_scaling_equal_the_hand_computation() {
    let (_dir, db, prices) = audit("json");
    let out =
        run(&["report", "--db", &db, "--by", "config", "--cost-per-unit", "--prices", &prices, "--format", "json"]);
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["by"], "config");
    assert_eq!(r["groups"][0]["key"], "llm-7b");
    let c = &r["cost_per_unit"];
    assert_eq!((c["runs"].as_u64(), c["currency"].as_str()), (Some(8), Some("CNY")));
    let cfg = &c["configs"][0];
    assert_eq!((cfg["config"].as_str(), cfg["unit"].as_str()), (Some("llm-7b"), Some("tokens")));
    let (a1, h1, a8, h8) = (row(cfg, "A100", 1), row(cfg, "H100", 1), row(cfg, "A100", 8), row(cfg, "H100", 8));
    for (row, x, sd) in
        [(a1, 1000.0, 20_000f64.sqrt()), (h1, 3000.0, 0.0), (a8, 800.0, 0.0), (h8, 1800.0, 20_000f64.sqrt())]
    {
        assert!(close(row["throughput_per_gpu"].as_f64().unwrap(), x), "{row}");
        assert!(close(row["stddev_per_gpu"].as_f64().unwrap(), sd), "{row}");
        assert_eq!(row["runs"], 2);
    }
    assert_eq!((a1["min_per_gpu"].as_f64(), a1["max_per_gpu"].as_f64()), (Some(900.0), Some(1100.0)));
    let want = [
        (a1, [12.0 / 3600.0, 0.002, 0.003]),
        (h1, [30.0 / 10800.0, 18.0 / 10800.0, 0.0025]),
        (a8, [12.0 / 2880.0, 0.0025, 0.00375]),
        (h8, [30.0 / 6480.0, 18.0 / 6480.0, 27.0 / 6480.0]),
    ];
    for (row, costs) in want {
        for (mode, v) in ["on_demand", "reserved", "per_task"].into_iter().zip(costs) {
            assert!(close(cost(row, mode), v), "{mode}: {} against {v} in {row}", cost(row, mode));
        }
    }
    assert_eq!([&h1["rank"], &a1["rank"], &a8["rank"], &h8["rank"]], [1, 2, 1, 2]);
    assert!(close(a1["vs_cheapest"].as_f64().unwrap(), 1.2));
    assert!(close(h8["vs_cheapest"].as_f64().unwrap(), (30.0 / 6480.0) / (12.0 / 2880.0)));
    assert!(close(a8["scaling_efficiency"].as_f64().unwrap(), 0.8));
    assert!(close(h8["scaling_efficiency"].as_f64().unwrap(), 0.6));
    assert_eq!(h8["scaling_base_gpus"], 1);
    let best = &cfg["cheapest"];
    assert_eq!((best["gpu_type"].as_str(), best["gpus"].as_u64()), (Some("H100"), Some(1)));
    assert!(close(best["per_1k"].as_f64().unwrap(), 30.0 / 10800.0));
}

#[test]
fn table_csv_and_html_carry_the_section() {
    let (_dir, db, prices) = audit("text");
    let table = run(&["report", "--db", &db, "--by", "config", "--cost-per-unit", "--prices", &prices]);
    let t = String::from_utf8(table.stdout).unwrap();
    assert!(
        t.contains("configuration llm-7b (tokens/s), 8 runs; cheapest: H100 on 1 GPU at 0.00278 per 1k tokens"),
        "{t}"
    );
    let line = t.lines().find(|l| l.trim_start().starts_with("H100") && l.contains("  8  ")).unwrap();
    assert!(line.contains("0.00463") && line.contains("60.0% of 1 GPU") && line.contains("1.11x"), "{line}");

    let csv = run(&["report", "--db", &db, "--cost-per-unit", "--prices", &prices, "--format", "csv"]);
    let csv = String::from_utf8(csv.stdout).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 5, "a header and four rows: {csv}");
    // The report opens on the log's newest month, and its rows say which.
    assert!(lines[1].starts_with("2026-11,llm-7b,tokens,H100,1,2,3000,"), "{}", lines[1]);

    let html = run(&["report", "--db", &db, "--cost-per-unit", "--prices", &prices, "--format", "html"]);
    let h = String::from_utf8(html.stdout).unwrap();
    assert!(h.contains("<h2>Cost per unit of work</h2>") && h.contains("data-chart=\"cost-per-unit\""), "no section");
    assert!(!h.contains("<script"));

    // Without prices: throughput and scaling, no costs and no ranking.
    let bare = run(&["report", "--db", &db, "--cost-per-unit", "--format", "json"]);
    let r: Value = serde_json::from_slice(&bare.stdout).unwrap();
    let c = &r["cost_per_unit"];
    assert_eq!(c["priced"], false);
    let h8 = row(&c["configs"][0], "H100", 8);
    assert!(h8["rank"].is_null() && h8["cost"].as_array().unwrap().is_empty());
    assert!(close(h8["scaling_efficiency"].as_f64().unwrap(), 0.6));
    // And without the flag, no section at all.
    let plain = run(&["report", "--db", &db, "--format", "json"]);
    let r: Value = serde_json::from_slice(&plain.stdout).unwrap();
    assert!(r.get("cost_per_unit").is_none());
}

#[test]
fn a_bad_price_row_names_its_line_and_column() {
    let (dir, db, _) = audit("bad");
    let bad = dir.0.join("bad.toml");
    std::fs::write(&bad, "[on_demand]\nper_gpu_hour = 1.0\n[gpu_types]\nH100 = { on_demand = -3.0 }\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_bursar"))
        .args(["report", "--db", &db, "--cost-per-unit", "--prices", &bad.display().to_string()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8(out.stderr).unwrap();
    assert!(e.contains("bad.toml:4:22: price file: `gpu_types.H100.on_demand` must be a price greater than 0"), "{e}");
}
