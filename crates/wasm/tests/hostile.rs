//! Hostile guests, written as WAT core modules wrapped into components with the real WIT world (no
//! toolchain needed): an infinite loop, a memory bomb, a trap, invalid output, an error, a missing
//! export. Each must yield the policy's `on_error` outcome with a reason saying what happened, leave
//! the engine running and other policies' verdicts intact, and count towards quarantine.

#![expect(clippy::unwrap_used, reason = "test helpers: a failed setup step aborts the test with its error")]

use std::sync::Arc;

use crate::common::*;
use bursar_engine::Policy;
use bursar_lang::{OnError, WasmLimits};
use bursar_model::DecisionKind;
use bursar_wasm::{Failure, HostConfig, WasmHost};

fn host() -> WasmHost {
    WasmHost::new(HostConfig::default()).unwrap()
}

/// Loads a guest; unless the test is about the deadline, the deadline is far away so that a busy
/// machine cannot turn a test of something else into a deadline failure.
fn load(
    host: &WasmHost,
    id: &str,
    bytes: &[u8],
    on_error: OnError,
    mut limits: WasmLimits,
) -> Arc<bursar_wasm::WasmPolicy> {
    limits.deadline_ms = limits.deadline_ms.or(Some(60_000));
    host.load_bytes(&decl(id, &["job.submitted"], on_error, limits, "{}"), bytes).unwrap()
}

const LOOP: &str = "(loop $l (br $l)) (unreachable)";
const TRAP: &str = "(unreachable)";
const MEMORY_BOMB: &str = "(loop $l (drop (memory.grow (i32.const 16))) (br $l)) (unreachable)";

#[test]
fn a_well_behaved_wat_guest_answers() {
    let h = host();
    let p = load(&h, "wat/deny", &answering(1), OnError::Allow, WasmLimits::default());
    let d = run(vec![p.clone()], &[&submit(1, "j1", "nlp", 1)]);
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].decision, DecisionKind::Deny);
    assert_eq!(d[0].reason, "no from wat");
    assert_eq!(p.failures(), 0);
}

#[test]
fn an_infinite_loop_hits_the_deadline_and_the_engine_continues() {
    let h = host();
    // Fuel high enough that the wall-clock deadline is what stops the loop.
    let limits = WasmLimits { deadline_ms: Some(5), fuel: Some(u64::MAX / 2), ..WasmLimits::default() };
    let looping = load(&h, "wat/loop", &guest_with(LOOP, ""), OnError::Deny, limits);
    let good = load(&h, "wat/alert", &answering(5), OnError::Deny, WasmLimits::default());
    let d = run(vec![looping.clone(), good], &[&submit(1, "j1", "nlp", 1), &submit(2, "j2", "nlp", 1)]);
    let admissions: Vec<_> = d.iter().filter(|d| d.admission).collect();
    assert_eq!(admissions.len(), 2, "{d:?}");
    for a in &admissions {
        assert_eq!(a.decision, DecisionKind::Deny);
        assert!(
            a.reason.contains("wasm policy wat/loop exceeded its deadline of 5 ms (on_error = deny)"),
            "{}",
            a.reason
        );
    }
    // The other policy's alerts came through for both jobs.
    assert_eq!(d.iter().filter(|d| d.decision == DecisionKind::Alert && d.reason == "no from wat").count(), 2);
    assert_eq!(looping.failures(), 2);
    assert_eq!(looping.last_failure(), Some(Failure::Deadline(5)));
}

#[test]
fn fuel_stops_a_loop_deterministically() {
    let h = host();
    let limits = WasmLimits { deadline_ms: Some(60_000), fuel: Some(100_000), ..WasmLimits::default() };
    let p = load(&h, "wat/loop", &guest_with(LOOP, ""), OnError::Allow, limits);
    let d = run(vec![p.clone()], &[&submit(1, "j1", "nlp", 1)]);
    assert_eq!(d[0].decision, DecisionKind::Allow);
    assert!(d[0].reason.contains("ran out of fuel (100000 units) (on_error = allow)"), "{}", d[0].reason);
    assert_eq!(p.last_failure(), Some(Failure::Fuel(100_000)));
}

#[test]
fn a_memory_bomb_hits_the_cap() {
    let h = host();
    let limits = WasmLimits { memory_mb: Some(4), ..WasmLimits::default() };
    let p = load(&h, "wat/bomb", &guest_with(MEMORY_BOMB, ""), OnError::Deny, limits);
    let d = run(vec![p.clone()], &[&submit(1, "j1", "nlp", 1)]);
    assert_eq!(d[0].decision, DecisionKind::Deny);
    assert!(d[0].reason.contains("exceeded its memory cap of 4 MiB"), "{}", d[0].reason);
    assert_eq!(p.last_failure(), Some(Failure::Memory(4)));
}

#[test]
fn a_trap_is_reported_and_the_instance_replaced() {
    let h = host();
    let p = load(&h, "wat/trap", &guest_with(TRAP, ""), OnError::Deny, WasmLimits::default());
    let d = run(vec![p.clone()], &[&submit(1, "j1", "nlp", 1), &submit(2, "j2", "nlp", 1)]);
    assert_eq!(d.len(), 2);
    for x in &d {
        assert!(
            x.reason.contains("wasm policy wat/trap trapped: wasm `unreachable` instruction executed"),
            "{}",
            x.reason
        );
    }
    assert_eq!(p.failures(), 2);
}

#[test]
fn skip_leaves_the_decision_to_the_other_policies() {
    let h = host();
    let p = load(&h, "wat/trap", &guest_with(TRAP, ""), OnError::Skip, WasmLimits::default());
    let d = run(vec![p.clone()], &[&submit(1, "j1", "nlp", 1)]);
    assert_eq!(d[0].decision, DecisionKind::Allow);
    // As if the policy were absent.
    assert_eq!(d[0].reason, "no policy applies to this job");
    assert_eq!(p.failures(), 1);
}

#[test]
fn an_invalid_variant_is_bad_output() {
    let h = host();
    let p = load(&h, "wat/bad", &answering(9), OnError::Deny, WasmLimits::default());
    let d = run(vec![p.clone()], &[&submit(1, "j1", "nlp", 1)]);
    assert_eq!(d[0].decision, DecisionKind::Deny);
    assert!(matches!(p.last_failure(), Some(Failure::BadOutput(_))), "{:?}", p.last_failure());
    assert!(d[0].reason.contains("wasm policy wat/bad returned an invalid verdict"), "{}", d[0].reason);
}

#[test]
fn a_defer_into_the_past_is_bad_output() {
    // Case 3 (defer) with payload 0: 1970 is before the event.
    let h = host();
    let p = load(&h, "wat/past", &answering(3), OnError::Allow, WasmLimits::default());
    let d = run(vec![p.clone()], &[&submit(1, "j1", "nlp", 1)]);
    assert_eq!(d[0].decision, DecisionKind::Allow);
    assert!(d[0].reason.contains("returned an invalid verdict: defer until 1970-01-01T00:00:00Z"), "{}", d[0].reason);
}

#[test]
fn a_guest_error_applies_on_error() {
    let body = r#"(i32.store8 (i32.const 32) (i32.const 1))
    (i32.store (i32.const 36) (i32.const 512))
    (i32.store (i32.const 40) (i32.const 4))
    (i32.const 32)"#;
    let h = host();
    let p = load(
        &h,
        "wat/err",
        &guest_with(body, r#"(data (i32.const 512) "boom")"#),
        OnError::Deny,
        WasmLimits::default(),
    );
    let d = run(vec![p], &[&submit(1, "j1", "nlp", 1)]);
    assert!(d[0].reason.contains("wasm policy wat/err reported an error: boom (on_error = deny)"), "{}", d[0].reason);
}

#[test]
fn quarantine_after_max_failures() {
    let h = host();
    let limits = WasmLimits { max_failures: Some(2), ..WasmLimits::default() };
    let p = load(&h, "wat/trap", &guest_with(TRAP, ""), OnError::Deny, limits);
    let lines: Vec<String> = (1..=4).map(|i| submit(i, &format!("j{i}"), "nlp", 1)).collect();
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let d = run(vec![p.clone()], &refs);
    assert_eq!(d.len(), 4);
    assert!(d[1].reason.ends_with("; quarantined after 2 failures"), "{}", d[1].reason);
    assert!(d[2].reason.starts_with("wasm policy wat/trap is quarantined after 2 failures"), "{}", d[2].reason);
    assert!(d.iter().all(|x| x.decision == DecisionKind::Deny));
    // The guest is no longer called once quarantined.
    assert_eq!(p.failures(), 2);
    assert!(p.quarantined());
}

#[test]
fn a_missing_export_is_refused_at_load() {
    let h = host();
    let empty = wat::parse_str("(component)").unwrap();
    let e = h
        .load_bytes(&decl("wat/empty", &["job.submitted"], OnError::Deny, WasmLimits::default(), "{}"), &empty)
        .unwrap_err();
    assert!(e.contains("does not export the `bursar:policy/policy` world"), "{e}");
    // A core module that lacks `evaluate` cannot even be wrapped.
    let no_eval = guest(
        r#"(module (memory (export "memory") 1)
             (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) (i32.const 1024))
             (func (export "init") (param i32 i32) (result i32) (i32.const 16)))"#,
    );
    let e = h
        .load_bytes(&decl("wat/noeval", &["job.submitted"], OnError::Deny, WasmLimits::default(), "{}"), &no_eval)
        .unwrap_err();
    assert!(e.contains("evaluate"), "{e}");
}

#[test]
fn a_guest_that_imports_wasi_is_refused() {
    let h = host();
    let wasi = wat::parse_str(
        r#"(component (import "wasi:cli/environment@0.2.0" (instance (export "get-arguments" (func (result (list string)))))))"#,
    )
    .unwrap();
    let e = h
        .load_bytes(&decl("wat/wasi", &["job.submitted"], OnError::Deny, WasmLimits::default(), "{}"), &wasi)
        .unwrap_err();
    assert!(e.contains("may import only `bursar:policy/state`"), "{e}");
}

#[test]
fn the_compile_cache_is_keyed_by_content() {
    let h = host();
    let bytes = answering(1);
    load(&h, "wat/a", &bytes, OnError::Deny, WasmLimits::default());
    load(&h, "wat/b", &bytes, OnError::Deny, WasmLimits::default());
    assert_eq!(h.cached(), 1);
    load(&h, "wat/c", &answering(5), OnError::Deny, WasmLimits::default());
    assert_eq!(h.cached(), 2);
}

#[test]
fn a_reused_instance_whose_memory_creeps_up_is_retired_before_the_cap() {
    // Grows its memory by one 64 KiB page on every call, then denies: a slow leak. The cap is 1 MiB
    // (16 pages), so without retirement the 16th call would fail on the cap.
    let leaky = answering_after("(drop (memory.grow (i32.const 1)))", 1);
    let h = host();
    let p = load(&h, "wat/leaky", &leaky, OnError::Allow, WasmLimits { memory_mb: Some(1), ..WasmLimits::default() });
    let lines: Vec<String> = (0..40).map(|n| submit(n, &format!("j{n}"), "nlp", 1)).collect();
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let d = run(vec![p.clone()], &refs);
    assert_eq!(d.len(), 40);
    assert!(d.iter().all(|d| d.decision == DecisionKind::Deny && d.reason == "no from wat"), "{d:?}");
    assert_eq!(p.failures(), 0, "{:?}", p.last_failure());
    assert!(p.usage().memory_bytes <= 1 << 20, "{:?}", p.usage());
}
