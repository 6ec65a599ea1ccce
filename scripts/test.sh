#!/usr/bin/env bash
# test.sh - the README's test command: installs what is missing, builds, and
# runs the whole suite with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh "$@"
cd build
# One test at a time: each test's kernels already use every core (OpenMP),
# and two at once would oversubscribe them.
ctest --output-on-failure
