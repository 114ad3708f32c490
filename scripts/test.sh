#!/usr/bin/env bash
# The test command: installs what is missing, builds with -Wall -Wextra -Werror,
# and runs every test through CTest; then builds the unit tests under
# AddressSanitizer + UBSan and runs them; between the two, the fuzz targets'
# seed corpora and short fuzzing runs (scripts/fuzz.sh).
#   scripts/test.sh            everything (release + sanitizer unit run)
#   ZTUNE_SKIP_ASAN=1 scripts/test.sh   skip the sanitizer pass
#   ZTUNE_SKIP_FUZZ=1 scripts/test.sh   skip the fuzz pass (scripts/fuzz.sh)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
"$ROOT/scripts/install-deps.sh"
JOBS="$(nproc)"

echo "== build (release) =="
"$ROOT/scripts/build.sh" "$ROOT/build/release"
echo "== ctest (release: unit + e2e) =="
(cd "$ROOT/build/release" && ctest --output-on-failure -j "$JOBS" --timeout 600)

if [ "${ZTUNE_SKIP_FUZZ:-0}" != "1" ]; then
  # clang + libFuzzer in build/fuzz: replays every seed corpus and fuzzes each
  # target for ZTUNE_FUZZ_SECONDS (default 20); about 4 min with the build.
  "$ROOT/scripts/fuzz.sh"
fi

if [ "${ZTUNE_SKIP_ASAN:-0}" != "1" ]; then
  echo "== build (asan+ubsan) =="
  "$ROOT/scripts/build.sh" "$ROOT/build/asan" -DZTUNE_SANITIZE=ON -DZTUNE_BUILD_BENCH=OFF \
    -DCMAKE_BUILD_TYPE=Debug
  echo "== ctest (asan+ubsan: unit) =="
  (cd "$ROOT/build/asan" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --output-on-failure -j "$JOBS" -L unit --timeout 600)
fi
echo "== all tests passed =="
