#!/usr/bin/env bash
# A head and N workers on this machine.
#   scripts/local-cluster.sh up [N]      start the head and N workers (default 2)
#   scripts/local-cluster.sh status      show processes and what the head sees
#   scripts/local-cluster.sh down        stop workers, then the head
# Workers get $ZTUNE_WORKER_CPUS CPUs each (default 2), and run the process
# trainables of $ZTUNE_TRAINABLES when it names a file (ztune-worker
# --trainables, docs/process-protocol.md), e.g.
#   ZTUNE_TRAINABLES=examples/digits/trainables.json scripts/local-cluster.sh up 2
# With ZTUNE_SUBMITTED_CODE=1 they also run the Python projects clients upload
# (ztune-worker --allow-submitted-code, with this tree's SDK), e.g. for
#   ztune submit examples/digits/spec-submitted.json
# Everything lives under $ZTUNE_RUN_DIR (default ./run): pid files, logs/, data/.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cmd="${1:-}"; N="${2:-2}"
CPUS="${ZTUNE_WORKER_CPUS:-2}"
TRAINABLES="${ZTUNE_TRAINABLES:-}"
SUBMITTED_CODE="${ZTUNE_SUBMITTED_CODE:-}"
export ZTUNE_HEAD="tcp://127.0.0.1:$ZTUNE_CLIENT_PORT"

case "$cmd" in
  up)
    worker_args=(--cpus "$CPUS")
    if [ -n "$TRAINABLES" ]; then
      [ -f "$TRAINABLES" ] || { echo "error: ZTUNE_TRAINABLES=$TRAINABLES is not a file" >&2; exit 2; }
      worker_args+=(--trainables "$(cd "$(dirname "$TRAINABLES")" && pwd)/$(basename "$TRAINABLES")")
    fi
    if [ "$SUBMITTED_CODE" = 1 ]; then
      worker_args+=(--allow-submitted-code --python /usr/bin/python3
                    --python-path "$ZTUNE_ROOT/python")
    fi
    ensure_local_keys
    "$ZTUNE_ROOT/scripts/start-head.sh"
    for i in $(seq 1 "$N"); do
      "$ZTUNE_ROOT/scripts/start-worker.sh" "w$i" "${worker_args[@]}"
    done
    CLI="$(ztune_bin ztune)"
    for _ in $(seq 1 100); do
      alive="$("$CLI" workers --json 2>/dev/null | grep -Eo '"alive": *true' | wc -l || true)"
      [ "$alive" -ge "$N" ] && break
      sleep 0.1
    done
    echo "cluster up: $alive/$N workers registered"
    echo "to use the CLI: export ZTUNE_HEAD=$ZTUNE_HEAD ZTUNE_KEY=$ZTUNE_KEY ZTUNE_HEAD_KEY=$ZTUNE_HEAD_KEY"
    ;;
  status)
    [ -f "$ZTUNE_RUN_DIR/data/head.pub" ] && ensure_local_keys
    if is_running "$ZTUNE_RUN_DIR/head.pid"; then
      echo "head: running (pid $(cat "$ZTUNE_RUN_DIR/head.pid"))"
    else
      echo "head: not running"
    fi
    for f in "$ZTUNE_RUN_DIR"/worker-*.pid; do
      [ -e "$f" ] || continue
      n="$(basename "$f" .pid)"
      if is_running "$f"; then echo "$n: running (pid $(cat "$f"))"; else echo "$n: dead"; fi
    done
    if is_running "$ZTUNE_RUN_DIR/head.pid"; then "$(ztune_bin ztune)" workers || true; fi
    ;;
  down)
    for f in "$ZTUNE_RUN_DIR"/worker-*.pid; do [ -e "$f" ] && stop_pidfile "$f"; done
    stop_pidfile "$ZTUNE_RUN_DIR/head.pid"
    echo "cluster down"
    ;;
  *)
    echo "usage: $0 up [N] | status | down" >&2; exit 2 ;;
esac
