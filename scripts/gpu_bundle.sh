#!/usr/bin/env bash
# gpu_bundle.sh - builds dlua with the CUDA backend here (a machine with the
# CUDA toolkit but perhaps no GPU) and packs what a GPU machine without our
# Debian dependencies needs to run it: gpubundle/bundle.tar.xz holding
# bin/dlua and lib/ (Lua, oneDNN, libpng, libjpeg-turbo, zlib, readline,
# libgomp, and what they pull in).  cuBLAS, cuBLASLt and cuDNN are not packed:
# scripts/gpu_check.sh finds the GPU machine's own copies.  The CUDA runtime is
# linked statically.  The bundle is < 30 MB and travels with the source tree
# (scripts/gpu_check.sh unpacks it beside itself).
# Usage: bash scripts/gpu_bundle.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=$root/gpubundle
bld=$root/build-cuda
mkdir -p "$out"
cmake -S . -B "$bld" -DCMAKE_BUILD_TYPE=Release -DDL_CUDA=ON >/dev/null
make -C "$bld" -j"$(nproc)" dlua 2>&1 | grep -E 'error|warning' || true
test -x "$bld/dlua"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
cp "$bld/dlua" "$stage/bin/dlua"
strip "$stage/bin/dlua"
# every shared library dlua needs, except the C runtime and the CUDA libraries
ldd "$bld/dlua" | awk '$3 ~ /^\// {print $1, $3}' | while read -r name path; do
  case "$name" in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|libstdc++.so*|libgcc_s.so*) ;;
    libcublas*|libcudnn*|libcudart*) ;;
    *) cp -L "$path" "$stage/lib/$name" ;;
  esac
done
tar -C "$stage" -cJf "$out/bundle.tar.xz" bin lib
ls -la "$out/bundle.tar.xz"
