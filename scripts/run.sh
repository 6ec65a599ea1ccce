#!/usr/bin/env bash
# run.sh - the README's main command: installs what is missing, builds,
# prepares Fashion-MNIST as an ImageFolder of PNGs (once: skipped when
# data/fashion-mnist is complete) and runs the built-in default training run,
# `train_resnet.lua --preset fashion-mnist` (resnet18 at 32x32, about 5
# minutes on 2 CPU cores).  It prints progress, the final validation top-1,
# the checkpoint path and the plot path.  Extra arguments go to
# train_resnet.lua (e.g. --epochs 2, --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

src=/usr/share/datasets/fashion-mnist
dest=data/fashion-mnist
if [ ! -f "$dest/.complete" ]; then
  if [ ! -d "$src" ]; then
    echo "run.sh: $src is missing (Debian package dataset-fashion-mnist; scripts/setup.sh installs it as root)" >&2
    exit 1
  fi
  echo "run.sh: preparing Fashion-MNIST in $dest (once)"
  rm -rf "$dest"
  ./build/dlua scripts/prepare_fashion_mnist.lua "$src" "$dest"
  touch "$dest/.complete"
fi

exec ./build/dlua scripts/train_resnet.lua --preset fashion-mnist "$@"
