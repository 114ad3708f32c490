# Shared settings for the cluster scripts (sourced, not run).
# ZTUNE_BIN_DIR   where ztune-head, ztune-worker and ztune live (default build/release/...)
# ZTUNE_RUN_DIR   pid files, logs and the head's data dir (default ./run)
ZTUNE_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ZTUNE_BUILD_DIR="${ZTUNE_BUILD_DIR:-$ZTUNE_ROOT/build/release}"
ZTUNE_RUN_DIR="${ZTUNE_RUN_DIR:-$ZTUNE_ROOT/run}"
ZTUNE_CLIENT_PORT="${ZTUNE_CLIENT_PORT:-7500}"
ZTUNE_WORKER_PORT="${ZTUNE_WORKER_PORT:-7501}"

ztune_bin() {
  local name="$1"
  if [ -n "${ZTUNE_BIN_DIR:-}" ] && [ -x "$ZTUNE_BIN_DIR/$name" ]; then echo "$ZTUNE_BIN_DIR/$name"; return; fi
  for d in "$ZTUNE_BUILD_DIR/head" "$ZTUNE_BUILD_DIR/worker" "$ZTUNE_BUILD_DIR/client"; do
    if [ -x "$d/$name" ]; then echo "$d/$name"; return; fi
  done
  if command -v "$name" >/dev/null; then command -v "$name"; return; fi
  echo "error: $name not found (build with scripts/build.sh or set ZTUNE_BIN_DIR)" >&2
  return 1
}

# is_running PIDFILE: the process in PIDFILE is alive.
is_running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# stop_pidfile PIDFILE: SIGTERM, wait up to 10 s, then SIGKILL.
stop_pidfile() {
  local pidfile="$1" pid
  [ -f "$pidfile" ] || return 0
  pid="$(cat "$pidfile")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  fi
  rm -f "$pidfile"
}
