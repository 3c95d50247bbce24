//! Where the GPU-hours went: per-job facts kept beside the audit log, reports of nominal vs effective
//! GPU-hours by project, user or tag, the billing-mode comparison, and a self-contained HTML page with
//! charts.
//!
//! Boundaries: this crate reads an audit database written by `bursar-audit` through its typed reads
//! (the inputs, the engine's job steps and the decisions) and owns the `facts_*` tables it adds to the
//! same file; it never writes the audit tables, evaluates policies or serves HTTP. The facts are derived data, rebuilt from the log
//! when their version or the idle threshold changes. `bursar report` (crates/cli) and `bursar serve`
//! call in here.
//!
//! ```no_run
//! use bursar_report::{FactsStore, GroupBy, Options, Span, build, render};
//! # fn demo() -> bursar_report::Result<()> {
//! let mut store = FactsStore::open("audit.db", None)?;   // creates the facts tables if needed
//! store.catch_up()?;                                      // applies what the log gained since
//! let report = build(&store, &Options { span: Span::parse("2026-11")?, by: GroupBy::Project, prices: None })?;
//! let html = render::html(&report);                       // or render::table / csv / json
//! # let _ = html; Ok(()) }
//! ```
//!
//! For `serve`: [`current_json`] and [`current_html`] catch up and render the current month (the month
//! of the newest event) or a `period` and `by` from the query string.
//!
//! # Layout
//! - [`facts`] — [`FactsStore`]: the facts tables, the accounting rules, incremental catch-up.
//! - [`report`] — [`Report`] and [`build`]: the grouped queries.
//! - [`billing`] — the price file and the billing-mode arithmetic.
//! - [`policy`] — idle threshold and monthly budgets read from the policy files.
//! - [`period`] — `--period` spans and day arithmetic.
//! - [`render`] — table, CSV, JSON and HTML (with hand-written SVG charts in [`render::svg`]).
//! - [`error`] — [`ReportError`].

pub mod billing;
pub mod error;
pub mod facts;
pub mod period;
pub mod policy;
pub mod render;
pub mod report;

use std::path::Path;

pub use billing::{Comparison, Prices};
pub use error::{ReportError, Result};
pub use facts::{CatchUp, FactsStore, JobFacts, Split};
pub use period::Span;
pub use policy::PolicyHints;
pub use report::{GroupBy, Options, Report, build};

/// The report `serve` answers: catches up the facts of `db` and builds the report for `period`
/// (default: the calendar month of the newest event in the log — the engine's "now", which is also
/// right for a replayed history — or of `now_ms` when the log is empty), grouped by `by` (default
/// `project`).
pub fn serve_report(
    db: &Path,
    period: Option<&str>,
    by: Option<&str>,
    prices: Option<&Prices>,
    now_ms: i64,
) -> Result<Report> {
    let mut store = FactsStore::open(db, None)?;
    store.catch_up()?;
    let span = match period {
        Some(p) => Span::parse(p)?,
        None => {
            let newest = store.audit().newest_event_time()?;
            Span::month_of(newest.unwrap_or(now_ms).div_euclid(period::DAY_MS))
        }
    };
    let by = GroupBy::parse(by.unwrap_or("project"))?;
    build(&store, &Options { span, by, prices: prices.cloned() })
}

/// `GET /v1/report[?period=2026-11&by=project]` for `serve`: [`serve_report`] as JSON.
pub fn current_json(db: &Path, period: Option<&str>, by: Option<&str>, now_ms: i64) -> Result<String> {
    serve_report(db, period, by, None, now_ms).map(|r| render::json(&r))
}

/// `GET /report[?period=…&by=…]` for `serve`: [`serve_report`] as one self-contained HTML page.
pub fn current_html(db: &Path, period: Option<&str>, by: Option<&str>, now_ms: i64) -> Result<String> {
    serve_report(db, period, by, None, now_ms).map(|r| render::html(&r))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serve_reports_need_an_audit_log() {
        let missing = std::env::temp_dir().join(format!("bursar-report-none-{}.db", std::process::id()));
        let e = current_json(&missing, None, None, 0).unwrap_err().to_string();
        assert!(e.contains("does not exist"), "{e}");
    }
}
