//! Fuzz the request-body decoder of `bursar serve` (`POST /v1/events`, `POST /v1/admit`): any bytes
//! must give either a refusal or a split into accepted events and rejected lines, never a panic, and
//! every line number must point inside the body.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((ok, rejected)) = bursar_serve::http::decode_body(data) {
        let lines = data.split(|b| *b == b'\n').count();
        for e in &ok {
            assert!(e.line >= 1 && e.line <= lines);
            assert!(!e.raw.contains('\n'));
        }
        for r in &rejected {
            let n = r["line"].as_u64().unwrap_or(0) as usize;
            assert!(n >= 1 && n <= lines);
        }
    }
});
