//! Real cluster history and synthetic workloads as bursar events (wire format v1).
//!
//! The importers turn three public or site-local formats into [`JobTrace`]s — one per job, with its
//! submission, start and end — and [`emit`] writes them as v1 events sorted by event time, optionally
//! with utilisation samples taken from a real duty-cycle series ([`util`]). The generator ([`workload`])
//! streams a synthetic workload of any size in constant memory. Every choice a trace does not record
//! (which utilisation curve a job gets, which project an OpenB pod belongs to) is made by a documented,
//! seeded rule (see `docs/importers.md`); nothing is invented silently, and every record that cannot be
//! mapped is counted in the [`Report`] with the reason.
//!
//! Boundaries: reading and writing only; no policy evaluation (pipe the output into `bursar eval`).
//!
//! Layout:
//! - [`bill`]: a cloud bill (FinOps FOCUS CSV, or another export through a mapping file) as
//!   `billing.charge` events, one per line, streamed.
//! - [`philly`], [`openb`], [`sacct`]: one parser per format, each `read(...) -> Vec<JobTrace>`.
//! - [`util`]: the GenAI duty-cycle series (tar.gz or CSV) and the job-to-container rule.
//! - [`throughput`]: the seeded throughput model (`--model-throughput`), labelled as modelled.
//! - [`emit`](mod@emit): the time-ordered merge of every job's events onto a writer.
//! - [`workload`]: the seeded, streaming workload generator.
//! - [`rng`]: version-stable seeded randomness.

pub mod bill;
pub mod emit;
pub mod openb;
pub mod philly;
pub mod rng;
pub mod sacct;
pub mod throughput;
pub mod util;
pub mod workload;

use std::collections::BTreeMap;
use std::fmt;

use bursar_model::{FinishStatus, JobSpec, Timestamp};

pub use emit::{EmitOptions, emit};
pub use throughput::ThroughputModel;
pub use util::UtilSeries;

/// One job as a trace recorded it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobTrace {
    /// The submission as bursar sees it (`job.submitted`).
    pub spec: JobSpec,
    /// When it was submitted.
    pub submitted: Timestamp,
    /// When it started, if it did.
    pub started: Option<Timestamp>,
    /// When and how it ended, if it did.
    pub finished: Option<(Timestamp, FinishStatus)>,
    /// The (first) machine it ran on, when the trace says (Philly's `detail[0].ip`).
    pub machine: Option<String>,
}

/// What an import did: records read, mapped, skipped (by reason), events written.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// The input format.
    pub format: String,
    /// Records read from the input (jobs, pods, sacct lines).
    pub records: u64,
    /// Records that became jobs.
    pub mapped: u64,
    /// Records skipped, by reason.
    pub skipped: BTreeMap<String, u64>,
    /// Events written.
    pub events: u64,
    /// `job.sample` events among them.
    pub samples: u64,
    /// Jobs that received utilisation samples.
    pub util_jobs: u64,
    /// Rules applied to fill or leave out fields, one sentence each.
    pub notes: Vec<String>,
}

impl Report {
    /// A report for `format`.
    pub fn new(format: &str) -> Report {
        Report { format: format.to_owned(), ..Report::default() }
    }

    /// Counts a skipped record.
    pub fn skip(&mut self, reason: impl Into<String>) {
        *self.skipped.entry(reason.into()).or_insert(0) += 1;
    }

    /// Records skipped in total.
    pub fn skipped_total(&self) -> u64 {
        self.skipped.values().sum()
    }

    /// Adds a note once.
    pub fn note(&mut self, note: impl Into<String>) {
        let note = note.into();
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "import {}: {} records, {} mapped, {} skipped; {} events written ({} job.sample for {} jobs)",
            self.format,
            self.records,
            self.mapped,
            self.skipped_total(),
            self.events,
            self.samples,
            self.util_jobs
        )?;
        for (reason, n) in &self.skipped {
            writeln!(f, "  skipped {n}: {reason}")?;
        }
        for note in &self.notes {
            writeln!(f, "  note: {note}")?;
        }
        Ok(())
    }
}

/// Why an input could not be imported at all (single bad records are skipped and counted instead).
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// Reading or writing failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        source: std::io::Error,
    },
    /// The input as a whole is not in the expected format.
    #[error("{0}")]
    Format(String),
}

impl ImportError {
    /// An I/O error with what was being done.
    pub fn io(context: impl fmt::Display, source: std::io::Error) -> ImportError {
        ImportError::Io { context: context.to_string(), source }
    }
}

/// Parses a trace time written without a zone (`2017-10-07 01:11:39` or `2026-11-02T09:00:00`) as UTC.
/// Returns `None` for anything else, including `None`/`Unknown` placeholders.
pub fn parse_naive_utc(s: &str) -> Option<Timestamp> {
    let s = s.trim();
    if s.len() != 19 {
        return Timestamp::parse(s).ok();
    }
    Timestamp::parse(&format!("{s}Z")).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn naive_times_are_read_as_utc_and_placeholders_are_none() {
        let t = parse_naive_utc("2017-10-07 01:11:39");
        assert_eq!(t.map(|t| t.to_string()), Some("2017-10-07T01:11:39Z".to_owned()));
        assert_eq!(parse_naive_utc("2026-11-02T09:00:00"), parse_naive_utc("2026-11-02 09:00:00"));
        assert_eq!(parse_naive_utc("Unknown"), None);
        assert_eq!(parse_naive_utc("None"), None);
        assert_eq!(parse_naive_utc(""), None);
    }

    #[test]
    fn report_counts_skips_by_reason() {
        let mut r = Report::new("philly");
        r.skip("a");
        r.skip("a");
        r.skip("b");
        r.note("n");
        r.note("n");
        assert_eq!(r.skipped_total(), 3);
        assert_eq!(r.notes.len(), 1);
        let text = r.to_string();
        assert!(text.contains("skipped 2: a"), "{text}");
    }
}
