//! Per-call cost of a WebAssembly policy against its TOML twin, measured side by side in one run.
//!
//! `readiness/toml` is the TOML readiness family; `readiness/wasm-reuse` and `readiness/wasm-fresh` run
//! its WebAssembly twin (`policies/wasm/readiness`) with the two instance strategies, and
//! `readiness/wasm-js` the JavaScript twin (`examples/js-policy`, reused instance) when it is built. Each iteration is
//! one `Policy::evaluate` of a `job.submitted` (event conversion, argument passing, the guest, verdict
//! validation). `scripts/build-wasm.sh` must have been run (the bench runs it if the component is missing).
//!
//! Run: `CARGO_TARGET_DIR=… cargo bench -p bursar-wasm --bench wasm`.

#![expect(clippy::unwrap_used, reason = "a benchmark with a broken setup should stop at once")]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bursar_engine::{Context, EventMask, Mode, Output, Policy, PolicyMeta, Selector, State};
use bursar_lang::{Diagnostic, OnError, WasmDecl, WasmLimits};
use bursar_model::{Timestamp, decode_event};
use bursar_wasm::{HostConfig, Strategy, WasmHost, WasmPolicy};
use criterion::{Criterion, criterion_group, criterion_main};

const EVENT: &str = r#"{"id":"e1","time":"2026-11-02T09:00:00Z","type":"job.submitted","job":{"id":"j1","project":"nlp","user":"alice","queue":"short","gpus":8,"gpu_type":"H200","gpu_mem_gb":141,"nodes":1,"requested_hours":4.0,"stage":"finetune","model_params_b":7.0,"image":"registry/llm:1.4","dataset":"ds-42","script_hash":"sha256:ab12","ready":{"image":true,"data":false,"script":true},"deferrable":false,"tags":{"team":"search"}}}"#;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn wasm_policy(strategy: Strategy) -> Arc<dyn Policy> {
    let path = root().join("policies/wasm/readiness.wasm");
    if !path.exists() {
        let ok = std::process::Command::new("bash").arg(root().join("scripts/build-wasm.sh")).status();
        assert!(ok.is_ok_and(|s| s.success()), "scripts/build-wasm.sh failed");
    }
    let bytes = std::fs::read(&path).unwrap();
    let decl = WasmDecl {
        meta: PolicyMeta {
            id: Arc::from("readiness/all-ready"),
            description: String::new(),
            mode: Mode::Enforce,
            selector: Selector::default(),
            events: EventMask::of_name("job.submitted").unwrap(),
            source: "bench".into(),
            kind: "wasm",
            branches: Vec::new(),
            self_approval: false,
        },
        component: path.clone(),
        component_at: Diagnostic::file("bench", ""),
        on_error: OnError::Deny,
        limits: WasmLimits::default(),
        config_json: r#"{"require":["image","data","script"]}"#.into(),
    };
    let host = WasmHost::new(HostConfig { strategy, ..HostConfig::default() }).unwrap();
    host.load_bytes(&decl, &bytes).unwrap()
}

/// The JavaScript twin (`examples/js-policy`), loaded through its manifest, when `build.sh` has built it.
/// Only under `cargo bench`: in test mode (`cargo test --all-targets`) compiling its 12 MB component
/// would cost more than every other benchmark together, and `crates/wasm/tests/js.rs` covers it.
fn js_policy() -> Option<Arc<WasmPolicy>> {
    let dir = root().join("examples/js-policy");
    if !std::env::args().any(|a| a == "--bench") || !dir.join("readiness.wasm").exists() {
        eprintln!("readiness/wasm-js: skipped (only under `cargo bench`, after examples/js-policy/build.sh)");
        return None;
    }
    let manifest = std::fs::read_to_string(dir.join("policy.toml")).unwrap();
    let decl = bursar_lang::compile_str("policy.toml", &manifest, &dir).unwrap().wasm.remove(0);
    let host = WasmHost::new(HostConfig::default()).unwrap();
    let t = std::time::Instant::now();
    let policy = host.load(&decl).unwrap();
    eprintln!("readiness/wasm-js: compiled and started in {:.2?}", t.elapsed());
    Some(policy)
}

fn toml_policy() -> Arc<dyn Policy> {
    let path = root().join("tests/cases-wasm/readiness/toml/readiness.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut compiled = bursar_lang::compile_str("readiness.toml", &text, Path::new(".")).unwrap();
    compiled.policies.remove(0)
}

fn bench(c: &mut Criterion) {
    let event = decode_event(EVENT).unwrap();
    let state = State::default();
    let cx = Context { event: &event, raw: Some(EVENT), now: Timestamp(event.time.millis()), state: &state, job: None };
    let mut group = c.benchmark_group("readiness");
    let mut variants = vec![
        ("toml", toml_policy()),
        ("wasm-reuse", wasm_policy(Strategy::Reuse)),
        ("wasm-fresh", wasm_policy(Strategy::Fresh)),
    ];
    let js = js_policy();
    variants.extend(js.clone().map(|p| ("wasm-js", p as Arc<dyn Policy>)));
    for (name, policy) in variants {
        // Same answer from every variant, or the comparison is meaningless.
        let mut out = Output::default();
        policy.evaluate(&cx, &mut out);
        assert_eq!(out.verdicts.len(), 1, "{name}");
        assert!(
            out.verdicts[0].reason.text().starts_with("job j1 is not ready: data"),
            "{name}: {}",
            out.verdicts[0].reason.text()
        );
        group.bench_function(name, |b| {
            b.iter(|| {
                out.clear();
                policy.evaluate(std::hint::black_box(&cx), &mut out);
            })
        });
    }
    group.finish();
    if let Some(js) = js {
        // After every iteration on one reused instance: what the JavaScript engine needed at most.
        eprintln!("readiness/wasm-js: {:?} under {:?}, {} failures", js.usage(), js.limits(), js.failures());
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
