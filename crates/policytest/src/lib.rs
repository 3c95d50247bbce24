//! Tools for the people who write policies: know what a change will do before it is merged.
//!
//! This crate holds the policy test-file format and its runner (`bursar test`), branch coverage of a
//! policy set by its tests, replay of recorded history under a candidate set compared with what was
//! decided or with a baseline set (`bursar replay`), and the comment-preserving formatter for TOML
//! policy files (`bursar fmt`). It runs policies only through [`bursar_engine::Engine`], so TOML and
//! WebAssembly policies are tested alike.
//!
//! Boundaries: no policy loading (the caller passes a [`bursar_engine::PolicySet`], loaded with the
//! same loader as `check` and `eval`), no SQLite (the caller reads the audit log and feeds events and
//! their recorded decisions to a [`replay::Replayer`]), no printing (reports render to strings).
//!
//! Layout:
//! - [`format`]: the `*.test.toml` format, parsed with locations.
//! - [`runner`]: one case from a fresh engine, expectation matching, the diff of a failed case.
//! - [`suite`]: every case of every file, filter, summary, JSON.
//! - [`coverage`]: branch coverage of a set.
//! - [`replay`]: history under a candidate set, compared.
//! - [`fmt`]: the TOML formatter.

pub mod coverage;
pub mod fmt;
pub mod format;
pub mod replay;
pub mod runner;
pub mod suite;

#[cfg(test)]
mod fixtures;

pub use coverage::CoverageReport;
pub use format::{Case, Expectation, FormatError, TestFile, parse_test_file};
pub use replay::{ReplayReport, Replayer};
pub use runner::{CaseResult, find_test_files, load_test_files, run_case};
pub use suite::{SuiteOptions, SuiteReport, run_suite};
