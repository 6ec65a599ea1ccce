#!/usr/bin/env bash
# fuzz.sh - builds the libFuzzer targets of tests/fuzz/ with clang into
# build-fuzz (ASan + UBSan + libFuzzer, CPU only) and runs them.
#
#   scripts/fuzz.sh --ci                 every target for 45 s on its seeds and
#                                        regressions (CI; fails on any finding)
#   scripts/fuzz.sh --time 600 [target]  long sessions, one target at a time;
#                                        the grown corpus stays in
#                                        build-fuzz/corpus/<target>/
#   scripts/fuzz.sh --build              build only
#
# Targets: jpeg png safetensors idx nested_table folder tokenizer onnx.  A
# crash, leak, UB report or hang (> 10 s on one input) stops the run; libFuzzer writes the
# input to build-fuzz/artifacts/<target>/.  Fix the bug, then copy the input to
# tests/fuzz/regressions/<target>/ so ctest's fuzz.<target> replays it forever.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
targets="jpeg png safetensors idx nested_table folder tokenizer onnx"
mode=ci secs=${DL_FUZZ_SECONDS:-45}
case "${1:-}" in
  --ci) shift ;;
  --time) mode=long secs=${2:?--time needs seconds}; shift 2 ;;
  --build) mode=build; shift ;;
  "") ;;
  *) echo "usage: $0 [--ci | --time SECONDS [target...] | --build]" >&2; exit 2 ;;
esac
[ $# -gt 0 ] && targets="$*"

# clang with its libFuzzer/sanitizer runtimes and OpenMP (Debian 12 names),
# installed like scripts/setup.sh does when run as root
PKGS="clang libclang-rt-dev libomp-dev"
# shellcheck source-path=SCRIPTDIR source=debian_packages.sh
source scripts/debian_packages.sh
# shellcheck disable=SC2086 # one word per package
need_debian_packages fuzz $PKGS

CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Release -DDL_FUZZ=ON -DDL_CUDA=OFF >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target $(for t in $targets; do printf 'fuzz_%s ' "$t"; done)
[ "$mode" = build ] && exit 0

export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:allocator_may_return_null=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export TMPDIR=${TMPDIR:-/tmp}
[ -d /dev/shm ] && [ -w /dev/shm ] && export TMPDIR=/dev/shm   # scratch files of the targets
max_len() {
  case $1 in
    jpeg|png) echo 65536 ;;
    safetensors|idx|tokenizer|onnx) echo 16384 ;;
    *) echo 4096 ;;
  esac
}

status=0
for t in $targets; do
  art="$root/build-fuzz/artifacts/$t"
  mkdir -p "$art"
  seeds=()
  for d in "tests/fuzz/corpus/$t" "tests/fuzz/regressions/$t"; do [ -d "$d" ] && seeds+=("$root/$d"); done
  if [ "$mode" = ci ]; then
    work=$(mktemp -d)   # CI never grows the checked-in corpus
  else
    work="$root/build-fuzz/corpus/$t"
    mkdir -p "$work"
  fi
  echo "fuzz: $t for ${secs}s"
  log="$root/build-fuzz/fuzz_$t.log"
  if ! "build-fuzz/tests/fuzz/fuzz_$t" "$work" "${seeds[@]}" -max_total_time="$secs" -timeout=10 \
      -rss_limit_mb=2048 -max_len="$(max_len "$t")" -print_final_stats=1 \
      -artifact_prefix="$art/" >"$log" 2>&1; then
    echo "fuzz: $t FOUND A PROBLEM (input in $art/); the end of $log:" >&2
    tail -40 "$log" >&2
    status=1
  fi
  grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb' "$log" | sed "s/^/fuzz: $t /" || true
  grep -E '^#[0-9]+.*(DONE|cov:)' "$log" | tail -1 | sed "s/^/fuzz: $t /" || true
  [ "$mode" = ci ] && rm -rf "$work"
done
exit $status
