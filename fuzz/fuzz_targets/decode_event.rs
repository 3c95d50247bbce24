//! Fuzz the wire-format v1 decoder: any bytes must decode or return an error, never panic, and a
//! decoded event must survive a round trip through its canonical JSON.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(line) = std::str::from_utf8(data) else { return };
    if let Ok(event) = bursar_model::decode_event(line) {
        let again = bursar_model::decode_event(&event.to_json()).expect("canonical form decodes");
        assert_eq!(again, event);
    }
});
