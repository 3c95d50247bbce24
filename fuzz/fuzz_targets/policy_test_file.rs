//! Fuzz the policy test-file parser (`*.test.toml`): any text must give test cases or located errors,
//! never a panic. Events files named by `events_file` are read relative to a directory that does not
//! exist, so the target never touches real files.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let path = std::path::Path::new("/nonexistent-bursar-fuzz/x.test.toml");
        if let Err(errors) = bursar_policytest::parse_test_file(path, text) {
            for e in errors {
                assert!(e.line >= 1 && e.column >= 1, "{e}");
            }
        }
    }
});
