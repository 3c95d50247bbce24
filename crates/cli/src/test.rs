//! `bursar test [DIR]`: run the policy test files (`*.test.toml`) under DIR against the policies in
//! DIR, with optional branch coverage. The format and the runner live in `bursar-policytest`; this
//! module loads, runs and prints. See `docs/testing-policies.md`.

use std::path::{Path, PathBuf};

use bursar_policytest::{SuiteOptions, find_test_files, load_test_files, run_suite};

use crate::{CliError, ErrorFormat, ExitCode, load_policies};

/// How a report is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ReportFormat {
    /// For people.
    #[default]
    Human,
    /// One JSON document, for CI and tools.
    Json,
}

/// Arguments of `bursar test`.
#[derive(Debug, Clone, clap::Args)]
pub struct TestArgs {
    /// The policy directory; its `*.test.toml` files (at any depth) are the tests. A single test file
    /// runs against the policies of its directory.
    #[arg(default_value = "policies")]
    pub dir: PathBuf,
    /// Run only the cases whose `file: case name` contains this text.
    #[arg(long)]
    pub filter: Option<String>,
    /// Report format.
    #[arg(long, value_enum, default_value_t = ReportFormat::Human)]
    pub format: ReportFormat,
    /// Report which policy branches (rules, conditions) the cases exercised, and list the untested ones.
    #[arg(long)]
    pub coverage: bool,
    /// Fail when branch coverage is below this percentage (implies --coverage).
    #[arg(long, value_name = "PCT")]
    pub min_coverage: Option<f64>,
}

/// Runs the tests; exit 1 if a case failed, a test file has an error or coverage is too low.
pub fn run(args: &TestArgs, error_format: ErrorFormat) -> Result<ExitCode, CliError> {
    let policy_dir: &Path = if args.dir.is_file() { args.dir.parent().unwrap_or(Path::new(".")) } else { &args.dir };
    let paths = find_test_files(&args.dir)
        .map_err(|e| CliError::io(format!("cannot list test files in `{}`", args.dir.display()), e))?;
    if paths.is_empty() {
        eprintln!(
            "bursar test: no test files (`*.test.toml`) under `{}`\nhelp: write one beside the policies; see docs/testing-policies.md",
            args.dir.display()
        );
        return Ok(ExitCode::Failed);
    }
    let set = match load_policies(policy_dir, error_format) {
        Ok(s) => s,
        Err(CliError::Policies { count }) => {
            eprintln!("{}: {count} error(s) in the policies; no test was run", policy_dir.display());
            return Ok(ExitCode::Failed);
        }
        Err(e) => return Err(e),
    };
    let (files, errors) = load_test_files(&paths);
    let opts = SuiteOptions { filter: args.filter.clone(), coverage: args.coverage || args.min_coverage.is_some() };
    let report = run_suite(&set, &files, errors, &opts);
    let coverage_low = match (&report.coverage, args.min_coverage) {
        (Some(c), Some(min)) => c.percent + 1e-9 < min,
        _ => false,
    };
    match args.format {
        ReportFormat::Human => {
            print!("{}", report.render());
            if coverage_low && let Some(c) = &report.coverage {
                println!(
                    "coverage {:.1}% is below the required {:.1}% (--min-coverage)",
                    c.percent,
                    args.min_coverage.unwrap_or(0.0)
                );
            }
        }
        ReportFormat::Json => {
            let mut v = serde_json::to_value(&report).map_err(|e| CliError::Message(e.to_string()))?;
            if let Some(o) = v.as_object_mut() {
                o.insert("ok".into(), serde_json::Value::Bool(report.ok() && !coverage_low));
                if let Some(min) = args.min_coverage {
                    o.insert("min_coverage".into(), serde_json::json!(min));
                }
            }
            println!("{v}");
        }
    }
    Ok(if report.ok() && !coverage_low { ExitCode::Ok } else { ExitCode::Failed })
}
