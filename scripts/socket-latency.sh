#!/usr/bin/env bash
# serve's answer on its event socket as the Slurm hook asks it (one kept connection, one submission
# line, wait for its answer), with PRELOAD jobs already admitted and waiting, against none, in the same
# run: is the time a submission spends in serve flat as the queue grows? (docs/perf/slurm.md)
# Usage: scripts/socket-latency.sh [PRELOAD=20000] [N=300]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
preload=${1:-20000}; n=${2:-300}
cargo build --quiet --release -p bursar --manifest-path "$root/Cargo.toml"
bin="${CARGO_TARGET_DIR:-$root/target}/release/bursar"
work=$(mktemp -d); pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
for pre in 0 "$preload"; do
  d="$work/run-$pre"; mkdir -p "$d"
  "$bin" serve --policies "$root/policies" --audit "$d/audit.db" --listen 127.0.0.1:0 --socket "$d/s.sock" > "$d/log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do [ -S "$d/s.sock" ] && break; sleep 0.1; done
  [ -S "$d/s.sock" ] || { cat "$d/log"; exit 1; }
  python3 - "$d/s.sock" "$pre" "$n" <<'PY'
import json, socket, statistics, sys, time
path, preload, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_UNIX); s.connect(path); f = s.makefile("rwb")
now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
def sub(i):
    job = {"id": f"j{i}", "project": "p", "user": "u", "queue": "gpu", "gpus": 1, "gpu_type": "H100", "requested_hours": 1}
    return (json.dumps({"id": f"e{i}", "time": now, "type": "job.submitted", "job": job}) + "\n").encode()
i = 0
while i < preload:                      # written ahead in thousands: group commit
    k = min(1000, preload - i)
    f.write(b"".join(sub(j) for j in range(i, i + k))); f.flush()
    for _ in range(k): f.readline()
    i += k
lat = []
for j in range(preload, preload + n):   # then one at a time, as the hook asks
    t0 = time.perf_counter(); f.write(sub(j)); f.flush(); f.readline()
    lat.append((time.perf_counter() - t0) * 1000)
lat.sort()
print(f"{preload:>6} admitted and waiting: p50 {statistics.median(lat):.3f} ms, p90 {lat[int(len(lat) * 0.9)]:.3f} ms")
PY
  kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
done
