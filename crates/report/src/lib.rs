//! Where the GPU-hours went: per-job facts kept beside the audit log, reports of nominal vs effective
//! GPU-hours by project, user or tag, the billing-mode comparison, and a self-contained HTML page with
//! charts.
//!
//! # Boundaries and dependencies
//!
//! - **Reads the audit log only through `bursar-audit`'s typed reads** ([`bursar_audit::AuditLog`]:
//!   `events_since`, `steps_between`, `decisions_since`, `newest_event_time`); it runs no SQL against
//!   the audit tables and never writes them. It owns the `facts_*` tables it adds to the same file
//!   (derived data: rebuilt from the log when their version or the idle threshold changes).
//! - **The job lifecycle is the engine's** ([`bursar_engine::Step`], journalled per input in the
//!   audit log's `lifecycle` table): a job starts and is released when the engine says so; this crate
//!   does the accounting (samples, idle/held/failure, reruns, days and hours, money) on top.
//! - **Budgets and the idle threshold come from a loaded [`bursar_engine::PolicySet`]**
//!   ([`PolicyHints::from_set`], over the set's own description of what it limits); this crate never
//!   reads or parses policy files, and never evaluates policies.
//! - No HTTP, no CLI: `bursar report` and `bursar eval --audit` (crates/cli) and `bursar serve`'s
//!   report routes call in here. It depends on `bursar-model` (decoding stored inputs),
//!   `bursar-engine` (steps, the policy set), `bursar-audit` (the typed reads), `rusqlite` (the facts
//!   tables) and `toml` (the price file).
//!
//! ```no_run
//! use bursar_report::{FactsStore, GroupBy, Options, PolicyHints, Span, build, render};
//! # fn demo(set: &bursar_engine::PolicySet) -> bursar_report::Result<()> {
//! let hints = PolicyHints::from_set(set);                 // budgets and idle threshold of the set
//! let mut store = FactsStore::open("audit.db", Some(&hints))?; // creates the facts tables if needed
//! store.catch_up()?;                                      // applies what the log gained since
//! let opts = Options { span: Span::parse("2026-11")?, by: GroupBy::Project, prices: None, cost_per_unit: false };
//! let report = build(&store, &opts)?;
//! let html = render::html(&report);                       // or render::table / csv / json
//! # let _ = html; Ok(()) }
//! ```
//!
//! # Exports
//!
//! - [`FactsStore`] (with [`CatchUp`], [`JobFacts`], [`Split`]): the facts and the incremental catch-up
//!   — what `eval --audit` runs after a stream and every report runs first.
//! - [`PolicyHints`]: what a report takes from the policies, kept beside the facts so a report
//!   without the policies at hand uses the set the log was written with.
//! - [`build`], [`Report`], [`Options`], [`GroupBy`], [`Span`]: the grouped queries and their options.
//! - [`Prices`], [`Comparison`]: the price file (with rates per GPU type) and the billing-mode
//!   comparison.
//! - [`CostPerUnit`]: cost per unit of work by configuration and GPU type, with the ranking and the
//!   scaling efficiency (`--cost-per-unit`).
//! - [`render`]: table, CSV, JSON and HTML.
//! - [`serve_report`], [`current_json`], [`current_html`], [`ReportQuery`]: the report `serve`
//!   answers — catch up with the set in force and render the current month (the month of the newest
//!   event) or a `period`, `by` and `cost_per_unit` from the query string.
//! - [`ReportError`], [`Result`].
//!
//! # Layout
//! - [`facts`] — [`FactsStore`]: the facts tables, the accounting rules, incremental catch-up.
//! - [`report`] — [`Report`] and [`build`]: the grouped queries.
//! - [`reconcile`] — [`Reconciliation`]: the imported bill beside the hours jobs held.
//! - [`billing`] — the price file and the billing-mode arithmetic.
//! - [`cost`] — cost per unit of work from measured throughput.
//! - [`policy`] — [`PolicyHints`]: idle threshold and monthly budgets from a loaded policy set.
//! - [`period`] — `--period` spans and day arithmetic.
//! - [`render`] — table, CSV, JSON and HTML (with hand-written SVG charts in [`render::svg`]).
//! - [`error`] — [`ReportError`].

pub mod billing;
pub mod cost;
pub mod error;
pub mod facts;
pub mod period;
pub mod policy;
pub mod pool;
pub mod reconcile;
pub mod render;
pub mod report;

use std::path::Path;

use bursar_engine::PolicySet;

pub use billing::{Comparison, Prices, TypeRates};
pub use cost::CostPerUnit;
pub use error::{ReportError, Result};
pub use facts::{CatchUp, FactsStore, Gap, JobFacts, Split};
pub use period::Span;
pub use policy::PolicyHints;
pub use reconcile::Reconciliation;
pub use report::{GroupBy, Options, Report, build};

/// What a `serve` report request asks for: its query string (`?period=2026-11&by=config&cost_per_unit=true`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReportQuery<'a> {
    /// `period` (same forms as `--period`); default: the calendar month of the newest event.
    pub period: Option<&'a str>,
    /// `by` (`project`, `user`, `config`, `tag:KEY`); default `project`.
    pub by: Option<&'a str>,
    /// `cost_per_unit=true`: add the cost-per-unit section.
    pub cost_per_unit: bool,
}

/// The report `serve` answers: catches up the facts of `db` — with the idle threshold and budgets of
/// `policies`, the set in force, when given — and builds the report for the query's period (default:
/// the calendar month of the newest event in the log — the engine's "now", which is also right for a
/// replayed history — or of `now_ms` when the log is empty), grouped by its `by` (default `project`).
/// With `prices` (serve's `--prices`) it has the billing comparison and, asked for, costs per unit.
pub fn serve_report(
    db: &Path,
    policies: Option<&PolicySet>,
    query: &ReportQuery<'_>,
    prices: Option<&Prices>,
    now_ms: i64,
) -> Result<Report> {
    let hints = policies.map(PolicyHints::from_set);
    let mut store = FactsStore::open(db, hints.as_ref())?;
    store.catch_up()?;
    // The page's own parameters, not the CLI's flags (issue 52: `/report?period=2026-13` answered
    // with `--period`).
    let web = |e: ReportError| match e {
        ReportError::Invalid(m) => ReportError::Invalid(m.replace("`--period ", "`period=").replace("`--by ", "`by=")),
        other => other,
    };
    let span = match query.period {
        Some(p) => Span::parse(p).map_err(web)?,
        None => {
            let newest = store.audit().newest_event_time()?;
            Span::month_of(newest.unwrap_or(now_ms).div_euclid(period::DAY_MS))
        }
    };
    let by = GroupBy::parse(query.by.unwrap_or("project")).map_err(web)?;
    let mut report = build(&store, &Options { span, by, prices: prices.cloned(), cost_per_unit: query.cost_per_unit })?;
    // A reader of serve's report learns nothing of the server's file system (issue 56).
    report.db = SERVED_DB.to_owned();
    Ok(report)
}

/// What a report served by `bursar serve` names as its audit log, in place of the file's path.
pub const SERVED_DB: &str = "the server's audit log";

/// `GET /v1/report[?period=2026-11&by=project&cost_per_unit=true]` for `serve`: [`serve_report`] as JSON.
pub fn current_json(
    db: &Path,
    policies: Option<&PolicySet>,
    query: &ReportQuery<'_>,
    prices: Option<&Prices>,
    now_ms: i64,
) -> Result<String> {
    serve_report(db, policies, query, prices, now_ms).map(|r| render::json(&r))
}

/// `GET /report[?period=…&by=…&cost_per_unit=true]` for `serve`: [`serve_report`] as one
/// self-contained HTML page.
pub fn current_html(
    db: &Path,
    policies: Option<&PolicySet>,
    query: &ReportQuery<'_>,
    prices: Option<&Prices>,
    now_ms: i64,
) -> Result<String> {
    serve_report(db, policies, query, prices, now_ms).map(|r| render::html_page(&r, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serve_reports_need_an_audit_log() {
        let missing = std::env::temp_dir().join(format!("bursar-report-none-{}.db", std::process::id()));
        let e = current_json(&missing, None, &ReportQuery::default(), None, 0).unwrap_err().to_string();
        assert!(e.contains("does not exist"), "{e}");
    }
}
