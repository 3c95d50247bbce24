//! Fuzz the `--util` duty-cycle CSV reader and the job-to-series rule: any bytes parse or fail cleanly,
//! and lookups on whatever parsed stay in range.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(series) = bursar_traces::util::parse_csv_bytes(data)
        && let Some(a) = series.assign(7, "job")
    {
        let v = series.value_at(a, i64::from(data.len() as u32) * 37);
        assert!((0.0..=1.0).contains(&v));
    }
});
