//! Fuzz the bill reader (`bursar import bill`): any bytes, read with the default mapping and with one
//! that maps columns, tags and SKUs, must give charges and refused lines or a typed error, never a
//! panic; and every charge written must decode as a wire-format event (the reader checks it, so a
//! line it lets through that `eval` would refuse is a bug).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mapped = bursar_traces::bill::Mapping::parse(
        "currency = \"USD\"\n[columns]\nBilledCost = \"cost\"\n[tag_columns]\nproject = \"label\"\n[skus.s]\ngpu_type = \"H100\"\ngpus = 8\n",
        "fuzz.toml",
    );
    let mut mappings = vec![bursar_traces::bill::Mapping::default()];
    mappings.extend(mapped.ok());
    for m in &mappings {
        let mut out = Vec::new();
        if bursar_traces::bill::import(data, "fuzz.csv", m, None, &mut out, &mut std::io::sink()).is_ok() {
            for line in String::from_utf8_lossy(&out).lines() {
                assert!(bursar_model::decode_event(line).is_ok(), "the reader wrote a line eval refuses: {line}");
            }
        }
    }
});
