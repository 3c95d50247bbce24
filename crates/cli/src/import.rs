//! `bursar import <philly|openb|sacct> FILE [--util FILE] [--seed S]`: a cluster trace as v1 events.
//!
//! Events go to stdout (sorted by event time, ready for `bursar eval --events -`); the report — records
//! read, mapped, skipped and why, and every fill rule applied — goes to stderr. The mapping of each
//! format is in `docs/importers.md` and in the `bursar-traces` crate.

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
pub fn run(opts: &ImportOptions, out: &mut dyn Write) -> Result<Report, CliError> {
    let name = match opts.format {
        Format::Philly => "philly",
        Format::Openb => "openb",
        Format::Sacct => "sacct",
    };
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
    Ok(report)
}
