//! Helpers shared by the integration tests: declarations built in code (as the manifest parser would),
//! hand-written core modules wrapped into components with the real WIT world, and an engine run.

#![allow(dead_code)]
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers: a failed setup step aborts the test with its error"
)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bursar_engine::{Engine, EventMask, Mode, Policy, PolicyMeta, PolicySet, Selector};
use bursar_lang::{Diagnostic, OnError, WasmDecl, WasmLimits};
use bursar_model::{Decision, decode_event};

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A declaration as `bursar-lang` would produce it from a manifest.
pub fn decl(id: &str, events: &[&str], on_error: OnError, limits: WasmLimits, config_json: &str) -> WasmDecl {
    let mut mask = EventMask::NONE;
    for e in events {
        mask = mask.with(EventMask::of_name(e).unwrap());
    }
    WasmDecl {
        meta: PolicyMeta {
            id: Arc::from(id),
            description: format!("test policy {id}"),
            mode: Mode::Enforce,
            selector: Selector::default(),
            events: mask,
            source: format!("{id}.toml"),
            kind: "wasm",
            branches: Vec::new(),
            self_approval: false,
        },
        component: PathBuf::from(format!("{id}.wasm")),
        component_at: Diagnostic::file(&format!("{id}.toml"), "component"),
        on_error,
        limits,
        config_json: config_json.to_owned(),
    }
}

/// A core module in WAT with the `bursar:policy/policy` world embedded, ready for the host to wrap.
pub fn guest(wat_src: &str) -> Vec<u8> {
    let mut bytes = wat::parse_str(wat_src).unwrap();
    let mut resolve = wit_parser::Resolve::default();
    let (pkg, _) = resolve.push_dir(root().join("wit")).unwrap();
    let world = resolve.select_world(&[pkg], Some("policy")).unwrap();
    wit_component::embed_component_metadata(&mut bytes, &resolve, world, wit_component::StringEncoding::UTF8).unwrap();
    bytes
}

/// A guest whose `init` succeeds and whose `evaluate` runs `body` (a `(param i32) (result i32)`
/// function body: the argument is a pointer to the event, the result a pointer to the return area).
///
/// Memory map: the return area is at 32; one verdict record (80 bytes, align 8) at 256; strings at 512+.
/// `cabi_realloc` bumps from 1024 and wraps at 60000, which is enough for one event at a time.
pub fn guest_with(body: &str, data: &str) -> Vec<u8> {
    guest_with_realloc(BUMP_REALLOC, body, data)
}

/// The default `cabi_realloc` body: bump from 1024, wrap at 60000 (one page of memory).
pub const BUMP_REALLOC: &str = r#"(local $p i32)
    (local.set $p (i32.and (i32.add (global.get $bump) (i32.const 7)) (i32.const -8)))
    (if (i32.gt_u (i32.add (local.get $p) (local.get 3)) (i32.const 60000))
      (then (local.set $p (i32.const 1024))))
    (global.set $bump (i32.add (local.get $p) (local.get 3)))
    (local.get $p)"#;

/// A `cabi_realloc` body like a real guest's allocator: bumps from 1024, never reuses, and grows the
/// memory by 16 pages at a time when an allocation does not fit, as `dlmalloc` would. An input as
/// large as the memory cap makes it hit the cap while the host copies the input in.
pub const GROWING_REALLOC: &str = r#"(local $p i32) (local $end i32)
    (local.set $p (i32.and (i32.add (global.get $bump) (i32.const 7)) (i32.const -8)))
    (local.set $end (i32.add (local.get $p) (local.get 3)))
    (block $done
      (loop $grow
        (br_if $done (i32.le_u (local.get $end) (i32.mul (memory.size) (i32.const 65536))))
        (if (i32.eq (memory.grow (i32.const 16)) (i32.const -1)) (then (unreachable)))
        (br $grow)))
    (global.set $bump (local.get $end))
    (local.get $p)"#;

/// Like [`guest_with`] with `realloc` as the body of `cabi_realloc` (params: old pointer, old size,
/// align, new size; result: the pointer). Globals: `$bump` (starts at 1024), and `$seen` and `$flag`
/// (0, free for the test's own use).
pub fn guest_with_realloc(realloc: &str, body: &str, data: &str) -> Vec<u8> {
    guest(&format!(
        r#"(module
  (memory (export "memory") 1)
  (global $bump (mut i32) (i32.const 1024))
  (global $seen (mut i32) (i32.const 0))
  (global $flag (mut i32) (i32.const 0))
  (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
    {realloc})
  (func (export "init") (param i32 i32) (result i32)
    (i32.store8 (i32.const 16) (i32.const 0))
    (i32.const 16))
  (func (export "evaluate") (param i32) (result i32)
    {body})
  {data}
)"#
    ))
}

/// The body of an `evaluate` that returns `ok([verdict { kind: <case>, reason: "no from wat" }])`
/// after running `prelude`; pair it with [`ANSWER_DATA`].
pub fn answer_body(prelude: &str, case: u8) -> String {
    format!(
        r#"{prelude}
    (i32.store8 (i32.const 256) (i32.const {case}))
    (i32.store (i32.const 312) (i32.const 512))
    (i32.store (i32.const 316) (i32.const 11))
    (i32.store8 (i32.const 320) (i32.const 0))
    (i32.store8 (i32.const 32) (i32.const 0))
    (i32.store (i32.const 36) (i32.const 256))
    (i32.store (i32.const 40) (i32.const 1))
    (i32.const 32)"#
    )
}

/// The data segment of [`answer_body`]: its reason.
pub const ANSWER_DATA: &str = r#"(data (i32.const 512) "no from wat")"#;

/// `evaluate` returns `ok([verdict { kind: <case>, reason: "no from wat", gpu-hours: none }])`.
pub fn answering(case: u8) -> Vec<u8> {
    answering_after("", case)
}

/// Like [`answering`], running `prelude` (WAT instructions that leave nothing on the stack) first.
pub fn answering_after(prelude: &str, case: u8) -> Vec<u8> {
    guest_with(&answer_body(prelude, case), ANSWER_DATA)
}

/// Runs `lines` (JSON events) through an engine over `policies`, returning the decisions.
pub fn run(policies: Vec<Arc<dyn Policy>>, lines: &[&str]) -> Vec<Decision> {
    let set = PolicySet::new(policies, Vec::new(), "test".to_owned()).unwrap();
    let mut engine = Engine::new(Arc::new(set));
    let mut out = Vec::new();
    for line in lines {
        let e = decode_event(line).unwrap();
        engine.process(&e, Some(line), &mut out);
    }
    out
}

/// A `job.submitted` line for job `id` of project `project` with `gpus` GPUs.
pub fn submit(n: u32, id: &str, project: &str, gpus: u32) -> String {
    format!(
        r#"{{"id":"e{n}","time":"2026-11-02T09:{:02}:00Z","type":"job.submitted","job":{{"id":"{id}","project":"{project}","user":"alice","gpus":{gpus},"requested_hours":2.0,"ready":{{"image":true,"data":true,"script":true}}}}}}"#,
        n % 60
    )
}

/// Builds the example guests under `policies/wasm/` with `scripts/build-wasm.sh` (once per test
/// binary; a no-op cargo build when nothing changed), so `cargo test` alone works on a fresh clone.
pub fn ensure_built() {
    static BUILT: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| {
        let status = std::process::Command::new("bash")
            .arg(root().join("scripts/build-wasm.sh"))
            .status()
            .expect("run scripts/build-wasm.sh");
        assert!(status.success(), "scripts/build-wasm.sh failed");
    });
}

/// Loads a policy directory with a real WebAssembly host.
pub fn load_dir(dir: &Path, host: &bursar_wasm::WasmHost) -> Vec<Arc<dyn Policy>> {
    match bursar_loader::load_dir(dir, host) {
        Ok(set) => set.policies().to_vec(),
        Err(diags) => panic!("{}", diags.iter().map(ToString::to_string).collect::<String>()),
    }
}
