#!/bin/bash
# The watcher's own memory on a first poll beside a full queue, without a Slurm: `bursar slurm watch
# --once` with an empty state file against a stand-in squeue that prints N jobs (default 20,000) as the
# lab's Slurm 22.05 printed them (rows of `squeue -O`, the document of `squeue --json`, both built from
# the captures in crates/slurm/tests/data), and a serve taking the events. Every job is new, so the
# watcher reads the whole queue as JSON, the path that held the whole document before issue 55.
# Prints the watcher's peak RSS (GNU time; the stand-in squeue is `cat`, a few MB).
#
#   BURSAR=target/release/bursar integrations/slurm/watch-memory.sh [N]
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DATA=$HERE/../../crates/slurm/tests/data
BURSAR=${BURSAR:?set BURSAR to a bursar binary}
N=${1:-20000}
WORK=$(mktemp -d /tmp/bursar-watch-memory.XXXXXX)
SERVE_PID=
. "$HERE/lib.sh"
trap '[ -n "$SERVE_PID" ] && alive "$SERVE_PID" && stop_pid "$SERVE_PID"; rm -rf "$WORK"' EXIT
python3 - "$DATA" "$WORK" "$N" <<'PY'
import json, sys
data, work, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
doc = json.load(open(f"{data}/squeue-22.05.json"))
proto = next(j for j in doc["jobs"] if j["admin_comment"].startswith("bursar_job="))
rows, jobs = [], []
for i in range(n):
    jid = 100000 + i
    j = dict(proto, job_id=jid, admin_comment=f"bursar_job=lab-{i:012x}", job_state="PENDING", gres_detail=[])
    jobs.append(j)
    rows.append(f"{jid}|N/A|N/A|N/A|N/A|PENDING|0|N/A|N/A|1|cpu=1,mem=1000M,node=1,billing=1|n/a|debug|0|alice|Priority|")
doc["jobs"] = jobs
json.dump(doc, open(f"{work}/queue.json", "w"), indent=2)
open(f"{work}/rows.txt", "w").write("\n".join(rows) + "\n")
PY
cat > "$WORK/squeue" <<SH
#!/bin/sh
case " \$* " in *" --json "*) exec cat "$WORK/queue.json";; *) exec cat "$WORK/rows.txt";; esac
SH
chmod +x "$WORK/squeue"
mkdir -p "$WORK/policies"
"$BURSAR" serve --policies "$WORK/policies" --allow-empty --audit "$WORK/audit.db" --listen 127.0.0.1:0 \
  --port-file "$WORK/port" --fast-commit > "$WORK/serve.log" 2>&1 &
SERVE_PID=$!
for _ in $(seq 300); do [ -s "$WORK/port" ] && break; sleep 0.1; done
/usr/bin/time -f "%M %e" -o "$WORK/time" "$BURSAR" slurm watch --once --server "127.0.0.1:$(cat "$WORK/port")" \
  --cluster lab --state "$WORK/watch.json" --squeue "$WORK/squeue" --scontrol /bin/false > "$WORK/watch.log" 2>&1 \
  || { cat "$WORK/watch.log"; exit 1; }
read -r KB SECS < "$WORK/time"
printf 'first poll of %d new jobs (%s MB of squeue JSON): watcher peak RSS %.1f MB, %s s\n' "$N" \
  "$(( $(stat -c %s "$WORK/queue.json") / 1000000 ))" "$(echo "$KB / 1024" | bc -l)" "$SECS"
