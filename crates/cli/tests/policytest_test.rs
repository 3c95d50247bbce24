//! `bursar test` through the real binary: the repo's own `policies/` pass; a changed expectation fails
//! with a readable diff; `--filter`, `--format json`, coverage and its threshold behave as documented.

#![expect(clippy::unwrap_used, reason = "test helpers: a failed setup step aborts the test with its error")]

use std::process::Output;

use crate::serve_support::{bursar, repo};
use bursar_testkit::TempDir;

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// A fresh directory, removed when the test ends.
fn temp(name: &str) -> TempDir {
    TempDir::new(&format!("policytest-{name}")).unwrap()
}

/// Copies the TOML policies of the repo named in `files` (and their tests) into a fresh directory.
fn copy_policies(name: &str, files: &[&str]) -> TempDir {
    let d = temp(name);
    for f in files {
        for suffix in [".toml", ".test.toml"] {
            let src = repo().join("policies").join(format!("{f}{suffix}"));
            std::fs::copy(&src, d.join(format!("{f}{suffix}"))).unwrap();
        }
    }
    d
}

/// The example policy files that are plain TOML and whose tests do not involve the WebAssembly
/// policies (trial.test.toml names the WebAssembly ladder beside the TOML trial policy).
const ALL_TOML: [&str; 10] =
    ["approval", "asset-reuse", "efficiency", "fit", "placement", "quota", "readiness", "reclaim", "rules", "tags"];

#[test]
fn the_repos_own_policies_pass_their_tests() {
    let out = bursar(&["test", repo().join("policies").to_str().unwrap()]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("test result: ok."), "{t}");
    assert!(!t.contains("FAIL"), "{t}");
}

#[test]
fn every_example_policy_file_has_a_test_file() {
    for entry in std::fs::read_dir(repo().join("policies")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if let Some(stem) = name.strip_suffix(".toml").filter(|s| !s.ends_with(".test")) {
            assert!(
                repo().join("policies").join(format!("{stem}.test.toml")).is_file(),
                "policies/{name} has no tests"
            );
        }
    }
}

#[test]
fn a_changed_expectation_fails_with_a_readable_diff() {
    let d = copy_policies("diff", &ALL_TOML);
    let ok = bursar(&["test", d.to_str().unwrap()]);
    assert!(ok.status.success(), "{}", text(&ok));

    // Tighten what the quota test expects: speech's second job should now be allowed.
    let path = d.join("quota.test.toml");
    let src = std::fs::read_to_string(&path).unwrap();
    let changed = src.replacen("decision = \"deny\"\njob = \"sp2\"", "decision = \"allow\"\njob = \"sp2\"", 1);
    assert_ne!(src, changed);
    std::fs::write(&path, changed).unwrap();
    let out = bursar(&["test", d.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let t = String::from_utf8_lossy(&out.stdout).into_owned();
    let file = d.join("quota.test.toml").display().to_string();
    assert!(
        t.contains(&format!("FAIL  {file}: speech may not go over its 2,000 monthly GPU-hours    ({file}:6)")),
        "{t}"
    );
    // Expected side, with the line of the expectation; actual side, marked as unexpected.
    assert!(
        t.contains(&format!(
            "    - expected allow job=sp2 policies=[quota/monthly-gpu-hours] gpu_hours=1120 reason~\"project speech would reach 2,240 of its 2,000 GPU-hours for 2026-11\"    ({file}:17)"
        )),
        "{t}"
    );
    assert!(
        t.contains("    + q2/0 deny (admission) job=sp2 project=speech policies=[quota/monthly-gpu-hours] \"project speech would reach 2,240 of its 2,000 GPU-hours for 2026-11\""),
        "{t}"
    );
    assert!(t.contains("    = q1/0 allow (admission) job=sp1"), "{t}");
    assert!(t.contains("test result: FAILED. 35 passed; 1 failed; 0 filtered out"), "{t}");
}

#[test]
fn filter_runs_a_subset_and_json_is_machine_readable() {
    let d = copy_policies("filter", &["quota", "reclaim", "tags"]);
    let out = bursar(&["test", d.to_str().unwrap(), "--filter", "keepalive", "--format", "json"]);
    assert!(out.status.success(), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(v["passed"], 1);
    assert_eq!(v["failed"], 0);
    assert_eq!(v["filtered_out"], 8);
    assert_eq!(v["cases"][0]["name"], "a keepalive calls the idle reclaim off");
    assert_eq!(v["cases"][0]["decisions"][0][0], "matched");
    assert_eq!(v["cases"][0]["decisions"][0][1]["decision"], "allow");
}

#[test]
fn a_broken_test_file_is_reported_with_its_location_and_fails_the_run() {
    let d = copy_policies("broken", &["readiness"]);
    std::fs::write(
        d.join("extra.test.toml"),
        "[[case]]\nname = \"typo\"\nevents = '{\"id\":\"x\",\"time\":\"2026-11-02T09:00:00Z\",\"type\":\"clock.tick\"}'\n[[case.expect]]\ndecison = \"deny\"\n",
    )
    .unwrap();
    let out = bursar(&["test", d.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let t = text(&out);
    let file = d.join("extra.test.toml").display().to_string();
    assert!(t.contains(&format!("error: {file}:5:1: unknown field `decison`")), "{t}");
    // The other file's cases still ran.
    assert!(t.contains("ok    "), "{t}");
}

#[test]
fn a_directory_without_tests_is_an_error() {
    let d = temp("none");
    std::fs::copy(repo().join("policies/quota.toml"), d.join("quota.toml")).unwrap();
    let out = bursar(&["test", d.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("no test files (`*.test.toml`)"), "{}", text(&out));
}
