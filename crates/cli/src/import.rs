//! `bursar import <philly|openb|sacct> FILE [--util FILE] [--seed S]`: a cluster trace as v1 events;
//! `bursar import bill FILE [--mapping FILE]`: a cloud bill (FOCUS CSV) as `billing.charge` events.
//!
//! Events go to stdout (a trace sorted by event time, a bill in the order of its lines, ready for
//! `bursar eval --events -`); the report — records read, mapped, skipped and why, and every fill rule
//! applied; for a bill, each refused line with its line and column, and progress — goes to stderr. The
//! mapping of each format is in `docs/importers.md` and in the `bursar-traces` crate.

use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use bursar_traces::{EmitOptions, ImportError, Report, ThroughputModel, UtilSeries, openb, philly, sacct};

use crate::CliError;

/// The trace formats `import` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Microsoft Philly `sampled_jobs.json` (a JSON array of jobs).
    Philly,
    /// Alibaba OpenB `openb_pod_list_default.csv`.
    Openb,
    /// Slurm `sacct --parsable2` output (see docs/importers.md for the `--format` list).
    Sacct,
    /// A cloud bill: a FinOps FOCUS export (CSV), or another export with `--mapping FILE`.
    Bill,
}

/// Options of `import`.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// Input format.
    pub format: Format,
    /// Input file.
    pub file: PathBuf,
    /// Duty-cycle series to attach as `job.sample` events.
    pub util: Option<PathBuf>,
    /// Seed of the job-to-series rule.
    pub seed: u64,
    /// Seconds between two samples of a running job.
    pub sample_every_secs: i64,
    /// Declare every Philly job ready (the trace has no readiness).
    pub assume_ready: bool,
    /// Attach seeded, modelled throughput to the utilisation samples (and model the GPU type and
    /// configuration a trace lacks): `bursar_traces::throughput`.
    pub model_throughput: bool,
    /// `bill` only: the mapping file of an export that is not FOCUS (columns, tag keys, units, GPUs
    /// per SKU or resource).
    pub mapping: Option<PathBuf>,
}

/// What an import did, for stderr.
#[derive(Debug)]
pub enum Imported {
    /// A trace.
    Trace(Report),
    /// A bill.
    Bill(bursar_traces::bill::BillReport),
}

impl std::fmt::Display for Imported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Imported::Trace(r) => r.fmt(f),
            Imported::Bill(r) => r.fmt(f),
        }
    }
}

/// `bursar import bill FILE`: streams the bill's lines to `out` as charges; refused lines and progress
/// go to stderr as they happen.
fn bill(opts: &ImportOptions, out: &mut dyn Write) -> Result<Imported, CliError> {
    if opts.util.is_some() || opts.assume_ready || opts.model_throughput {
        return Err(CliError::Message(
            "`--util`, `--assume-ready` and `--model-throughput` apply to traces, not to `import bill`".into(),
        ));
    }
    let mapping = match &opts.mapping {
        Some(p) => bursar_traces::bill::Mapping::from_file(p).map_err(err)?,
        None => bursar_traces::bill::Mapping::default(),
    };
    let total = std::fs::metadata(&opts.file).ok().map(|m| m.len());
    let input = open(&opts.file)?;
    let mut w = BufWriter::with_capacity(1 << 16, out);
    let shown = opts.file.display().to_string();
    let report = bursar_traces::bill::import(input, &shown, &mapping, total, &mut w, &mut std::io::stderr().lock())
        .map_err(err)?;
    w.flush().map_err(|e| CliError::io("cannot write events", e))?;
    Ok(Imported::Bill(report))
}

fn err(e: ImportError) -> CliError {
    match e {
        ImportError::Io { context, source } => CliError::io(context, source),
        ImportError::Format(m) => CliError::Message(m),
    }
}

fn open(path: &Path) -> Result<BufReader<std::fs::File>, CliError> {
    std::fs::File::open(path)
        .map(|f| BufReader::with_capacity(1 << 16, f))
        .map_err(|e| CliError::io(format!("cannot open `{}`", path.display()), e))
}

/// Runs the import, writing events to `out`; returns the report for stderr.
pub fn run(opts: &ImportOptions, out: &mut dyn Write) -> Result<Imported, CliError> {
    let name = match opts.format {
        Format::Philly => "philly",
        Format::Openb => "openb",
        Format::Sacct => "sacct",
        Format::Bill => return bill(opts, out),
    };
    if opts.mapping.is_some() {
        return Err(CliError::Message("`--mapping` applies to `import bill` only".into()));
    }
    let mut report = Report::new(name);
    if opts.assume_ready && opts.format != Format::Philly {
        return Err(CliError::Message("`--assume-ready` applies to `philly` only".into()));
    }
    if opts.model_throughput && opts.util.is_none() {
        return Err(CliError::Message(
            "`--model-throughput` attaches throughput to utilisation samples: add `--util FILE`".into(),
        ));
    }
    let input = open(&opts.file)?;
    let mut jobs = match opts.format {
        Format::Philly => {
            philly::read(input, philly::Fill { assume_ready: opts.assume_ready }, &mut report).map_err(err)?
        }
        Format::Openb => openb::read(input, &mut report).map_err(err)?,
        Format::Sacct => sacct::read(input, &mut report).map_err(err)?,
        Format::Bill => Vec::new(),
    };
    let util = match &opts.util {
        Some(p) => {
            let u = UtilSeries::from_path(p).map_err(err)?;
            if u.is_empty() {
                return Err(CliError::Message(format!("`{}` holds no usable utilisation series", p.display())));
            }
            report.note(format!(
                "--util: {} series from {} rows ({} malformed rows, {} series under {} points dropped); seed {}, one sample every {} s",
                u.len(),
                u.rows,
                u.bad_rows,
                u.short_series,
                bursar_traces::util::MIN_POINTS,
                opts.seed,
                opts.sample_every_secs
            ));
            Some(u)
        }
        None => None,
    };
    let throughput = opts.model_throughput.then_some(ThroughputModel { seed: opts.seed });
    if let Some(m) = throughput {
        for j in &mut jobs {
            m.fill(j, &mut report);
        }
        report.note(format!(
            "--model-throughput: every sample carries MODELLED throughput in `{}` (seed {}; docs/importers.md): not measured",
            bursar_traces::throughput::UNIT,
            opts.seed
        ));
    }
    let emit =
        EmitOptions { util: util.as_ref(), seed: opts.seed, sample_every_secs: opts.sample_every_secs, throughput };
    let mut w = BufWriter::with_capacity(1 << 16, out);
    bursar_traces::emit(&jobs, &emit, &mut w, &mut report).map_err(err)?;
    w.flush().map_err(|e| CliError::io("cannot write events", e))?;
    Ok(Imported::Trace(report))
}
