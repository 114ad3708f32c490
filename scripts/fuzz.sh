#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang, ASan and UBSan in
# build/fuzz, then runs them.
#   scripts/fuzz.sh             replay every seed corpus and fuzz each target
#                               briefly (ctest -L fuzz; ZTUNE_FUZZ_SECONDS per
#                               target, default 20)
#   scripts/fuzz.sh long [N]    fuzz each target, one after another, for N
#                               executions (default 10,000,000); prints the
#                               executions, exec/s and findings per target
#   scripts/fuzz.sh build       only build
# Long runs keep their grown corpora and any finding in build/fuzz/long/<target>/
# (never in the repository); a later long run continues from that corpus, and
# each run appends a line (date, commit, executions, seconds, result) to
# build/fuzz/long/<target>/history.tsv, so that runs split over several
# sittings add up. ZTUNE_FUZZ_FLAGS adds libFuzzer flags (e.g. -entropic=0,
# about 1.4x faster on fuzz_client_request, whose many features make the
# entropic schedule cost a third of its time).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
"$ROOT/scripts/install-deps.sh"
BUILD="$ROOT/build/fuzz"
MODE="${1:-ctest}"
# Slowest last: a long run reports the quick targets early.
# ZTUNE_FUZZ_TARGETS="fuzz_codec fuzz_spec" limits a long run to those.
read -r -a TARGETS <<<"${ZTUNE_FUZZ_TARGETS:-fuzz_codec fuzz_spec fuzz_store_records fuzz_client_request}"

echo "== build (fuzz: clang, libFuzzer + ASan + UBSan) =="
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  # Product warnings are gated by the gcc build (-Werror there); clang warns
  # about other things, so only the fuzz sources are built with -Werror here.
  CC=clang CXX=clang++ cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DZTUNE_FUZZ=ON -DZTUNE_BUILD_TESTS=OFF -DZTUNE_BUILD_BENCH=OFF -DZTUNE_WERROR=OFF >/dev/null
fi
if [ -n "${ZTUNE_FUZZ_SECONDS:-}" ]; then
  cmake "$BUILD" -DZTUNE_FUZZ_SECONDS="$ZTUNE_FUZZ_SECONDS" >/dev/null
fi
cmake --build "$BUILD" -j "$(nproc)" --target ztune_fuzz_targets

case "$MODE" in
  build) ;;
  ctest)
    echo "== ctest (fuzz: replay the seed corpora, fuzz each target briefly) =="
    (cd "$BUILD" && ctest --output-on-failure -j "$(nproc)" -L fuzz)
    ;;
  long)
    RUNS="${2:-10000000}"
    export ASAN_OPTIONS="detect_leaks=1:${ASAN_OPTIONS:-}"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
    summary=()
    found=0
    incomplete=0
    for t in "${TARGETS[@]}"; do
      dir="$BUILD/long/$t"
      mkdir -p "$dir/corpus"
      cp -n "$ROOT/tests/fuzz/corpus/$t/"* "$dir/corpus/" 2>/dev/null || true
      dict=()
      [ -f "$ROOT/tests/fuzz/$t.dict" ] && dict=("-dict=$ROOT/tests/fuzz/$t.dict")
      echo "== $t: $RUNS executions (log: $dir/fuzz.log) =="
      start=$(date +%s)
      rc=0
      "$BUILD/tests/fuzz/$t" -runs="$RUNS" -rss_limit_mb=2048 -malloc_limit_mb=16 -timeout=30 \
        -print_final_stats=1 ${ZTUNE_FUZZ_FLAGS:-} \
        -artifact_prefix="$dir/" "${dict[@]}" "$dir/corpus" >"$dir/fuzz.log" 2>&1 || rc=$?
      secs=$(( $(date +%s) - start ))
      execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/fuzz.log" | tail -1)
      rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$dir/fuzz.log" | tail -1)
      cov=$(grep -Eo 'cov: [0-9]+' "$dir/fuzz.log" | tail -1 || true)
      artifacts=$(find "$dir" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' \
        -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
      if [ "$artifacts" -eq 0 ] && [ "$rc" -eq 72 ]; then
        # libFuzzer's exit code after SIGINT/SIGTERM: stopped, not a finding.
        result="INTERRUPTED by a signal (rerun: ZTUNE_FUZZ_TARGETS=$t $0 long $RUNS)"
        incomplete=1
      elif [ "$rc" -ne 0 ] || [ "$artifacts" -ne 0 ]; then
        result="FOUND (exit $rc, $artifacts artifacts in $dir)"
        found=1
      else
        result="nothing found"
      fi
      printf '%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" \
        "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')" "${execs:-0}" "$secs" \
        "$result" >>"$dir/history.tsv"
      summary+=("$(printf '%-20s %12s execs %7s exec/s %6ss  %-10s %s' "$t" "${execs:-?}" \
        "${rate:-?}" "$secs" "${cov:-}" "$result")")
      echo "${summary[-1]}"
    done
    echo "== summary =="
    printf '%s\n' "${summary[@]}"
    [ "$found" -eq 0 ] || exit 1
    [ "$incomplete" -eq 0 ] || exit 2
    ;;
  *)
    echo "usage: $0 [ctest | long [N] | build]" >&2
    exit 2
    ;;
esac
