//! The integration tests of `bursar-lang`, in one test binary (as ripgrep's `tests/tests.rs`): each file
//! of this folder is a module of it, so the workspace is linked once for this crate's tests, not
//! once per file. One file's tests: `cargo test -p bursar-lang --test integration <file>::`.

mod cost_per_unit;
mod idle_deadline;
mod idle_min_samples;
mod idle_reload;
mod limits;
mod properties;
mod run_facts;
mod wasm_manifest;
