//! Fuzz the wire-format v1 decoder: any bytes must decode or return an error, never panic, and a
//! decoded event must survive a round trip through its canonical JSON. The same for the inputs
//! that are not policy events but come from producers too (`pool.inventory`, action records). GPU
//! counts (`"2/7"`, `0.5`) and MIG profile names are read from the same bytes: a count that parses
//! prints back as itself.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(line) = std::str::from_utf8(data) else { return };
    if let Ok(g) = bursar_model::Gpus::parse(line) {
        assert_eq!(bursar_model::Gpus::parse(&g.to_string()), Ok(g));
    }
    let _ = bursar_model::mig_share(line);
    if let Ok(event) = bursar_model::decode_event(line) {
        let again = bursar_model::decode_event(&event.to_json()).expect("canonical form decodes");
        assert_eq!(again, event);
    }
    if let Ok(input @ bursar_model::Input::Inventory(_)) = bursar_model::decode_input(line) {
        let again = bursar_model::decode_input(&input.to_json()).expect("canonical form decodes");
        assert_eq!(again, input);
        let _ = bursar_model::names::check(&input);
    }
});
