#!/bin/bash
# Bring up a lab Slurm cluster (Debian 12 packages, Slurm 22.05) with 8 fake H100 GPUs per node whose
# job_submit.lua asks bursar serve for every admission (and cli_filter.lua marks --test-only). One node
# named after the host, or (SLURM_NODES=2) two slurmd on this host, n1 and n2, with partitions debug
# (default), other, and urgent, whose jobs preempt debug's by requeue. Everything lives under $LAB;
# needs root.
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
# has principals; default none), BURSAR_CONFIRM_WITHIN_S (the hook's confirm_within_s, default 900),
# SLURMCTLD_PORT (6817), SLURMD_PORT (6818; the second node uses the next port), SLURM_NODES (1 or 2),
# MAX_JOBS (slurm.conf MaxJobCount, default 10000), JOB_SUBMIT (a job_submit.lua to use instead of
# bursar's, for benchmarks), BURSAR_NODE_GPUS_FILE (the hook's node_gpus_file: where the watcher's
# --node-gpus-file writes each partition's largest node, for --exclusive; default the hook's),
# BURSAR_NODE_GPUS (the hook's node_gpus override; default none: the file says), SLURM_MIG (1: with
# SLURM_NODES=2, a third slurmd, m1, whose one fake A100 is cut into MIG slices — seven 1g.10gb — and a
# second into two 3g.40gb, typed GRES in partition `mig`; default 0).
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
SLURM_NODES=${SLURM_NODES:-1}
SLURM_MIG=${SLURM_MIG:-0}
[ "$SLURM_MIG" = 0 ] || [ "$SLURM_NODES" = 2 ] || { echo "up.sh: SLURM_MIG=1 needs SLURM_NODES=2" >&2; exit 2; }
MAX_JOBS=${MAX_JOBS:-10000}
BURSAR_CONFIRM_WITHIN_S=${BURSAR_CONFIRM_WITHIN_S:-900}
JOB_SUBMIT=${JOB_SUBMIT:-$HERE/job_submit.lua}
T0=$(date +%s.%N)

mkdir -p "$LAB"/{etc,munge,spool/ctld,spool/d,spool/d-n1,spool/d-n2,spool/d-m1,log,run,dev,out,dcgm-job-map}
rm -rf "${LAB:?}"/spool/ctld/* "${LAB:?}"/spool/d*/* "${LAB:?}"/dcgm-job-map/*   # fresh state, job ids restart at 1
chmod 755 "$LAB/munge"; chmod 1777 "$LAB/out"         # munged needs o+x on its socket folder
[ -s "$LAB/munge/munge.key" ] || mungekey -c -k "$LAB/munge/munge.key"
for i in 0 1 2 3 4 5 6 7; do                          # gres.conf File= must be character devices
  [ -c "$LAB/dev/nvidia$i" ] || { rm -f "$LAB/dev/nvidia$i"; mknod -m 666 "$LAB/dev/nvidia$i" c 195 "$i"; }
done
# SLURM_MIG: one device file per MIG slice (Slurm schedules each as one typed GPU): mig0-6 the seven
# 1g.10gb of one A100, mig7-8 the two 3g.40gb of another.
if [ "$SLURM_MIG" = 1 ]; then
  for i in 0 1 2 3 4 5 6 7 8; do
    [ -c "$LAB/dev/mig$i" ] || { rm -f "$LAB/dev/mig$i"; mknod -m 666 "$LAB/dev/mig$i" c 195 $((64 + i)); }
  done
fi

NODE_LINE="CPUs=64 Sockets=2 CoresPerSocket=32 ThreadsPerCore=1 RealMemory=512000 Gres=gpu:h100:8 State=UNKNOWN"
MIG_GRES=
if [ "$SLURM_NODES" = 2 ]; then
  NODE_NAMES="n1 n2" NODE_SUFFIX=-%n GRES_NODES="n[1-2]"
  NODES="NodeName=n1 NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$SLURMD_PORT $NODE_LINE
NodeName=n2 NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$((SLURMD_PORT + 1)) $NODE_LINE
PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=other Nodes=n1,n2 MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=urgent Nodes=n1,n2 MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF"
  if [ "$SLURM_MIG" = 1 ]; then
    NODE_NAMES="n1 n2 m1"
    NODES="$NODES
NodeName=m1 NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$((SLURMD_PORT + 2)) CPUs=16 Sockets=2 CoresPerSocket=8 ThreadsPerCore=1 RealMemory=64000 Gres=gpu:1g.10gb:7,gpu:3g.40gb:2 State=UNKNOWN
PartitionName=mig Nodes=m1 MaxTime=INFINITE State=UP PriorityTier=1"
    MIG_GRES="NodeName=m1 Name=gpu Type=1g.10gb File=$LAB/dev/mig[0-6]
NodeName=m1 Name=gpu Type=3g.40gb File=$LAB/dev/mig[7-8]"
  fi
else
  NODE_NAMES=$HOST NODE_SUFFIX= GRES_NODES=$HOST
  NODES="NodeName=$HOST NodeAddr=127.0.0.1 $NODE_LINE
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP"
fi
fill() {
  sed -e "s#@LAB@#$LAB#g; s#@HOST@#$HOST#g; s#@CTLD_PORT@#$SLURMCTLD_PORT#g; s#@D_PORT@#$SLURMD_PORT#g" \
      -e "s#@NODE_SUFFIX@#$NODE_SUFFIX#g; s#@GRES_NODES@#$GRES_NODES#g; s#@MAX_JOBS@#$MAX_JOBS#g" "$1" \
    | awk -v nodes="$NODES" -v mig="${MIG_GRES:-}" '{ if ($0 == "@NODES@") print nodes; else if ($0 == "@MIG_GRES@") { if (mig != "") print mig } else print }' > "$2"
}
fill "$HERE/slurm.conf.in" "$LAB/etc/slurm.conf"
fill "$HERE/gres.conf.in" "$LAB/etc/gres.conf"
cp "$JOB_SUBMIT" "$LAB/etc/job_submit.lua"
cp "$HERE/cli_filter.lua" "$LAB/etc/cli_filter.lua"
cp "$HERE/prolog-dcgm.sh" "$HERE/epilog-dcgm.sh" "$LAB/etc/"
# The lab's GPUs are fake (no driver, no nvidia-smi): Slurm's device numbers are taken as DCGM's indices.
cat > "$LAB/etc/dcgm-job-map.conf" <<CONF
BURSAR_DCGM_MAP_DIR=$LAB/dcgm-job-map
BURSAR_GPU_INDEX=slurm
CONF
SOCKET_LUA=nil
[ -n "${BURSAR_SOCKET:-}" ] && SOCKET_LUA="\"$BURSAR_SOCKET\""
TOKEN_FILE_LUA=nil
[ -n "$BURSAR_TOKEN_FILE" ] && TOKEN_FILE_LUA="\"$BURSAR_TOKEN_FILE\""
NODE_GPUS_FILE_LUA=nil
[ -n "${BURSAR_NODE_GPUS_FILE:-}" ] && NODE_GPUS_FILE_LUA="\"$BURSAR_NODE_GPUS_FILE\""
NODE_GPUS_LUA=${BURSAR_NODE_GPUS:-nil}
cat > "$LAB/etc/bursar.lua" <<CONF
-- Settings for job_submit.lua (see the CONFIG table there).
return {
  url = "$BURSAR_URL",
  socket = $SOCKET_LUA,
  timeout = $BURSAR_TIMEOUT,
  fail_open = $BURSAR_FAIL_OPEN,
  cluster = "lab",
  token_file = $TOKEN_FILE_LUA,
  confirm_within_s = $BURSAR_CONFIRM_WITHIN_S,
  node_gpus = $NODE_GPUS_LUA,
  node_gpus_file = $NODE_GPUS_FILE_LUA,
}
CONF

export SLURM_CONF=$LAB/etc/slurm.conf
munged -S "$LAB/munge/munge.socket.2" --key-file="$LAB/munge/munge.key" --log-file="$LAB/munge/munged.log" \
       --pid-file="$LAB/munge/munged.pid" --seed-file="$LAB/munge/munged.seed"
for _ in $(seq 100); do munge -n -S "$LAB/munge/munge.socket.2" >/dev/null 2>&1 && break; sleep 0.1; done
slurmctld -f "$SLURM_CONF"          # every daemon daemonizes and writes its pid file under $LAB/run
if [ "$SLURM_NODES" = 2 ]; then
  for n in $NODE_NAMES; do slurmd -f "$SLURM_CONF" -N "$n"; done   # n1 n2, and m1 with SLURM_MIG=1
else
  slurmd -f "$SLURM_CONF"
fi
idle() { [ "$(sinfo -h -N -n "${NODE_NAMES// /,}" -t idle -o %N 2>/dev/null | sort -u | wc -l)" = "$(echo $NODE_NAMES | wc -w)" ]; }
for _ in $(seq 150); do idle && break; sleep 0.2; done
if ! idle; then
  echo "up.sh: the nodes did not become idle" >&2; tail -n 20 "$LAB"/log/slurm*.log >&2; exit 1
fi
echo "up.sh: cluster up in $(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $T0}") s; export SLURM_CONF=$SLURM_CONF"
