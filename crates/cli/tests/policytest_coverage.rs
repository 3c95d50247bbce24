//! `bursar test --coverage` through the real binary: a rule added without a test is named as untested,
//! and `--min-coverage` fails the run below the threshold.

#![expect(clippy::unwrap_used, reason = "test helpers: a failed setup step aborts the test with its error")]

use std::path::Path;
use std::process::Output;

use crate::serve_support::bursar;
use bursar_testkit::TempDir;

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// A fresh directory (removed when the test ends) holding the repo's policies named below.
fn setup(name: &str) -> TempDir {
    let d = TempDir::new(&format!("policytest-cov-{name}")).unwrap();
    let policies = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies");
    for f in ["rules.toml", "rules.test.toml", "approval.toml", "trial.toml", "placement.toml", "reclaim.toml"] {
        std::fs::copy(policies.join(f), d.join(f)).unwrap();
    }
    d
}

const NEW_RULE: &str = r#"
[[policy]]
id = "rules/no-friday-pretrain"
description = "No pre-training submitted on Fridays."
kind = "rule"
on = ["job.submitted"]
when = "job.stage == 'pretrain' && time.weekday == 5"
decision = "deny"
reason = "no pre-training on Fridays"
"#;

#[test]
fn a_rule_added_without_a_test_is_named_as_untested() {
    let d = setup("named");
    let before = bursar(&["test", d.to_str().unwrap(), "--coverage"]);
    let t = text(&before);
    assert!(before.status.success(), "{t}");
    assert!(t.contains("  rules/eval-size"), "{t}");
    assert!(!t.contains("rules/no-friday-pretrain"), "{t}");

    let mut rules = std::fs::read_to_string(d.join("rules.toml")).unwrap();
    rules.push_str(NEW_RULE);
    std::fs::write(d.join("rules.toml"), rules).unwrap();
    let after = bursar(&["test", d.to_str().unwrap(), "--coverage"]);
    let t = text(&after);
    assert!(after.status.success(), "coverage alone never fails the run:\n{t}");
    assert!(t.contains("  rules/no-friday-pretrain: condition holds\n"), "{t}");
    assert!(t.contains("untested branches:\n"), "{t}");
}

#[test]
fn min_coverage_fails_below_the_threshold_and_json_reports_the_branches() {
    let d = setup("min");
    let out = bursar(&["test", d.to_str().unwrap(), "--min-coverage", "100"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("is below the required 100.0% (--min-coverage)"), "{}", text(&out));

    let out = bursar(&["test", d.to_str().unwrap(), "--min-coverage", "1", "--format", "json"]);
    assert!(out.status.success(), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], true);
    let policies = v["coverage"]["policies"].as_array().unwrap();
    let eval = policies.iter().find(|p| p["id"] == "rules/eval-size").unwrap();
    assert_eq!(
        eval["branches"].as_array().unwrap().iter().filter(|b| b["covered"] == true).count(),
        eval["branches"].as_array().unwrap().len()
    );
    assert!(v["coverage"]["percent"].as_f64().unwrap() < 100.0);
}
