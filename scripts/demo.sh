#!/usr/bin/env bash
# The main job on a fresh machine: installs what is missing, builds, starts a
# local head and 2 workers, submits examples/quadratic.json, shows progress,
# prints the best trial and stops the cluster.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/common.sh"
export ZTUNE_RUN_DIR="${ZTUNE_RUN_DIR:-$ROOT/run/demo}"
export ZTUNE_HEAD="tcp://127.0.0.1:$ZTUNE_CLIENT_PORT"

echo "== installing dependencies and building =="
"$ROOT/scripts/build.sh"
CLI="$(ztune_bin ztune)"

trap '"$ROOT/scripts/local-cluster.sh" down >/dev/null 2>&1 || true' EXIT
rm -rf "$ZTUNE_RUN_DIR"
echo "== starting a local head and 2 workers (logs in $ZTUNE_RUN_DIR/logs) =="
"$ROOT/scripts/local-cluster.sh" up 2
ensure_local_keys  # the CLI below authenticates with the cluster's admin key

echo "== submitting examples/quadratic.json =="
EXP="$("$CLI" submit "$ROOT/examples/quadratic.json")"
echo "experiment $EXP"
"$CLI" status "$EXP"
echo

until "$CLI" wait "$EXP" --timeout 1 >/dev/null 2>&1; do
  "$CLI" status "$EXP"
  echo
done
echo "== final status =="
"$CLI" status "$EXP"
echo
echo "== best trial =="
BEST="$("$CLI" experiments --json | python3 -c '
import json, sys
exp = sys.argv[1]
for e in json.load(sys.stdin)["experiments"]:
    if e["experiment_id"] == exp and e["best_trial"]:
        print(e["best_trial"]["trial_id"])
' "$EXP")"
if [ -z "$BEST" ]; then echo "no best trial (did every trial fail?)" >&2; exit 1; fi
"$CLI" trial "$BEST"
echo
echo "== stopping the cluster =="
"$ROOT/scripts/local-cluster.sh" down
trap - EXIT
