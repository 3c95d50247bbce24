#!/usr/bin/env bash
# Every test: installs what the tests need (scripts/setup.sh), builds the example WebAssembly policies
# from source, and runs the whole workspace's tests: unit, integration (the real binary on real files,
# sockets and SQLite), table-driven cases, property tests, doc examples, and every criterion benchmark
# once in test mode so none of them rots (`--all-targets` reuses the debug build instead of compiling
# everything again in release, as `cargo bench --no-run` would).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scripts/setup.sh
scripts/build-wasm.sh
cargo test --workspace --all-targets --quiet
cargo test --workspace --doc --quiet
# The fuzz targets live in their own workspace (cargo fuzz needs nightly to run them); type-checking
# them here keeps them from rotting as the parsers they call change (three had, unnoticed). They share
# the workspace's target directory, so only the fuzz crate itself is checked anew.
CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}" cargo check --quiet --manifest-path fuzz/Cargo.toml --bins

# End to end against a real Slurm 22.05 and the real `bursar serve` (root only: they start munge,
# slurmctld and slurmd, and stop each by PID when they end, pass or fail): one node with 8 fake GPUs
# (admission, approval, deferral, idle reclaim, principals), then two nodes with 16 (issue 43: arrays,
# exclusive nodes, test-only, heterogeneous jobs, requeues, preemption, node failure, reruns, releases).
if [ "$(id -u)" = 0 ]; then
    BURSAR="${CARGO_TARGET_DIR:-$root/target}/debug/bursar" integrations/slurm/e2e.sh
    BURSAR="${CARGO_TARGET_DIR:-$root/target}/debug/bursar" integrations/slurm/e2e-runs.sh
else
    echo "test.sh: skipping integrations/slurm/e2e.sh and e2e-runs.sh (they need root to run Slurm)" >&2
fi
