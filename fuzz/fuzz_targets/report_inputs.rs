//! Fuzz what `bursar report` reads from people: the price file, the `--period` and `--by` arguments and
//! the policy TOML it takes the idle threshold and budgets from. Any input must give a value or a typed
//! error, and a parsed price file must price any usage curve without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(prices) = bursar_report::Prices::parse(text, "fuzz.toml") {
        let hourly: Vec<f64> = data.iter().map(|b| f64::from(*b) / 7.0).collect();
        let usage = bursar_report::billing::Usage { hourly, months: 1 + u32::from(data.first().copied().unwrap_or(0) % 13), jobs: vec![1.5, 0.0] };
        let _ = bursar_report::billing::compare(&usage, &prices);
    }
    let _ = bursar_report::Span::parse(text);
    let _ = bursar_report::GroupBy::parse(text);
    let mut hints = bursar_report::PolicyHints::default();
    hints.add_toml(text);
    let _ = hints.idle_threshold();
});
