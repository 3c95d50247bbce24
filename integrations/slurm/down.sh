#!/bin/bash
# Stop the lab cluster started by up.sh: cancel its jobs, then stop each daemon by the PID in its pid
# file (never by name), waiting for it to exit. Safe to run twice, and after a half-finished up.sh.
LAB=${LAB:?set LAB to the folder of the lab cluster}
export SLURM_CONF=$LAB/etc/slurm.conf
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # alive
if [ -f "$LAB/run/slurmctld.pid" ] && alive "$(cat "$LAB/run/slurmctld.pid")"; then
  squeue -h -o %i 2>/dev/null | xargs -r scancel 2>/dev/null
  for _ in $(seq 30); do [ -z "$(squeue -h -o %i 2>/dev/null | head -1)" ] && break; sleep 0.2; done
fi
stop() {  # $1 = pid file
  [ -f "$1" ] || return 0
  local p; p=$(cat "$1")
  if [ -n "$p" ] && alive "$p"; then
    kill "$p" 2>/dev/null
    for _ in $(seq 300); do alive "$p" || break; sleep 0.1; done   # up to 30 s
    alive "$p" && { echo "down.sh: pid $p still alive, SIGKILL" >&2; kill -9 "$p"; }
  fi
  rm -f "$1"
}
for f in "$LAB"/run/slurmd*.pid; do stop "$f"; done
stop "$LAB/run/slurmctld.pid"
stop "$LAB/munge/munged.pid"
exit 0
