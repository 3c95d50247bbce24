//! Where the GPU-hours went: per-job facts kept beside the audit log, reports of nominal vs effective
//! GPU-hours by project, user or tag, the billing-mode comparison, and a self-contained HTML page with
//! charts.
//!
//! Boundaries: this crate reads an audit database written by `bursar-audit` (its `events` and
//! `decisions` tables) and owns the `facts_*` tables it adds to the same file; it never writes the
//! audit tables, evaluates policies or serves HTTP. The facts are derived data, rebuilt from the log
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
//! For `serve`: [`current_json`] and [`current_html`] catch up and render the current calendar month.
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

/// Catches up the facts of `db` and builds the report of the calendar month containing `now_ms`
/// (milliseconds since the epoch), grouped by project.
pub fn current_report(db: &Path, now_ms: i64, prices: Option<&Prices>) -> Result<Report> {
    let mut store = FactsStore::open(db, None)?;
    store.catch_up()?;
    let span = Span::month_of(now_ms.div_euclid(period::DAY_MS));
    build(&store, &Options { span, by: GroupBy::Project, prices: prices.cloned() })
}

/// `GET /v1/report` for `serve`: the current month's report as JSON.
pub fn current_json(db: &Path, now_ms: i64, prices: Option<&Prices>) -> Result<String> {
    current_report(db, now_ms, prices).map(|r| render::json(&r))
}

/// `GET /report` for `serve`: the current month's report as one self-contained HTML page.
pub fn current_html(db: &Path, now_ms: i64, prices: Option<&Prices>) -> Result<String> {
    current_report(db, now_ms, prices).map(|r| render::html(&r))
}
