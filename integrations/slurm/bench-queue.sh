#!/bin/bash
# What bursar's Slurm side costs with a full queue (docs/perf/slurm.md): on the two-node lab, the queue is
# filled with held jobs (10,000 then 20,000 by default), and at each size this measures, in the same run:
#   - one poll as the watcher before issue 43 made it: `squeue --json --states=all` (the whole queue);
#   - one poll as it is now: `squeue -h --states=all -O <16 fields>`, and twenty jobs' records
#     (`scontrol show job -d -o ID` each), which the watcher reads for new jobs or starting runs;
#   - `bursar slurm watch --once` in steady state (every job known: the poll, no record read), and its
#     first poll beside a full queue (every job new: one JSON read, a job.queued each);
#   - with BURSAR_BEFORE (a bursar built before issue 43), that watcher's `--once` too;
#   - the hook's cost per submission: HOOK_N sequential sbatch with job_submit.lua asking bursar serve
#     over its event socket (one kept connection), HOOK_N asking over HTTP (curl per submission), then
#     HOOK_N with a job_submit.lua that asks nothing (same Lua plugin, no question); each after one
#     submission that loads the script (timed apart), with each submission's slurmctld time (median) and
#     their mean;
# each as wall time, bytes read, CPU (user+sys) and peak RSS of the process (GNU time), and slurmctld's
# own time for the RPCs it served (sdiag: REQUEST_JOB_INFO, REQUEST_JOB_INFO_SINGLE,
# REQUEST_SUBMIT_BATCH_JOB, total_time delta). Every daemon it starts is stopped by PID, pass or fail.
#
#   sudo BURSAR=target/release/bursar integrations/slurm/bench-queue.sh
#   SIZES="2000 4000" REPS=2 HOOK_N=10 ...          # a quick run
#   PERF_DIR=/tmp/prof ...    # also `perf record -g` slurmctld during each hook's submissions ($PERF_DIR/<size>-<hook>.data)
# Needs root, Slurm and munge installed (see e2e.sh), GNU time (/usr/bin/time), python3.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BURSAR=${BURSAR:?set BURSAR to a bursar binary}
BURSAR_BEFORE=${BURSAR_BEFORE:-}
SIZES=${SIZES:-"10000 20000"}
REPS=${REPS:-3}
HOOK_N=${HOOK_N:-30}
[ "$(id -u)" = 0 ] || { echo "bench-queue.sh: run as root (it starts Slurm's daemons)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "bench-queue.sh: needs GNU time (apt-get install time)" >&2; exit 2; }
MAX=0; for s in $SIZES; do [ "$s" -gt "$MAX" ] && MAX=$s; done

WORK=$(mktemp -d /tmp/bursar-slurm-bench-queue.XXXXXX); chmod 755 "$WORK"
LAB=$WORK/lab SERVE_PID=
. "$HERE/lib.sh"
cleanup() {
  local rc=$?
  set +e
  [ -d "$LAB" ] && LAB=$LAB "$HERE/down.sh"
  if [ -n "$SERVE_PID" ] && alive "$SERVE_PID"; then kill "$SERVE_PID"; wait "$SERVE_PID" 2>/dev/null; fi
  if [ $rc != 0 ] || [ -n "${KEEP:-}" ]; then echo "bench-queue.sh: work folder kept: $WORK" >&2; else rm -rf "$WORK"; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# bursar serve with no policy: every admission is allowed (the cost measured is the path, not a policy).
mkdir -p "$WORK/policies"
"$BURSAR" serve --policies "$WORK/policies" --allow-empty --audit "$WORK/audit.db" --listen 127.0.0.1:0 --port-file "$WORK/port" \
  --socket "$WORK/events.sock" --fast-commit > "$WORK/serve.log" 2>&1 &
SERVE_PID=$!
for _ in $(seq 300); do [ -s "$WORK/port" ] && break; sleep 0.1; done
PORT=$(cat "$WORK/port")

# The filling hook stamps each job `bursar_job=bench-<n>` without asking anyone (n continues across
# reloads from $LAB/etc/bench-next); serve is told of those jobs in bulk beforehand.
cat > "$WORK/fill_submit.lua" <<'LUA'
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local f = io.open(dir .. "bench-next", "r")
local n = f and tonumber(f:read("*l")) or 0
if f then f:close() end
function slurm_job_submit(job_desc, part_list, submit_uid)
  n = n + 1
  job_desc.admin_comment = "bursar_job=bench-" .. n
  return slurm.SUCCESS
end
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid) return slurm.SUCCESS end
return slurm.SUCCESS
LUA
cat > "$WORK/noop_submit.lua" <<'LUA'
function slurm_job_submit(job_desc, part_list, submit_uid) return slurm.SUCCESS end
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid) return slurm.SUCCESS end
return slurm.SUCCESS
LUA
LAB=$LAB SLURM_NODES=2 MAX_JOBS=$((MAX + 5000)) JOB_SUBMIT=$WORK/fill_submit.lua BURSAR_URL=http://127.0.0.1:$PORT/v1/admit \
  SLURMCTLD_PORT=${SLURMCTLD_PORT:-16827} SLURMD_PORT=${SLURMD_PORT:-16828} "$HERE/up.sh" >/dev/null
export SLURM_CONF=$LAB/etc/slurm.conf
cd "$LAB/out"
echo 0 > "$LAB/etc/bench-next"
use_hook() {  # $1 = a job_submit.lua; slurmctld reloads it when its mtime changes
  cp "$1" "$LAB/etc/job_submit.lua"; touch -d "+1 second" "$LAB/etc/job_submit.lua"; sleep 1.2
}
FIELDS="JobID:|,ArrayJobID:|,ArrayTaskID:|,HetJobID:|,HetJobOffset:|,State:|,RestartCnt:|,StartTime:|,EndTime:|,NumNodes:|,tres-alloc:|,BatchHost:|,Partition:|,exit_code:|,UserName:|,Reason:|"

# sdiag's total_time (µs) of RPC types, summed.
rpc_us() { sdiag | awk -v types="$*" 'BEGIN{n=split(types,t," "); for(i=1;i<=n;i++) want[t[i]]=1}
  $1 in want { for(i=1;i<=NF;i++) if ($i ~ /^total_time:/) { split($i,a,":"); s+=a[2] } } END{print s+0}'; }

# measure LABEL CMD...: one run; prints "LABEL wall_s cpu_s rss_mb bytes ctld_ms".
measure() {
  local label=$1; shift
  local before after
  before=$(rpc_us REQUEST_JOB_INFO REQUEST_JOB_INFO_SINGLE)
  /usr/bin/time -o "$WORK/time" -f "%e %U %S %M" "$@" > "$WORK/out" 2> "$WORK/err" || { cat "$WORK/err" >&2; return 1; }
  after=$(rpc_us REQUEST_JOB_INFO REQUEST_JOB_INFO_SINGLE)
  read -r wall user sys rss < "$WORK/time"
  printf '%s %s %.2f %.1f %s %.1f\n' "$label" "$wall" "$(echo "$user + $sys" | bc)" "$(echo "$rss / 1024" | bc -l)" \
    "$(wc -c < "$WORK/out")" "$(echo "($after - $before) / 1000" | bc -l)"
}
# median of column $2 over lines of label $1 in file $3
median() { awk -v l="$1" -v c="$2" '$1==l {print $c}' "$3" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# fill SIZE: tell serve of the jobs, then submit them held, four sbatch at a time.
have=0
fill() {
  local size=$1 from=$((have + 1))
  python3 - "$from" "$size" "$PORT" <<'PY'
import json, sys, urllib.request
a, b, port = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
for lo in range(a, b + 1, 5000):
    hi = min(b, lo + 4999)
    lines = "\n".join(json.dumps({"id": f"sub-bench-{i}", "time": "2026-12-01T00:00:00Z", "type": "job.submitted",
        "job": {"id": f"bench-{i}", "project": "bench", "user": "root", "gpus": 1, "requested_hours": 0.2}}) for i in range(lo, hi + 1))
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/events", data=(lines + "\n").encode(), headers={"content-type": "application/x-ndjson"})
    urllib.request.urlopen(req, timeout=120).read()
PY
  seq "$from" "$size" | xargs -P 4 -I{} sbatch -Q -H --gres=gpu:1 -t 10 -o /dev/null --wrap true
  have=$size
  local n; n=$(squeue -h -t pending | wc -l)
  [ "$n" -ge "$size" ] || { echo "bench-queue.sh: $n jobs queued, expected $size" >&2; exit 1; }
}

RES=$WORK/results
: > "$RES"
for size in $SIZES; do
  t0=$(date +%s); fill "$size"; echo "filled to $size held jobs in $(( $(date +%s) - t0 )) s" >&2
  for _ in $(seq "$REPS"); do
    measure "$size:squeue-json" squeue --json --states=all >> "$RES"
    measure "$size:squeue-O" env SLURM_TIME_FORMAT=%s squeue -h --states=all -O "$FIELDS" >> "$RES"
    # Twenty jobs' records one after another, as the watcher reads new jobs or starting runs.
    ids=$(squeue -h -o %i | shuf -n 20 | tr '\n' ' ')
    measure "$size:scontrol-x20" sh -c "for j in $ids; do scontrol show job -d -o \$j; done" >> "$RES"
  done
  rm -f "$WORK/watch.json"
  measure "$size:watch-first" "$BURSAR" slurm watch --once --server "127.0.0.1:$PORT" --cluster bench --state "$WORK/watch.json" \
    >> "$RES"
  for _ in $(seq "$REPS"); do
    measure "$size:watch-steady" "$BURSAR" slurm watch --once --server "127.0.0.1:$PORT" --cluster bench --state "$WORK/watch.json" >> "$RES"
    if [ -n "$BURSAR_BEFORE" ]; then
      measure "$size:watch-before" "$BURSAR_BEFORE" slurm watch --once --server "127.0.0.1:$PORT" --cluster bench-before \
        --state "$WORK/watch-before.json" >> "$RES"
    fi
  done
  # The hook: HOOK_N submissions through job_submit.lua asking serve over the socket, then over HTTP,
  # then through one asking nothing. bursar.lua is read when slurmctld loads the hook again.
  for hook in socket http noop; do
    case $hook in
      socket) sed -i "s|^  socket = .*|  socket = \"$WORK/events.sock\",|" "$LAB/etc/bursar.lua"; use_hook "$HERE/job_submit.lua" ;;
      http) sed -i "s|^  socket = .*|  socket = nil,|" "$LAB/etc/bursar.lua"; use_hook "$HERE/job_submit.lua" ;;
      noop) use_hook "$WORK/noop_submit.lua" ;;
    esac
    # The first submission after a change loads the script (slurmctld reloads job_submit.lua at its first
    # call after the file changed: once per change or reconfigure, not per submission): timed apart.
    c=$(rpc_us REQUEST_SUBMIT_BATCH_JOB)
    sbatch -Q -H --gres=gpu:1 -t 10 -o /dev/null --wrap true
    echo "$size:ctld-load-$hook $(( $(rpc_us REQUEST_SUBMIT_BATCH_JOB) - c ))" >> "$WORK/sbatch"
    b=$(rpc_us REQUEST_SUBMIT_BATCH_JOB)
    PERF_PID=
    if [ -n "${PERF_DIR:-}" ]; then  # profile slurmctld (call graphs) while this hook serves the submissions
      mkdir -p "$PERF_DIR"
      perf record -q -F 1999 -g -p "$(cat "$LAB/run/slurmctld.pid")" -o "$PERF_DIR/$size-$hook.data" 2>/dev/null &
      PERF_PID=$!; sleep 0.5
    fi
    # Each submission's own slurmctld time too (sdiag before and after it; sdiag is not a submission):
    # the median is what a submission costs, the mean also carries the rare ones that waited for a lock
    # (slurmctld saving the state of a large queue holds it for tens of milliseconds).
    for _ in $(seq "$HOOK_N"); do
      c=$(rpc_us REQUEST_SUBMIT_BATCH_JOB)
      s=$(date +%s%N)
      sbatch -Q -H --gres=gpu:1 -t 10 -o /dev/null --wrap true
      echo "$size:sbatch-$hook $(( ($(date +%s%N) - s) / 1000 ))" >> "$WORK/sbatch"
      echo "$size:ctld-one-$hook $(( $(rpc_us REQUEST_SUBMIT_BATCH_JOB) - c ))" >> "$WORK/sbatch"
    done
    if [ -n "$PERF_PID" ]; then kill -INT "$PERF_PID"; wait "$PERF_PID" 2>/dev/null || true; fi
    a=$(rpc_us REQUEST_SUBMIT_BATCH_JOB)
    echo "$size:ctld-submit-$hook $(echo "($a - $b) / 1000 / $HOOK_N" | bc -l)" >> "$WORK/sbatch"
  done
  have=$((have + 3 * (HOOK_N + 1)))
  echo "$have" > "$LAB/etc/bench-next"
  use_hook "$WORK/fill_submit.lua"
  # Jobs submitted through the measured hooks are not bench-<n> jobs: the watcher learns them once.
  "$BURSAR" slurm watch --once --server "127.0.0.1:$PORT" --cluster bench --state "$WORK/watch.json" > /dev/null 2>&1 || true
done

echo "Slurm 22.05 lab, two nodes, held jobs; medians of $REPS runs (first watcher poll: one run)."
echo "columns: wall s | CPU s (user+sys) | peak RSS MB | bytes read | slurmctld RPC ms"
for size in $SIZES; do
  for what in squeue-json squeue-O scontrol-x20 watch-before watch-first watch-steady; do
    l="$size:$what"
    grep -q "^$l " "$RES" || continue
    printf '%-22s %8s %8s %9s %11s %9s\n' "$l" "$(median "$l" 2 "$RES")" "$(median "$l" 3 "$RES")" \
      "$(median "$l" 4 "$RES")" "$(median "$l" 5 "$RES")" "$(median "$l" 6 "$RES")"
  done
  for hook in socket http noop; do
    printf '%-22s sbatch median %.1f ms; slurmctld median %.2f ms, mean %.2f ms per submission (loading the script %.1f ms)\n' \
      "$size:hook-$hook" "$(echo "$(median "$size:sbatch-$hook" 2 "$WORK/sbatch") / 1000" | bc -l)" \
      "$(echo "$(median "$size:ctld-one-$hook" 2 "$WORK/sbatch") / 1000" | bc -l)" \
      "$(awk -v l="$size:ctld-submit-$hook" '$1==l {print $2}' "$WORK/sbatch")" \
      "$(echo "$(median "$size:ctld-load-$hook" 2 "$WORK/sbatch") / 1000" | bc -l)"
  done
done
