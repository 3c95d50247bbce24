//! Fuzz the request-body decoder every door of `bursar serve` uses (`POST /v1/events`, `POST
//! /v1/admit`, the event socket: `bursar_session::decode_body`): any bytes must split into accepted
//! inputs and rejected lines, never a panic, and every line number must point inside the body.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (ok, rejected) = bursar_session::decode_body(data, 1 << 20, bursar_session::Origin::Producer);
    let lines = data.split(|b| *b == b'\n').count() as u64;
    for e in &ok {
        assert!(e.line >= 1 && e.line <= lines);
        assert!(!e.raw.contains('\n'));
    }
    for r in &rejected {
        assert!(r.line >= 1 && r.line <= lines);
    }
});
