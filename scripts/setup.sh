#!/usr/bin/env bash
# setup.sh - installs the Debian packages dlua needs (when run as root and
# something is missing), then configures and builds into ./build.
# Usage: scripts/setup.sh [extra cmake args]
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS="build-essential cmake pkg-config liblua5.4-dev lua5.4 libdnnl-dev libreadline-dev
      zlib1g-dev libpng-dev libturbojpeg0-dev libjpeg62-turbo-dev libsleef-dev tmux python3-torch python3-torchvision python3-numpy python3-pil
      dataset-fashion-mnist luarocks libprotobuf-c-dev protobuf-c-compiler python3-venv
      openmpi-bin libopenmpi-dev fortunes"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
  else
    echo "setup: missing Debian packages:$missing (run as root, or install them)" >&2
    exit 1
  fi
fi

# nvcc lives outside PATH on some machines
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j"$(nproc)"
