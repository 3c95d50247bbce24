//! `bursar gen --jobs N --projects P --seed S`: a synthetic v1 event stream for benchmarks and demos.
//!
//! Streams (constant memory for any `N`); the same seed always gives the same bytes. The workload model is
//! documented in `bursar_traces::workload` and `docs/importers.md`.

use std::io::{BufWriter, Write};

use bursar_traces::workload::{GenConfig, Generator};

use crate::CliError;

/// Writes the generated stream to `out`; returns the number of events.
pub fn run(cfg: GenConfig, out: &mut dyn Write) -> Result<u64, CliError> {
    let mut w = BufWriter::with_capacity(1 << 16, out);
    let mut n = 0u64;
    let mut line = String::with_capacity(512);
    for event in Generator::new(cfg) {
        line.clear();
        line.push_str(&event.to_json());
        line.push('\n');
        w.write_all(line.as_bytes()).map_err(|e| CliError::io("cannot write events", e))?;
        n += 1;
    }
    w.flush().map_err(|e| CliError::io("cannot write events", e))?;
    Ok(n)
}
