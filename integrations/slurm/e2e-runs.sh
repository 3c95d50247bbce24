#!/bin/bash
# End-to-end test of issue 43 on a real two-node Slurm 22.05 (16 fake GPUs): every GPU a job holds is
# reserved, charged per run and reclaimable, as an HPC site runs Slurm (docs/integrations/slurm.md).
#
# As root: starts munge, slurmctld and two slurmd (n1, n2) from Debian's packages (installed by e2e.sh
# if missing), `bursar serve` with integrations/slurm/e2e/runs/policies.toml, the watcher (0.5 s polls)
# and the enforcer, then runs each case and checks bursar's ledger (GET /v1/jobs: GPUs, runtime
# GPU-hours, runs) against what Slurm allocated and ran (JOB_GRES, StartTime/EndTime, and the times this
# script requeued, preempted or failed a node), within one poll interval:
#   1. an array with a throttle (each task a child, charged on its own run; the array ends after them);
#      --exclusive, -N 1-2, --gpus-per-socket, root's NumNodes=2: charged what Slurm allocated;
#      --exclusive and --exclusive -N 2 with no node_gpus setting: admitted for the whole nodes' GPUs
#      (the largest node per partition, from the file the watcher writes), what Slurm allocated;
#   2. --test-only reserves nothing; a forged test-only marker stays held; a bad partition and a
#      heterogeneous job with a denied component are released unconfirmed; an allowed heterogeneous job
#      charges both components;
#   3. requeue and SPECIAL_EXIT: two runs, the pending gap not charged; the owner's requeue of a COMPLETED
#      job reclaimed; an administrator's release of a held job charged from its start and not cancelled
#      when the approval lapses; the owner's partition change re-admitted (and a denied one refused);
#      an array task past its max runtime cancelled exactly (`scancel A_T`); a reclaim Slurm does not
#      carry out (scancel exiting 0) recorded as failed;
#   4. preemption by a higher partition (requeue) and a node failure: requeued, not ended;
#   5. MIG slices (issue 55; a third slurmd, m1, with typed GRES: seven 1g.10gb and two 3g.40gb, partition
#      mig): two 1g.10gb admitted and held as 2/7 of a GPU and charged 2/7 x its run; project mig's cap of
#      1 GPU takes a 4-slice job beside a 3g.40gb (7/7) and refuses one slice more; --exclusive on m1
#      admitted for 2 (13/7 rounded up, the watcher's file) and held as the 13/7 Slurm allocated.
# Every daemon it started is stopped by PID on exit, pass or fail.
#
#   sudo integrations/slurm/e2e-runs.sh        # builds bursar with cargo unless BURSAR=path is set
#   KEEP=1 sudo integrations/slurm/e2e-runs.sh # keep the work folder (logs, audit.db) afterwards
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
T0=$(date +%s)
say() { printf '[%3ss] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }
fail() { say "FAIL: $*"; exit 1; }
ok() { say "ok: $*"; }
[ "$(id -u)" = 0 ] || { echo "e2e-runs.sh: run as root (it starts Slurm's daemons)" >&2; exit 2; }
for b in slurmctld slurmd sbatch squeue scancel scontrol munged mungekey curl sqlite3 python3; do
  command -v "$b" >/dev/null 2>&1 || { echo "e2e-runs.sh: $b is missing (integrations/slurm/e2e.sh installs Slurm)" >&2; exit 2; }
done
if [ -z "${BURSAR:-}" ]; then
  say "building bursar"
  (cd "$ROOT" && cargo build -q -p bursar)
  BURSAR=${CARGO_TARGET_DIR:-$ROOT/target}/debug/bursar
fi
[ -x "$BURSAR" ] || fail "no bursar binary at $BURSAR"

WORK=$(mktemp -d /tmp/bursar-slurm-runs.XXXXXX)
chmod 755 "$WORK"
LAB=$WORK/lab
SERVE_PID= WATCH_PID= ENFORCE_PID=
. "$HERE/lib.sh"
cleanup() {
  local rc=$?
  set +e
  stop_pid "$ENFORCE_PID"; stop_pid "$WATCH_PID"
  [ -d "$LAB" ] && LAB=$LAB "$HERE/down.sh"
  stop_pid "$SERVE_PID"
  local left=""
  for p in $ENFORCE_PID $WATCH_PID $SERVE_PID; do alive "$p" && left="$left $p"; done
  for f in "$LAB"/run/*.pid "$LAB/munge/munged.pid"; do [ -f "$f" ] && alive "$(cat "$f")" && left="$left $(cat "$f")"; done
  [ -n "$left" ] && { echo "e2e-runs.sh: processes still running:$left" >&2; rc=1; }
  if [ $rc != 0 ]; then
    for f in serve.log watch.log enforce.log lab/log/slurmctld.log; do
      [ -f "$WORK/$f" ] && { echo "----- $f (last 30 lines)"; tail -n 30 "$WORK/$f"; }
    done
    echo "e2e-runs.sh: FAILED (work folder kept: $WORK)"
  elif [ -n "${KEEP:-}" ]; then
    echo "e2e-runs.sh: passed in $(( $(date +%s) - T0 )) s (work folder kept: $WORK)"
  else
    rm -rf "$WORK"
    echo "e2e-runs.sh: passed in $(( $(date +%s) - T0 )) s; every daemon stopped"
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- bursar serve, the cluster, the agents -------------------------------------------------------------
mkdir -p "$WORK/policies"
cp "$HERE/e2e/runs/policies.toml" "$WORK/policies/"
"$BURSAR" serve --policies "$WORK/policies" --audit "$WORK/audit.db" --listen 127.0.0.1:0 --port-file "$WORK/port" \
  --fast-commit --tick 500ms > "$WORK/serve.log" 2>&1 &
SERVE_PID=$!
for _ in $(seq 300); do [ -s "$WORK/port" ] && break; alive $SERVE_PID || break; sleep 0.1; done
[ -s "$WORK/port" ] || fail "bursar serve did not start"
PORT=$(cat "$WORK/port")
API=http://127.0.0.1:$PORT
# No node_gpus: --exclusive reads the largest node from the file the watcher writes beside its state.
NODE_GPUS_FILE=$WORK/watch.node-gpus.tsv
LAB=$LAB SLURM_NODES=2 SLURM_MIG=1 BURSAR_URL=$API/v1/admit BURSAR_CONFIRM_WITHIN_S=900 SLURMCTLD_PORT=${SLURMCTLD_PORT:-16837} \
  BURSAR_NODE_GPUS_FILE=$NODE_GPUS_FILE \
  SLURMD_PORT=${SLURMD_PORT:-16838} "$HERE/up.sh" | sed 's/^/    /'
export SLURM_CONF=$LAB/etc/slurm.conf
INTERVAL=0.5
start_watch() {
  "$BURSAR" slurm watch --server "127.0.0.1:$PORT" --cluster lab --state "$WORK/watch.json" --interval 500ms >> "$WORK/watch.log" 2>&1 &
  WATCH_PID=$!
}
start_enforce() {
  "$BURSAR" slurm enforce --server "127.0.0.1:$PORT" --cluster lab --state "$WORK/enforce.json" --watch-state "$WORK/watch.json" \
    --retry-delay 200ms --max-attempts 2 --verify-within 8s >> "$WORK/enforce.log" 2>&1 &
  ENFORCE_PID=$!
}
start_watch; start_enforce
for _ in $(seq 100); do [ -s "$NODE_GPUS_FILE" ] && break; sleep 0.1; done
[ "$(grep -v '^#' "$NODE_GPUS_FILE" 2>/dev/null | paste -sd' ')" = "$(printf 'debug\t8 mig\t2 other\t8 urgent\t8')" ] \
  || fail "the watcher did not write each partition's largest node to $NODE_GPUS_FILE: $(cat "$NODE_GPUS_FILE" 2>&1)"
grep -q 'node_gpus = nil' "$LAB/etc/bursar.lua" || fail "the hook has a node_gpus setting"
ok "serve on $PORT, two nodes ($(sinfo -h -N -o '%N %G' | sort -u | paste -sd' ')), watch $WATCH_PID, enforce $ENFORCE_PID"

# --- helpers -------------------------------------------------------------------------------------------
cd "$LAB/out"
chmod 1777 "$LAB/out"
sb() { sbatch --parsable "$@" 2>> "$WORK/sbatch.err"; }
state_of() { squeue -h -t all -j "$1" -o %T 2>/dev/null | head -1; }
wait_state() {  # job, state, seconds
  local s=""
  for _ in $(seq $(( $3 * 5 ))); do s=$(state_of "$1"); [ "$s" = "$2" ] && return 0; sleep 0.2; done
  fail "Slurm job $1 is ${s:-gone}, expected $2 within $3 s"
}
bid() { scontrol show job "$1" | grep -o 'bursar_job=[^ ]*' | head -1 | cut -d= -f2; }
view() { curl -sf "$API/v1/jobs/$1" || echo '{}'; }
# A field of a JSON document on stdin (dots for nesting, empty when absent).
jget() { python3 -c 'import json,sys
d=json.load(sys.stdin)
for k in sys.argv[1].split("."):
    d = d.get(k) if isinstance(d, dict) else None
print("" if d is None else (json.dumps(d) if isinstance(d,(dict,list)) else d))' "$1"; }
# Waits until a field of a job's view equals a value.
wait_view() {  # bursar id, field, value, seconds
  local v=""
  for _ in $(seq $(( $4 * 5 ))); do v=$(view "$1" | jget "$2"); [ "$v" = "$3" ] && return 0; sleep 0.2; done
  view "$1" >&2; echo >&2
  fail "bursar's $2 of $1 is '${v}', expected '$3' within $4 s"
}
# Waits until a job ended in bursar's books (finished, or reclaimed at its end by reclaim/finished).
wait_done() {  # bursar id, seconds
  local v=""
  for _ in $(seq $(( $2 * 5 ))); do v=$(view "$1" | jget phase); case "$v" in finished|reclaimed) return 0;; esac; sleep 0.2; done
  view "$1" >&2; echo >&2
  fail "bursar's phase of $1 is '$v', expected it ended within $2 s"
}
sql() { sqlite3 -readonly "$WORK/audit.db" "$1"; }
# Slurm's own figures of a record: JOB_GRES GPUs, StartTime, EndTime (Unix s); slurm_gres: JOB_GRES as is.
slurm_gpus() { scontrol show job -d "$1" | grep -o 'JOB_GRES=[^ ]*' | head -1 | grep -o '[0-9]*$'; }
slurm_gres() { scontrol show job -d "$1" | grep -o 'JOB_GRES=[^ ]*' | head -1 | cut -d= -f2; }
# $1 × $2 (a share such as 2/7 times seconds), for charged's expected GPU-seconds.
times() { python3 -c 'import sys; from fractions import Fraction as F; print(float(F(sys.argv[1]) * int(sys.argv[2])))' "$1" "$2"; }
slurm_times() { SLURM_TIME_FORMAT=%s squeue -h -t all -j "$1" -O "StartTime:|,EndTime:|" | head -1; }
# bursar's ledger: the GPU-hours project $1 has settled (its quota/caps line on GET /v1/pool), against the
# GPU-seconds Slurm ran ($2), within one poll interval (and a second's rounding) per requeue and GPU
# ($3 = GPUs, $4 = requeues: a requeue is dated by the poll that saw it; starts and ends are Slurm's), or
# within $5 GPU-seconds when given (MIG slices: their shares are exact, so is the charge).
charged() {  # project, expected GPU-seconds, gpus, requeues[, tolerance]
  # GET /v1/pool reuses the engine's copy for up to a second (docs/serve.md): a copy taken just before
  # the job's end was applied shows its last run unsettled, so ask again for a few seconds.
  local got tries=0
  while :; do
    got=$(curl -sf "$API/v1/pool" | python3 -c 'import json,sys
p=json.load(sys.stdin)
for line in p.get("projects", []):
    if line.get("project") == sys.argv[1]:
        for q in line.get("quotas", []):
            if q.get("policy") == "quota/caps":
                print(q.get("used", 0))' "$1")
    tries=$((tries + 1))
    python3 - "$1" "${got:-0}" "$2" "$3" "$4" "$INTERVAL" "$([ $tries -ge 8 ] && echo last)" "${5:-}" <<'PY' && return 0
import sys
project, got, want, gpus, requeues, interval, last = sys.argv[1], float(sys.argv[2]) * 3600, float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6]), sys.argv[7] == "last"
tol = float(sys.argv[8]) if sys.argv[8] else gpus * requeues * (interval + 1.0) + 0.5
good = abs(got - want) <= tol
d = 3 if sys.argv[8] else 1
if good or last:
    print(f"    project {project}: bursar settled {got:.{d}f} GPU-s, Slurm ran {want:.{d}f} GPU-s (tolerance {tol:.{d}f})")
sys.exit(0 if good else 1)
PY
    [ $tries -ge 8 ] && fail "ledger of project $1: see above"
    sleep 0.5
  done
}
decisions_by() { sql "SELECT count(*) FROM decisions WHERE job='$1' AND policies LIKE '%$2%'"; }

# --- 1. what Slurm allocated -------------------------------------------------------------------------
say "1. arrays and shapes the hook cannot see"
ARR=$(sb -A sweep --array=0-3%2 --gres=gpu:2 -t 5 --wrap 'sleep 3')
EXC=$(sb -A shapes --exclusive -t 5 --wrap 'sleep 3')
EXC2=$(sb -A whole --exclusive -N 2 -t 5 --wrap 'sleep 3')
[ -n "$EXC2" ] || fail "sbatch --exclusive -N 2 failed: $(tail -n 3 "$WORK/sbatch.err")"
RNG=$(sb -A shapes -N 1-2 --gres=gpu:2 -t 5 --wrap 'sleep 3')
SOCK=$(sb -A shapes --gpus-per-socket=1 --sockets-per-node=2 -t 5 --wrap 'sleep 3')
NUMN=$(sb -A shapes -H --gres=gpu:2 -t 5 --wrap 'sleep 3')
scontrol update JobId="$NUMN" NumNodes=2 || fail "root could not set NumNodes=2"
scontrol release "$NUMN"
ARR_BID=$(bid "${ARR}_0")
[ -n "$ARR_BID" ] || fail "the array has no bursar id"
[ "$(view "$ARR_BID" | jget runs.array.tasks)" = 4 ] || { view "$ARR_BID"; fail "the array was not admitted as 4 tasks"; }
sql "SELECT raw FROM events WHERE type='job.submitted' AND job='$ARR_BID'" | grep -q '"array":{"tasks":4,"max_running":2}' \
  || fail "the hook did not send the array's tasks and throttle"
for j in $EXC $EXC2 $RNG $SOCK $NUMN; do wait_state "$j" COMPLETED 40; done
for t in 0 1 2 3; do wait_state "${ARR}_$t" COMPLETED 40; done
wait_done "$ARR_BID" 5
ran=0
for t in 0 1 2 3; do
  task="${ARR_BID}_$t"
  wait_done "$task" 5
  [ "$(view "$task" | jget runs.parent)" = "$ARR_BID" ] || fail "task $task does not name its array"
  read -r s e <<<"$(slurm_times "${ARR}_$t" | tr '|' ' ')"
  [ "$(view "$task" | jget gpus)" = 2 ] || fail "task $task: bursar holds $(view "$task" | jget gpus) GPUs, Slurm allocated 2"
  ran=$(( ran + 2 * (e - s) ))
done
charged sweep "$ran" 2 0
ok "array $ARR: admitted as 4 tasks (throttle 2), each task charged on its own run, the array ended after them"
ran=0
for j in $EXC $RNG $SOCK $NUMN; do
  b=$(bid "$j"); g=$(slurm_gpus "$j")
  wait_done "$b" 5
  [ "$(view "$b" | jget gpus)" = "$g" ] || fail "job $j: bursar holds $(view "$b" | jget gpus) GPUs, Slurm allocated $g"
  read -r s e <<<"$(slurm_times "$j" | tr '|' ' ')"
  ran=$(( ran + g * (e - s) ))
  a=$(view "$b" | jget runs.admitted_gpus)
  printf '    Slurm job %s: admitted %s GPUs, allocated %s\n' "$j" "${a:-$g}" "$g"
done
charged shapes "$ran" 8 0
[ "$(slurm_gpus "$EXC")" = 8 ] && [ "$(slurm_gpus "$NUMN")" = 4 ] || fail "the lab did not allocate what the case needs"
[ "$(decisions_by "$(bid "$NUMN")" bursar/allocation)" -ge 1 ] || fail "no bursar/allocation correction for root's NumNodes=2"
ok "--exclusive (8), -N 1-2, --gpus-per-socket, root's NumNodes=2 (4): charged what Slurm allocated"
# Issue 55: with no node_gpus setting an --exclusive job is admitted for its whole nodes' GPUs (what the
# watcher's file says of the partition's largest node), which is what Slurm allocated: no correction.
# EXC2 names no partition: the hook takes the default partition's from slurmctld's partition list.
for j in $EXC $EXC2; do
  b=$(bid "$j"); g=$(slurm_gpus "$j")
  wait_done "$b" 5
  [ "$(view "$b" | jget gpus)" = "$g" ] || fail "job $j: bursar holds $(view "$b" | jget gpus) GPUs, Slurm allocated $g"
  adm=$(sql "SELECT json_extract(raw,'\$.job.gpus') FROM events WHERE type='job.submitted' AND job='$b'")
  [ "$adm" = "$g" ] || fail "--exclusive job $j was admitted for '$adm' GPUs, Slurm allocated $g"
  scontrol show job "$j" | grep -q "bursar_gpus=$g\b" || fail "job $j's AdminComment does not say bursar_gpus=$g"
  [ "$(decisions_by "$b" bursar/allocation)" = 0 ] || fail "--exclusive job $j needed an allocation correction"
done
[ "$(slurm_gpus "$EXC2")" = 16 ] || fail "the lab did not allocate two whole nodes to $EXC2"
ok "--exclusive (8) and --exclusive -N 2 (16) with no node_gpus setting: admitted for what Slurm allocated"

# --- 2. what Slurm never creates -----------------------------------------------------------------------
say "2. --test-only, a forged marker, a bad partition, heterogeneous jobs"
SUBS="SELECT count(*) FROM events WHERE type='job.submitted'"
before=$(sql "$SUBS")
sbatch --test-only -A phantom --gres=gpu:8 -t 60 --wrap true > testonly.out 2>&1 || fail "sbatch --test-only failed: $(cat testonly.out)"
grep -q "test only: nothing reserved" testonly.out || fail "the hook did not answer as a test: $(cat testonly.out)"
grep -q "to start at" testonly.out || fail "sbatch --test-only lost Slurm's estimate: $(cat testonly.out)"
[ "$(sql "$SUBS")" = "$before" ] || fail "a --test-only submission was recorded"
FORGED=$(sb -A phantom --gres=gpu:1 -t 5 --comment 'bursar_test_only=1' --wrap true)
sleep 1
[ "$(squeue -h -j "$FORGED" -o %r)" = JobHeldUser ] || fail "a job forging the test-only marker is not held"
if scontrol release "$FORGED" 2>/dev/null; then fail "root released a job carrying the test-only marker"; fi
for _ in $(seq 20); do grep -q "Slurm job $FORGED .*--test-only marker" "$WORK/watch.log" && break; sleep 0.2; done
grep -q "Slurm job $FORGED .*--test-only marker" "$WORK/watch.log" || fail "the watcher did not report the forged marker"
scancel "$FORGED"
ok "--test-only answered without a reservation (Slurm's estimate kept); a forged marker stays held, unreserved"
if sbatch -p nosuch -A phantom --gres=gpu:1 -t 5 --wrap true 2> nosuch.err; then fail "Slurm accepted partition nosuch"; fi
NOSUCH=$(sql "SELECT job FROM events WHERE type='job.submitted' AND json_extract(raw,'\$.job.queue')='nosuch' ORDER BY seq DESC LIMIT 1")
[ -n "$NOSUCH" ] || fail "the bad partition's admission is not in the audit log"
cat > het.sh <<'H'
#!/bin/bash
#SBATCH -A het -t 5 --gres=gpu:1
#SBATCH hetjob
#SBATCH -A het -t 5 --gres=gpu:8
sleep 2
H
if sbatch het.sh > het.out 2>&1; then fail "a heterogeneous job with a component over its cap was accepted"; fi
grep -q "bursar denied job lab-[0-9a-f]*+1" het.out || fail "the second component was not denied by bursar: $(cat het.out)"
HET0=$(grep -o 'lab-[0-9a-f]\{12\}+1' het.out | head -1); HET0=${HET0%+1}
# Issue 55: with confirm_within_s at its 900 s default, the watcher releases what Slurm never created
# within two polls (it used to hold GPUs for the 15 minutes).
wait_done "$NOSUCH" 15
wait_done "$HET0" 15
never() { sql "SELECT count(*) FROM events WHERE type='job.finished' AND job='$1' AND json_extract(raw,'\$.slurm_state')='never created'"; }
[ "$(never "$NOSUCH")" = 1 ] && [ "$(never "$HET0")" = 1 ] \
  || fail "the admissions Slurm never created were not released by the watcher: $(sql "SELECT raw FROM events WHERE job IN ('$NOSUCH','$HET0') AND type='job.finished'")"
# A --test-only from a client without cli_filter.lua (SLURM_CONF pointing at a copy without it) is
# admitted for real by the hook, and Slurm creates nothing: released the same way.
sed '/^CliFilterPlugins/d' "$SLURM_CONF" > "$WORK/slurm-nofilter.conf"
before=$(sql "$SUBS")
SLURM_CONF=$WORK/slurm-nofilter.conf sbatch --test-only -A phantom --gres=gpu:1 -t 5 --wrap true > tonf.out 2>&1 \
  || fail "sbatch --test-only without the client filter failed: $(cat tonf.out)"
TONF=$(sql "SELECT job FROM events WHERE type='job.submitted' AND json_extract(raw,'\$.job.project')='phantom' ORDER BY seq DESC LIMIT 1")
[ "$(sql "$SUBS")" -gt "$before" ] && [ -n "$TONF" ] || fail "the unfiltered --test-only was not admitted (so this case tests nothing)"
wait_done "$TONF" 15
[ "$(never "$TONF")" = 1 ] || fail "the unfiltered --test-only's admission was not released as never created"
ok "a bad partition, a denied heterogeneous component and an unfiltered --test-only: released within two polls as never created"
sed -i 's/gpu:8/gpu:2/' het.sh
HETOK=$(sbatch --parsable het.sh) || fail "an allowed heterogeneous job was refused"
HETOK=${HETOK%%;*}
wait_state "$HETOK" COMPLETED 40
ran=0
for c in "$HETOK" "$((HETOK + 1))"; do
  b=$(bid "$c"); g=$(slurm_gpus "$c")
  wait_done "$b" 5
  read -r s e <<<"$(slurm_times "$c" | tr '|' ' ')"
  ran=$(( ran + g * (e - s) ))
done
charged het "$ran" 3 0
ok "heterogeneous job $HETOK: both components admitted, confirmed and charged"

# --- 3. runs -------------------------------------------------------------------------------------------
say "3. requeue, SPECIAL_EXIT, rerun, release, partition change, task reclaim"
RQ=$(sb -A rq --gres=gpu:2 -t 5 --wrap 'sleep 6')
SE=$(sb -A se --gres=gpu:2 -t 5 --wrap 'sleep 6')
wait_state "$RQ" RUNNING 20; wait_state "$SE" RUNNING 20
sleep 2
read -r RQ_S0 _ <<<"$(slurm_times "$RQ" | tr '|' ' ')"; read -r SE_S0 _ <<<"$(slurm_times "$SE" | tr '|' ' ')"
scontrol requeue "$RQ"; RQ_T=$(date +%s)
scontrol requeuehold State=SpecialExit "$SE"; SE_T=$(date +%s)
RQ_BID=$(bid "$RQ"); SE_BID=$(bid "$SE")
wait_view "$SE_BID" phase admitted 5
[ "$(view "$SE_BID" | jget status)" = "" ] || fail "SPECIAL_EXIT was taken for an end"
sleep 2   # the pending gap, not charged
scontrol update JobId="$RQ" StartTime=now
scontrol release "$SE"; scontrol update JobId="$SE" StartTime=now
for j in $RQ $SE; do wait_state "$j" COMPLETED 30; done
for pair in "$RQ:$RQ_BID:$RQ_S0:$RQ_T:rq" "$SE:$SE_BID:$SE_S0:$SE_T:se"; do
  IFS=: read -r j b s0 t project <<<"$pair"
  wait_done "$b" 5
  [ "$(view "$b" | jget runs.reruns)" = 1 ] || fail "job $j: bursar counts $(view "$b" | jget runs.reruns) reruns, Slurm ran it twice"
  read -r s1 e1 <<<"$(slurm_times "$j" | tr '|' ' ')"
  charged "$project" "$(( 2 * ((t - s0) + (e1 - s1)) ))" 2 1
done
ok "requeue and SPECIAL_EXIT: two runs each, settled one by one, the pending gap not charged"

RR=$(runuser -u nobody -- sbatch --parsable --chdir="$LAB/out" -A runs --gres=gpu:4 -t 5 --wrap 'sleep 1')
wait_state "$RR" COMPLETED 20
RR_BID=$(bid "$RR")
wait_done "$RR_BID" 5
runuser -u nobody -- scontrol requeue "$RR" || fail "the owner could not requeue their COMPLETED job"
wait_state "$RR" CANCELLED 20
q="SELECT count(*) FROM events WHERE type='action.executed' AND job='$RR_BID' AND json_extract(raw,'\$.action')='scancel'"
for _ in $(seq 25); do [ "$(sql "$q")" -ge 1 ] && break; sleep 0.2; done
[ "$(sql "$q")" -ge 1 ] || fail "no record of the enforcer cancelling the rerun of $RR"
ok "the owner's requeue of COMPLETED job $RR: seen as a rerun, reclaimed, cancelled by the enforcer"

AP=$(sb -A appr --gres=gpu:4 -t 5 --wrap 'sleep 30')
sleep 1
[ "$(squeue -h -j "$AP" -o %r)" = JobHeldUser ] || fail "job $AP is not held for approval"
AP_BID=$(bid "$AP")
scontrol release "$AP"
wait_state "$AP" RUNNING 20
wait_view "$AP_BID" runs.released_by root 5
[ "$(decisions_by "$AP_BID" bursar/override)" -ge 1 ] || fail "no bursar/override alert for root's release of $AP"
sleep 9   # past the approval's 8 s expiry
[ "$(state_of "$AP")" = RUNNING ] || fail "the approval's expiry cancelled job $AP, released by root"
read -r s _ <<<"$(slurm_times "$AP" | tr '|' ' ')"
[ "$(view "$AP_BID" | jget phase)" = running ] || fail "bursar does not see job $AP running"
scancel "$AP"; wait_state "$AP" CANCELLED 20
wait_done "$AP_BID" 5
read -r s e <<<"$(slurm_times "$AP" | tr '|' ' ')"
charged appr "$(( 4 * (e - s) ))" 4 0
ok "root's release of held job $AP: an override by root, charged from its start, not cancelled when the approval lapsed"

MV=$(runuser -u nobody -- sbatch --parsable --chdir="$LAB/out" -A move --gres=gpu:1 -t 5 --begin=now+1hour --wrap true)
MV_OLD=$(bid "$MV")
wait_view "$MV_OLD" runs.confirm_by "" 10
runuser -u nobody -- scontrol update JobId="$MV" Partition=other || fail "the owner's partition change was refused"
MV_NEW=$(scontrol show job "$MV" | grep -o 'bursar_readmit=lab-[0-9a-f]*' | cut -d= -f2)
[ -n "$MV_NEW" ] || fail "the partition change carries no re-admission"
wait_view "$MV_NEW" queue other 5
wait_view "$MV_NEW" runs.confirm_by "" 10
wait_done "$MV_OLD" 5
sql "SELECT raw FROM events WHERE type='job.finished' AND job='$MV_OLD'" | grep -q "\"replaced_by\":\"$MV_NEW\"" \
  || fail "the old admission $MV_OLD was not ended as replaced by $MV_NEW"
BIG=$(runuser -u nobody -- sbatch --parsable --chdir="$LAB/out" -A move --gres=gpu:4 -t 5 --begin=now+1hour --wrap true)
if runuser -u nobody -- scontrol update JobId="$BIG" Partition=other 2>/dev/null; then
  fail "a partition change over the queue's cap was accepted"
fi
[ "$(squeue -h -j "$BIG" -o %P)" = debug ] || fail "a refused partition change moved job $BIG"
scancel "$MV" "$BIG"
ok "the owner's partition change re-admitted ($MV_OLD replaced by $MV_NEW); one over the queue's cap refused"

# A move counts once (issue 55): a project at its cap (movecap: 2 GPUs) moves its 2-GPU waiting job, and
# holds 2 GPUs right after the move, before the watcher has seen it, and after.
MC=$(runuser -u nobody -- sbatch --parsable --chdir="$LAB/out" -A movecap --gres=gpu:2 -t 5 --begin=now+1hour --wrap true)
MC_OLD=$(bid "$MC")
wait_view "$MC_OLD" runs.confirm_by "" 10
runuser -u nobody -- scontrol update JobId="$MC" Partition=other || fail "project movecap, at its cap, could not move its waiting job $MC"
MC_NEW=$(scontrol show job "$MC" | grep -o 'bursar_readmit=lab-[0-9a-f]*' | cut -d= -f2)
[ -n "$MC_NEW" ] || fail "the move of $MC carries no re-admission"
held=$(curl -sf "$API/v1/projects/movecap" | jget held_gpus)
[ "$held" = 2 ] || fail "project movecap holds $held GPUs right after its move, not 2 (counted twice?)"
wait_done "$MC_OLD" 5
wait_view "$MC_NEW" runs.confirm_by "" 10
held=$(curl -sf "$API/v1/projects/movecap" | jget held_gpus)
[ "$held" = 2 ] || fail "project movecap holds $held GPUs after the watcher saw the move, not 2"
sleep 2   # time for any reclaim of the old id to reach the enforcer: none may cancel the moved job
[ "$(squeue -h -j "$MC" -o %T)" = PENDING ] || fail "the moved job $MC is $(squeue -h -j "$MC" -o %T), not PENDING (an action about its old id reached it)"
scancel "$MC"
ok "a project at its cap moved its waiting job ($MC_OLD to $MC_NEW), counted once: 2 GPUs held before and after the watcher saw it"

TA=$(sb -A arr --array=0-2 --gres=gpu:1 -t 5 --wrap 'sleep 30')
for t in 0 1 2; do wait_state "${TA}_$t" CANCELLED 30; done
TA_BID=$(bid "${TA}_0")
for t in 0 1 2; do
  q="SELECT count(*) FROM events WHERE type='action.executed' AND job='${TA_BID}_$t' AND json_extract(raw,'\$.slurm_target')='${TA}_$t'"
  for _ in $(seq 25); do [ "$(sql "$q")" = 1 ] && break; sleep 0.2; done
  [ "$(sql "$q")" = 1 ] || fail "no record of scancel ${TA}_$t for task ${TA_BID}_$t"
done
ok "array $TA: each task past its 4 s reclaimed by its own id (scancel ${TA}_0, _1, _2)"

stop_pid "$ENFORCE_PID"; ENFORCE_PID=
SEQ=$(curl -sf "$API/v1/decisions?after=0&format=jsonl&follow=false" | tail -1 | jget seq)
REF=$(sb -A arr --gres=gpu:1 -t 5 --wrap 'sleep 30')
wait_state "$REF" RUNNING 20
REF_BID=$(bid "$REF")
for _ in $(seq 50); do [ "$(decisions_by "$REF_BID" reclaim/arr)" -ge 1 ] && break; sleep 0.2; done
"$BURSAR" slurm enforce --once --server "127.0.0.1:$PORT" --cluster lab --state "$WORK/enforce-refused.json" --start-after "$SEQ" \
  --watch-state "$WORK/watch.json" --scancel /bin/true --max-attempts 1 --verify-within 2s > "$WORK/enforce-refused.log" 2>&1 \
  || fail "enforce --once failed: $(cat "$WORK/enforce-refused.log")"
q="SELECT raw FROM events WHERE type='action.failed' AND job='$REF_BID'"
sql "$q" | grep -q "exited 0, but Slurm job $REF is still RUNNING" || fail "a scancel that did nothing was not recorded as failed: $(sql "$q")"
[ "$(state_of "$REF")" = RUNNING ] || fail "job $REF is not running"
# Issue 55: the job Slurm did not stop counts again — running, held, marked — and is charged on.
wait_view "$REF_BID" phase running 10
[ -n "$(view "$REF_BID" | jget runs.reclaim_failed)" ] || fail "job $REF_BID is not marked as a reclaim not carried out: $(view "$REF_BID")"
[ "$(decisions_by "$REF_BID" bursar/reclaim-failed)" -ge 1 ] || fail "no bursar/reclaim-failed alert for $REF_BID"
curl -sf "$API/metrics" | grep -q '^bursar_reclaims_not_carried_out 1$' || fail "/metrics does not count the job Slurm did not stop"
sleep 2
scancel "$REF"
wait_state "$REF" CANCELLED 20
wait_done "$REF_BID" 20
read -r ST EN < <(slurm_times "$REF" | tr '|' ' ')
python3 - "$(view "$REF_BID" | jget runtime_gpu_hours)" "$ST" "$EN" "$INTERVAL" <<'PY' || fail "job $REF_BID was not charged for the time it ran after the failed reclaim"
import sys
got, start, end, interval = float(sys.argv[1]) * 3600, float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
want = end - start
print(f"    job charged {got:.1f} GPU-s, Slurm ran it {want:.1f} GPU-s")
sys.exit(0 if abs(got - want) <= interval + 1.5 else 1)
PY
start_enforce
ok "a reclaim Slurm did not carry out (scancel exited 0): action.failed, and the job counted and charged until it ended"

# --- 4. preemption and node failure --------------------------------------------------------------------
say "4. preemption and a node failure"
P1=$(sb -A pre --gres=gpu:8 -t 5 --wrap 'sleep 60')
P2=$(sb -A pre --gres=gpu:8 -t 5 --wrap 'sleep 60')
wait_state "$P1" RUNNING 20; wait_state "$P2" RUNNING 20
declare -A FIRST_START
for j in $P1 $P2; do read -r s _ <<<"$(slurm_times "$j" | tr '|' ' ')"; FIRST_START[$j]=$s; done
sleep 1
URG=$(sb -p urgent -A urg --gres=gpu:8 -t 5 --wrap 'sleep 2')
wait_state "$URG" RUNNING 20
read -r URG_S _ <<<"$(slurm_times "$URG" | tr '|' ' ')"
PRE=""
for j in $P1 $P2; do [ "$(state_of "$j")" = PENDING ] && PRE=$j; done
[ -n "$PRE" ] || fail "neither $P1 nor $P2 was preempted"
PRE_BID=$(bid "$PRE")
wait_view "$PRE_BID" phase admitted 5
wait_state "$URG" COMPLETED 20
scontrol update JobId="$PRE" StartTime=now
wait_state "$PRE" RUNNING 20
read -r PRE_S1 _ <<<"$(slurm_times "$PRE" | tr '|' ' ')"
wait_view "$PRE_BID" runs.reruns 1 5
wait_view "$PRE_BID" phase running 5
ok "job $PRE preempted by urgent job $URG: requeued (not ended), running again as a second run"
OTHER=$P1; [ "$PRE" = "$P1" ] && OTHER=$P2
ON_N2=""
for j in $P1 $P2; do [ "$(squeue -h -j "$j" -o %N)" = n2 ] && ON_N2=$j; done
[ -n "$ON_N2" ] || fail "no job runs on n2"
N2_BID=$(bid "$ON_N2")
reruns_before=$(view "$N2_BID" | jget runs.reruns); reruns_before=${reruns_before:-0}
scontrol update NodeName=n2 State=DOWN Reason=bursar-e2e; T_DOWN=$(date +%s)
wait_state "$ON_N2" PENDING 20
wait_view "$N2_BID" phase admitted 5
[ "$(view "$N2_BID" | jget status)" = "" ] || fail "the node failure was taken for an end of $ON_N2"
ok "node n2 failed: job $ON_N2 requeued, not ended"
scancel "$P1" "$P2"
scontrol update NodeName=n2 State=RESUME 2>/dev/null || true
for j in $P1 $P2; do wait_state "$j" CANCELLED 20; done
wait_done "$PRE_BID" 5
wait_done "$N2_BID" 5
# Project pre's two jobs, run by run: the preempted one until the urgent job started, again from its
# restart; the one on n2 until the node went down; each until it was cancelled otherwise.
ran=0 requeues=0
for j in $P1 $P2; do
  read -r _ e <<<"$(slurm_times "$j" | tr '|' ' ')"
  s=${FIRST_START[$j]}
  if [ "$j" = "$PRE" ]; then ran=$(( ran + 8 * (URG_S - s) )); s=$PRE_S1; requeues=$((requeues + 1)); fi
  if [ "$j" = "$ON_N2" ]; then ran=$(( ran + 8 * (T_DOWN - s) )); requeues=$((requeues + 1)); else ran=$(( ran + 8 * (e - s) )); fi
done
charged pre "$ran" 8 "$requeues"
ok "preemption and node failure settled run by run"

# --- 5. MIG slices -------------------------------------------------------------------------------------
say "5. MIG slices: typed GRES counted as their share of a GPU"
SL=$(sb -A slices -p mig --gres=gpu:1g.10gb:2 -t 5 --wrap 'sleep 3')
M4=$(sb -A mig -p mig --gres=gpu:1g.10gb:4 -t 5 --wrap 'sleep 30')
M3=$(sb -A mig -p mig --gres=gpu:3g.40gb:1 -t 5 --wrap 'sleep 30')
[ -n "$SL" ] || fail "sbatch --gres=gpu:1g.10gb:2 failed: $(tail -n 3 "$WORK/sbatch.err")"
[ -n "$M4" ] && [ -n "$M3" ] || fail "a 4-slice job beside a 3g.40gb (7/7 of project mig's 1 GPU) was refused: $(tail -n 3 "$WORK/sbatch.err")"
if sbatch -A mig -p mig --gres=gpu:1g.10gb:1 -t 5 --wrap true > mig-over.out 2>&1; then
  fail "one slice more than project mig's cap of 1 GPU was accepted"
fi
grep -q "bursar denied job .*quota/mig" mig-over.out || fail "the slice over the cap was not denied by quota/mig: $(cat mig-over.out)"
printf '    one slice more: %s\n' "$(grep -o 'bursar denied.*' mig-over.out | head -1)"
SL_BID=$(bid "$SL")
adm=$(sql "SELECT json_extract(raw,'\$.job.gpus') FROM events WHERE type='job.submitted' AND job='$SL_BID'")
[ "$adm" = 2/7 ] || fail "--gres=gpu:1g.10gb:2 was admitted for '$adm' GPUs, not 2/7"
scontrol show job "$SL" | grep -q 'bursar_gpus=2/7\b' || fail "job $SL's AdminComment does not say bursar_gpus=2/7"
for j in $SL $M4 $M3; do wait_state "$j" RUNNING 20; done
wait_view "$SL_BID" gpus 2/7 5
wait_state "$SL" COMPLETED 20
wait_done "$SL_BID" 5
[ "$(slurm_gres "$SL")" = gpu:1g.10gb:2 ] || fail "Slurm allocated $(slurm_gres "$SL") to $SL"
[ "$(view "$SL_BID" | jget gpus)" = 2/7 ] || fail "bursar holds $(view "$SL_BID" | jget gpus) GPUs for $SL, Slurm allocated two 1g.10gb (2/7)"
[ "$(decisions_by "$SL_BID" bursar/allocation)" = 0 ] || fail "the watcher reported other GPUs for $SL than the 2/7 admitted"
read -r s e <<<"$(slurm_times "$SL" | tr '|' ' ')"
charged slices "$(times 2/7 $(( e - s )))" 1 0 0.01
ok "two 1g.10gb: admitted, held and charged as 2/7 of a GPU (no correction at the start)"
for pair in "$M4:4/7:gpu:1g.10gb:4" "$M3:3/7:gpu:3g.40gb:1"; do
  IFS=: read -r j share gres <<<"$pair"
  wait_view "$(bid "$j")" gpus "$share" 5
  [ "$(slurm_gres "$j")" = "$gres" ] || fail "Slurm allocated $(slurm_gres "$j") to $j, not $gres"
done
sleep 1
scancel "$M4" "$M3"
for j in $M4 $M3; do wait_state "$j" CANCELLED 20; wait_done "$(bid "$j")" 5; done
read -r s4 e4 <<<"$(slurm_times "$M4" | tr '|' ' ')"; read -r s3 e3 <<<"$(slurm_times "$M3" | tr '|' ' ')"
charged mig "$(python3 -c "print(4/7*($e4-$s4) + 3/7*($e3-$s3))")" 1 0 0.01
ok "project mig (cap 1 GPU): 4/7 beside 3/7 admitted and charged as such, one slice more denied"
MX=$(sb -A migx -p mig --exclusive -t 5 --wrap 'sleep 2')
[ -n "$MX" ] || fail "sbatch -p mig --exclusive failed: $(tail -n 3 "$WORK/sbatch.err")"
MX_BID=$(bid "$MX")
adm=$(sql "SELECT json_extract(raw,'\$.job.gpus') FROM events WHERE type='job.submitted' AND job='$MX_BID'")
[ "$adm" = 2 ] || fail "--exclusive on m1 was admitted for '$adm' GPUs, not 2 (13/7 rounded up)"
wait_state "$MX" COMPLETED 30
wait_done "$MX_BID" 5
[ "$(view "$MX_BID" | jget gpus)" = 13/7 ] || fail "bursar holds $(view "$MX_BID" | jget gpus) GPUs for $MX, Slurm allocated $(slurm_gres "$MX") (13/7)"
read -r s e <<<"$(slurm_times "$MX" | tr '|' ' ')"
charged migx "$(times 13/7 $(( e - s )))" 1 0 0.01
ok "--exclusive on the MIG node: admitted for 2 (the file's whole GPUs), held and charged as the 13/7 allocated ($(slurm_gres "$MX"))"
inv=$(sql "SELECT raw FROM events WHERE type='pool.inventory' ORDER BY seq DESC LIMIT 1")
if [ -n "$inv" ]; then
  python3 - "$inv" <<'PY' || fail "the inventory does not count m1's slices as their share: $inv"
import json, sys
from fractions import Fraction
rows = {(r["gpu_type"], r["queue"]): r for r in json.loads(sys.argv[1])["capacity"]}
one, three = rows[("1G.10GB", "mig")], rows[("3G.40GB", "mig")]
# Seven 1g.10gb are one GPU, two 3g.40gb six sevenths (wire format v1.x writes a share as "6/7").
assert (one["in_service"], three["in_service"]) == (1, "6/7"), (one, three)
for r in (one, three):
    assert Fraction(r["allocated"]) + Fraction(r["free"]) == Fraction(r["in_service"]), r
assert rows[("H100", "debug")]["in_service"] + rows[("H100", "debug")]["drained"] == 16
print(f"    inventory of partition mig: 1G.10GB in service {one['in_service']} ({one['free']} free), 3G.40GB {three['in_service']} ({three['free']} free)")
PY
fi
