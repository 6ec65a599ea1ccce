#!/usr/bin/env bash
# run.sh - the README's main command: installs what is missing, builds, and
# runs the main job (for now the tensor demo; the training program replaces it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec ./build/dlua scripts/demo.lua "$@"
