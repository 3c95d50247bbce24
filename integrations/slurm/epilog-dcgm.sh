#!/bin/bash
# Slurm Epilog: remove the job's lines from dcgm-exporter's mapping files (the Prolog, prolog-dcgm.sh,
# wrote them; docs/integrations/utilisation.md).
#
# Every mapping file in $BURSAR_DCGM_MAP_DIR is cleaned, not only the files of SLURM_JOB_GPUS: a line
# left behind would label the next job's GPU with this job (bursar counts that as `extra_gpu` and
# makes no sample), so the epilog does not rely on the translation the prolog made. A file left empty
# is removed, and dcgm-exporter drops the `hpc_job` label at its next collection.
#
# Never fails (slurmd drains a node whose epilog exits non-zero). Settings as in prolog-dcgm.sh.
PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=/dev/null
[ -r "$HERE/dcgm-job-map.conf" ] && . "$HERE/dcgm-job-map.conf"
MAP_DIR=${BURSAR_DCGM_MAP_DIR:-/run/dcgm-job-map}
log() { echo "epilog-dcgm: job ${SLURM_JOB_ID:-?}: $*" >&2; }

JOB=${SLURM_JOB_ID:-}
[ -n "$JOB" ] || exit 0
[ -d "$MAP_DIR" ] || exit 0
exec 9>"$MAP_DIR/.lock" || { log "cannot lock $MAP_DIR"; exit 0; }
flock -w 10 9 || { log "lock on $MAP_DIR timed out"; exit 0; }
for f in "$MAP_DIR"/*; do
  name=${f##*/}
  [[ $name =~ ^[0-9]+(\.[0-9]+)?$ ]] && [ -f "$f" ] || continue   # the names dcgm-exporter reads
  grep -qxF "$JOB" "$f" || continue
  if grep -vxF "$JOB" "$f" > "$f.tmp.$$"; then
    chmod 644 "$f.tmp.$$" && mv -f "$f.tmp.$$" "$f"
  else
    rm -f "$f" "$f.tmp.$$"                                        # no other job left on this GPU
  fi
done
exit 0
