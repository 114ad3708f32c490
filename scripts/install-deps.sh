#!/usr/bin/env bash
# Installs the Debian 12 packages ztune needs to build and test. Idempotent and
# quiet when everything is already there; uses sudo when not root.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libzmq3-dev libsodium-dev cppzmq-dev libmsgpack-cxx-dev librocksdb-dev libspdlog-dev
  nlohmann-json3-dev libcli11-dev libjemalloc-dev libcpp-httplib-dev libssl-dev libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-venv python3-pip python3-setuptools python3-wheel
  python3-zmq python3-msgpack python3-numpy python3-sklearn python3-optuna
)
# Only the tests need these (fuzzing, reading exports with pandas, the deploy
# files' YAML, the dashboard in a browser, a single-node Slurm); ZTUNE_INSTALL_TEST_DEPS=0 (the
# demo) leaves them out.
TEST_PACKAGES=(clang libclang-rt-dev openssl python3-pandas python3-yaml chromium slurm-wlm munge)
if [ "${ZTUNE_INSTALL_TEST_DEPS:-1}" != 0 ]; then PACKAGES+=("${TEST_PACKAGES[@]}"); fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
