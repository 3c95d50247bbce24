//! Fuzz the policy loader: any text must compile or produce diagnostics with valid line and column
//! numbers, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Err(diags) = bursar_lang::compile_str("fuzz.toml", text, std::path::Path::new(".")) {
        for d in diags {
            assert!(d.line >= 1 && d.column >= 1);
            let _ = d.to_string();
        }
    }
});
