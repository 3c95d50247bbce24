//! A whole `bursar test` run: every case of every test file against one policy set, with an optional
//! name filter and coverage, summarised for people or as one JSON document for CI.

use std::collections::BTreeSet;
use std::sync::Arc;

use bursar_engine::{Coverage, PolicySet};
use serde::Serialize;

use crate::coverage::CoverageReport;
use crate::format::{FormatError, TestFile};
use crate::runner::{CaseResult, render_failure, run_case};

/// Options of a run.
#[derive(Debug, Clone, Default)]
pub struct SuiteOptions {
    /// Run only cases whose `file: name` contains this text.
    pub filter: Option<String>,
    /// Record branch coverage.
    pub coverage: bool,
}

/// The outcome of a run.
#[derive(Debug, Clone, Serialize)]
pub struct SuiteReport {
    /// Errors in test files (each fails the run).
    pub errors: Vec<FormatError>,
    /// Every case run, in file and case order.
    pub cases: Vec<CaseResult>,
    /// Cases that passed.
    pub passed: usize,
    /// Cases that failed.
    pub failed: usize,
    /// Cases the filter skipped.
    pub filtered_out: usize,
    /// Coverage, when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coverage: Option<CoverageReport>,
}

impl SuiteReport {
    /// True when every case passed and every test file parsed.
    pub fn ok(&self) -> bool {
        self.failed == 0 && self.errors.is_empty()
    }

    /// The report for people: one line per case, a diff under each failure, a summary line.
    pub fn render(&self) -> String {
        let mut s = String::new();
        for e in &self.errors {
            s.push_str(&format!("error: {e}\n"));
        }
        for c in &self.cases {
            if c.passed {
                s.push_str(&format!("ok    {}: {}\n", c.file, c.name));
            } else {
                s.push_str(&format!("FAIL  {}: {}    ({}:{})\n", c.file, c.name, c.file, c.line));
                s.push_str(&render_failure(c));
            }
        }
        if let Some(cov) = &self.coverage {
            s.push_str(&cov.render());
        }
        s.push_str(&format!(
            "test result: {}. {} passed; {} failed; {} filtered out{}\n",
            if self.ok() { "ok" } else { "FAILED" },
            self.passed,
            self.failed,
            self.filtered_out,
            if self.errors.is_empty() { String::new() } else { format!("; {} test-file error(s)", self.errors.len()) },
        ));
        s
    }
}

/// Runs the cases of `files` against `set`; `errors` are parse errors of other test files, carried into
/// the report.
pub fn run_suite(
    set: &Arc<PolicySet>,
    files: &[TestFile],
    errors: Vec<FormatError>,
    opts: &SuiteOptions,
) -> SuiteReport {
    let mut taken = Coverage::new();
    let mut seen: BTreeSet<Arc<str>> = BTreeSet::new();
    let mut cases = Vec::new();
    let mut filtered_out = 0;
    for f in files {
        let file = f.path.display().to_string();
        for c in &f.cases {
            if let Some(filter) = &opts.filter
                && !format!("{file}: {}", c.name).contains(filter.as_str())
            {
                filtered_out += 1;
                continue;
            }
            let r = run_case(set, &file, c, opts.coverage.then_some(&mut taken));
            if opts.coverage {
                for (_, d) in &r.decisions {
                    seen.extend(d.policies.iter().cloned());
                }
            }
            cases.push(r);
        }
    }
    let passed = cases.iter().filter(|c| c.passed).count();
    SuiteReport {
        errors,
        failed: cases.len() - passed,
        passed,
        cases,
        filtered_out,
        coverage: opts.coverage.then(|| CoverageReport::build(set, &taken, &seen)),
    }
}
