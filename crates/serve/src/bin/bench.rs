//! Load generator for `bursar serve` (filled in below).
fn main() {}
