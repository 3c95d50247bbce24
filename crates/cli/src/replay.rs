//! `bursar replay --policies NEW (--events FILE | --audit DB) [--baseline OLD]`: re-evaluate history
//! under a candidate policy set from a clean state and report what would have changed.
//!
//! With `--events`, the baseline is `--baseline OLD` evaluated on the same events (an events file
//! records no decisions). With `--audit`, the baseline is what the audit log recorded, unless
//! `--baseline` is given. The comparison itself is `bursar_policytest::replay`; this module opens the
//! input (read through the session crate's framing and decoding: a malformed line is reported with
//! its number and skipped) and prints the report.

use std::path::PathBuf;

use bursar_engine::EngineConfig;
use bursar_model::Timestamp;
use bursar_policytest::Replayer;
use bursar_session::{Frame, Line};

use crate::test::ReportFormat;
use crate::{CliError, ErrorFormat, ExitCode, load_policies};

/// Arguments of `bursar replay`.
#[derive(Debug, Clone, clap::Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["events", "audit"])))]
pub struct ReplayArgs {
    /// The candidate policy directory.
    #[arg(long)]
    pub policies: PathBuf,
    /// History as an events file (JSON Lines; `-` reads stdin).
    #[arg(long)]
    pub events: Option<PathBuf>,
    /// History as an audit log (SQLite): its events, and the decisions recorded for them.
    #[arg(long)]
    pub audit: Option<PathBuf>,
    /// Replay only events at or after this time (RFC 3339), from a clean state.
    #[arg(long, value_parser = parse_time)]
    pub since: Option<Timestamp>,
    /// Compare with this policy directory evaluated on the same events instead of what was recorded.
    #[arg(long)]
    pub baseline: Option<PathBuf>,
    /// Report format.
    #[arg(long, value_enum, default_value_t = ReportFormat::Human)]
    pub format: ReportFormat,
    /// How many changed decisions to list.
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    /// How far one event may move the event clock (with --events).
    #[command(flatten)]
    pub clock: crate::eval::ClockArgs,
}

fn parse_time(s: &str) -> Result<Timestamp, String> {
    Timestamp::parse(s).map_err(|e| e.to_string())
}

/// Runs the replay and prints the report on stdout.
pub fn run(args: &ReplayArgs, error_format: ErrorFormat) -> Result<ExitCode, CliError> {
    let load = |dir: &PathBuf| match load_policies(dir, error_format) {
        Ok(s) => Ok(Some(s)),
        Err(CliError::Policies { count }) => {
            eprintln!("{}: {count} error(s) in the policies", dir.display());
            Ok(None)
        }
        Err(e) => Err(e),
    };
    let Some(candidate) = load(&args.policies)? else { return Ok(ExitCode::Failed) };
    let config = EngineConfig::default();
    let mut replayer = match &args.baseline {
        Some(dir) => {
            let Some(base) = load(dir)? else { return Ok(ExitCode::Failed) };
            Replayer::against_policies(candidate, base, config)
                .with_labels(args.policies.display().to_string(), format!("baseline `{}`", dir.display()))
        }
        None if args.events.is_some() => {
            return Err(CliError::Message(
                "an events file records no decisions to compare with\nhelp: add `--baseline OLD_POLICY_DIR`, or replay an audit log with `--audit DB`"
                    .into(),
            ));
        }
        None => Replayer::against_recorded(candidate, config)
            .with_labels(args.policies.display().to_string(), "the decisions recorded in the audit log"),
    }
    .with_limit(args.limit);
    // An events file is a producer's stream: its clock is bounded. An audit log holds only what was
    // accepted, and is replayed as it was.
    if args.events.is_some() {
        replayer = replayer.with_clock_bound(args.clock.bound());
    }

    if let Some(path) = &args.events {
        replay_events(&mut replayer, path, args.since, error_format)?;
    } else if let Some(db) = &args.audit {
        replay_audit(&mut replayer, db, args.since)?;
    }
    let report = replayer.finish();
    match args.format {
        ReportFormat::Human => print!("{}", report.render()),
        ReportFormat::Json => {
            println!("{}", serde_json::to_string(&report).map_err(|e| CliError::Message(e.to_string()))?)
        }
    }
    Ok(ExitCode::Ok)
}

fn replay_events(
    replayer: &mut Replayer,
    path: &PathBuf,
    since: Option<Timestamp>,
    error_format: ErrorFormat,
) -> Result<(), CliError> {
    let name = crate::eval::source_name(path);
    let input = crate::eval::open_events(path)?;
    replayer
        .read(input, bursar_session::DEFAULT_MAX_LINE, since, |r| crate::eval::report_rejected(error_format, &name, r))
        .map_err(|e| CliError::io(format!("cannot read `{name}`"), e))
}

/// Feeds the inputs of an audit log, in order, each with the decisions recorded for it, decoded under
/// the journal's rules: `serve`'s wall ticks (`bursar.tick`, and the `bursar-tick-…` clock ticks of
/// older logs) are replayed as wall ticks, never as a producer's `clock.tick`, so the candidate fires
/// the timers serve fired, at the same times. Decisions recorded without an input (possible in logs
/// of older versions) are grouped with the next input.
fn replay_audit(replayer: &mut Replayer, db: &PathBuf, since: Option<Timestamp>) -> Result<(), CliError> {
    const PAGE: usize = 10_000;
    let audit_err = |e: bursar_audit::AuditError| CliError::Message(format!("audit log `{}`: {e}", db.display()));
    if !db.is_file() {
        return Err(CliError::Message(format!("audit log `{}` does not exist", db.display())));
    }
    let log = bursar_audit::AuditLog::open_read(db).map_err(audit_err)?;
    let mut decisions: std::collections::VecDeque<bursar_audit::StoredDecision> = std::collections::VecDeque::new();
    let mut decision_cursor = 0i64;
    let mut decisions_done = false;
    let mut event_cursor = 0i64;
    let mut recorded = Vec::new();
    loop {
        let events = log.events_since(event_cursor, PAGE).map_err(audit_err)?;
        if events.is_empty() {
            break;
        }
        for stored in events {
            event_cursor = stored.seq;
            // Pull the decisions up to and including this event's.
            recorded.clear();
            loop {
                if decisions.is_empty() && !decisions_done {
                    let page = log.decisions_since(decision_cursor, PAGE).map_err(audit_err)?;
                    decisions_done = page.len() < PAGE;
                    if let Some(last) = page.last() {
                        decision_cursor = last.seq;
                    }
                    decisions.extend(page);
                }
                match decisions.front() {
                    Some(d) if d.event_seq.is_none_or(|s| s <= stored.seq) => {
                        if let Some(d) = decisions.pop_front() {
                            match d.to_decision() {
                                Ok(dec) => recorded.push(dec),
                                Err(e) => eprintln!("{}: decision {} is unreadable, skipped: {e}", db.display(), d.seq),
                            }
                        }
                    }
                    _ => break,
                }
            }
            let frame = Frame::Line { line: u64::try_from(stored.seq).unwrap_or(0), bytes: stored.raw.as_bytes() };
            let input = match bursar_session::decode(frame, replayer.origin()) {
                Line::Input(d) => d.input,
                Line::Blank => continue,
                Line::Rejected(r) => {
                    replayer.malformed();
                    eprintln!(
                        "{}: event {} ({}) does not decode, skipped: {}",
                        db.display(),
                        stored.seq,
                        stored.event_id,
                        r.error
                    );
                    continue;
                }
            };
            if since.is_some_and(|s| input.time() < s) {
                continue;
            }
            let _ = replayer.input(&input, &stored.raw, &recorded);
        }
    }
    Ok(())
}
