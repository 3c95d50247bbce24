//! The integration tests of `bursar-audit`, in one test binary (as ripgrep's `tests/tests.rs`): each file
//! of this folder is a module of it, so the workspace is linked once for this crate's tests, not
//! once per file. One file's tests: `cargo test -p bursar-audit --test integration <file>::`.
//!
//! Shared set-up is in `common`, declared once here.

mod common;

mod lifecycle;
mod log;
mod query;
mod tamper;
mod trust;
mod verify;
mod witness;
