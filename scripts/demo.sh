#!/usr/bin/env bash
# The main job on a fresh machine: installs what is missing, builds the three
# binaries (not the tests), starts a local head and 2 workers that run the
# Python digits trainable (examples/digits), tunes it with ASHA while showing
# the live view, prints the best trial, exports every result as CSV, writes
# the dashboard page and stops the cluster. ZTUNE_DEMO_SPEC picks another spec
# for the digits workers (e.g. examples/digits/spec-pbt.json).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# Its own directory (removed at the start): set before common.sh, which
# would default it to ./run, where a cluster of local-cluster.sh keeps its data.
export ZTUNE_RUN_DIR="${ZTUNE_RUN_DIR:-$ROOT/run/demo}"
source "$ROOT/scripts/common.sh"
export ZTUNE_HEAD="tcp://127.0.0.1:$ZTUNE_CLIENT_PORT"
SPEC="${ZTUNE_DEMO_SPEC:-$ROOT/examples/digits/spec-asha.json}"

echo "== installing dependencies and building ztune-head, ztune-worker, ztune =="
ZTUNE_INSTALL_TEST_DEPS=0 ZTUNE_BUILD_TARGETS="ztune-head ztune-worker ztune" "$ROOT/scripts/build.sh"
CLI="$(ztune_bin ztune)"

trap '"$ROOT/scripts/local-cluster.sh" down >/dev/null 2>&1 || true' EXIT
rm -rf "$ZTUNE_RUN_DIR"
echo "== starting a local head and 2 workers with the digits trainable (logs in $ZTUNE_RUN_DIR/logs) =="
ZTUNE_TRAINABLES="$ROOT/examples/digits/trainables.json" "$ROOT/scripts/local-cluster.sh" up 2
ensure_local_keys  # the CLI below authenticates with the cluster's admin key

echo "== submitting ${SPEC#"$ROOT"/} =="
EXP="$("$CLI" submit "$SPEC")"
echo "experiment $EXP"
if [ -t 1 ]; then
  # The live view: redrawn in place until the experiment finishes.
  "$CLI" status "$EXP" --watch --interval 1
else
  # Not a terminal (a log): a line per change, then the report.
  "$CLI" wait "$EXP"
  "$CLI" status "$EXP"
fi
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
echo "== every result as CSV =="
CSV="$ZTUNE_RUN_DIR/$EXP.csv"
"$CLI" export "$EXP" -o "$CSV"
echo "read it with pandas (Debian python3-pandas): python3 -c 'import pandas; print(pandas.read_csv(\"$CSV\").groupby(\"trial_id\").accuracy.max())'"
echo
echo "== the dashboard as one HTML file =="
"$CLI" report "$EXP" -o "$ZTUNE_RUN_DIR/$EXP.html"
echo "open it in a browser: file://$ZTUNE_RUN_DIR/$EXP.html"
echo
echo "== stopping the cluster =="
"$ROOT/scripts/local-cluster.sh" down
trap - EXIT
