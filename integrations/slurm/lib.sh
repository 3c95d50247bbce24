# Sourced by the lab scripts (up/down, e2e.sh, e2e-runs.sh, bench-queue.sh): the process helpers they
# all need. Processes are stopped by PID, never by name.

# alive PID: the process exists and is not a zombie (a zombie has exited).
alive() { local st; st=$(ps -o stat= -p "$1" 2>/dev/null); [ -n "$st" ] && [ "${st#Z}" = "$st" ]; }

# stop_pid PID: SIGTERM a child of this shell, up to 10 s for it to exit, then SIGKILL; reaps it.
stop_pid() {
  [ -n "$1" ] || return 0
  if alive "$1"; then
    kill "$1" 2>/dev/null || true
    for _ in $(seq 100); do alive "$1" || break; sleep 0.1; done
    alive "$1" && kill -9 "$1" 2>/dev/null
  fi
  wait "$1" 2>/dev/null || true
}
