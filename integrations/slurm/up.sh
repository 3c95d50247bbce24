#!/bin/bash
# Bring up a one-node Slurm cluster (Debian 12 packages, Slurm 22.05) with 8 fake H100 GPUs whose
# job_submit.lua asks bursar serve for every admission. Everything lives under $LAB; needs root.
# Adapted from the slurm-lab scripts; see docs/integrations/slurm.md.
#
#   LAB=$(mktemp -d) BURSAR_URL=http://127.0.0.1:7878/v1/admit integrations/slurm/up.sh
#   export SLURM_CONF=$LAB/etc/slurm.conf      # then sbatch, squeue, ... talk to it
#   LAB=... integrations/slurm/down.sh
#
# The Prolog/Epilog pair (prolog-dcgm.sh, epilog-dcgm.sh) keeps dcgm-exporter's job mapping files in
# $LAB/dcgm-job-map, as on a real GPU node.
#
# Settings (environment): LAB (required), BURSAR_URL, BURSAR_FAIL_OPEN (true|false, default false),
# BURSAR_TIMEOUT (seconds, default 2), BURSAR_TOKEN_FILE (the scheduler principal's token, when serve
# has principals; default none), SLURMCTLD_PORT (6817), SLURMD_PORT (6818).
# Prerequisite: apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge curl
set -euo pipefail
LAB=${LAB:?set LAB to a folder for the lab cluster}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
HOST=$(hostname -s)
BURSAR_URL=${BURSAR_URL:-http://127.0.0.1:7878/v1/admit}
BURSAR_FAIL_OPEN=${BURSAR_FAIL_OPEN:-false}
BURSAR_TIMEOUT=${BURSAR_TIMEOUT:-2}
BURSAR_TOKEN_FILE=${BURSAR_TOKEN_FILE:-}
SLURMCTLD_PORT=${SLURMCTLD_PORT:-6817}
SLURMD_PORT=${SLURMD_PORT:-6818}
T0=$(date +%s.%N)

mkdir -p "$LAB"/{etc,munge,spool/ctld,spool/d,log,run,dev,out,dcgm-job-map}
rm -rf "${LAB:?}"/spool/ctld/* "${LAB:?}"/spool/d/* "${LAB:?}"/dcgm-job-map/*   # fresh state, job ids restart at 1
chmod 755 "$LAB/munge"; chmod 1777 "$LAB/out"         # munged needs o+x on its socket folder
[ -s "$LAB/munge/munge.key" ] || mungekey -c -k "$LAB/munge/munge.key"
for i in 0 1 2 3 4 5 6 7; do                          # gres.conf File= must be character devices
  [ -c "$LAB/dev/nvidia$i" ] || { rm -f "$LAB/dev/nvidia$i"; mknod -m 666 "$LAB/dev/nvidia$i" c 195 "$i"; }
done

fill() { sed -e "s#@LAB@#$LAB#g; s#@HOST@#$HOST#g; s#@CTLD_PORT@#$SLURMCTLD_PORT#g; s#@D_PORT@#$SLURMD_PORT#g" "$1" > "$2"; }
fill "$HERE/slurm.conf.in" "$LAB/etc/slurm.conf"
fill "$HERE/gres.conf.in" "$LAB/etc/gres.conf"
cp "$HERE/job_submit.lua" "$LAB/etc/job_submit.lua"
cp "$HERE/prolog-dcgm.sh" "$HERE/epilog-dcgm.sh" "$LAB/etc/"
# The lab's GPUs are fake (no driver, no nvidia-smi): Slurm's device numbers are taken as DCGM's indices.
cat > "$LAB/etc/dcgm-job-map.conf" <<CONF
BURSAR_DCGM_MAP_DIR=$LAB/dcgm-job-map
BURSAR_GPU_INDEX=slurm
CONF
TOKEN_FILE_LUA=nil
[ -n "$BURSAR_TOKEN_FILE" ] && TOKEN_FILE_LUA="\"$BURSAR_TOKEN_FILE\""
cat > "$LAB/etc/bursar.lua" <<CONF
-- Settings for job_submit.lua (see the CONFIG table there).
return {
  url = "$BURSAR_URL",
  timeout = $BURSAR_TIMEOUT,
  fail_open = $BURSAR_FAIL_OPEN,
  cluster = "lab",
  token_file = $TOKEN_FILE_LUA,
}
CONF

export SLURM_CONF=$LAB/etc/slurm.conf
munged -S "$LAB/munge/munge.socket.2" --key-file="$LAB/munge/munge.key" --log-file="$LAB/munge/munged.log" \
       --pid-file="$LAB/munge/munged.pid" --seed-file="$LAB/munge/munged.seed"
for _ in $(seq 100); do munge -n -S "$LAB/munge/munge.socket.2" >/dev/null 2>&1 && break; sleep 0.1; done
slurmctld -f "$SLURM_CONF"          # both daemonize and write their pid files under $LAB/run
slurmd -f "$SLURM_CONF"
for _ in $(seq 150); do
  [ "$(sinfo -h -n "$HOST" -o %T 2>/dev/null)" = idle ] && break; sleep 0.2
done
if [ "$(sinfo -h -n "$HOST" -o %T 2>/dev/null)" != idle ]; then
  echo "up.sh: the node did not become idle" >&2; tail -n 20 "$LAB"/log/slurm*.log >&2; exit 1
fi
echo "up.sh: cluster up in $(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $T0}") s; export SLURM_CONF=$SLURM_CONF"
