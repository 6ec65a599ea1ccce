#!/usr/bin/env bash
# setup.sh - installs the Debian packages dlua needs (when run as root and
# something is missing), then configures and builds into ./build.
# Usage: scripts/setup.sh [extra cmake args]
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS="build-essential cmake pkg-config liblua5.4-dev lua5.4 libdnnl-dev libreadline-dev
      zlib1g-dev libpng-dev libturbojpeg0-dev libjpeg62-turbo-dev libsleef-dev tmux python3-torch python3-torchvision python3-numpy python3-pil
      dataset-fashion-mnist luarocks libprotobuf-c-dev protobuf-c-compiler python3-venv
      python3-onnx libonnx-testdata
      openmpi-bin libopenmpi-dev fortunes"
# shellcheck source-path=SCRIPTDIR source=debian_packages.sh
source scripts/debian_packages.sh
# shellcheck disable=SC2086 # one word per package
need_debian_packages setup $PKGS

# nvcc lives outside PATH on some machines
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j"$(nproc)"
