//! Fuzz what `bursar report` reads from people: the price file, the `--period` and `--by` arguments and
//! the policy set it takes the idle threshold and budgets from. Any input must give a value or a typed
//! error, and a parsed price file must price any usage curve without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(prices) = bursar_report::Prices::parse(text, "fuzz.toml") {
        let hourly: Vec<f64> = data.iter().map(|b| f64::from(*b) / 7.0).collect();
        let usage = bursar_report::billing::Usage { hourly, months: 1.0 + f64::from(data.first().copied().unwrap_or(0) % 13), jobs: vec![1.5, 0.0] };
        let _ = bursar_report::billing::compare(&usage, &prices);
    }
    let _ = bursar_report::Span::parse(text);
    let _ = bursar_report::GroupBy::parse(text);
    // The report takes budgets and the idle threshold from a compiled set, as `check` compiles it.
    if let Ok(file) = bursar_lang::compile_str("fuzz.toml", text, std::path::Path::new("."))
        && let Ok(set) = bursar_engine::PolicySet::new(file.policies, Vec::new(), "fuzz".to_owned())
    {
        let hints = bursar_report::PolicyHints::from_set(&set);
        let _ = hints.idle_threshold();
    }
});
