#!/usr/bin/env bash
# What cross-region placement costs an admission (issue 53, item 4): N jobs admitted and waiting in one
# region, then M submissions that may run anywhere ("region": "any") against M that name their region,
# under a placement policy with [policy.cross_region], each stream through `bursar eval` (audit off),
# alternated ROUNDS times. Placement scans the live jobs once per such admission.
# Usage: scripts/bench-cross-region.sh [WAITING=20000] [M=2000] [ROUNDS=3]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
waiting=${1:-20000}; m=${2:-2000}; rounds=${3:-3}
cargo build --quiet --release -p bursar --manifest-path "$root/Cargo.toml"
bin="${CARGO_TARGET_DIR:-$root/target}/release/bursar"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$work/policies"
cat > "$work/policies/placement.toml" <<'TOML'
[[policy]]
id = "placement/regions"
description = "work that may run anywhere goes where it can start now"
kind = "placement"

[policy.cross_region]
copy_hours = 1
TOML
python3 - "$work" "$waiting" "$m" <<'PY'
import json, sys
work, waiting, m = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
inv = {"id": "i1", "time": "2026-11-02T09:00:00Z", "type": "pool.inventory", "source": "bench", "capacity": [
    {"region": r, "gpu_type": "H100", "queue": "gpu", "in_service": 1000000, "allocated": 0, "free": 1000000}
    for r in ("cn-north", "cn-east", "cn-west")]}
def sub(i, region, t):
    job = {"id": f"j{i}", "project": "p", "user": "u", "queue": "gpu", "gpus": 1, "gpu_type": "H100",
           "requested_hours": 1, "region": region}
    return json.dumps({"id": f"e{i}", "time": t, "type": "job.submitted", "job": job})
head = [json.dumps(inv)] + [sub(i, "cn-north", "2026-11-02T09:01:00Z") for i in range(waiting)]
for name, region in (("fixed", "cn-north"), ("any", "any")):
    tail = [sub(i, region, "2026-11-02T09:02:00Z") for i in range(waiting, waiting + m)]
    open(f"{work}/{name}.jsonl", "w").write("\n".join(head + tail) + "\n")
PY
run() { "$bin" eval --policies "$work/policies" --events "$work/$1.jsonl" 2>&1 >/dev/null | sed -n 's/.* in \([0-9.]*\)s.*/\1/p'; }
echo "waiting=$waiting submissions=$m: seconds for the whole stream (fixed region, then any region)"
for r in $(seq "$rounds"); do
  f=$(run fixed); a=$(run any)
  python3 -c "import sys; f,a,m,w=map(float,sys.argv[1:]); print(f'round $r: fixed {f:.3f} s, any {a:.3f} s; extra per untied admission {(a-f)/m*1e6:.0f} us, {(a-f)/m/w*1e9:.1f} ns per waiting job')" "$f" "$a" "$m" "$waiting"
done
