//! Fuzz the comment-preserving TOML formatter: any text must format or be refused, never panic, and a
//! formatted text must be a fixed point (formatting it again changes nothing).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(once) = bursar_policytest::fmt::format_toml(text)
    {
        let twice = bursar_policytest::fmt::format_toml(&once);
        assert_eq!(twice.as_deref(), Ok(once.as_str()), "formatting is not idempotent");
    }
});
