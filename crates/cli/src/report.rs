//! `bursar report`: where the GPU-hours went — nominal vs effective GPU-hours by project, user or tag,
//! what policies prevented, and what each billing mode would have cost. A thin layer over
//! `bursar-report`: bring the facts up to date from the audit log, query, render. The idle threshold
//! and budgets come from a policy set loaded with [`crate::load_policies`], the loader `check` and
//! `eval` use, never from a second reading of the files.

use std::io::Write;
use std::path::{Path, PathBuf};

use bursar_engine::PolicySet;
use bursar_report::{FactsStore, GroupBy, Options, PolicyHints, Prices, Span, build, render};

use crate::{CliError, ErrorFormat, ExitCode};

/// Output formats of `bursar report`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ReportFormat {
    /// Aligned columns for a terminal.
    #[default]
    Table,
    /// The whole report as one JSON document.
    Json,
    /// One row per group (RFC 4180).
    Csv,
    /// One self-contained HTML page with charts (no network needed to view it).
    Html,
}

/// `bursar report …`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReportArgs {
    /// The audit database written by `bursar eval --audit` or `bursar serve`.
    #[arg(long)]
    pub db: PathBuf,
    /// A month (`2026-11`), year (`2026`), day, range (`2026-11-01..2026-11-15`) or `all`; default:
    /// the month of the log's newest event (this month, on a live log).
    #[arg(long)]
    pub period: Option<String>,
    /// Rows: `project`, `user`, `config` (the submission's `config`; jobs naming none are one row, `(no config)`) or `tag:KEY`.
    #[arg(long, default_value = "project")]
    pub by: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = ReportFormat::Table)]
    pub format: ReportFormat,
    /// A price file (TOML) for the billing-mode comparison and, with its `[gpu_types]` rates, the cost
    /// per unit of work; see examples/prices.toml.
    #[arg(long, value_name = "FILE")]
    pub prices: Option<PathBuf>,
    /// Add the cost per unit of work: for each configuration and GPU type with runs that reported
    /// throughput, throughput per GPU, cost per 1k units under each billing mode, the ranking of the
    /// GPU types and the scaling efficiency across GPU counts. With `--format csv`, the CSV holds
    /// these rows instead of the groups.
    #[arg(long)]
    pub cost_per_unit: bool,
    /// The policy directory, loaded as `eval` loads it: its enforced idle-reclaim threshold and monthly
    /// quotas are used (the ones `eval --audit` stored are used otherwise; 5% utilisation without
    /// either). A directory with errors stops the report, with the errors `bursar check` prints.
    #[arg(long, value_name = "DIR")]
    pub policies: Option<PathBuf>,
    /// Write to this file instead of stdout.
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Drop the stored facts and rebuild them from the whole audit log.
    #[arg(long)]
    pub rebuild: bool,
}

fn err(e: bursar_report::ReportError) -> CliError {
    CliError::Message(e.to_string())
}

/// Brings the facts of `db` up to date, with the idle threshold and budgets of `policies` (the set
/// that was just run). Called by `eval --audit` after the stream so that `report` starts from
/// current facts.
pub fn update_facts(db: &Path, policies: Option<&PolicySet>) -> Result<bursar_report::CatchUp, CliError> {
    let hints = policies.map(PolicyHints::from_set);
    let mut store = FactsStore::open(db, hints.as_ref()).map_err(err)?;
    store.catch_up().map_err(err)
}

/// Runs `bursar report`.
pub fn run(args: &ReportArgs, error_format: ErrorFormat) -> Result<ExitCode, CliError> {
    let by = GroupBy::parse(&args.by).map_err(err)?;
    let prices = args.prices.as_deref().map(Prices::from_file).transpose().map_err(err)?;
    let set = match args.policies.as_deref().map(|dir| crate::load_policies(dir, error_format)).transpose() {
        Ok(set) => set,
        // Every error is printed already, as `check` prints it.
        Err(CliError::Policies { .. }) => return Ok(ExitCode::Failed),
        Err(e) => return Err(e),
    };
    let hints = set.as_deref().map(PolicyHints::from_set);
    let mut store = FactsStore::open(&args.db, hints.as_ref()).map_err(err)?;
    if args.rebuild {
        store.reset().map_err(err)?;
    }
    store.catch_up().map_err(err)?;
    let span = match &args.period {
        Some(p) => Span::parse(p).map_err(err)?,
        None => {
            let newest = store.audit().newest_event_time().map_err(|e| CliError::Message(e.to_string()))?;
            let span =
                Span::month_of(newest.unwrap_or_else(bursar_audit::wall_ms).div_euclid(bursar_report::period::DAY_MS));
            eprintln!(
                "bursar report: period {} (the log's newest month; `--period all` for all of history)",
                span.label
            );
            span
        }
    };
    let report = build(&store, &Options { span, by, prices, cost_per_unit: args.cost_per_unit }).map_err(err)?;
    let text = match args.format {
        ReportFormat::Table => render::table(&report),
        ReportFormat::Json => render::json(&report),
        ReportFormat::Csv if args.cost_per_unit => render::cost_csv(&report),
        ReportFormat::Csv => render::csv(&report),
        ReportFormat::Html => render::html(&report),
    };
    match &args.output {
        Some(path) => std::fs::write(path, text).map_err(|e| CliError::io(format!("write `{}`", path.display()), e))?,
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())
                .and_then(|()| out.flush())
                .map_err(|e| CliError::io("write the report", e))?;
        }
    }
    Ok(ExitCode::Ok)
}
