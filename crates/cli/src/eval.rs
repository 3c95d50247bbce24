//! `bursar eval --policies DIR --events FILE|-`: run policies over an event stream.
//!
//! Streams line by line: memory grows with live jobs and projects, not with the input. A malformed
//! line is reported on stderr with its line number and reason, counted and skipped; its neighbours are
//! processed normally. Decisions go to the sink (stdout) as JSON lines; a summary goes to stderr.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::time::Instant;

use bursar_engine::{Engine, EngineConfig, Outcome, PolicySet};
use bursar_model::{DecisionKind, decode_event};
use serde::Serialize;

use crate::sink::DecisionSink;
use crate::{CliError, ErrorFormat};

/// What `eval` counted.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Lines read (blank lines excluded).
    pub lines: u64,
    /// Events applied.
    pub events: u64,
    /// Lines that were not valid events.
    pub malformed: u64,
    /// Events ignored because their id was seen before.
    pub duplicates: u64,
    /// Job events about jobs bursar never saw submitted.
    pub unknown_jobs: u64,
    /// Decisions by kind.
    pub decisions: std::collections::BTreeMap<&'static str, u64>,
    /// Dry-run decisions among them.
    pub dry_run: u64,
    /// Seconds spent.
    pub seconds: f64,
    /// Events per second.
    pub events_per_second: f64,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kinds: Vec<String> = self.decisions.iter().map(|(k, v)| format!("{k} {v}")).collect();
        write!(
            f,
            "eval: {} events ({} malformed, {} duplicate, {} about unknown jobs) in {:.3}s, {:.0} events/s; decisions: {}{}",
            self.events,
            self.malformed,
            self.duplicates,
            self.unknown_jobs,
            self.seconds,
            self.events_per_second,
            if kinds.is_empty() { "none".to_owned() } else { kinds.join(", ") },
            if self.dry_run > 0 { format!(" ({} dry-run)", self.dry_run) } else { String::new() },
        )
    }
}

/// Options of `eval` that are not the inputs.
#[derive(Debug, Clone)]
pub struct EvalOptions {
    /// Where the events come from, for messages.
    pub source_name: String,
    /// Engine settings.
    pub engine: EngineConfig,
    /// How to print per-line errors.
    pub error_format: ErrorFormat,
}

/// Opens `path`, or stdin for `-`.
pub fn open_events(path: &PathBuf) -> Result<Box<dyn Read>, CliError> {
    if path.as_os_str() == "-" {
        Ok(Box::new(std::io::stdin().lock()))
    } else {
        std::fs::File::open(path)
            .map(|f| Box::new(f) as Box<dyn Read>)
            .map_err(|e| CliError::io(format!("cannot open events file `{}`", path.display()), e))
    }
}

/// Runs `set` over the events of `input`, sending decisions to `sink`.
pub fn run(
    set: std::sync::Arc<PolicySet>,
    input: impl Read,
    sink: &mut dyn DecisionSink,
    opts: &EvalOptions,
) -> Result<Summary, CliError> {
    let mut engine = Engine::with_config(set, opts.engine);
    run_with(&mut engine, input, sink, opts)
}

/// Like [`run`] with an engine the caller built (restored from a snapshot, say).
pub fn run_with(
    engine: &mut Engine,
    input: impl Read,
    sink: &mut dyn DecisionSink,
    opts: &EvalOptions,
) -> Result<Summary, CliError> {
    let started = Instant::now();
    let mut reader = BufReader::with_capacity(256 * 1024, input);
    let mut line = String::new();
    let mut line_no: u64 = 0;
    let mut summary = Summary::default();
    let mut decisions = Vec::new();
    loop {
        line.clear();
        let n = match reader.read_line(&mut line) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                // Not UTF-8: skip to the next newline and report the line.
                line_no += 1;
                summary.lines += 1;
                summary.malformed += 1;
                report(opts, line_no, "line is not valid UTF-8");
                let mut junk = Vec::new();
                reader.read_until(b'\n', &mut junk).map_err(|e| CliError::io(&opts.source_name, e))?;
                continue;
            }
            Err(e) => return Err(CliError::io(format!("cannot read `{}`", opts.source_name), e)),
        };
        if n == 0 {
            break;
        }
        line_no += 1;
        let text = line.trim_end_matches(['\n', '\r']);
        if text.trim().is_empty() {
            continue;
        }
        summary.lines += 1;
        let event = match decode_event(text) {
            Ok(e) => e,
            Err(err) => {
                summary.malformed += 1;
                report(opts, line_no, &err.to_string());
                continue;
            }
        };
        decisions.clear();
        if engine.process(&event, Some(text), &mut decisions) == Outcome::Duplicate {
            continue;
        }
        sink.accept(text, &event, &decisions).map_err(|e| CliError::io("cannot write decisions", e))?;
    }
    sink.finish().map_err(|e| CliError::io("cannot write decisions", e))?;
    let stats = engine.stats();
    summary.events = stats.events;
    summary.duplicates = stats.duplicates;
    summary.unknown_jobs = stats.unknown_jobs;
    summary.dry_run = stats.dry_run_decisions;
    for (i, k) in DecisionKind::ALL.iter().enumerate() {
        if stats.decisions[i] > 0 {
            summary.decisions.insert(k.as_str(), stats.decisions[i]);
        }
    }
    summary.seconds = started.elapsed().as_secs_f64();
    summary.events_per_second = if summary.seconds > 0.0 { summary.events as f64 / summary.seconds } else { 0.0 };
    Ok(summary)
}

fn report(opts: &EvalOptions, line: u64, reason: &str) {
    match opts.error_format {
        ErrorFormat::Human => eprintln!("{}:{line}: skipped malformed event: {reason}", opts.source_name),
        ErrorFormat::Json => eprintln!(
            "{}",
            serde_json::json!({"file": opts.source_name, "line": line, "error": "malformed event", "reason": reason})
        ),
    }
}
