#!/usr/bin/env bash
# Starts ztune-head in the background: pid in $ZTUNE_RUN_DIR/head.pid, log in
# $ZTUNE_RUN_DIR/logs/head.log, data in $ZTUNE_RUN_DIR/data.
# CURVE is on: the head's key pair and allow-lists live in the data dir, and
# this script adds a local worker key and admin client key to them
# (ensure_local_keys in common.sh). Extra arguments go to ztune-head and
# replace the script's defaults for the flags they name, e.g. workers on other
# machines reach a head started with
#   scripts/start-head.sh --worker-endpoint tcp://0.0.0.0:7501
set -euo pipefail
source "$(dirname "$0")/common.sh"
HEAD="$(ztune_bin ztune-head)"
mkdir -p "$ZTUNE_RUN_DIR/logs"
if is_running "$ZTUNE_RUN_DIR/head.pid"; then
  echo "head already running (pid $(cat "$ZTUNE_RUN_DIR/head.pid"))"; exit 0
fi
rm -f "$ZTUNE_RUN_DIR/endpoints.json"
# given FLAG: the extra arguments set FLAG (as `FLAG V` or `FLAG=V`); then
# they replace this script's default for it (ztune-head takes each once).
given() {
  local a
  for a in "${EXTRA[@]}"; do
    case "$a" in "$1"|"$1"=*) return 0 ;; esac
  done
  return 1
}
EXTRA=("$@")
args=(--endpoints-file "$ZTUNE_RUN_DIR/endpoints.json")
if given --data-dir; then
  # The keys and allow-lists this script writes live in $ZTUNE_RUN_DIR/data.
  echo "error: set ZTUNE_RUN_DIR to move the head's data (it is \$ZTUNE_RUN_DIR/data), not --data-dir" >&2
  exit 2
fi
args+=(--data-dir "$ZTUNE_RUN_DIR/data")
case " $* " in *" --insecure "*) ;; *) ensure_local_keys ;; esac
given --client-endpoint || args+=(--client-endpoint "tcp://127.0.0.1:$ZTUNE_CLIENT_PORT")
given --worker-endpoint || args+=(--worker-endpoint "tcp://127.0.0.1:$ZTUNE_WORKER_PORT")
nohup "$HEAD" "${args[@]}" "$@" >>"$ZTUNE_RUN_DIR/logs/head.log" 2>&1 &
echo $! >"$ZTUNE_RUN_DIR/head.pid"
for _ in $(seq 1 100); do
  [ -f "$ZTUNE_RUN_DIR/endpoints.json" ] && break
  if ! is_running "$ZTUNE_RUN_DIR/head.pid"; then
    echo "error: ztune-head exited; last log lines:" >&2
    tail -n 20 "$ZTUNE_RUN_DIR/logs/head.log" >&2
    rm -f "$ZTUNE_RUN_DIR/head.pid"; exit 1
  fi
  sleep 0.1
done
echo "head started (pid $(cat "$ZTUNE_RUN_DIR/head.pid")): $(cat "$ZTUNE_RUN_DIR/endpoints.json")"
