#!/usr/bin/env bash
# gpu_check.sh - the one command to run on a machine with an NVIDIA GPU: runs
# every CUDA test file, then the GPU ResNet-50 benchmark next to PyTorch on the
# same GPU, and prints one table.  Ends within 8 minutes; logs go to $OUT
# when that is set (else ./gpu_check_logs).
#
# The GPU machine needs the driver, cuBLAS and cuDNN 9 (system libraries or
# the NVIDIA Python wheels PyTorch uses: their lib folders are found) and,
# for the comparison, python3 with torch and torchvision.  dlua itself comes
# either from gpubundle/bundle.tar.xz (made here by scripts/gpu_bundle.sh and
# carried with the tree: bin/dlua plus its non-CUDA libraries) or from
# build-cuda/dlua when the machine could build it.
# After the benchmark: an in-process A/B of the speed switches
# (scripts/bench_switches.lua; DL_GPU_AB_VARIANTS picks the variants).
# Usage: bash scripts/gpu_check.sh [--tests-only|--bench-only]
#        (DL_GPU_CHECK_OPS=1 adds scripts/bench_ops_gpu.lua's per-op table)
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
logs=${OUT:-$root/gpu_check_logs}
mkdir -p "$logs"
mode=${1:-all}
start=$(date +%s)
say() { echo "$@" | tee -a "$logs/summary.txt"; }

# --- dlua --------------------------------------------------------------------------
dlua=""
if [ -f gpubundle/bundle.tar.xz ]; then
  mkdir -p /tmp/dlua-bundle
  tar -C /tmp/dlua-bundle -xJf gpubundle/bundle.tar.xz
  # the binary finds the Lua library beside it (lua/dl)
  ln -sfn "$root/lua" /tmp/dlua-bundle/bin/lua
  export LD_LIBRARY_PATH=/tmp/dlua-bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  dlua=/tmp/dlua-bundle/bin/dlua
elif [ -x build-cuda/dlua ]; then
  dlua=$root/build-cuda/dlua
else
  say "gpu_check: no dlua: run scripts/gpu_bundle.sh on a build machine and carry gpubundle/"
  exit 2
fi
# cuBLAS/cuDNN: system copies, else the NVIDIA wheels'
for lib in libcublasLt.so.13 libcublas.so.13 libcudnn.so.9; do
  if ! ldconfig -p 2>/dev/null | grep -q "$lib"; then
    d=$(find / -xdev -name "$lib" -not -path '*/proc/*' 2>/dev/null | head -1)
    [ -n "$d" ] && export LD_LIBRARY_PATH=$(dirname "$d"):$LD_LIBRARY_PATH
  fi
done
export DLUA_LUA_PATH=$root/lua
say "== gpu_check $(date -u +%Y-%m-%dT%H:%MZ)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | sed 's/^/gpu: /' | tee -a "$logs/summary.txt"
if ! "$dlua" -v >>"$logs/summary.txt" 2>&1; then
  say "gpu_check: dlua does not start:"
  ldd "$dlua" | grep -i "not found" | tee -a "$logs/summary.txt"
  exit 2
fi
tail -1 "$logs/summary.txt"
py=$(command -v python3)

# --- tests ---------------------------------------------------------------------------
fails=0
if [ "$mode" != "--bench-only" ]; then
  say ""
  say "$(printf '%-34s %8s %8s %8s' 'CUDA test file' passed failed seconds)"
  budget=${DL_GPU_TEST_BUDGET:-260} # seconds for all test files together
  for f in tests/lua/test_cuda.lua tests/lua/test_*_cuda.lua; do # the API, then each family
    name=$(basename "$f" .lua)
    t0=$(date +%s)
    left=$(( budget - (t0 - start) ))
    [ "$left" -gt 90 ] && left=90
    if [ "$left" -lt 5 ]; then say "$(printf '%-34s %8s' "$name" 'no time')"; fails=$((fails + 1)); continue; fi
    (cd tests/lua && DL_TEST_PYTHON=$py DL_TEST_TMP=/tmp/dlua-test timeout "$left" "$dlua" "$name.lua") \
      >"$logs/$name.log" 2>&1
    rc=$?
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$logs/$name.log" | tail -1)
    p=$(echo "$line" | awk '{print $1}'); fl=$(echo "$line" | awk '{print $3}')
    [ -z "$line" ] && { p=-; fl="rc=$rc"; }
    [ "$rc" != 0 ] && fails=$((fails + 1))
    say "$(printf '%-34s %8s %8s %8s' "$name" "$p" "$fl" $(( $(date +%s) - t0 )))"
  done
  # the training program on the GPU: --device cuda, --amp bf16/fp16, --channels-last
  t0=$(date +%s)
  timeout 120 bash tests/sh/test_train_device.sh "$dlua" >"$logs/test_train_device.log" 2>&1
  rc=$?
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$logs/test_train_device.log" | tail -1)
  [ "$rc" != 0 ] && fails=$((fails + 1))
  say "$(printf '%-34s %8s %8s %8s' test_train_device "$(echo "$line" | awk '{print $1}')" \
    "$(echo "$line" | awk '{print $3}')" $(( $(date +%s) - t0 )))"
  # the first failures of each file, for the log
  grep -h -A4 '^FAIL' "$logs"/test_cuda.log "$logs"/test_*_cuda.log "$logs"/test_train_device.log 2>/dev/null | head -150 >"$logs/failures.txt"
  say "test files failing: $fails"
fi

# --- benchmark -----------------------------------------------------------------------------
if [ "$mode" != "--tests-only" ]; then
  left=$(( 470 - ($(date +%s) - start) ))
  if [ "$left" -lt 60 ]; then
    say "benchmark skipped: $left s left of the 8-minute budget"
  else
    say ""
    timeout "$left" "$dlua" scripts/bench_resnet.lua --device cuda --python "$py" --steps 5 --warmup 2 \
      >"$logs/bench.txt" 2>"$logs/bench_err.txt"
    cat "$logs/bench.txt" | tee -a "$logs/summary.txt"
    tail -5 "$logs/bench_err.txt"
  fi
fi
# --- DistributedDataParallel at world size 1 on the GPU: its own cost per step -----------
# (the "local" backend: the GPU machine has no MPI; NCCL needs the MPI plugin)
if [ "$mode" != "--tests-only" ] && [ $(( 470 - ($(date +%s) - start) )) -ge 60 ]; then
  timeout 60 "$dlua" scripts/bench_ddp.lua --device cuda --backend local --arch resnet50 --size 224 \
    --batch 64 --threads 1 --steps 8 --warmup 3 --rounds 2 >"$logs/bench_ddp.txt" 2>&1
  say "$(grep -E '^bench_ddp|overhead' "$logs/bench_ddp.txt" || tail -3 "$logs/bench_ddp.txt")"
fi
# --- A/B of the speed switches (issue 17), one process: fused BN+ReLU(+add), the BN
# implementation (auto/native/cudnn), NHWC max-pool, vectorized maps, and all off ----------
# (variants: scripts/bench_switches.lua's --only list; empty = all of them)
AB_VARIANTS=${DL_GPU_AB_VARIANTS:-default,unfused-bn,bn-native,bn-cudnn,pool-planar,maps-scalar,before}
left=$(( 470 - ($(date +%s) - start) ))
if [ "$mode" != "--tests-only" ] && [ "$left" -ge 60 ]; then
  [ "$left" -gt 150 ] && left=150
  say ""
  timeout "$left" "$dlua" scripts/bench_switches.lua --device cuda --arch resnet50 --batch 256 \
    --size 224 --amp bf16 --channels-last --steps 3 --rounds 2 --only "$AB_VARIANTS" \
    >"$logs/bench_switches.txt" 2>&1
  tee -a "$logs/summary.txt" <"$logs/bench_switches.txt"
fi
# --- per-op timings (DL_GPU_CHECK_OPS=1): where the network's time goes --------------------
if [ "${DL_GPU_CHECK_OPS:-0}" = 1 ]; then
  timeout 120 "$dlua" scripts/bench_ops_gpu.lua --python "$py" >"$logs/ops.txt" 2>"$logs/ops_err.txt"
  cat "$logs/ops.txt"
  tail -5 "$logs/ops_err.txt"
fi
say "gpu_check finished in $(( $(date +%s) - start )) s"
[ "$fails" = 0 ]
