//! A verdict's `gpu-hours` (WIT `verdict.gpu-hours`) reaches the decision it becomes: an alert carries
//! it; an admission keeps the GPU-hours requested whatever the guest says.

#![expect(clippy::unwrap_used, reason = "test helpers: a failed setup step aborts the test with its error")]

use crate::common::*;
use bursar_lang::{OnError, WasmLimits};
use bursar_model::DecisionKind;
use bursar_wasm::{HostConfig, WasmHost};

/// `evaluate` returns `ok([verdict { kind: <case>, reason: "no from wat", gpu-hours: some(12.5) }])`.
fn answering_with_hours(case: u8) -> Vec<u8> {
    guest_with(
        &format!(
            r#"(i32.store8 (i32.const 256) (i32.const {case}))
    (i32.store (i32.const 312) (i32.const 512))
    (i32.store (i32.const 316) (i32.const 11))
    (i32.store8 (i32.const 320) (i32.const 1))
    (f64.store (i32.const 328) (f64.const 12.5))
    (i32.store8 (i32.const 32) (i32.const 0))
    (i32.store (i32.const 36) (i32.const 256))
    (i32.store (i32.const 40) (i32.const 1))
    (i32.const 32)"#
        ),
        r#"(data (i32.const 512) "no from wat")"#,
    )
}

fn load(host: &WasmHost, id: &str, bytes: &[u8]) -> std::sync::Arc<bursar_wasm::WasmPolicy> {
    let limits = WasmLimits { deadline_ms: Some(60_000), ..WasmLimits::default() };
    host.load_bytes(&decl(id, &["job.submitted"], OnError::Allow, limits, "{}"), bytes).unwrap()
}

#[test]
fn an_alert_carries_the_gpu_hours_its_verdict_gives() {
    let host = WasmHost::new(HostConfig::default()).unwrap();
    let alert = load(&host, "wat/alert", &answering_with_hours(5));
    let d = run(vec![alert], &[&submit(1, "j1", "nlp", 4)]);
    let alert = d.iter().find(|d| d.decision == DecisionKind::Alert).unwrap();
    assert_eq!(alert.gpu_hours, Some(12.5), "{d:?}");
    let admission = d.iter().find(|d| d.admission).unwrap();
    assert_eq!(admission.gpu_hours, Some(8.0), "the admission keeps the GPU-hours requested");
}

#[test]
fn a_deny_keeps_the_gpu_hours_requested() {
    let host = WasmHost::new(HostConfig::default()).unwrap();
    let deny = load(&host, "wat/deny", &answering_with_hours(1));
    let d = run(vec![deny], &[&submit(1, "j1", "nlp", 4)]);
    assert_eq!((d[0].decision, d[0].gpu_hours), (DecisionKind::Deny, Some(8.0)));
}
