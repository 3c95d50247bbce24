//! The JavaScript example policy (`examples/js-policy/`): `readiness.js`, built into a component by
//! componentize-js (`examples/js-policy/build.sh`), loaded through its manifest by the real loader, must
//! decide exactly like the TOML `readiness` family and the Rust guest over the readiness differential
//! case (`tests/cases-wasm/readiness/`), pass its `policy.test.toml`, and stay well inside the limits its
//! manifest sets.
//!
//! Node.js and npm are needed to build the component (`build.sh` runs `npm ci` itself). Without them the
//! test fails when `CI` is set and is skipped, with the reason printed, otherwise.

#![expect(clippy::unwrap_used, clippy::panic, reason = "a failed setup step aborts the test with its error")]

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use crate::common::*;
use bursar_engine::{Policy, PolicySet};
use bursar_lang::OnError;
use bursar_wasm::{Strategy, WasmHost, WasmPolicy};

type Row = (String, Option<String>, Vec<String>, String, Option<u64>);

fn dir() -> PathBuf {
    root().join("examples/js-policy")
}

/// Builds the component with `build.sh` (a no-op when `readiness.wasm` is newer than its sources), or
/// returns `None` when Node.js is missing outside CI.
fn built() -> Option<PathBuf> {
    let t = Instant::now();
    let status = std::process::Command::new("bash").arg(dir().join("build.sh")).status().unwrap();
    if status.code() == Some(127) {
        bursar_testkit::need::missing(
            "Node.js 20+ and npm on PATH (examples/js-policy/build.sh needs them)",
            "docs/wasm-policies.md says how to install them",
        );
        return None;
    }
    assert!(status.success(), "examples/js-policy/build.sh failed ({status})");
    eprintln!("js: build.sh took {:.1?}", t.elapsed());
    Some(dir().join("readiness.wasm"))
}

fn rows(policies: Vec<Arc<dyn Policy>>, events: &str) -> Vec<Row> {
    let lines: Vec<&str> = events.lines().filter(|l| !l.trim().is_empty()).collect();
    run(policies, &lines)
        .into_iter()
        .map(|d| {
            (
                d.decision.as_str().to_owned(),
                d.job_id.map(|j| j.to_string()),
                d.policies.iter().map(|p| p.to_string()).collect(),
                d.reason,
                d.gpu_hours.map(|h| (h * 1e6).round() as u64),
            )
        })
        .collect()
}

/// The example, loaded once per test binary with the process-wide host (so the component is compiled
/// once): the set the real loader makes of `examples/js-policy/`, the same manifest's policy loaded
/// directly (for its usage figures), and the component's bytes.
struct Js {
    set: Arc<PolicySet>,
    policy: Arc<WasmPolicy>,
    bytes: Vec<u8>,
}

fn js() -> Option<&'static Js> {
    static JS: OnceLock<Option<Js>> = OnceLock::new();
    JS.get_or_init(|| {
        let component = built()?;
        let host = WasmHost::shared().unwrap();
        // Every component the tests of this binary load is compiled here, once, so that a test counting
        // the host's cache is not raced by another compiling the Rust guest beside it.
        ensure_built();
        drop(load_dir(&root().join("tests/cases-wasm/readiness/wasm"), host));
        let bytes = std::fs::read(&component).unwrap();
        let t = Instant::now();
        let set = match bursar_loader::load_dir(&dir(), host) {
            Ok(set) => Arc::new(set),
            Err(diags) => panic!("{}", diags.iter().map(ToString::to_string).collect::<String>()),
        };
        eprintln!("js: loading the {} byte component took {:.1?}", bytes.len(), t.elapsed());
        let manifest = std::fs::read_to_string(dir().join("policy.toml")).unwrap();
        let decl = bursar_lang::compile_str("policy.toml", &manifest, &dir()).unwrap().wasm.remove(0);
        let cached = host.cached();
        let policy = host.load(&decl).unwrap();
        assert_eq!(host.cached(), cached, "the component was compiled twice");
        Some(Js { set, policy, bytes })
    })
    .as_ref()
}

#[test]
fn the_javascript_policy_decides_like_the_toml_family_and_the_rust_guest() {
    let Some(example) = js() else { return };
    ensure_built();
    let host = WasmHost::shared().unwrap();
    let js = example.set.policies().to_vec();
    assert_eq!(js.len(), 1);
    assert_eq!(js[0].meta().kind, "wasm");

    let case = root().join("tests/cases-wasm/readiness");
    let events = std::fs::read_to_string(case.join("events.jsonl")).unwrap();
    let toml = rows(load_dir(&case.join("toml"), host), &events);
    let rust = rows(load_dir(&case.join("wasm"), host), &events);
    let t = Instant::now();
    let from_js = rows(js.clone(), &events);
    eprintln!("js: {} events took {:.1?}", events.lines().count(), t.elapsed());

    assert!(toml.iter().any(|d| d.0 == "deny") && toml.iter().any(|d| d.0 == "allow"), "the case proves little");
    assert_eq!(toml, rust, "the Rust guest and the TOML family disagree (the fixture is broken)");
    assert_eq!(toml.len(), from_js.len(), "different number of decisions");
    for (i, (t, j)) in toml.iter().zip(&from_js).enumerate() {
        assert_eq!(t, j, "decision {i} differs (left TOML, right JavaScript)");
    }

    // The same manifest loaded directly: the same decisions, and the usage figures. Limits were set
    // from measurement: the guest must stay far inside them.
    let p = &example.policy;
    assert_eq!(rows(vec![p.clone()], &events), from_js);
    let (usage, limits) = (p.usage(), p.limits());
    eprintln!("js: {usage:?} under {limits:?}");
    assert_eq!(p.failures(), 0);
    assert!(usage.call_fuel > 0 && usage.call_fuel * 4 <= limits.fuel, "fuel per call {usage:?} vs {limits:?}");
    assert!(usage.init_fuel * 4 <= limits.fuel, "fuel at start {usage:?} vs {limits:?}");
    assert!(usage.memory_bytes * 2 <= limits.memory_mb << 20, "memory {usage:?} vs {limits:?}");
}

#[test]
fn the_javascript_policy_passes_its_test_file_and_reports_config_errors() {
    let Some(example) = js() else { return };
    let host = WasmHost::shared().unwrap();

    // `bursar test examples/js-policy`, through the same library calls.
    let files = bursar_policytest::runner::find_test_files(&dir()).unwrap();
    assert_eq!(files, vec![dir().join("policy.test.toml")]);
    let (tests, errors) = bursar_policytest::runner::load_test_files(&files);
    assert!(errors.is_empty(), "{errors:?}");
    let mut ran = 0;
    for f in &tests {
        for case in &f.cases {
            let r = bursar_policytest::runner::run_case(&example.set, "policy.test.toml", case, None);
            assert!(r.passed, "{}", bursar_policytest::runner::render_failure(&r));
            ran += 1;
        }
    }
    assert_eq!(ran, 3);

    // A config `init` rejects: the JavaScript `throw` becomes the `err` of `result<_, string>`, and a load
    // error. The compiled component comes from the host's cache.
    let bytes = &example.bytes;
    let cached = host.cached();
    let bad = decl("js/bad", &["job.submitted"], OnError::Deny, Default::default(), r#"{"require":["gpu"]}"#);
    let err = host.load_bytes(&bad, bytes).unwrap_err();
    assert_eq!(
        err,
        "could not start: `init` rejected the config: config `require`: `gpu` is not one of image, data, script"
    );
    assert_eq!(host.cached(), cached, "the component was compiled again");

    // Another config: only data is required.
    let some = decl("js/some", &["job.submitted"], OnError::Deny, Default::default(), r#"{"require":["data"]}"#);
    let p = host.load_bytes(&some, bytes).unwrap();
    assert_eq!(p.strategy(), Strategy::Reuse);
    let d = run(vec![p.clone()], &[&submit(1, "j1", "nlp", 1)]);
    assert_eq!((d[0].decision.as_str(), d[0].reason.as_str()), ("allow", "no policy objects"));
}
