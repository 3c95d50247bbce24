//! Differential tests: every case under `tests/cases-wasm/<name>/` holds a TOML policy set (`toml/`),
//! its WebAssembly twin (`wasm/`) and an event stream (`events.jsonl`). Both sets run over the stream
//! through the real engine and must make identical decisions: same kind, job, policies and reason, in
//! the same order, whether the host reuses instances or starts a fresh one per call.

use std::path::Path;

use crate::common::*;
use bursar_wasm::{HostConfig, Strategy, WasmHost};

fn decisions(dir: &Path, host: &WasmHost, events: &str) -> Vec<(String, Option<String>, Vec<String>, String)> {
    let policies = load_dir(dir, host);
    let lines: Vec<&str> = events.lines().filter(|l| !l.trim().is_empty()).collect();
    run(policies, &lines)
        .into_iter()
        .map(|d| {
            (
                d.decision.as_str().to_owned(),
                d.job_id.map(|j| j.to_string()),
                d.policies.iter().map(|p| p.to_string()).collect(),
                d.reason,
            )
        })
        .collect()
}

#[test]
fn every_wasm_twin_decides_like_its_toml_policy() {
    ensure_built();
    let host = WasmHost::new(HostConfig::default()).unwrap();
    let fresh = WasmHost::new(HostConfig { strategy: Strategy::Fresh, ..HostConfig::default() }).unwrap();
    let cases = root().join("tests/cases-wasm");
    let mut ran = 0;
    for entry in std::fs::read_dir(&cases).unwrap() {
        let case = entry.unwrap().path();
        let events = std::fs::read_to_string(case.join("events.jsonl")).unwrap();
        let toml = decisions(&case.join("toml"), &host, &events);
        let wasm = decisions(&case.join("wasm"), &host, &events);
        // The instance strategy must not change a decision either.
        let wasm_fresh = decisions(&case.join("wasm"), &fresh, &events);
        assert_eq!(wasm, wasm_fresh, "case {}: reused and fresh instances disagree", case.display());
        assert!(!toml.is_empty(), "case {} made no decisions", case.display());
        assert_eq!(toml.len(), wasm.len(), "case {}: different number of decisions", case.display());
        for (i, (t, w)) in toml.iter().zip(&wasm).enumerate() {
            assert_eq!(t, w, "case {}: decision {i} differs (left TOML, right WebAssembly)", case.display());
        }
        // The case must exercise both outcomes, or it proves little.
        assert!(toml.iter().any(|d| d.0 == "deny") && toml.iter().any(|d| d.0 == "allow"));
        ran += 1;
    }
    assert!(ran >= 1);
}

#[test]
fn a_manifest_can_ask_for_fresh_instances_and_decides_the_same() {
    ensure_built();
    let host = WasmHost::new(HostConfig::default()).unwrap();
    let case = root().join("tests/cases-wasm/readiness");
    let events = std::fs::read_to_string(case.join("events.jsonl")).unwrap();
    let reused = decisions(&case.join("wasm"), &host, &events);

    // The case's manifest with `strategy = "fresh"`, in a directory of its own.
    let dir = std::env::temp_dir().join(format!("bursar-wasm-fresh-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let component = root().join("policies/wasm/readiness.wasm");
    let manifest = std::fs::read_to_string(case.join("wasm/readiness.toml"))
        .unwrap()
        .replace("../../../../policies/wasm/readiness.wasm", &component.display().to_string())
        .replace("[policy.config]", "[policy.limits]\nstrategy = \"fresh\"\n\n[policy.config]");
    std::fs::write(dir.join("readiness.toml"), &manifest).unwrap();

    let decl = bursar_lang::compile_str("readiness.toml", &manifest, &dir).unwrap().wasm.remove(0);
    assert_eq!(decl.limits.strategy, Some(bursar_lang::WasmStrategy::Fresh));
    assert_eq!(host.load(&decl).unwrap().strategy(), Strategy::Fresh, "the manifest's strategy was ignored");
    let fresh = decisions(&dir, &host, &events);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(reused, fresh, "fresh instances decided differently from reused ones");

    // A host built for fresh instances keeps them whatever a manifest says.
    let strict = WasmHost::new(HostConfig { strategy: Strategy::Fresh, ..HostConfig::default() }).unwrap();
    let mut reuse = decl.clone();
    reuse.limits.strategy = Some(bursar_lang::WasmStrategy::Reuse);
    assert_eq!(strict.strategy_for(&reuse), Strategy::Fresh);
    assert_eq!(host.strategy_for(&reuse), Strategy::Reuse);
}
