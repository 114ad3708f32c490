#!/usr/bin/env bash
# Hunts flaky tests: builds once, then runs the whole CTest suite N times with
# -j2 while CPU-burning processes run beside it (a loaded machine, as CI is),
# and prints every test that failed with its count.
#
#   scripts/flake-hunt.sh [N] [ctest args...]
#     N                 rounds (default 10)
#     ctest args        passed through, e.g. -L e2e or -R 'ChaosE2ETest.*'
#   ZTUNE_FLAKE_BURNERS   CPU burners beside the suite (default 1)
#   ZTUNE_FLAKE_JOBS      ctest -j (default 2)
#   ZTUNE_BUILD_DIR       build directory (default build/release)
#   ZTUNE_FLAKE_NO_BUILD=1  use the binaries as they are (no build step)
#
# The output of every failed round is kept under $BUILD_DIR/flake-hunt/ for
# reading afterwards. Exit status: 0 when no round failed, 1 otherwise.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
ROUNDS="${1:-10}"
shift || true
case "$ROUNDS" in ''|*[!0-9]*) echo "usage: $0 [N] [ctest args...]" >&2; exit 2;; esac
BURNERS="${ZTUNE_FLAKE_BURNERS:-1}"
JOBS="${ZTUNE_FLAKE_JOBS:-2}"
BUILD_DIR="${ZTUNE_BUILD_DIR:-$ROOT/build/release}"
OUT="$BUILD_DIR/flake-hunt"

if [ "${ZTUNE_FLAKE_NO_BUILD:-0}" != "1" ]; then "$ROOT/scripts/build.sh" "$BUILD_DIR"; fi
rm -rf "$OUT"
mkdir -p "$OUT"

burner_pids=()
stop_burners() {
  for pid in "${burner_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop_burners EXIT
for _ in $(seq 1 "$BURNERS"); do
  # A busy loop at normal priority: it competes with the suite for the cores.
  ( trap 'exit 0' TERM; while :; do :; done ) &
  burner_pids+=("$!")
done

declare -A failures=()
failed_rounds=0
start=$(date +%s)
for round in $(seq 1 "$ROUNDS"); do
  log="$OUT/round-$round.log"
  round_start=$(date +%s)
  rm -f "$BUILD_DIR/Testing/Temporary/LastTestsFailed.log"
  if (cd "$BUILD_DIR" && ctest --output-on-failure -j "$JOBS" --timeout 600 "$@") >"$log" 2>&1; then
    echo "round $round/$ROUNDS: pass ($(( $(date +%s) - round_start )) s)"
    rm -f "$log"
    continue
  fi
  failed_rounds=$((failed_rounds + 1))
  names=()
  if [ -f "$BUILD_DIR/Testing/Temporary/LastTestsFailed.log" ]; then
    # Lines are "<index>:<test name>".
    while IFS= read -r line; do names+=("${line#*:}"); done \
      < "$BUILD_DIR/Testing/Temporary/LastTestsFailed.log"
  fi
  [ ${#names[@]} -eq 0 ] && names=("(ctest failed without a failed test: see $log)")
  for n in "${names[@]}"; do failures["$n"]=$(( ${failures["$n"]:-0} + 1 )); done
  echo "round $round/$ROUNDS: FAIL ($(( $(date +%s) - round_start )) s): ${names[*]} (log: $log)"
done

echo
echo "== flake hunt: $ROUNDS rounds, ctest -j $JOBS, $BURNERS burner(s), $(( $(date +%s) - start )) s =="
if [ "$failed_rounds" -eq 0 ]; then
  echo "no failures"
  exit 0
fi
echo "$failed_rounds round(s) failed; failures per test:"
for n in "${!failures[@]}"; do printf '%4d  %s\n' "${failures[$n]}" "$n"; done | sort -rn
exit 1
