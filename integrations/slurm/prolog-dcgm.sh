#!/bin/bash
# Slurm Prolog: tell dcgm-exporter which job holds which GPU, so its metrics carry `hpc_job`
# (docs/integrations/utilisation.md, "The Slurm side").
#
# For each GPU the job holds on this node, the job's Slurm id is added as a line to
# $BURSAR_DCGM_MAP_DIR/<GPU index>: the files dcgm-exporter reads on every collection when started with
# `--hpc-job-mapping-dir=$BURSAR_DCGM_MAP_DIR` (one file per GPU, named by the GPU's `gpu` label, one
# job id per line). The Epilog (epilog-dcgm.sh) removes the line again. bursar learns which of its jobs
# a Slurm id is from `bursar slurm watch`'s job.started events.
#
# The trap: Slurm names a GPU by the number in its device file (SLURM_JOB_GPUS=3 means /dev/nvidia3,
# device minor number 3), dcgm-exporter by DCGM's GPU index (NVML's order, by PCI bus id). On many
# multi-GPU servers the two orders differ, and a file named by Slurm's number silently labels another
# job's GPU. So by default (BURSAR_GPU_INDEX=nvml) each device number is translated: the minor number
# gives the PCI bus id (/proc/driver/nvidia/gpus/<bus id>/information, "Device Minor:"), and nvidia-smi
# gives that bus id's index. A GPU that cannot be translated is left out (and logged), never guessed.
# CUDA_VISIBLE_DEVICES is not used: with ConstrainDevices=yes Slurm renumbers it from 0.
#
# It never fails the job: slurmd drains a node whose prolog exits non-zero, so errors are logged to
# stderr (slurmd's log) and the script exits 0.
#
# Settings: environment, or KEY=value lines in dcgm-job-map.conf beside this script (slurmd runs
# prologs with a bare environment):
#   BURSAR_DCGM_MAP_DIR   the mapping directory (default /run/dcgm-job-map)
#   BURSAR_GPU_INDEX      nvml (default): translate as above; slurm: use Slurm's numbers as they are (a
#                         node where you checked they agree, or the lab's fake GPUs)
#   BURSAR_NVIDIA_SMI     the nvidia-smi binary (default nvidia-smi)
#   BURSAR_NVIDIA_PROC    where the driver lists GPUs (default /proc/driver/nvidia/gpus)
# Slurm provides SLURM_JOB_ID and SLURM_JOB_GPUS (comma list of device numbers on this node).
PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=/dev/null
[ -r "$HERE/dcgm-job-map.conf" ] && . "$HERE/dcgm-job-map.conf"
MAP_DIR=${BURSAR_DCGM_MAP_DIR:-/run/dcgm-job-map}
MODE=${BURSAR_GPU_INDEX:-nvml}
SMI=${BURSAR_NVIDIA_SMI:-nvidia-smi}
PROC=${BURSAR_NVIDIA_PROC:-/proc/driver/nvidia/gpus}
log() { echo "prolog-dcgm: job ${SLURM_JOB_ID:-?}: $*" >&2; }

JOB=${SLURM_JOB_ID:-}
GPUS=${SLURM_JOB_GPUS:-}
[ -n "$JOB" ] || { log "no SLURM_JOB_ID, nothing to do"; exit 0; }
[ -n "$GPUS" ] || exit 0                          # a job without GPUs on this node

# PCI bus id, normalised: lower case, 4-digit domain ("00000000:1A:00.0" -> "0000:1a:00.0").
norm_bus() { local b=${1,,}; local dom=${b%%:*}; printf '%s:%s' "${dom: -4}" "${b#*:}"; }

# Slurm device number (minor) -> DCGM/NVML index, or nothing.
to_index() {
  local minor=$1 info bus line idx sbus
  [ "$MODE" = slurm ] && { echo "$minor"; return; }
  for info in "$PROC"/*/information; do
    [ -r "$info" ] || continue
    if grep -Eq "^Device Minor:[[:space:]]*$minor[[:space:]]*$" "$info"; then
      bus=$(basename "$(dirname "$info")")
      break
    fi
  done
  [ -n "${bus:-}" ] || { log "no GPU with device minor $minor under $PROC"; return; }
  bus=$(norm_bus "$bus")
  while IFS= read -r line; do
    idx=${line%%,*}; sbus=${line#*,}; sbus=${sbus// /}
    [ "$(norm_bus "$sbus")" = "$bus" ] && { echo "${idx// /}"; return; }
  done < <("$SMI" --query-gpu=index,pci.bus_id --format=csv,noheader 2>/dev/null)
  log "nvidia-smi lists no GPU at bus $bus (device minor $minor)"
}

mkdir -p "$MAP_DIR" 2>/dev/null && chmod 755 "$MAP_DIR" 2>/dev/null
[ -d "$MAP_DIR" ] && [ -w "$MAP_DIR" ] || { log "cannot write $MAP_DIR"; exit 0; }
exec 9>"$MAP_DIR/.lock" || { log "cannot lock $MAP_DIR"; exit 0; }
flock -w 10 9 || { log "lock on $MAP_DIR timed out"; exit 0; }
written=""
for minor in ${GPUS//,/ }; do
  [[ $minor =~ ^[0-9]+$ ]] || { log "unexpected GPU number '$minor' in SLURM_JOB_GPUS=$GPUS"; continue; }
  idx=$(to_index "$minor")
  [ -n "$idx" ] || continue
  f=$MAP_DIR/$idx
  grep -qxF "$JOB" "$f" 2>/dev/null && continue   # a requeue or a second prolog on the node
  { [ -f "$f" ] && cat "$f"; echo "$JOB"; } > "$f.tmp.$$" && chmod 644 "$f.tmp.$$" && mv -f "$f.tmp.$$" "$f" \
    || { log "cannot write $f"; rm -f "$f.tmp.$$"; continue; }
  written="$written $idx"
done
[ -n "$written" ] && log "mapped to GPU index${written}"
exit 0
