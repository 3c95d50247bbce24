//! Fuzzes the WebAssembly host's load path with arbitrary bytes: the core-module check, the
//! `wit-component` wrap, component validation, import and export checks, `init`. A policy file's
//! `.wasm` is untrusted input; loading it must fail with a message, never panic.

#![no_main]

use std::sync::{Arc, OnceLock};

use bursar_engine::{EventMask, Mode, PolicyMeta, Selector};
use bursar_lang::{Diagnostic, OnError, WasmDecl, WasmLimits};
use bursar_wasm::{HostConfig, WasmHost};
use libfuzzer_sys::fuzz_target;

fn host() -> Option<&'static WasmHost> {
    static HOST: OnceLock<Option<WasmHost>> = OnceLock::new();
    HOST.get_or_init(|| WasmHost::new(HostConfig::default()).ok()).as_ref()
}

fuzz_target!(|data: &[u8]| {
    let Some(host) = host() else { return };
    let decl = WasmDecl {
        meta: PolicyMeta {
            id: Arc::from("fuzz/component"),
            description: String::new(),
            mode: Mode::Enforce,
            selector: Selector::default(),
            events: EventMask::ALL,
            source: "fuzz".into(),
            kind: "wasm",
            branches: Vec::new(),
            self_approval: false,
        },
        component: "fuzz.wasm".into(),
        component_at: Diagnostic::file("fuzz.toml", "component"),
        on_error: OnError::Deny,
        limits: WasmLimits::default(),
        config_json: "{}".into(),
    };
    let _ = host.load_bytes(&decl, data);
});
