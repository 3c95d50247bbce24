#!/usr/bin/env bash
# The main job on the example: build bursar and the example WebAssembly policies, check the policies,
# and evaluate the sample event stream with the SQLite audit log on. Decisions go to stdout; the audit
# log is target/example-audit.db (query it with `bursar audit query --db target/example-audit.db`).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
BURSAR_SETUP_MINIMAL=1 scripts/setup.sh
scripts/build-wasm.sh
# A debug build: it shares its artifacts with scripts/test.sh and is plenty for the example; use
# `cargo build --release -p bursar` for real event volumes.
cargo build --quiet -p bursar
bin="${CARGO_TARGET_DIR:-$root/target}/debug/bursar"
"$bin" check policies
rm -f target/example-audit.db target/example-audit.db-wal target/example-audit.db-shm
"$bin" eval --policies policies --events examples/events.jsonl --audit target/example-audit.db
