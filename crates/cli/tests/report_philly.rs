//! `bursar import philly … | bursar eval --audit r.db` then `bursar report --db r.db --by project` on the
//! real Philly excerpt (`tests/data/philly`): every virtual cluster gets a row, and the split adds up.
//! The expected nominal and failure GPU-hours are computed here straight from the trace's JSON,
//! independently of the importer and of the report.

#![expect(clippy::unwrap_used, reason = "test helpers: a failed setup step aborts the test with its error")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use bursar_model::Timestamp;
use bursar_testkit::TempDir;
use serde_json::Value;

fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data").join(rel)
}

/// A fresh directory with an empty `policies/`, removed when the test ends.
fn tmp(name: &str) -> TempDir {
    let dir = TempDir::new(&format!("report-philly-{name}")).unwrap();
    std::fs::create_dir_all(dir.join("policies")).unwrap();
    dir
}

/// `bursar import philly [extra…] | bursar eval --policies dir/policies --audit dir/r.db`; returns
/// the decisions eval printed.
fn import_and_eval(dir: &Path, extra: &[&str]) -> Vec<Value> {
    let bin = env!("CARGO_BIN_EXE_bursar");
    let trace = data("philly/sampled_jobs.json");
    let mut import = Command::new(bin)
        .args(["import", "philly", trace.to_str().unwrap()])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let eval = Command::new(bin)
        .args(["eval", "--policies", dir.join("policies").to_str().unwrap(), "--events", "-"])
        .args(["--audit", dir.join("r.db").to_str().unwrap(), "--durability", "fast"])
        .stdin(import.stdout.take().unwrap())
        .output()
        .unwrap();
    assert!(import.wait().unwrap().success());
    assert!(eval.status.success(), "eval failed: {}", String::from_utf8_lossy(&eval.stderr));
    String::from_utf8(eval.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// The whole trace excerpt (the report opens on the newest month; these checks cover every month).
fn report(dir: &Path) -> Value {
    serde_json::from_str(&report_as(dir, &["--period", "all", "--format", "json"])).unwrap()
}

/// `bursar report --db dir/r.db --by project ARGS…`, as text.
fn report_as(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_bursar"))
        .args(["report", "--db", dir.join("r.db").to_str().unwrap(), "--by", "project"])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn exact(g: &Value) -> [i64; 6] {
    let s = &g["exact_gpu_ms"];
    let v = |k: &str| s[k].as_i64().unwrap();
    [v("nominal"), v("productive"), v("idle"), v("failure"), v("held"), v("unmeasured")]
}

fn check_adds_up(r: &Value) {
    let mut sum = [0i64; 6];
    for g in r["groups"].as_array().unwrap() {
        let [n, p, i, f, h, u] = exact(g);
        assert_eq!(p + i + f + h + u, n, "project {}", g["key"]);
        for (a, b) in sum.iter_mut().zip(exact(g)) {
            *a += b;
        }
    }
    let [n, p, i, f, h, u] = exact(&r["total"]);
    assert_eq!(p + i + f + h + u, n, "total");
    assert_eq!(sum, exact(&r["total"]), "the total is the sum of the projects");
}

fn time(rec: &Value, key: &str) -> Option<i64> {
    let s = rec[key].as_str().filter(|s| !s.is_empty() && *s != "None")?;
    Some(Timestamp::parse(&format!("{}Z", s.replace(' ', "T"))).unwrap().millis())
}

/// Per virtual cluster: (GPU-ms from start to end, GPU-ms of failed jobs), from the raw trace.
fn expected() -> BTreeMap<String, (i64, i64)> {
    expected_of(|_| true)
}

/// [`expected`] over the trace's jobs whose id passes `keep`.
fn expected_of(keep: impl Fn(&str) -> bool) -> BTreeMap<String, (i64, i64)> {
    let text = std::fs::read_to_string(data("philly/sampled_jobs.json")).unwrap();
    let records: Vec<Value> = serde_json::from_str(&text).unwrap();
    let mut out = BTreeMap::new();
    for rec in records.iter().filter(|r| keep(r["jobid"].as_str().unwrap())) {
        let vc = rec["vc"].as_str().unwrap().to_owned();
        let gpus: i64 =
            rec["detail"].as_array().unwrap().iter().map(|m| m["gpus"].as_array().unwrap().len() as i64).sum();
        let e: &mut (i64, i64) = out.entry(vc).or_default();
        if let (Some(s), Some(t)) = (time(rec, "start_time"), time(rec, "end_time")) {
            e.0 += gpus * (t - s);
            if rec["status"] == "Failed" {
                e.1 += gpus * (t - s);
            }
        }
    }
    out
}

#[test]
fn every_virtual_cluster_is_split_and_the_split_adds_up() {
    // No reclaim policy: release is the trace's end, so nominal must equal the trace exactly.
    let dir = tmp("plain");
    std::fs::write(
        dir.join("policies/q.toml"),
        "[[policy]]\nid = \"quota/big\"\ndescription = \"A budget nobody reaches.\"\nkind = \"quota\"\ngpu_hours = 100_000_000\n",
    )
    .unwrap();
    import_and_eval(&dir, &[]);
    let r = report(&dir);
    check_adds_up(&r);
    let want = expected();
    let groups: BTreeMap<String, &Value> =
        r["groups"].as_array().unwrap().iter().map(|g| (g["key"].as_str().unwrap().to_owned(), g)).collect();
    assert_eq!(groups.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>(), "one row per virtual cluster");
    for (vc, (nominal, failure)) in &want {
        let [n, p, i, f, h, u] = exact(groups[vc]);
        assert_eq!(n, *nominal, "{vc}: nominal GPU-ms from start to end");
        assert_eq!(f, *failure, "{vc}: GPU-ms of failed jobs");
        // No utilisation samples: nothing is known productive, idle or held; the rest is not measured.
        assert_eq!((p, i, h, u), (0, 0, 0, n - f), "{vc}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn with_utilisation_samples_and_an_idle_rule_the_split_still_adds_up() {
    let dir = tmp("util");
    std::fs::write(
        dir.join("policies/r.toml"),
        "[[policy]]\nid = \"reclaim/idle\"\ndescription = \"Idle GPUs go back.\"\nkind = \"reclaim\"\n[policy.idle]\nbelow = 0.05\nwindow = \"12h\"\ngrace = \"1h\"\n",
    )
    .unwrap();
    let util = data("alibaba-genai-2026/pod_gpu_duty_cycle_excerpt.csv");
    import_and_eval(&dir, &["--util", util.to_str().unwrap(), "--sample-every", "12h"]);
    let r = report(&dir);
    check_adds_up(&r);
    let want = expected();
    assert_eq!(r["groups"].as_array().unwrap().len(), want.len(), "one row per virtual cluster");
    let [n, _, idle, _, held, _] = exact(&r["total"]);
    assert!(idle > 0 && held > 0, "samples under 5% make idle and held hours");
    // Reclaims only ever shorten a job: nominal never exceeds the trace.
    let trace_total: i64 = want.values().map(|v| v.0).sum();
    assert!(n <= trace_total, "{n} > {trace_total}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_burndown_shows_the_budgets_the_loaded_policies_define() {
    // The repository's quota policies (every project 10,000 GPU-hours a month, nlp/vision/speech
    // their own), one project held to 5,000 by a second quota that selects it, and a dry-run quota
    // that would hold everyone to 1 GPU-hour.
    let dir = tmp("budgets");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies");
    std::fs::copy(repo.join("quota.toml"), dir.join("policies/quota.toml")).unwrap();
    // Where the team budget's `team` comes from (a tag-scoped quota needs its source).
    std::fs::copy(repo.join("tags.toml"), dir.join("policies/tags.toml")).unwrap();
    std::fs::write(
        dir.join("policies/more.toml"),
        r#"[[policy]]
id = "quota/ee9e8c"
description = "The busiest team is held to half."
kind = "quota"
gpu_hours = 5_000
[policy.select]
projects = ["ee9e8c"]

[[policy]]
id = "quota/tried-out"
description = "A budget tried out in dry run."
kind = "quota"
mode = "dry_run"
gpu_hours = 1
"#,
    )
    .unwrap();
    let decisions = import_and_eval(&dir, &[]);
    let r: Value = serde_json::from_str(&report_as(&dir, &["--period", "2017-10", "--format", "json"])).unwrap();
    let budgets: BTreeMap<&str, Option<f64>> = r["burndown"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["project"].as_str().unwrap(), b["budget_gpu_hours"].as_f64()))
        .collect();
    assert!(budgets.len() >= 10, "a burn-down line per project with use in 2017-10: {budgets:?}");
    for (project, budget) in &budgets {
        let want = if *project == "ee9e8c" { 5_000.0 } else { 10_000.0 };
        assert_eq!(*budget, Some(want), "{project}: the lowest enforced monthly quota that applies to it");
    }
    let html = report_as(&dir, &["--period", "2017-10", "--format", "html"]);
    assert!(!html.contains("no monthly budget"), "every project has a budget line");
    assert!(html.contains("ee9e8c: budget left of 5.0k GPU-h"), "the selected project's own budget");
    assert!(html.contains("budget left of 10k GPU-h"), "the default budget of the others");

    // The hours are those of the jobs the engine admitted: a denied job never held GPUs.
    let admitted: std::collections::BTreeSet<&str> = decisions
        .iter()
        .filter(|d| d["admission"] == true && d["decision"] == "allow")
        .map(|d| d["job_id"].as_str().unwrap())
        .collect();
    let denied = decisions.iter().filter(|d| d["admission"] == true && d["decision"] == "deny").count();
    assert!(denied > 0 && !admitted.is_empty(), "the monthly quota admits some jobs and denies others");
    let all = report(&dir);
    check_adds_up(&all);
    let want = expected_of(|id| admitted.contains(id));
    for g in all["groups"].as_array().unwrap() {
        let vc = g["key"].as_str().unwrap();
        let [n, _, _, f, _, _] = exact(g);
        assert_eq!(
            (n, f),
            want.get(vc).copied().unwrap_or_default(),
            "{vc}: nominal and failure of admitted jobs only"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
