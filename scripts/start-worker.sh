#!/usr/bin/env bash
# Starts one ztune-worker in the background.
#   scripts/start-worker.sh NAME [--head tcp://HOST:7501] [--cpus N] [--gpus N] ...
# pid in $ZTUNE_RUN_DIR/worker-NAME.pid, log in $ZTUNE_RUN_DIR/logs/worker-NAME.log.
# Without --head it connects to the local head on $ZTUNE_WORKER_PORT, with the
# local cluster's worker key (ensure_local_keys in common.sh) unless --key,
# --insecure or $ZTUNE_WORKER_KEY says otherwise.
set -euo pipefail
source "$(dirname "$0")/common.sh"
[ $# -ge 1 ] || { echo "usage: $0 NAME [ztune-worker args...]" >&2; exit 2; }
NAME="$1"; shift
WORKER="$(ztune_bin ztune-worker)"
mkdir -p "$ZTUNE_RUN_DIR/logs" "$ZTUNE_RUN_DIR/workers"
PIDFILE="$ZTUNE_RUN_DIR/worker-$NAME.pid"
if is_running "$PIDFILE"; then echo "worker $NAME already running"; exit 0; fi
args=(--name "$NAME" --work-dir "$ZTUNE_RUN_DIR/workers/$NAME")
case " $* " in *" --head "*) ;; *) args+=(--head "tcp://127.0.0.1:$ZTUNE_WORKER_PORT") ;; esac
case " $* " in
  *" --insecure "*|*" --key "*) ;;
  *) [ -n "${ZTUNE_WORKER_KEY:-}" ] || ensure_local_keys ;;
esac
nohup "$WORKER" "${args[@]}" "$@" >>"$ZTUNE_RUN_DIR/logs/worker-$NAME.log" 2>&1 &
echo $! >"$PIDFILE"
sleep 0.2
if ! is_running "$PIDFILE"; then
  echo "error: worker $NAME exited; last log lines:" >&2
  tail -n 20 "$ZTUNE_RUN_DIR/logs/worker-$NAME.log" >&2
  rm -f "$PIDFILE"; exit 1
fi
echo "worker $NAME started (pid $(cat "$PIDFILE"))"
