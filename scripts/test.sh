#!/usr/bin/env bash
# test.sh - the README's test command: installs what is missing, builds, and
# runs the whole suite with ctest.
# Usage: scripts/test.sh [-DOPTION=VALUE ...] [ctest args ...]
#   -D... arguments go to cmake (e.g. -DDL_CUDA=OFF), the rest to ctest
#   (e.g. -L smoke: the quick subset the fresh-machine check runs).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake_args=()
ctest_args=()
for a in "$@"; do
  case "$a" in
    -D*) cmake_args+=("$a") ;;
    *) ctest_args+=("$a") ;;
  esac
done
bash scripts/setup.sh "${cmake_args[@]}"
cd build
# One test at a time: each test's kernels already use every core (OpenMP),
# and two at once would oversubscribe them.
ctest --output-on-failure "${ctest_args[@]}"
