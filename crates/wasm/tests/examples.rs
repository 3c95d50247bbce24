//! The example policies under `policies/`, built from source and loaded through their manifests by the
//! real loader, run over event streams that exercise each branch.

use std::sync::Arc;

use crate::common::*;
use bursar_engine::Policy;
use bursar_model::DecisionKind;
use bursar_wasm::{HostConfig, WasmHost};

fn manifest_policy(name: &str, host: &WasmHost) -> Arc<dyn Policy> {
    ensure_built();
    let path = root().join("policies").join(name);
    let mut policies = load_dir(&path, host);
    assert_eq!(policies.len(), 1);
    policies.remove(0)
}

fn ev(n: u32, minute: u32, body: &str) -> String {
    format!(
        r#"{{"id":"e{n}","time":"2026-11-{:02}T{:02}:{:02}:00Z",{body}}}"#,
        2 + minute / 1440,
        (minute / 60) % 24,
        minute % 60
    )
}

fn job(n: u32, minute: u32, id: &str, project: &str, gpus: u32, config: &str) -> String {
    ev(
        n,
        minute,
        &format!(
            r#""type":"job.submitted","job":{{"id":"{id}","project":"{project}","user":"u","gpus":{gpus},"requested_hours":1.0,"config":"{config}"}}"#
        ),
    )
}

fn started(n: u32, minute: u32, id: &str) -> String {
    ev(n, minute, &format!(r#""type":"job.started","job_id":"{id}""#))
}

fn finished(n: u32, minute: u32, id: &str, status: &str) -> String {
    ev(n, minute, &format!(r#""type":"job.finished","job_id":"{id}","status":"{status}""#))
}

fn admissions(policy: Arc<dyn Policy>, lines: &[String]) -> Vec<(String, DecisionKind, String)> {
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    run(vec![policy], &refs)
        .into_iter()
        .filter(|d| d.admission)
        .map(|d| (d.job_id.map(|j| j.to_string()).unwrap_or_default(), d.decision, d.reason))
        .collect()
}

#[test]
fn fair_share_lets_a_project_exceed_its_share_only_while_nobody_waits() {
    let host = WasmHost::new(HostConfig::default()).unwrap();
    let p = manifest_policy("fair-share.toml", &host);
    // Pool 64, nlp weight 2, vision weight 1: with both active nlp's share is 42.7, vision's 21.3.
    let lines = vec![
        job(1, 0, "v1", "vision", 16, "c"),
        started(2, 1, "v1"),
        job(3, 2, "n1", "nlp", 40, "c"),
        started(4, 3, "n1"),
        // vision goes to 32 > 21.3, but nlp has nothing queued: allowed.
        job(5, 4, "v2", "vision", 16, "c"),
        // nlp would reach 48 > 42.7 while vision's v2 (16 GPUs) waits: denied.
        job(6, 5, "n2", "nlp", 8, "c"),
        started(7, 6, "v2"),
        // Nobody waits any more: nlp may exceed its share.
        job(8, 7, "n3", "nlp", 8, "c"),
        // n3 waits now, so vision (at 32 > 21.3) may not grow.
        job(9, 8, "v3", "vision", 1, "c"),
    ];
    let a = admissions(p.clone(), &lines);
    let kinds: Vec<_> = a.iter().map(|(j, k, _)| (j.as_str(), *k)).collect();
    assert_eq!(
        kinds,
        vec![
            ("v1", DecisionKind::Allow),
            ("n1", DecisionKind::Allow),
            ("v2", DecisionKind::Allow),
            ("n2", DecisionKind::Deny),
            ("n3", DecisionKind::Allow),
            ("v3", DecisionKind::Deny),
        ]
    );
    assert_eq!(
        a[3].2,
        "project nlp would hold 48 GPUs, above its fair share of 42.7 of 64 (weight 2 of 3), while vision has 16 GPUs queued"
    );
    assert_eq!(
        a[5].2,
        "project vision would hold 33 GPUs, above its fair share of 21.3 of 64 (weight 1 of 3), while nlp has 8 GPUs queued"
    );
    assert_eq!(p.failures(), 0);
}

#[test]
fn trial_ladder_weighs_the_history_of_the_configuration() {
    let host = WasmHost::new(HostConfig::default()).unwrap();
    let p = manifest_policy("trial-before-scale.toml", &host);
    let lines = vec![
        // No history: a 32-GPU run is denied.
        job(1, 0, "big0", "nlp", 32, "llm-a"),
        // A 2-GPU trial succeeds.
        job(2, 1, "t2", "nlp", 2, "llm-a"),
        started(3, 2, "t2"),
        finished(4, 60, "t2", "succeeded"),
        // 64 GPUs is more than 8x the 2-GPU success: approval.
        job(5, 61, "big1", "nlp", 64, "llm-a"),
        // 16 GPUs is not above min_gpus; it succeeds.
        job(6, 62, "mid", "nlp", 16, "llm-a"),
        started(7, 63, "mid"),
        finished(8, 120, "mid", "succeeded"),
        // 24 GPUs is within 8x of 16: allowed.
        job(9, 121, "ok", "nlp", 24, "llm-a"),
        // Another 16-GPU run fails.
        job(10, 122, "mid2", "nlp", 16, "llm-a"),
        started(11, 123, "mid2"),
        finished(12, 180, "mid2", "failed"),
        // The configuration failed after its last success: approval.
        job(13, 181, "big2", "nlp", 17, "llm-a"),
        // Another configuration has no history at all.
        job(14, 182, "other", "nlp", 32, "llm-b"),
        // Fifteen days later the success is out of the window.
        job(15, 60 * 24 * 15, "late", "nlp", 32, "llm-a"),
    ];
    let a = admissions(p.clone(), &lines);
    let got: Vec<_> = a.iter().map(|(j, k, _)| (j.as_str(), *k)).collect();
    assert_eq!(
        got,
        vec![
            ("big0", DecisionKind::Deny),
            ("t2", DecisionKind::Allow),
            ("big1", DecisionKind::RequireApproval),
            ("mid", DecisionKind::Allow),
            ("ok", DecisionKind::Allow),
            ("mid2", DecisionKind::Allow),
            ("big2", DecisionKind::RequireApproval),
            ("other", DecisionKind::Deny),
            // Nobody answered the approval requests within 24 hours: they expire as denials.
            ("big1", DecisionKind::Deny),
            ("big2", DecisionKind::Deny),
            ("late", DecisionKind::Deny),
        ]
    );
    assert_eq!(
        a[0].2,
        "job big0 asks for 32 GPUs but configuration llm-a has no successful run in the last 14 days; run a trial with at most 16 GPUs first"
    );
    assert_eq!(
        a[2].2,
        "job big1 scales configuration llm-a from 2 to 64 GPUs, more than 8x its largest successful run; a run with at least 8 GPUs would not need approval"
    );
    assert_eq!(a[6].2, "job big2 asks for 17 GPUs but configuration llm-a failed after its last successful run");
}

#[test]
fn a_config_the_guest_rejects_fails_the_load_with_its_message() {
    ensure_built();
    let host = WasmHost::new(HostConfig::default()).unwrap();
    let bytes = std::fs::read(root().join("policies/wasm/fair-share.wasm")).unwrap();
    let d = decl("wasm/fs", &["job.submitted"], bursar_lang::OnError::Deny, Default::default(), "{}");
    let e = host.load_bytes(&d, &bytes).unwrap_err();
    assert!(e.contains("`init` rejected the config: config `pool_gpus` must be a positive number of GPUs"), "{e}");
}
