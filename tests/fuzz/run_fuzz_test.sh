#!/usr/bin/env bash
# CTest driver for one libFuzzer target (tests/fuzz/CMakeLists.txt).
#   run_fuzz_test.sh replay TARGET CORPUS_DIR          every seed once
#   run_fuzz_test.sh fuzz   TARGET CORPUS_DIR SECONDS  fuzz from a scratch copy
# Exits non-zero on any crash, leak, UBSan report, timeout, or single
# allocation above 16 MiB (inputs are a few KiB: that much is an
# amplification a peer could use, as fuzz_codec found). The repository's
# corpus is never written: new inputs go to a temporary copy, and a finding is
# kept under the build tree (artifacts/) to be added to the corpus by hand.
set -euo pipefail
mode="$1" target="$2" corpus="$3"
name="$(basename "$target")"
dict="$(dirname "$corpus")/../${name}.dict"
dict_arg=()
[ -f "$dict" ] && dict_arg=("-dict=$dict")
# A finding must fail the test, whatever the environment asks for.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
artifacts="$PWD/artifacts"
mkdir -p "$artifacts"

case "$mode" in
  replay)
    mapfile -t seeds < <(find "$corpus" -type f | sort)
    [ ${#seeds[@]} -gt 0 ] || { echo "no seeds in $corpus" >&2; exit 1; }
    # Files (not the directory) so that libFuzzer only runs them and never
    # writes into the corpus.
    exec "$target" -rss_limit_mb=2048 -malloc_limit_mb=16 -timeout=10 \
      -artifact_prefix="$artifacts/$name-" \
      "${seeds[@]}"
    ;;
  fuzz)
    seconds="${4:-20}"
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    cp -r "$corpus" "$work/corpus"
    "$target" -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=16 -timeout=10 \
      -print_final_stats=1 -artifact_prefix="$artifacts/$name-" "${dict_arg[@]}" \
      "$work/corpus"
    ;;
  *)
    echo "usage: $0 replay|fuzz TARGET CORPUS_DIR [SECONDS]" >&2
    exit 2
    ;;
esac
