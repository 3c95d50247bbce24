//! Regression tests for quarantine poisoning (issue 14, item 7): five submissions from one project
//! carrying a 20 MB unknown field pushed the WebAssembly policies past their memory cap, the policy was
//! quarantined after five failures, and every other project's next job was denied (or, with
//! `on_error = "allow"`, let through). What broke: failures caused by an input were charged to the
//! guest. Now an input too large to pass never reaches the guest, a failure on a large input is the
//! input's, a reused instance that took a large input is retired, and the offending event still gets
//! the configured `on_error` outcome. Every guest here is hostile WAT loaded through the real host.

#![expect(clippy::unwrap_used, reason = "test helpers: a failed setup step aborts the test with its error")]

use std::sync::Arc;

use crate::common::*;
use bursar_engine::Policy;
use bursar_lang::{OnError, WasmLimits};
use bursar_model::DecisionKind;
use bursar_wasm::{Failure, HostConfig, WasmHost, WasmPolicy};

/// A `job.submitted` like [`submit`] with an unknown field `blob` of `size` bytes (kept in `raw`).
fn submit_with_blob(n: u32, id: &str, project: &str, size: usize) -> String {
    format!(
        r#"{{"id":"e{n}","time":"2026-11-02T09:{:02}:00Z","type":"job.submitted","blob":"{}","job":{{"id":"{id}","project":"{project}","user":"mallory","gpus":1,"requested_hours":2.0}}}}"#,
        n % 60,
        "x".repeat(size)
    )
}

fn load_with(host: &WasmHost, id: &str, bytes: &[u8], on_error: OnError, limits: WasmLimits) -> Arc<WasmPolicy> {
    let limits = WasmLimits { deadline_ms: limits.deadline_ms.or(Some(60_000)), ..limits };
    host.load_bytes(&decl(id, &["job.submitted"], on_error, limits, "{}"), bytes).unwrap()
}

/// A guest with a real allocator's habit (grow memory when an allocation does not fit) that answers
/// every job with verdict `case`: a 20 MB input makes it hit a 16 MiB cap while the host copies it in.
fn growing_guest(case: u8) -> Vec<u8> {
    guest_with_realloc(GROWING_REALLOC, &answer_body("", case), ANSWER_DATA)
}

const MB20: usize = 20 << 20;

#[test]
fn twenty_megabyte_fields_from_one_project_do_not_quarantine_the_policy_for_everyone() {
    let host = WasmHost::new(HostConfig::default()).unwrap();
    let limits = WasmLimits { max_failures: Some(5), memory_mb: Some(16), ..WasmLimits::default() };
    let p = load_with(&host, "wat/share", &growing_guest(0), OnError::Deny, limits);
    let mut lines: Vec<String> = (1..=5).map(|i| submit_with_blob(i, &format!("bad{i}"), "mallory", MB20)).collect();
    lines.push(submit(6, "good", "nlp", 1));
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let d = run(vec![p.clone() as Arc<dyn Policy>], &refs);
    assert_eq!(d.len(), 6, "{d:?}");
    for bad in &d[..5] {
        // The offending event gets the configured outcome, and the reason says why and that it was not counted.
        assert_eq!(bad.decision, DecisionKind::Deny, "{}", bad.reason);
        assert!(bad.reason.contains("wasm policy wat/share was not called: event `e"), "{}", bad.reason);
        assert!(bad.reason.contains("more than the 1048576 a call may pass (on_error = deny)"), "{}", bad.reason);
        assert!(bad.reason.ends_with("not counted as a failure of the policy"), "{}", bad.reason);
    }
    // The other project's job gets the guest's real answer: the policy is in service.
    assert_eq!((d[5].decision, d[5].reason.as_str()), (DecisionKind::Allow, "no from wat"));
    assert_eq!(p.failures(), 0, "{:?}", p.last_failure());
    assert!(!p.quarantined());
    assert_eq!(p.input_failures(), 5);
    let last = p.last_input_failure().unwrap();
    assert_eq!(last.event_id, "e5");
    assert!(last.bytes > MB20 as u64 && last.failure.is_none(), "{last:?}");
}

#[test]
fn with_on_error_allow_only_the_offending_events_are_let_through() {
    let host = WasmHost::new(HostConfig::default()).unwrap();
    let limits = WasmLimits { max_failures: Some(5), ..WasmLimits::default() };
    let p = load_with(&host, "wat/deny-all", &growing_guest(1), OnError::Allow, limits);
    let mut lines: Vec<String> = (1..=6).map(|i| submit_with_blob(i, &format!("bad{i}"), "mallory", MB20)).collect();
    lines.push(submit(7, "good", "nlp", 1));
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let d = run(vec![p.clone() as Arc<dyn Policy>], &refs);
    assert_eq!(d.len(), 7);
    assert!(
        d[..6].iter().all(|x| x.decision == DecisionKind::Allow && x.reason.contains("(on_error = allow)")),
        "{d:?}"
    );
    // Not every job: the next ordinary one is denied by the guest itself.
    assert_eq!((d[6].decision, d[6].reason.as_str()), (DecisionKind::Deny, "no from wat"));
    assert_eq!(p.failures(), 0);
}

/// A guest that spends fuel in proportion to the bytes the host copied into it (two bytes an
/// iteration), then answers deny: a 100 KB input runs out of a 100,000 fuel budget, a small one does not.
fn fuel_per_byte_guest() -> Vec<u8> {
    let realloc = GROWING_REALLOC.replacen(
        "(local $p i32) (local $end i32)",
        "(local $p i32) (local $end i32) (global.set $seen (i32.add (global.get $seen) (local.get 3)))",
        1,
    );
    let burn = r#"(block $d (loop $l
      (br_if $d (i32.le_s (global.get $seen) (i32.const 0)))
      (global.set $seen (i32.sub (global.get $seen) (i32.const 2)))
      (br $l)))"#;
    guest_with_realloc(&realloc, &answer_body(burn, 1), ANSWER_DATA)
}

#[test]
fn a_failure_on_a_large_input_is_attributed_to_that_input() {
    let host = WasmHost::new(HostConfig::default()).unwrap();
    let limits = WasmLimits { max_failures: Some(2), fuel: Some(100_000), ..WasmLimits::default() };
    let p = load_with(&host, "wat/burn", &fuel_per_byte_guest(), OnError::Deny, limits);
    let mut lines: Vec<String> = (1..=4).map(|i| submit_with_blob(i, &format!("big{i}"), "mallory", 100_000)).collect();
    lines.push(submit(5, "small", "nlp", 1));
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let d = run(vec![p.clone() as Arc<dyn Policy>], &refs);
    assert_eq!(d.len(), 5);
    for big in &d[..4] {
        assert_eq!(big.decision, DecisionKind::Deny);
        assert!(
            big.reason.contains("wasm policy wat/burn ran out of fuel (100000 units) on event `e"),
            "{}",
            big.reason
        );
        assert!(
            big.reason.contains("attributed to the input, larger than the 16384 bytes of an ordinary one"),
            "{}",
            big.reason
        );
    }
    // Four failures with max_failures = 2, and still in service: the small job gets the guest's answer.
    assert_eq!(d[4].reason, "no from wat");
    assert_eq!((p.failures(), p.input_failures()), (0, 4));
    let last = p.last_input_failure().unwrap();
    assert_eq!((last.event_id.as_str(), last.failure), ("e4", Some(Failure::Fuel(100_000))));
    // The same guest's own failure on an ordinary input does count: with a budget too small for
    // even a small event it is quarantined as before (see also hostile.rs, quarantine_after_max_failures).
    let starved = WasmLimits { max_failures: Some(2), fuel: Some(300), ..WasmLimits::default() };
    let q = load_with(&host, "wat/burn", &fuel_per_byte_guest(), OnError::Deny, starved);
    let small: Vec<String> = (1..=3).map(|i| submit(i, &format!("s{i}"), "nlp", 1)).collect();
    let refs: Vec<&str> = small.iter().map(String::as_str).collect();
    let d = run(vec![q.clone() as Arc<dyn Policy>], &refs);
    assert!(d[2].reason.contains("is quarantined after 2 failures"), "{}", d[2].reason);
    assert_eq!((q.failures(), q.input_failures()), (2, 0));
}

#[test]
fn a_reused_instance_that_took_a_large_input_is_retired() {
    // The guest marks itself when an allocation over 64 KiB was made, and traps on the call after the
    // one that took it: what a large input leaves in an instance must not fail the next, ordinary
    // call and be charged to the guest.
    let realloc = GROWING_REALLOC.replacen(
        "(local $p i32) (local $end i32)",
        "(local $p i32) (local $end i32) (if (i32.gt_u (local.get 3) (i32.const 65536)) (then (global.set $seen (i32.const 1))))",
        1,
    );
    let prelude = r#"(if (global.get $flag) (then (unreachable)))
    (global.set $flag (global.get $seen))
    (global.set $seen (i32.const 0))"#;
    let bytes = guest_with_realloc(&realloc, &answer_body(prelude, 1), ANSWER_DATA);
    let host = WasmHost::new(HostConfig::default()).unwrap();
    let p = load_with(&host, "wat/tainted", &bytes, OnError::Allow, WasmLimits::default());
    let lines = [
        submit(1, "a", "nlp", 1),
        submit_with_blob(2, "big", "mallory", 100_000),
        submit(3, "b", "nlp", 1),
        submit(4, "c", "nlp", 1),
    ];
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let d = run(vec![p.clone() as Arc<dyn Policy>], &refs);
    assert_eq!(d.len(), 4);
    assert!(d.iter().all(|x| x.decision == DecisionKind::Deny && x.reason == "no from wat"), "{d:?}");
    assert_eq!(p.failures(), 0, "{:?}", p.last_failure());
}
