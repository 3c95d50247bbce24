#!/bin/bash
# The hook's own cost per submission, outside slurmctld: job_submit.lua loaded under Debian's lua5.1 (the
# Lua slurmctld links) answers N submissions in a loop against a real `bursar serve` (no policy: the path
# is measured, not a policy), asking over the event socket (one kept connection) and over HTTP (curl per
# submission), in the same run. bench-queue.sh measures the same hook inside slurmctld, where other work
# shares the time; this isolates what the hook itself adds to each of slurmctld's serialised Lua calls.
#
#   BURSAR=target/release/bursar integrations/slurm/hook-bench.sh [N]      (default N=2000)
# Needs lua5.1 and lua-socket (scripts/setup.sh), curl.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BURSAR=${BURSAR:?set BURSAR to a bursar binary}
N=${1:-2000}
WORK=$(mktemp -d /tmp/bursar-hook-bench.XXXXXX)
SERVE_PID=
. "$HERE/lib.sh"
cleanup() {
  if [ -n "$SERVE_PID" ] && alive "$SERVE_PID"; then stop_pid "$SERVE_PID"; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/policies"
"$BURSAR" serve --policies "$WORK/policies" --allow-empty --audit "$WORK/audit.db" --listen 127.0.0.1:0 \
  --port-file "$WORK/port" --socket "$WORK/events.sock" --fast-commit > "$WORK/serve.log" 2>&1 &
SERVE_PID=$!
for _ in $(seq 300); do [ -s "$WORK/port" ] && [ -S "$WORK/events.sock" ] && break; sleep 0.1; done
cat > "$WORK/loop.lua" <<'LUA'
slurm = { SUCCESS = 0, ERROR = -1, ESLURM_ACCESS_DENIED = 2002, log_info = function() end,
  log_error = function(...) io.stderr:write(string.format(...), "\n") end, log_user = function() end }
local hook, n = arg[1], tonumber(arg[2])
assert(dofile(hook) == slurm.SUCCESS)
local NO_VAL, NO_VAL16 = 4294967294, 65534
local clock = require("socket").gettime
local t0 = clock()
for _ = 1, n do
  local job = { name = "j", user_name = "alice", account = "nlp", tres_per_node = "gres/gpu:1", min_nodes = 1,
    max_nodes = NO_VAL, shared = NO_VAL16, sockets_per_node = NO_VAL16, num_tasks = NO_VAL, het_job_offset = NO_VAL,
    time_limit = 60, comment = "stage=finetune ready=all" }
  assert(slurm_job_submit(job, {}, 1000) == slurm.SUCCESS, "a submission was not accepted")
end
print(string.format("%.3f", (clock() - t0) * 1000 / n))
LUA
URL="http://127.0.0.1:$(cat "$WORK/port")/v1/admit"
per() {  # $1 = the socket setting (a Lua expression); prints ms per submission
  printf 'return { socket = %s, url = "%s", cluster = "bench" }\n' "$1" "$URL" > "$WORK/bursar.lua"
  BURSAR_SLURM_CONFIG=$WORK/bursar.lua lua5.1 "$WORK/loop.lua" "$HERE/job_submit.lua" "$2"
}
socket=$(per "\"$WORK/events.sock\"" "$N")
http=$(per nil "$((N / 10))")
echo "job_submit.lua outside slurmctld, against bursar serve (no policy, --fast-commit); $N submissions over the socket, $((N / 10)) over HTTP"
printf 'socket (one kept connection): %s ms per submission\n' "$socket"
printf 'HTTP (curl per submission):   %s ms per submission (%.1fx the socket)\n' "$http" "$(echo "$http / $socket" | bc -l)"
