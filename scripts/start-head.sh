#!/usr/bin/env bash
# Starts ztune-head in the background: pid in $ZTUNE_RUN_DIR/head.pid, log in
# $ZTUNE_RUN_DIR/logs/head.log, data in $ZTUNE_RUN_DIR/data (or --data-dir).
# CURVE is on: the head's key pair and allow-lists live in the data dir, and
# this script adds a local worker key and admin client key to them
# (ensure_local_keys in common.sh). Extra arguments go to ztune-head, e.g.
#   scripts/start-head.sh --worker-endpoint tcp://0.0.0.0:7501
set -euo pipefail
source "$(dirname "$0")/common.sh"
HEAD="$(ztune_bin ztune-head)"
mkdir -p "$ZTUNE_RUN_DIR/logs"
if is_running "$ZTUNE_RUN_DIR/head.pid"; then
  echo "head already running (pid $(cat "$ZTUNE_RUN_DIR/head.pid"))"; exit 0
fi
rm -f "$ZTUNE_RUN_DIR/endpoints.json"
case " $* " in *" --insecure "*) ;; *) ensure_local_keys ;; esac
args=(--data-dir "$ZTUNE_RUN_DIR/data"
      --client-endpoint "tcp://127.0.0.1:$ZTUNE_CLIENT_PORT"
      --worker-endpoint "tcp://127.0.0.1:$ZTUNE_WORKER_PORT"
      --endpoints-file "$ZTUNE_RUN_DIR/endpoints.json")
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
