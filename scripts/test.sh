#!/usr/bin/env bash
# Every test: installs what the tests need (scripts/setup.sh), builds the example WebAssembly policies
# from source, runs the whole workspace's tests (unit, integration, table-driven cases, property tests),
# compiles the benchmarks so they never rot, and runs the end-to-end test against a real Slurm.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scripts/setup.sh
scripts/build-wasm.sh
cargo test --workspace --quiet
cargo bench --workspace --no-run --quiet
