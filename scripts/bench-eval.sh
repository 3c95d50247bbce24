#!/usr/bin/env bash
# End-to-end `bursar eval` throughput on a generated stream, with the audit log off, durable and fast,
# measured in one run so the three can be compared as ratios (docs/perf/bench.md, "eval end to end").
#
# Usage: scripts/bench-eval.sh [JOBS] [ROUNDS]     default: 100000 jobs (about 1.5 M events), 3 rounds
#
# Reads and writes only under target/bench-eval/. Each round runs the three variants back to back; the
# table gives each variant's best round (the least disturbed by the rest of the machine) and its ratio to
# the audit-off run. The decisions printed on stdout go to /dev/null: writing them is the caller's cost.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
jobs="${1:-100000}"
rounds="${2:-3}"
out="$root/target/bench-eval"
bin="${CARGO_TARGET_DIR:-$root/target}/release/bursar"
mkdir -p "$out"

cd "$root"
echo "bench-eval: building the release binary" >&2
cargo build --quiet --release -p bursar

events="$out/events-$jobs.jsonl"
if [ ! -s "$events" ]; then
    echo "bench-eval: generating $jobs jobs into $events" >&2
    "$bin" gen --jobs "$jobs" --projects 16 --seed 11 > "$events.tmp"
    mv "$events.tmp" "$events"
fi
lines=$(wc -l < "$events")
echo "bench-eval: $lines events; $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2

# Prints the events/s of one run of `bursar eval` with the given extra arguments.
run() {
    "$bin" eval --policies policies --events "$events" --summary-json "$@" 2> "$out/summary.json" > /dev/null
    python3 -c '
import json, sys
last = [l for l in open(sys.argv[1]) if l.startswith("{")][-1]
print(json.loads(last)["events_per_second"])' "$out/summary.json"
}

declare -A best=()
for r in $(seq 1 "$rounds"); do
    for variant in off durable fast; do
        rm -f "$out/audit.db" "$out/audit.db-wal" "$out/audit.db-shm"
        case "$variant" in
            off) eps=$(run) ;;
            durable) eps=$(run --audit "$out/audit.db" --durability durable) ;;
            fast) eps=$(run --audit "$out/audit.db" --durability fast) ;;
        esac
        echo "bench-eval: round $r $variant: $eps events/s" >&2
        if [ -z "${best[$variant]:-}" ] || python3 -c "import sys; sys.exit(0 if $eps > ${best[$variant]} else 1)"; then
            best[$variant]=$eps
        fi
    done
done

echo
echo "| audit | events/s (best of $rounds) | ratio to audit off |"
echo "|---|---:|---:|"
for variant in off durable fast; do
    python3 -c "print('| %s | %.0f | %.2f |' % ('$variant', ${best[$variant]}, ${best[$variant]} / ${best[off]}))"
done
