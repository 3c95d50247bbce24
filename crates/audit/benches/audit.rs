//! Audit benchmarks (filled in below).
fn main() {}
