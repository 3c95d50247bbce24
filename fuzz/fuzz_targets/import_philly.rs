//! Fuzz the `philly` importer: any bytes must parse to jobs or a typed error, and whatever parses must
//! emit as v1 events without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(jobs) = bursar_traces::philly::parse_bytes(data) {
        let mut report = bursar_traces::Report::new("philly");
        let _ = bursar_traces::emit(&jobs, &bursar_traces::EmitOptions::default(), &mut std::io::sink(), &mut report);
    }
});
