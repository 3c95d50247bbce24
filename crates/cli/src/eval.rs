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
use bursar_model::Duration;
use bursar_model::api::Rejected;
use bursar_session::{Applied, ClockBound, Journal, LineOutcome, Origin, Session, SessionError};
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
    /// Events refused: beyond the clock bound, or a second submission of a known job.
    pub refused: u64,
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
            "eval: {} events ({} malformed, {} duplicate, {}{} about unknown jobs) in {:.3}s, {:.0} events/s; decisions: {}{}",
            self.events,
            self.malformed,
            self.duplicates,
            if self.refused > 0 { format!("{} refused, ", self.refused) } else { String::new() },
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
    /// How far one event may move the event clock.
    pub clock: ClockBound,
}

/// How far one event may move the event clock, for the commands that read a producer's stream
/// (`eval`, `replay --events`). One event dated `9999-12-31` would otherwise expire every approval,
/// reclaim every running job and count every quota in the year 9999.
#[derive(Debug, Clone, clap::Args)]
pub struct ClockArgs {
    /// The largest forward jump of the event clock from the latest event so far; an event further
    /// ahead is refused with its line number and changes nothing. The default is twice the longest
    /// quiet spell of the public traces bursar imports (Philly: 50 h; Alibaba OpenB: 392 h).
    #[arg(long, value_name = "DURATION", default_value = "31d", value_parser = parse_duration)]
    pub max_clock_jump: Duration,
    /// Accept events however far ahead of the event clock they are.
    #[arg(long, conflicts_with = "max_clock_jump")]
    pub allow_clock_jump: bool,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    match Duration::parse(s) {
        Ok(d) if d.millis() > 0 => Ok(d),
        Ok(_) => Err("the bound must be longer than zero".into()),
        Err(e) => Err(e.to_string()),
    }
}

impl ClockArgs {
    /// The bound these flags ask for.
    pub fn bound(&self) -> ClockBound {
        if self.allow_clock_jump { ClockBound::Unbounded } else { ClockBound::Jump { max: self.max_clock_jump } }
    }
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

/// Prints a refused line on stderr: `FILE:LINE: refused: REASON` (JSON: the rejected-line shape).
pub fn report_refused(format: ErrorFormat, source: &str, line: u64, reason: &str) {
    report_rejected_as(format, source, &Rejected { source: None, line, error: reason.to_owned() }, "refused")
}

fn report_rejected_as(format: ErrorFormat, source: &str, r: &Rejected, what: &str) {
    match format {
        ErrorFormat::Human => eprintln!("{source}:{}: {what}: {}", r.line, r.error),
        ErrorFormat::Json => {
            let r = Rejected { source: Some(source.to_owned()), error: format!("{what}: {}", r.error), ..r.clone() };
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
    let mut session = Session::open(engine, journal, Origin::Producer)
        .map_err(|e| session_err(&opts.source_name, e.into()))?
        .with_clock_bound(opts.clock);
    session
        .read(input, opts.max_line, |outcome| match outcome {
            LineOutcome::Rejected(r) => report_rejected(opts.error_format, &opts.source_name, r),
            LineOutcome::Input { line, applied: Applied::Refused(r), .. } => {
                report_refused(opts.error_format, &opts.source_name, *line, &r.reason)
            }
            _ => {}
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
        refused: counts.refused,
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
