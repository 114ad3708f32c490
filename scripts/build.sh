#!/usr/bin/env bash
# Configures and builds ztune. Usage: scripts/build.sh [BUILD_DIR] [extra cmake args...]
# BUILD_DIR defaults to build/release. Installs missing packages first.
# ZTUNE_BUILD_TARGETS="ztune-head ztune-worker ztune" builds only those targets
# (the demo's: no tests, no benchmarks); by default everything is built.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
"$ROOT/scripts/install-deps.sh"
BUILD_DIR="${1:-$ROOT/build/release}"
shift || true
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S "$ROOT" -B "$BUILD_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
fi
TARGETS=()
for t in ${ZTUNE_BUILD_TARGETS:-}; do TARGETS+=(--target "$t"); done
cmake --build "$BUILD_DIR" -j "$(nproc)" "${TARGETS[@]}"
