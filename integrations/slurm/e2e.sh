#!/bin/bash
# End-to-end test: bursar governing a real one-node Slurm cluster (docs/integrations/slurm.md).
#
# As root: installs slurmctld, slurmd, slurm-client, munge and curl from Debian if missing (without
# letting their init scripts start anything), starts munge + Slurm with 8 fake GPUs in a temporary
# folder, `bursar serve` with the example policies (idle window shortened to seconds) and a configuration
# with principals (docs/security.md: the hook, the agents, two approvers and an operator each hold their
# own token; MUNGE names a person on this host), and the two agents (`bursar slurm watch`, `bursar slurm
# enforce`), then shows:
#   0. a caller without a credential refused (401), a credential without the power refused (403);
#   1. a job over quota rejected by sbatch with bursar's reason;
#   2. an allowed job running;
#   3. a job needing approval held (and not releasable by its owner), listed by `bursar pending`, refused
#      to a non-approver (alice's token; a MUNGE credential of `nobody`), to alice answering `--as bob`,
#      and released after bob's `bursar approve`, which the audit log records as proved by his token;
#   4. a deferrable job given bursar's begin time;
#   5. an idle job alerted, then cancelled by the enforcer, the action recorded — its utilisation read
#      from a real Prometheus (`serve --utilisation`) scraping a dcgm-exporter stand-in that labels each
#      GPU with the job the Prolog mapped to it (2 and 5 also check the Prolog/Epilog mapping files);
#   6. each decision in the audit log next to Slurm's job id, and each enforcer action recorded;
#   7. both agents killed and restarted from scratch: nothing done or recorded twice;
#   8. with bursar down, submissions rejected (fail closed).
# Every daemon it started is stopped by PID on exit, pass or fail.
#
#   sudo integrations/slurm/e2e.sh                 # builds bursar with cargo unless BURSAR=path is set
#   KEEP=1 sudo integrations/slurm/e2e.sh          # keep the work folder (logs, audit.db) afterwards
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
T0=$(date +%s)
say() { printf '[%3ss] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }
fail() { say "FAIL: $*"; exit 1; }
ok() { say "ok: $*"; }

[ "$(id -u)" = 0 ] || { echo "e2e.sh: run as root (it installs Slurm and starts its daemons)" >&2; exit 2; }

# --- 1. packages ---------------------------------------------------------------------------------------
missing=0
for b in slurmctld slurmd sbatch squeue scancel scontrol munged mungekey curl sqlite3 prometheus; do
  command -v "$b" >/dev/null 2>&1 || missing=1
done
if [ $missing = 1 ]; then
  say "installing Slurm and munge from Debian"
  made_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then   # keep the packages' init scripts from starting daemons
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod 755 /usr/sbin/policy-rc.d; made_policy=1
  fi
  pkgs=(slurmctld slurmd slurm-client munge curl sqlite3 prometheus)
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null 2>&1 \
    || { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null; }
  [ $made_policy = 1 ] && rm -f /usr/sbin/policy-rc.d
fi

# --- 2. bursar -----------------------------------------------------------------------------------------
if [ -z "${BURSAR:-}" ]; then
  say "building bursar"
  (cd "$ROOT" && cargo build -q -p bursar)
  BURSAR=${CARGO_TARGET_DIR:-$ROOT/target}/debug/bursar
fi
[ -x "$BURSAR" ] || fail "no bursar binary at $BURSAR"
# The dcgm-exporter stand-in (crates/testkit): a GPU's load is the one thing that cannot be had here.
FAKE_DCGM=${FAKE_DCGM:-$(dirname "$BURSAR")/bursar-fake-dcgm}
if [ ! -x "$FAKE_DCGM" ]; then
  say "building the dcgm-exporter stand-in"
  (cd "$ROOT" && cargo build -q -p bursar-testkit --bin bursar-fake-dcgm)
  FAKE_DCGM=${CARGO_TARGET_DIR:-$ROOT/target}/debug/bursar-fake-dcgm
fi
[ -x "$FAKE_DCGM" ] || fail "no bursar-fake-dcgm binary at $FAKE_DCGM"

# --- 3. work folder and cleanup ------------------------------------------------------------------------
WORK=$(mktemp -d /tmp/bursar-slurm-e2e.XXXXXX)
chmod 755 "$WORK"
LAB=$WORK/lab
SERVE_PID= WATCH_PID= ENFORCE_PID= DCGM_PID= PROM_PID=
. "$HERE/lib.sh"
cleanup() {
  local rc=$?
  set +e
  stop_pid "$ENFORCE_PID"; stop_pid "$WATCH_PID"
  [ -d "$LAB" ] && LAB=$LAB "$HERE/down.sh"
  stop_pid "$SERVE_PID"; stop_pid "$PROM_PID"; stop_pid "$DCGM_PID"
  local left=""
  for p in $ENFORCE_PID $WATCH_PID $SERVE_PID $PROM_PID $DCGM_PID; do alive "$p" && left="$left $p"; done
  for f in "$LAB/run/slurmctld.pid" "$LAB/run/slurmd.pid" "$LAB/munge/munged.pid"; do
    [ -f "$f" ] && alive "$(cat "$f")" && left="$left $(cat "$f")"
  done
  [ -n "$left" ] && { echo "e2e.sh: processes still running:$left" >&2; rc=1; }
  if [ $rc != 0 ]; then
    for f in serve.log watch.log enforce.log dcgm.log prometheus.log lab/log/slurmctld.log; do
      [ -f "$WORK/$f" ] && { echo "----- $f (last 25 lines)"; tail -n 25 "$WORK/$f"; }
    done
    echo "e2e.sh: FAILED (work folder kept: $WORK)"
  elif [ -n "${KEEP:-}" ]; then
    echo "e2e.sh: passed in $(( $(date +%s) - T0 )) s (work folder kept: $WORK)"
  else
    rm -rf "$WORK"
    echo "e2e.sh: passed in $(( $(date +%s) - T0 )) s; every daemon stopped"
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- 4. policies: the TOML examples, with the test's short idle window and an off-peak window 2 h ahead ---
# (The TOML examples only: WebAssembly policies need a build with WebAssembly support and say nothing
# about Slurm.)
mkdir -p "$WORK/policies"
for f in "$ROOT"/policies/*.toml; do grep -q '^kind = "wasm"' "$f" || cp "$f" "$WORK/policies/"; done
cp "$HERE"/e2e/*.toml "$WORK/policies/"
OFF_START=$(( ($(date -u +%-H) + 2) % 24 ))
OFF_END=$(( (OFF_START + 1) % 24 ))
sed -i -e "s/^start = .*/start = \"$(printf %02d $OFF_START):00\"/" -e "s/^end = .*/end = \"$(printf %02d $OFF_END):00\"/" \
       -e 's/^utc_offset = .*/utc_offset = "+00:00"/' "$WORK/policies/placement.toml"
grep -q "start = \"$(printf %02d $OFF_START):00\"" "$WORK/policies/placement.toml" || fail "could not set the off-peak window"

# --- 5. utilisation: dcgm-exporter stand-in -> Prometheus -> bursar serve --utilisation -----------------
# The stand-in serves dcgm-exporter's /metrics for the node's 8 GPUs, each labelled hpc_job=<Slurm id>
# from the mapping files the Prolog writes; a GPU running a job reads busy (0.9) unless the test wrote
# a load for that job under $WORK/load. Prometheus scrapes it every second on a loopback port.
mkdir -p "$LAB/dcgm-job-map" "$WORK/load" "$WORK/prometheus"
"$FAKE_DCGM" --map-dir "$LAB/dcgm-job-map" --load-dir "$WORK/load" --gpus 8 --hostname lab \
  --port-file "$WORK/dcgm.port" > "$WORK/dcgm.log" 2>&1 &
DCGM_PID=$!
for _ in $(seq 100); do [ -s "$WORK/dcgm.port" ] && break; alive $DCGM_PID || break; sleep 0.1; done
[ -s "$WORK/dcgm.port" ] || fail "the dcgm-exporter stand-in did not start"
cat > "$WORK/prometheus/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: dcgm
    static_configs:
      - targets: ["127.0.0.1:$(cat "$WORK/dcgm.port")"]
YML
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PROM_PORT=$(free_port)
prometheus --config.file="$WORK/prometheus/prometheus.yml" --storage.tsdb.path="$WORK/prometheus/data" \
  --web.listen-address="127.0.0.1:$PROM_PORT" > "$WORK/prometheus.log" 2>&1 &
PROM_PID=$!
for _ in $(seq 150); do curl -sf "http://127.0.0.1:$PROM_PORT/-/ready" >/dev/null && break; alive $PROM_PID || break; sleep 0.2; done
curl -sf "http://127.0.0.1:$PROM_PORT/-/ready" >/dev/null || fail "Prometheus did not start"
cat > "$WORK/utilisation.toml" <<TOML
[prometheus]
server = "http://127.0.0.1:$PROM_PORT"
interval = "1s"
lag = "1s"
max_age = "3s"
timeout = "2s"

[jobs]
keys = "slurm"
slurm_cluster = "lab"
TOML
ok "Prometheus on port $PROM_PORT (pid $PROM_PID) scraping the dcgm-exporter stand-in (pid $DCGM_PID)"

# --- 6. bursar serve, with principals --------------------------------------------------------------------
# Each caller holds its own token (0600, made by `bursar auth token`); the configuration keeps only their
# SHA-256. The hook may only submit, the agents only report (and read the decisions they enforce) for
# lab-* jobs, bob and alice only answer, ops only reads and administers. A person MUNGE names (on this
# host) is an approver or a user, like any person the file does not declare.
CREDS=$WORK/creds
mkdir -m 700 "$CREDS"
for who in slurmctld agents bob alice ops; do
  "$BURSAR" auth token --name "$who" --out "$CREDS/$who.token" > /dev/null 2>&1 || fail "bursar auth token failed for $who"
done
hash_of() { "$BURSAR" auth hash < "$CREDS/$1.token"; }
cat > "$WORK/bursar.toml" <<TOML
[serve]
policies = "$WORK/policies"
audit = "$WORK/audit.db"

[auth]
people = ["approver", "user"]

[auth.munge]
socket = "$LAB/munge/munge.socket.2"

[[principal]]
name = "slurmctld"
roles = ["scheduler"]
jobs = ["lab-*"]
tokens = ["$(hash_of slurmctld)"]
unix_users = ["root"]      # SlurmUser: the hook asks over the event socket (issue 55)

[[principal]]
name = "slurm-agents"
roles = ["producer", "reader"]
jobs = ["lab-*"]
tokens = ["$(hash_of agents)"]

[[principal]]
name = "bob"
roles = ["approver"]
tokens = ["$(hash_of bob)"]

[[principal]]
name = "alice"
roles = ["approver"]
tokens = ["$(hash_of alice)"]

[[principal]]
name = "ops"
roles = ["reader", "admin"]
tokens = ["$(hash_of ops)"]
TOML
"$BURSAR" config check "$WORK/bursar.toml" > "$WORK/config-check.out" 2>&1 \
  || fail "bursar config check refused the test's configuration: $(cat "$WORK/config-check.out")"
"$BURSAR" serve --config "$WORK/bursar.toml" --listen 127.0.0.1:0 --socket "$WORK/events.sock" \
  --port-file "$WORK/port" --fast-commit --tick 500ms --utilisation "$WORK/utilisation.toml" \
  > "$WORK/serve.log" 2>&1 &
SERVE_PID=$!
for _ in $(seq 300); do [ -s "$WORK/port" ] && break; alive $SERVE_PID || break; sleep 0.1; done
[ -s "$WORK/port" ] || fail "bursar serve did not start"
PORT=$(cat "$WORK/port")
API=http://127.0.0.1:$PORT
curl -sf "$API/healthz" >/dev/null || fail "bursar serve does not answer /healthz"
ok "bursar serve on port $PORT (pid $SERVE_PID), with 5 principals"
# 0. Nobody is let in without a credential, and a credential is only its powers.
code() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
[ "$(code "$API/v1/pending")" = 401 ] || fail "GET /v1/pending without a credential was not refused with 401"
[ "$(code -H "Authorization: Bearer not-a-token" "$API/v1/pending")" = 401 ] || fail "a wrong token was not refused with 401"
REFUSED=$(curl -s -w ' %{http_code}' -H "Authorization: Bearer $(cat "$CREDS/slurmctld.token")" "$API/v1/pending")
[ "${REFUSED##* }" = 403 ] || fail "the hook's token read /v1/pending: $REFUSED"
echo "$REFUSED" | grep -q '`slurmctld` (scheduler) lacks the `read` power' || fail "the 403 does not name the power and the principal: $REFUSED"
REFUSED=$(curl -s -w ' %{http_code}' -H "Authorization: Bearer $(cat "$CREDS/agents.token")" -H 'content-type: application/json' \
  --data-binary '{"id":"forged-1","time":"'"$(date -u +%Y-%m-%dT%H:%M:%SZ)"'","type":"job.submitted","job_id":"lab-forged","project":"nlp","gpus":1,"hours":1}' \
  "$API/v1/admit")
[ "${REFUSED##* }" = 403 ] || fail "the agents' token admitted a job: $REFUSED"
ok "no credential or a wrong one: 401; the hook cannot read, the agents cannot submit: 403 naming the power"

# --- 7. the cluster ------------------------------------------------------------------------------------
LAB=$LAB BURSAR_URL=$API/v1/admit BURSAR_SOCKET=$WORK/events.sock BURSAR_TOKEN_FILE=$CREDS/slurmctld.token SLURMCTLD_PORT=${SLURMCTLD_PORT:-16817} SLURMD_PORT=${SLURMD_PORT:-16818} \
  "$HERE/up.sh" | sed 's/^/    /'
export SLURM_CONF=$LAB/etc/slurm.conf
ok "Slurm up: $(sinfo -h -o '%n %T %G')"

# --- 8. the agents -------------------------------------------------------------------------------------
"$BURSAR" slurm watch --server "127.0.0.1:$PORT" --token-file "$CREDS/agents.token" --cluster lab --state "$WORK/watch.json" --interval 300ms \
  > "$WORK/watch.log" 2>&1 &
WATCH_PID=$!
"$BURSAR" slurm enforce --server "127.0.0.1:$PORT" --token-file "$CREDS/agents.token" --cluster lab --state "$WORK/enforce.json" \
  --retry-delay 200ms > "$WORK/enforce.log" 2>&1 &
ENFORCE_PID=$!
ok "agents running (watch pid $WATCH_PID, enforce pid $ENFORCE_PID)"

# --- helpers -------------------------------------------------------------------------------------------
cd "$LAB/out"
NOW() { date -u +%Y-%m-%dT%H:%M:%S.%3NZ; }
state_of() { squeue -h -t all -j "$1" -o %T 2>/dev/null; }
wait_state() {  # job, state, seconds
  local s=""
  for _ in $(seq $(( $3 * 5 ))); do s=$(state_of "$1"); [ "$s" = "$2" ] && return 0; sleep 0.2; done
  fail "Slurm job $1 is $s, expected $2 within $3 s"
}
bid_in() { grep -o 'lab-[0-9a-f]\{12\}' "$1" | head -1; }
job_view() { curl -sf -H "Authorization: Bearer $(cat "$CREDS/ops.token")" "$API/v1/jobs/$1" || true; }
explain() { "$BURSAR" audit --db "$WORK/audit.db" explain --format json "$1"; }
# A job's story (`bursar audit explain`) must hold decision $2.
audit_has() {  # bursar id, decision
  local story; story=$(explain "$1") || fail "bursar audit explain $1 failed"
  echo "$story" | grep -q "\"decision\":\"$2\"" || { echo "$story" >&2; fail "audit: no $2 decision for $1"; }
}

# --- scenario 1: over quota ----------------------------------------------------------------------------
say "1. a job over its project's quota"
if sbatch --parsable -A speech --gpus=8 -t 300:00:00 -J over-quota \
     --comment 'stage=finetune ready=image,data,script' --wrap 'sleep 60' > deny.out 2> deny.err; then
  fail "sbatch accepted a job over quota: $(cat deny.out deny.err)"
fi
sed 's/^/    /' deny.err
grep -q 'bursar denied job lab-[0-9a-f]\{12\}: .*speech.*' deny.err || fail "sbatch did not show bursar's reason"
grep -q 'quota/monthly-gpu-hours' deny.err || fail "the reason does not name the quota policy"
DENY_BID=$(bid_in deny.err)
ok "rejected by sbatch with bursar's reason (bursar job $DENY_BID)"

# --- scenario 2: allowed -------------------------------------------------------------------------------
say "2. an allowed job"
ALLOW=$(sbatch --parsable -A nlp --gpus=2 -t 30 -J allowed \
  --comment 'stage=finetune ready=image,data,script model_params_b=7' --wrap 'echo GPUS=$CUDA_VISIBLE_DEVICES; sleep 300' 2> allow.err) \
  || fail "sbatch refused the allowed job: $(cat allow.err)"
wait_state "$ALLOW" RUNNING 20
ALLOW_BID=$(scontrol show job "$ALLOW" | grep -o 'bursar_job=lab-[0-9a-f]\{12\}' | cut -d= -f2)
[ -n "$ALLOW_BID" ] || fail "job $ALLOW has no bursar id in its AdminComment"
ok "Slurm job $ALLOW (bursar $ALLOW_BID) running"
# Issue 55: the hook asked over serve's event socket (the kept connection), as the slurmctld principal.
grep -q "job_submit/bursar: loaded (socket $WORK/events.sock" "$LAB/log/slurmctld.log" \
  || fail "the hook did not load with the socket: $(grep job_submit/bursar "$LAB/log/slurmctld.log" | tail -3)"
SENT_BY=$(python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("SELECT sender FROM events WHERE job = ? AND type = ?", (sys.argv[2], "job.submitted")).fetchone())' "$WORK/audit.db" "$ALLOW_BID")
echo "$SENT_BY" | grep -q '"via":"unix"' && echo "$SENT_BY" | grep -q '"principal":"slurmctld"' \
  || fail "the admission of $ALLOW_BID did not come over the socket as slurmctld: $SENT_BY"
ok "the hook asked over the event socket (one kept connection, the slurmctld principal by its UID)"
# The Prolog wrote dcgm-exporter's job mapping: one file per GPU of the job, holding its Slurm id.
# Slurm shows the job RUNNING from its allocation on, while the Prolog (PrologFlags=Alloc) may still
# be running on the node: wait for it, as the Epilog check below waits for the Epilog.
mapped() { grep -lx "$1" "$LAB"/dcgm-job-map/[0-9]* 2>/dev/null | wc -l; }
for _ in $(seq 50); do [ "$(mapped "$ALLOW")" = 2 ] && break; sleep 0.2; done
[ "$(mapped "$ALLOW")" = 2 ] || fail "the prolog mapped job $ALLOW to $(mapped "$ALLOW") GPU files, not 2: $(ls "$LAB/dcgm-job-map")"
ok "prolog: Slurm job $ALLOW listed in the mapping files of its 2 GPUs"

# --- scenario 3: approval ------------------------------------------------------------------------------
say "3. a job that needs approval"
HELD=$(sbatch --parsable -A nlp --gpus=1 -t 4-00:00:00 -J needs-approval \
  --comment 'stage=finetune ready=image,data,script' --wrap 'sleep 300' 2> held.err) \
  || fail "sbatch refused the job needing approval: $(cat held.err)"
sed 's/^/    /' held.err
grep -q 'is held until approved: .*bob' held.err || fail "sbatch did not say the job waits for bob's approval"
HELD_BID=$(bid_in held.err)
sleep 2
[ "$(state_of "$HELD")" = PENDING ] || fail "held job $HELD is $(state_of "$HELD")"
squeue -h -j "$HELD" -o %r | grep -q Held || fail "job $HELD is pending but not held: $(squeue -h -j "$HELD" -o %r)"
chown nobody "$LAB/out"
HELD_USER=$(runuser -u nobody -- sbatch --parsable --chdir="$LAB/out" -A nlp --gpus=1 -t 4-00:00:00 \
  --comment 'ready=image,data,script' --wrap 'sleep 300' 2>/dev/null)
if runuser -u nobody -- scontrol release "$HELD_USER" 2>/dev/null; then
  fail "the owner released their own job $HELD_USER that waits for bursar's approval"
fi
scancel "$HELD_USER"
ok "Slurm job $HELD held (bursar $HELD_BID); its owner cannot release such a job"
# What waits for whom, then the answers from a terminal: a non-approver is refused, bob approves.
as() { local who=$1; shift; "$BURSAR" "$@" --server "127.0.0.1:$PORT" --token-file "$CREDS/$who.token"; }
as ops pending > pending.out 2>&1 || fail "bursar pending failed: $(cat pending.out)"
sed 's/^/    /' pending.out
grep -q "$HELD_BID .*bob" pending.out || fail "bursar pending does not show $HELD_BID waiting for bob"
# alice is an approver, but not of this job; and her credential cannot answer as bob.
if as alice approve "$HELD_BID" > refused.out 2>&1; then
  fail "bursar approve accepted alice, who is not an approver of this job: $(cat refused.out)"
fi
grep -q "\`alice\` is not an approver of job .$HELD_BID.: only bob" refused.out || fail "no clear refusal: $(cat refused.out)"
if as alice approve "$HELD_BID" --as bob > refused.out 2>&1; then
  fail "alice's credential approved as bob: $(cat refused.out)"
fi
grep -q "answers as \`bob\` but the credential is \`alice\`'s" refused.out || fail "no clear refusal of alice as bob: $(cat refused.out)"
# A person on this host, proved by the lab's own munged: `nobody` is no approver of it either.
if runuser -u nobody -- "$BURSAR" approve "$HELD_BID" --server "127.0.0.1:$PORT" --munge \
     --munge-socket "$LAB/munge/munge.socket.2" > refused.out 2>&1; then
  fail "a MUNGE credential of nobody approved the job: $(cat refused.out)"
fi
grep -q "\`nobody\` is not an approver of job .$HELD_BID.: only bob" refused.out || fail "no clear refusal of nobody (MUNGE): $(cat refused.out)"
[ "$(state_of "$HELD")" = PENDING ] || fail "a refused answer released job $HELD"
as bob approve "$HELD_BID" > approve.out 2>&1 || fail "bursar approve failed: $(cat approve.out)"
sed 's/^/    /' approve.out
grep -q "approved by bob" approve.out || fail "bursar approve did not say the job was approved: $(cat approve.out)"
wait_state "$HELD" RUNNING 30
"$BURSAR" audit --db "$WORK/audit.db" explain "$HELD_BID" > story.out 2>&1 || fail "bursar audit explain failed: $(cat story.out)"
grep -q "from: bob (token: sha256:" story.out || { cat story.out >&2; fail "the audit log does not say bob's token proved the approval"; }
ok "alice (token), alice as bob, nobody (MUNGE) refused; bob's token approved: the enforcer released Slurm job $HELD, now running"

# --- scenario 4: deferred ------------------------------------------------------------------------------
say "4. deferrable work outside the off-peak window"
DEFER=$(sbatch --parsable -A nlp --gres=gpu:h100:1 -t 60 -J convert \
  --comment 'stage=format_conversion deferrable=true ready=image,data,script' --wrap 'sleep 30' 2> defer.err) \
  || fail "sbatch refused the conversion job: $(cat defer.err)"
sed 's/^/    /' defer.err
DEFER_BID=$(bid_in defer.err)
grep -q 'deferred until' defer.err || fail "the conversion job was not deferred"
[ "$(squeue -h -j "$DEFER" -o %r)" = BeginTime ] || fail "job $DEFER is not waiting for its begin time"
BEGIN=$(squeue -h -j "$DEFER" -o %S)
[ "$BEGIN" = "$(date -u +%Y-%m-%d)T$(printf %02d $OFF_START):00:00" ] \
  || [ "$BEGIN" = "$(date -u -d tomorrow +%Y-%m-%d)T$(printf %02d $OFF_START):00:00" ] \
  || fail "job $DEFER begins at $BEGIN, not at the off-peak start $(printf %02d $OFF_START):00"
ok "Slurm job $DEFER (bursar $DEFER_BID) deferred to $BEGIN"
scancel "$DEFER"

# --- scenario 5: idle ----------------------------------------------------------------------------------
say "5. an idle job"
IDLE=$(sbatch --parsable -A vision --gpus=1 -t 60 -J idle \
  --comment 'stage=finetune ready=image,data,script' --wrap 'sleep 300' 2> idle.err) \
  || fail "sbatch refused the idle job: $(cat idle.err)"
wait_state "$IDLE" RUNNING 20
IDLE_BID=$(scontrol show job "$IDLE" | grep -o 'bursar_job=lab-[0-9a-f]\{12\}' | cut -d= -f2)
for _ in $(seq 50); do job_view "$IDLE_BID" | grep -q '"started":"' && break; sleep 0.2; done
job_view "$IDLE_BID" | grep -q '"started":"' || fail "the watcher did not report job $IDLE as started"
# Its GPU goes quiet: the stand-in reports 1 % engine activity for it, Prometheus scrapes that, and
# serve's utilisation source turns it into job.sample events. Nothing is posted by hand.
echo 0.01 > "$WORK/load/$IDLE"
wait_state "$IDLE" CANCELLED 45
grep -q "alert.*$IDLE_BID\|$IDLE_BID.*alert" "$WORK/enforce.log" || fail "the enforcer saw no alert for $IDLE_BID"
samples=$(sqlite3 "$WORK/audit.db" "SELECT count(*) FROM events WHERE type = 'job.sample' AND job = '$IDLE_BID'")
[ "$samples" -gt 0 ] || fail "no job.sample of $IDLE_BID in the audit log"
# Every sample is the Prometheus source's (its ids are prom-<job>-<evaluation time>).
other=$(sqlite3 "$WORK/audit.db" "SELECT count(*) FROM events WHERE type = 'job.sample' AND event_id NOT LIKE 'prom-%'")
[ "$other" = 0 ] || fail "$other samples in the audit log did not come from Prometheus"
low=$(sqlite3 "$WORK/audit.db" "SELECT count(*) FROM events WHERE type = 'job.sample' AND job = '$IDLE_BID' AND raw LIKE '%\"gpu_util\":0.01%'")
[ "$low" -gt 0 ] || fail "no sample of $IDLE_BID carries the stand-in's 1 %: $(sqlite3 "$WORK/audit.db" "SELECT raw FROM events WHERE type = 'job.sample' AND job = '$IDLE_BID' LIMIT 2")"
ok "Slurm job $IDLE (bursar $IDLE_BID) alerted, then cancelled; $samples samples, all read from Prometheus"
# The busy job next to it was sampled too, and left alone.
busy=$(sqlite3 "$WORK/audit.db" "SELECT count(*) FROM events WHERE type = 'job.sample' AND job = '$ALLOW_BID'")
[ "$busy" -gt 0 ] || fail "no job.sample of the busy job $ALLOW_BID: is Prometheus attributing GPUs?"
[ "$(state_of "$ALLOW")" = RUNNING ] || fail "the busy job $ALLOW is $(state_of "$ALLOW"), not RUNNING"
ok "the busy Slurm job $ALLOW: $busy samples from Prometheus, still running"
for _ in $(seq 50); do [ "$(mapped "$IDLE")" = 0 ] && break; sleep 0.2; done
[ "$(mapped "$IDLE")" = 0 ] || fail "the epilog left job $IDLE in the mapping files"
ok "epilog: Slurm job $IDLE gone from the mapping files"

# --- scenario 6: the audit log -------------------------------------------------------------------------
say "6. the audit log"
sql() { sqlite3 -readonly "$WORK/audit.db" "$1"; }
audit_has "$DENY_BID" deny
sql "SELECT count(*) FROM decisions WHERE job='$DENY_BID' AND decision='deny' AND admission=1" | grep -qx 1 \
  || fail "audit: the deny of $DENY_BID is not there once"
for _ in $(seq 50); do   # the watcher reports the ends of the cancelled jobs
  explain "$IDLE_BID" | grep -q '"kind":"job.finished"' && explain "$DEFER_BID" | grep -q '"kind":"job.finished"' && break
  sleep 0.2
done
audit_has "$ALLOW_BID" allow
audit_has "$HELD_BID" require_approval
audit_has "$HELD_BID" allow
audit_has "$DEFER_BID" defer
audit_has "$IDLE_BID" alert
audit_has "$IDLE_BID" reclaim
# Every decision about a job that reached Slurm sits next to an event naming its Slurm job id.
for pair in "$ALLOW_BID:$ALLOW" "$HELD_BID:$HELD" "$DEFER_BID:$DEFER" "$IDLE_BID:$IDLE"; do
  b=${pair%%:*}; s=${pair#*:}
  unlinked=$(sql "SELECT count(*) FROM decisions d WHERE d.job='$b' AND NOT EXISTS (SELECT 1 FROM events e
    WHERE e.job=d.job AND json_extract(e.raw,'\$.slurm_job_id')='$s')")
  [ "$unlinked" = 0 ] || fail "audit: $unlinked decision(s) of $b not linked to Slurm job $s"
  printf '    Slurm job %-3s = bursar %s: %s\n' "$s" "$b" \
    "$(sql "SELECT group_concat(decision, ', ') FROM (SELECT decision FROM decisions WHERE job='$b' ORDER BY seq)")"
done
# The enforcer's records: the release and the cancel, done, with both ids. Each id the agents send is
# kept under their principal's name (`slurm-agents:enforce-…`): no other caller can squat it.
for rec in "$HELD_BID:$HELD:scontrol release" "$IDLE_BID:$IDLE:scancel"; do
  b=${rec%%:*}; rest=${rec#*:}; s=${rest%%:*}; action=${rest#*:}
  q="SELECT count(*) FROM events WHERE event_id LIKE 'slurm-agents:enforce-%' AND type='action.executed' AND job='$b'
     AND json_extract(raw,'\$.slurm_job_id')='$s' AND json_extract(raw,'\$.action')='$action'"
  for _ in $(seq 50); do [ "$(sql "$q")" = 1 ] && break; sleep 0.2; done
  [ "$(sql "$q")" = 1 ] || fail "audit: no record that '$action' on Slurm job $s was done"
  printf '    recorded: %s\n' "$(sql "SELECT raw FROM events WHERE event_id LIKE 'slurm-agents:enforce-%'
     AND type='action.executed' AND job='$b'")"
done
ok "every decision is in the audit log next to Slurm's job id; the enforcer's actions are recorded"

# --- scenario 7: agents restarted ----------------------------------------------------------------------
say "7. agents killed and restarted: nothing done or recorded twice"
# The inventory is an observation of now, not a record of something done: a restarted watcher that has
# forgotten what it sent reports the nodes once more, by design. Job events and actions must not repeat.
AGENT_EVENTS="SELECT count(*) FROM events WHERE (event_id LIKE 'slurm-agents:slurm-%' OR event_id LIKE 'slurm-agents:enforce-%') AND type <> 'pool.inventory'"
EVENTS_BEFORE=$(sql "$AGENT_EVENTS")
kill -9 "$ENFORCE_PID" "$WATCH_PID"; wait "$ENFORCE_PID" "$WATCH_PID" 2>/dev/null || true
rm -f "$WORK/watch.json"      # the watcher forgets everything: it resends, serve drops the resends
CURSOR=$(grep -o '"cursor":[0-9]*' "$WORK/enforce.json" | cut -d: -f2)
echo '{"version":1,"cursor":0}' > "$WORK/enforce.json"   # the enforcer redoes every decision
"$BURSAR" slurm watch --server "127.0.0.1:$PORT" --token-file "$CREDS/agents.token" --cluster lab --state "$WORK/watch.json" --once \
  > "$WORK/watch-again.log" 2>&1 || fail "watch --once failed: $(cat "$WORK/watch-again.log")"
"$BURSAR" slurm enforce --server "127.0.0.1:$PORT" --token-file "$CREDS/agents.token" --cluster lab --state "$WORK/enforce.json" --once \
  > "$WORK/enforce-again.log" 2>&1 || fail "enforce --once failed: $(cat "$WORK/enforce-again.log")"
sed 's/^/    /' "$WORK/watch-again.log" | grep -v INFO || true
sed 's/^/    /' "$WORK/enforce-again.log" | grep -v INFO || true
grep -q "already known" "$WORK/watch-again.log" || fail "watch did not report its resends"
grep -q " 0 actions recorded ([1-9][0-9]* recorded before)" "$WORK/enforce-again.log" \
  || fail "the enforcer did not find its earlier records"
[ "$(sql "$AGENT_EVENTS")" = "$EVENTS_BEFORE" ] \
  || fail "the restarted agents added $(( $(sql "$AGENT_EVENTS") - EVENTS_BEFORE )) events"
[ "$(state_of "$ALLOW")" = RUNNING ] && [ "$(state_of "$HELD")" = RUNNING ] || fail "a restart disturbed running jobs"
AGAIN=$(grep -o "cursor [0-9]*$" "$WORK/enforce-again.log" | cut -d" " -f2)
[ -n "$AGAIN" ] && [ "$AGAIN" -ge "$CURSOR" ] || fail "enforce came back to cursor ${AGAIN:-?}, not past $CURSOR"
ok "redone from scratch: $EVENTS_BEFORE agent events before and after, running jobs untouched"
WATCH_PID= ENFORCE_PID=

# --- scenario 8: bursar down ---------------------------------------------------------------------------
say "8. bursar unreachable"
stop_pid "$ENFORCE_PID"; ENFORCE_PID=
stop_pid "$WATCH_PID"; WATCH_PID=
stop_pid "$SERVE_PID"; SERVE_PID=
if sbatch --parsable --gpus=1 -t 5 --comment 'ready=image,data,script' --wrap true > down.out 2> down.err; then
  fail "a job was accepted while bursar was down (fail closed is the default)"
fi
sed 's/^/    /' down.err
grep -q 'bursar: job rejected: the admission service gave no decision' down.err || fail "no fail-closed message"
ok "rejected while bursar is down (fail closed)"
