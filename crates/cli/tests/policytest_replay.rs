//! `bursar replay` through the real binary over the sample stream (`examples/events.jsonl`): a tightened
//! quota reports the extra denials and their GPU-hours, the output is byte-identical on a second run,
//! and an audit log written by `bursar eval --audit` can be the baseline.

#![expect(clippy::unwrap_used, reason = "test helpers: a failed setup step aborts the test with its error")]

use std::path::PathBuf;
use std::process::Output;

use crate::serve_support::{bursar, repo};
use bursar_testkit::TempDir;

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// `old/` holds the repo's TOML policies (not the WebAssembly manifests); `new/` the same with the
/// speech project's monthly quota cut from 2,000 to 1,000 GPU-hours.
fn setup(name: &str) -> (TempDir, PathBuf, PathBuf) {
    let d = TempDir::new(&format!("policytest-replay-{name}")).unwrap();
    let (old, new) = (d.join("old"), d.join("new"));
    std::fs::create_dir_all(&old).unwrap();
    std::fs::create_dir_all(&new).unwrap();
    for entry in std::fs::read_dir(repo().join("policies")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".toml") || name.ends_with(".test.toml") {
            continue;
        }
        let src = std::fs::read_to_string(&path).unwrap();
        if src.contains("kind = \"wasm\"") {
            continue;
        }
        std::fs::write(old.join(&name), &src).unwrap();
        let tightened = src.replace("speech = 2_000", "speech = 1_000");
        if name == "quota.toml" {
            assert_ne!(tightened, src, "the sample quota policy changed; update this test");
        }
        std::fs::write(new.join(&name), tightened).unwrap();
    }
    (d, old, new)
}

#[test]
fn a_tightened_quota_reports_extra_denials_and_gpu_hours_and_is_deterministic() {
    let (_d, old, new) = setup("events");
    let events = repo().join("examples/events.jsonl");
    let args = [
        "replay",
        "--policies",
        new.to_str().unwrap(),
        "--baseline",
        old.to_str().unwrap(),
        "--events",
        events.to_str().unwrap(),
    ];
    let first = bursar(&args);
    assert!(first.status.success(), "{}", text(&first));
    let t = String::from_utf8_lossy(&first.stdout).into_owned();
    // speech's j13 (16 GPUs x 8 h = 128 GPU-hours... see the stream) is now over 1,000 GPU-hours.
    assert!(t.contains("\nadmission changes\n  allow -> deny "), "{t}");
    assert!(t.contains("quota/monthly-gpu-hours: deny"), "{t}");
    assert!(t.contains("speech would reach"), "{t}");
    assert!(t.contains("of its 1,000 GPU-hours for 2026-11"), "{t}");

    let second = bursar(&args);
    assert_eq!(first.stdout, second.stdout, "replay must be byte-identical on the same inputs");

    let json = bursar(&[&args[..], &["--format", "json"]].concat());
    assert!(json.status.success(), "{}", text(&json));
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let deny = &v["decisions"]["deny"];
    let extra = deny["candidate"].as_u64().unwrap() - deny["baseline"].as_u64().unwrap();
    assert!(extra >= 1, "{v}");
    let hours = &v["gpu_hours"]["deny"];
    let extra_hours = hours["candidate"].as_f64().unwrap() - hours["baseline"].as_f64().unwrap();
    let (jobs, moved_hours) =
        (&v["admission_changes"]["allow -> deny"][0], &v["admission_changes"]["allow -> deny"][1]);
    assert_eq!(jobs.as_u64().unwrap(), extra, "{v}");
    assert!((moved_hours.as_f64().unwrap() - extra_hours).abs() < 1e-6, "{v}");
    assert!(v["changes"].as_array().unwrap().iter().any(|c| c["project"] == "speech"
        && c["baseline"]["decision"] == "allow"
        && c["candidate"]["decision"] == "deny"));
    // The sample's shadow rule is reported apart.
    assert_eq!(v["shadow"]["candidate"]["rules/weekend-big-jobs"]["require_approval"]["decisions"], 1);
}

#[test]
fn the_audit_log_is_the_baseline_when_no_baseline_is_given() {
    let (d, old, new) = setup("audit");
    let db = d.join("audit.db");
    let events = repo().join("examples/events.jsonl");
    let eval = bursar(&[
        "eval",
        "--policies",
        old.to_str().unwrap(),
        "--events",
        events.to_str().unwrap(),
        "--audit",
        db.to_str().unwrap(),
    ]);
    assert!(eval.status.success(), "{}", text(&eval));

    // The same policies against what they decided: nothing changes.
    let same = bursar(&["replay", "--policies", old.to_str().unwrap(), "--audit", db.to_str().unwrap()]);
    let t = text(&same);
    assert!(same.status.success(), "{t}");
    assert!(t.contains(" 0 changed (0 different, 0 added, 0 removed)"), "{t}");

    let changed =
        bursar(&["replay", "--policies", new.to_str().unwrap(), "--audit", db.to_str().unwrap(), "--format", "json"]);
    assert!(changed.status.success(), "{}", text(&changed));
    let v: serde_json::Value = serde_json::from_slice(&changed.stdout).unwrap();
    assert_eq!(v["baseline"], "the decisions recorded in the audit log");
    assert!(v["admission_changes"]["allow -> deny"][0].as_u64().unwrap() >= 1, "{v}");

    // --since skips earlier history.
    let later = bursar(&[
        "replay",
        "--policies",
        old.to_str().unwrap(),
        "--audit",
        db.to_str().unwrap(),
        "--since",
        "2026-11-05T00:00:00Z",
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&later.stdout).unwrap();
    assert!(v["events"].as_u64().unwrap() < 10, "{v}");
}

#[test]
fn an_events_file_needs_a_baseline() {
    let (_d, _old, new) = setup("nobase");
    let events = repo().join("examples/events.jsonl");
    let out = bursar(&["replay", "--policies", new.to_str().unwrap(), "--events", events.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("help: add `--baseline OLD_POLICY_DIR`"), "{}", text(&out));
}
