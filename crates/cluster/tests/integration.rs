//! The integration tests of `bursar-cluster`, in one test binary (as ripgrep's `tests/tests.rs`): each file
//! of this folder is a module of it, so the workspace is linked once for this crate's tests, not
//! once per file. One file's tests: `cargo test -p bursar-cluster --test integration <file>::`.

mod cluster;
mod shared_ledgers;
