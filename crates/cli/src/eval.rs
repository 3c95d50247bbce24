//! `bursar eval --policies DIR --events FILE|-`: run policies over an event stream.
//!
//! A thin driver of the one road ([`bursar_session::Session`]): the session frames the input (true
//! line numbers, a bound on a line's length), decodes each line under the producer's rules, applies
//! it and hands it to the journal — stdout ([`crate::sink::JsonLines`]) or, with `--audit`, the audit
//! log's writer, which prints each group's decisions only after their commit. A malformed line is
//! reported on stderr with its line number and reason, counted and skipped; its neighbours are
//! processed normally. Memory grows with live jobs and projects, not with the input.

use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use bursar_engine::{Engine, EngineConfig, PolicySet};
use bursar_model::DecisionKind;
use bursar_model::api::Rejected;
use bursar_session::{Journal, LineOutcome, Origin, Session, SessionError};
use serde::Serialize;

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
    /// The longest line accepted, in bytes.
    pub max_line: usize,
}

/// Opens `path`, or stdin for `-`. The reader is `Send`: the session reads and decodes on a thread of
/// its own while the calling thread applies.
pub fn open_events(path: &PathBuf) -> Result<Box<dyn Read + Send>, CliError> {
    if path.as_os_str() == "-" {
        Ok(Box::new(std::io::stdin()))
    } else {
        std::fs::File::open(path)
            .map(|f| Box::new(f) as Box<dyn Read + Send>)
            .map_err(|e| CliError::io(format!("cannot open events file `{}`", path.display()), e))
    }
}

/// The name of an events path in messages.
pub fn source_name(path: &std::path::Path) -> String {
    if path.as_os_str() == "-" { "<stdin>".into() } else { path.display().to_string() }
}

/// Prints a rejected line on stderr: `FILE:LINE: skipped malformed event: REASON`, or with
/// `--error-format json` the one shape of a rejected line, `{"source":…,"line":…,"error":…}`.
pub fn report_rejected(format: ErrorFormat, source: &str, r: &Rejected) {
    match format {
        ErrorFormat::Human => eprintln!("{source}:{}: skipped malformed event: {}", r.line, r.error),
        ErrorFormat::Json => {
            let r = Rejected { source: Some(source.to_owned()), ..r.clone() };
            eprintln!("{}", serde_json::to_string(&r).unwrap_or_default());
        }
    }
}

/// Maps a session failure to the CLI's error, with what was being done.
pub fn session_err(source: &str, e: SessionError) -> CliError {
    match e {
        SessionError::Read(io) => CliError::io(format!("cannot read `{source}`"), io),
        SessionError::Journal(bursar_session::JournalError::Output(io)) => CliError::io("cannot write decisions", io),
        SessionError::Journal(bursar_session::JournalError::Store(m)) => {
            CliError::Message(format!("cannot write decisions: {m}"))
        }
    }
}

/// Runs `set` over the events of `input` into `journal`; returns the summary and the journal.
pub fn run<J: Journal>(
    set: Arc<PolicySet>,
    input: impl Read + Send,
    journal: J,
    opts: &EvalOptions,
) -> Result<(Summary, J), CliError> {
    let started = Instant::now();
    let engine = Engine::with_config(set, opts.engine);
    let mut session =
        Session::open(engine, journal, Origin::Producer).map_err(|e| session_err(&opts.source_name, e.into()))?;
    session
        .read(input, opts.max_line, |outcome| {
            if let LineOutcome::Rejected(r) = outcome {
                report_rejected(opts.error_format, &opts.source_name, r);
            }
        })
        .map_err(|e| session_err(&opts.source_name, e))?;
    session.flush().map_err(|e| session_err(&opts.source_name, e.into()))?;
    let counts = *session.counts();
    let (engine, journal) = session.into_parts();
    let stats = engine.stats();
    let mut summary = Summary {
        lines: counts.lines,
        events: counts.applied,
        malformed: counts.rejected,
        duplicates: counts.duplicates,
        unknown_jobs: stats.unknown_jobs,
        dry_run: stats.dry_run_decisions,
        ..Summary::default()
    };
    for (i, k) in DecisionKind::ALL.iter().enumerate() {
        if stats.decisions[i] > 0 {
            summary.decisions.insert(k.as_str(), stats.decisions[i]);
        }
    }
    summary.seconds = started.elapsed().as_secs_f64();
    summary.events_per_second = if summary.seconds > 0.0 { summary.events as f64 / summary.seconds } else { 0.0 };
    Ok((summary, journal))
}
