# Shared settings for the cluster scripts (sourced, not run).
# ZTUNE_BIN_DIR   where ztune-head, ztune-worker and ztune live (default build/release/...)
# ZTUNE_RUN_DIR   pid files, logs and the head's data dir (default ./run)
# ZTUNE_KEYS_DIR  the local cluster's worker and client keys (default $ZTUNE_RUN_DIR/keys)
ZTUNE_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ZTUNE_BUILD_DIR="${ZTUNE_BUILD_DIR:-$ZTUNE_ROOT/build/release}"
ZTUNE_RUN_DIR="${ZTUNE_RUN_DIR:-$ZTUNE_ROOT/run}"
ZTUNE_CLIENT_PORT="${ZTUNE_CLIENT_PORT:-7500}"
ZTUNE_WORKER_PORT="${ZTUNE_WORKER_PORT:-7501}"
ZTUNE_KEYS_DIR="${ZTUNE_KEYS_DIR:-$ZTUNE_RUN_DIR/keys}"

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

# ensure_local_keys: CURVE keys for a cluster on this machine, made as an
# operator makes them (docs/security.md): the head's pair in its data dir
# (ztune-head --print-public-key), a worker key and an admin client key in
# $ZTUNE_KEYS_DIR, each listed in the head's allow-lists. Idempotent. Exports
# ZTUNE_HEAD_KEY, ZTUNE_WORKER_KEY and ZTUNE_KEY for the workers and the CLI.
ensure_local_keys() {
  local data="$ZTUNE_RUN_DIR/data" cli head
  cli="$(ztune_bin ztune)"; head="$(ztune_bin ztune-head)"
  mkdir -p "$ZTUNE_KEYS_DIR"; chmod 700 "$ZTUNE_KEYS_DIR"
  "$head" --data-dir "$data" --print-public-key >/dev/null
  [ -f "$ZTUNE_KEYS_DIR/worker.key" ] || "$cli" keygen --out "$ZTUNE_KEYS_DIR/worker" >/dev/null
  [ -f "$ZTUNE_KEYS_DIR/client.key" ] || "$cli" keygen --out "$ZTUNE_KEYS_DIR/client" >/dev/null
  local wkey ckey
  wkey="$(sed -n 's/^public-key = //p' "$ZTUNE_KEYS_DIR/worker.pub")"
  ckey="$(sed -n 's/^public-key = //p' "$ZTUNE_KEYS_DIR/client.pub")"
  touch "$data/workers.allow" "$data/clients.allow"
  grep -qF -- "$wkey" "$data/workers.allow" || echo "$wkey local-workers" >>"$data/workers.allow"
  grep -qF -- "$ckey" "$data/clients.allow" || echo "$ckey admin local-admin" >>"$data/clients.allow"
  export ZTUNE_HEAD_KEY="$data/head.pub"
  export ZTUNE_WORKER_KEY="$ZTUNE_KEYS_DIR/worker.key"
  export ZTUNE_KEY="$ZTUNE_KEYS_DIR/client.key"
}
