#!/bin/bash
# What bursar's admission costs a Slurm submission: N sequential `sbatch` calls with job_submit.lua
# asking bursar serve, then N with the hook removed (JobSubmitPlugins unset, `scontrol reconfigure`),
# on the same lab cluster in the same run. Prints median and p90 wall time per sbatch and the ratio.
# Needs root, Slurm installed (see e2e.sh) and a built bursar:
#   BURSAR=target/release/bursar N=100 integrations/slurm/bench.sh
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BURSAR=${BURSAR:?set BURSAR to a bursar binary}
N=${N:-100}
WORK=$(mktemp -d /tmp/bursar-slurm-bench.XXXXXX); chmod 755 "$WORK"
LAB=$WORK/lab SERVE_PID=
cleanup() { set +e; [ -d "$LAB" ] && LAB=$LAB "$HERE/down.sh"; [ -n "$SERVE_PID" ] && kill "$SERVE_PID" && wait "$SERVE_PID"; rm -rf "$WORK"; }
trap cleanup EXIT
mkdir -p "$WORK/policies"
cp "$HERE/../../policies/quota.toml" "$HERE/../../policies/approval.toml" "$HERE/../../policies/placement.toml" "$WORK/policies/"
"$BURSAR" serve --policies "$WORK/policies" --audit "$WORK/audit.db" --listen 127.0.0.1:0 --port-file "$WORK/port" \
  > "$WORK/serve.log" 2>&1 &
SERVE_PID=$!
for _ in $(seq 300); do [ -s "$WORK/port" ] && break; sleep 0.1; done
PORT=$(cat "$WORK/port")
LAB=$LAB BURSAR_URL=http://127.0.0.1:$PORT/v1/admit SLURMCTLD_PORT=${SLURMCTLD_PORT:-16817} \
  SLURMD_PORT=${SLURMD_PORT:-16818} "$HERE/up.sh" >/dev/null
export SLURM_CONF=$LAB/etc/slurm.conf
cd "$LAB/out"
scontrol update PartitionName=debug State=DOWN >/dev/null   # jobs stay pending: only submission is timed
run() {  # $1 = label; prints "label median p90" in ms
  local t0 t1
  for i in $(seq "$N"); do
    t0=$(date +%s%N)
    sbatch -Q -A nlp --gpus=1 -t 30 --comment 'ready=image,data,script' --wrap true >/dev/null
    t1=$(date +%s%N)
    echo $(( (t1 - t0) / 1000 ))
  done | sort -n | awk -v l="$1" '{a[NR]=$1} END {printf "%s %.2f %.2f\n", l, a[int(NR*0.5)]/1000, a[int(NR*0.9)]/1000}'
}
A=$(run with-bursar)
scancel --quiet -u root
sed -i 's/^JobSubmitPlugins=lua/#JobSubmitPlugins=lua/' "$SLURM_CONF"
scontrol reconfigure; sleep 2
B=$(run without-hook)
scancel --quiet -u root
echo "sbatch wall time per submission, N=$N sequential, ms (median p90):"
echo "  $A"
echo "  $B"
echo "$A $B" | awk '{printf "  ratio with/without (median): %.2f; added per submission: %.2f ms\n", $2/$5, $2-$5}'
