#!/usr/bin/env bash
# gpu_check.sh - the one command to run on a machine with an NVIDIA GPU: runs
# every CUDA test file and the training program on the GPU
# (tests/sh/test_train_device.sh: --device cuda, --amp bf16/fp16,
# --channels-last, --cuda-graph), then the ResNet-50 benchmark
# (scripts/bench_resnet.lua, batch 256, 224x224) once per variant (A/B of the
# runtime switches, one process each) next to PyTorch on the same GPU
# (scripts/bench_resnet.py), and prints one table: the best variant per row
# against PyTorch, then every variant's figures.  Ends within 6 minutes (a
# budget per section; what does not fit is reported as skipped), so a second
# run fits in a 15-minute GPU slot.  Logs go to $OUT when that is set (else
# ./gpu_check_logs).
#
# The GPU machine needs the driver, cuBLAS and cuDNN 9 (system libraries or
# the NVIDIA Python wheels PyTorch uses: their lib folders are found) and,
# for the comparison, python3 with torch and torchvision.  dlua itself comes
# either from gpubundle/bundle.tar.xz (made here by scripts/gpu_bundle.sh and
# carried with the tree: bin/dlua plus its non-CUDA libraries) or from
# build-cuda/dlua when the machine could build it.
# After the benchmark: an in-process A/B of the speed switches
# (scripts/bench_switches.lua; DL_GPU_AB_VARIANTS picks the variants).
#
# Usage: bash scripts/gpu_check.sh [--tests-only|--bench-only]
#   DL_GPU_CHECK_VARIANTS="name|ENV=1 ENV2=0;name2|ENV3=1"  more benchmark variants
#   DL_GPU_CHECK_OPS=1   adds scripts/bench_ops_gpu.lua's per-op table (if time is left)
#   DL_GPU_CHECK_BUDGET  seconds for everything (default 360)
#   DL_GPU_TEST_CUDNN_GRAPH=0  the tests on cuDNN's legacy API (default: the graph API)
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
logs=${OUT:-$root/gpu_check_logs}
mkdir -p "$logs"
mode=${1:-all}
start=$(date +%s)
budget=${DL_GPU_CHECK_BUDGET:-360}
say() { echo "$@" | tee -a "$logs/summary.txt"; }
elapsed() { echo $(( $(date +%s) - start )); }
left() { echo $(( budget - $(date +%s) + start )); }

# --- the benchmark's variants: name|environment (one process each) -----------------------------
# Add a line to A/B another switch (an environment variable the library or
# bench_resnet.lua reads); names are short (they head the table's columns).
VARIANTS=(
  "graph|DLUA_CUDNN_GRAPH=1"
  "legacy|DLUA_CUDNN_GRAPH=0"
  "no-bench|DLUA_CUDNN_GRAPH=1 DLUA_BENCH_NO_BENCHMARK=1"
  "cuda-graph|DLUA_CUDNN_GRAPH=1 DLUA_BENCH_CUDA_GRAPH=1"
)
if [ -n "${DL_GPU_CHECK_VARIANTS:-}" ]; then
  IFS=';' read -r -a extra <<<"$DL_GPU_CHECK_VARIANTS"
  VARIANTS+=("${extra[@]}")
fi

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
    [ -n "$d" ] && export LD_LIBRARY_PATH=$(dirname "$d")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
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

# --- tests: 4 files at a time (correctness only; the GPU has room) --------------------------------
fails=0
if [ "$mode" != "--bench-only" ]; then
  tests_budget=${DL_GPU_TEST_BUDGET:-110} # seconds for all test files together
  per_file=${DL_GPU_TEST_FILE_TIMEOUT:-90}
  [ "$per_file" -gt "$tests_budget" ] && per_file=$tests_budget
  mkdir -p "$logs/tests"
  tests_deadline=$(( $(date +%s) + tests_budget ))
  # seconds a test may take: per_file, or less to end by the deadline
  file_time() {
    local t=$(( tests_deadline - $(date +%s) ))
    [ "$t" -gt "$per_file" ] && t=$per_file
    echo "$t"
  }
  run_test() { # name: one CUDA test file, its log and its result line
    local name=$1 t0 rc line p fl t
    t0=$(date +%s)
    t=$(file_time)
    if [ "$t" -lt 5 ]; then printf '%-34s %8s %8s %8s %s\n' "$name" - "no-time" 0 1 >"$logs/tests/$name.result"; return; fi
    (cd tests/lua && DL_TEST_PYTHON=$py DL_TEST_TMP=/tmp/dlua-test-$name timeout "$t" "$dlua" "$name.lua") \
      >"$logs/tests/$name.log" 2>&1
    rc=$?
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$logs/tests/$name.log" | tail -1)
    p=$(echo "$line" | awk '{print $1}'); fl=$(echo "$line" | awk '{print $3}')
    [ -z "$line" ] && { p=-; fl="rc=$rc"; }
    printf '%-34s %8s %8s %8s %s\n' "$name" "$p" "$fl" $(( $(date +%s) - t0 )) "$rc" >"$logs/tests/$name.result"
  }
  run_train() {
    local t0 rc line
    t0=$(date +%s)
    timeout "$(file_time)" bash tests/sh/test_train_device.sh "$dlua" >"$logs/tests/test_train_device.log" 2>&1
    rc=$?
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$logs/tests/test_train_device.log" | tail -1)
    printf '%-34s %8s %8s %8s %s\n' test_train_device "$(echo "$line" | awk '{print $1}')" \
      "$(echo "$line" | awk '{print $3}')" $(( $(date +%s) - t0 )) "$rc" >"$logs/tests/test_train_device.result"
  }
  export -f file_time run_test run_train
  export dlua py logs per_file tests_deadline
  # the tests run the cuDNN graph API path (off by default until measured;
  # test_conv_cuda.lua compares it with the legacy API explicitly)
  export DLUA_CUDNN_GRAPH=${DL_GPU_TEST_CUDNN_GRAPH:-1}
  say ""
  say "$(printf '%-34s %8s %8s %8s' 'CUDA test file' passed failed seconds)"
  names=$(cd tests/lua && ls test_cuda.lua test_*_cuda.lua | sed 's/\.lua$//')
  # the training program first (its 14 runs take longest), then the files
  { echo "__train__"; echo "$names"; } | xargs -P 4 -I{} bash -c \
    'if [ "{}" = __train__ ]; then run_train; else run_test "{}"; fi'
  for name in $names test_train_device; do
    r="$logs/tests/$name.result"
    if [ -f "$r" ]; then
      read -r n p fl secs rc <"$r"
      say "$(printf '%-34s %8s %8s %8s' "$n" "$p" "$fl" "$secs")"
      [ "$rc" != 0 ] && fails=$((fails + 1))
    else
      say "$(printf '%-34s %8s' "$name" 'no time')"
      fails=$((fails + 1))
    fi
  done
  # the first failures of each file, for the log
  grep -h -B1 -A6 '^FAIL' "$logs"/tests/*.log 2>/dev/null | head -200 >"$logs/failures.txt"
  say "test files failing: $fails (first failures: $logs/failures.txt)"
fi

# --- benchmark: PyTorch, then each variant alone on the GPU ---------------------------------------
if [ "$mode" != "--tests-only" ]; then
  bench="$logs/bench"
  mkdir -p "$bench"
  rm -f "$bench"/variant_*.txt "$bench/torch.txt"
  for v in "${VARIANTS[@]}"; do echo "${v%%|*}"; done >"$bench/variants.txt"
  steps=${DL_GPU_BENCH_STEPS:-4}
  common=(--device cuda --batch 256 --size 224 --steps "$steps" --warmup 2)
  say ""
  if [ "$(left)" -ge 90 ]; then
    t=$(( $(left) - 60 )); [ "$t" -gt 100 ] && t=100
    timeout "$t" "$py" scripts/bench_resnet.py --arch resnet50 --batch 256 --size 224 --steps "$steps" \
      --warmup 2 --device cuda >"$bench/torch.log" 2>&1
    grep -E '^[a-z_0-9]+ [-0-9.e+]+$' "$bench/torch.log" >"$bench/torch.txt"
    [ -s "$bench/torch.txt" ] || say "PyTorch: no figures ($(tail -1 "$bench/torch.log"))"
  else
    say "PyTorch benchmark skipped: $(left) s left"
  fi
  for v in "${VARIANTS[@]}"; do
    name=${v%%|*}; envs=${v#*|}
    t=$(( $(left) - 5 )); [ "$t" -gt 75 ] && t=75
    if [ "$t" -lt 40 ]; then say "variant $name skipped: $(left) s left"; continue; fi
    # shellcheck disable=SC2086
    env $envs timeout "$t" "$dlua" scripts/bench_resnet.lua "${common[@]}" --no-torch \
      --out "$bench/variant_$name.txt" >"$bench/variant_$name.log" 2>&1
    rc=$?
    [ "$rc" != 0 ] && say "variant $name: rc=$rc ($(tail -1 "$bench/variant_$name.log"))"
  done
  say "== ResNet-50, batch 256, 224x224, $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
  "$dlua" scripts/bench_resnet.lua --report "$bench" | tee -a "$logs/summary.txt"
fi
# --- DistributedDataParallel at world size 1 on the GPU: its own cost per step -----------
# (the "local" backend: the GPU machine has no MPI; NCCL needs the MPI plugin)
if [ "$mode" != "--tests-only" ] && [ "$(left)" -ge 70 ]; then
  timeout 60 "$dlua" scripts/bench_ddp.lua --device cuda --backend local --arch resnet50 --size 224 \
    --batch 64 --threads 1 --steps 8 --warmup 3 --rounds 2 >"$logs/bench_ddp.txt" 2>&1
  say "$(grep -E '^bench_ddp|overhead' "$logs/bench_ddp.txt" || tail -3 "$logs/bench_ddp.txt")"
fi
# --- A/B of the speed switches (issue 17), one process: fused BN+ReLU(+add), the BN
# implementation (auto/native/cudnn), NHWC max-pool, vectorized maps, and all off ----------
# (variants: scripts/bench_switches.lua's --only list; empty = all of them)
AB_VARIANTS=${DL_GPU_AB_VARIANTS:-default,unfused-bn,bn-native,bn-cudnn,pool-planar,maps-scalar,before}
if [ "$mode" != "--tests-only" ] && [ "$(left)" -ge 60 ]; then
  t=$(( $(left) - 5 )); [ "$t" -gt 150 ] && t=150
  say ""
  timeout "$t" "$dlua" scripts/bench_switches.lua --device cuda --arch resnet50 --batch 256 \
    --size 224 --amp bf16 --channels-last --steps 3 --rounds 2 --only "$AB_VARIANTS" \
    >"$logs/bench_switches.txt" 2>&1
  tee -a "$logs/summary.txt" <"$logs/bench_switches.txt"
fi

# --- per-op timings (DL_GPU_CHECK_OPS=1): where the network's time goes --------------------
if [ "${DL_GPU_CHECK_OPS:-0}" = 1 ] && [ "$(left)" -ge 40 ]; then
  timeout $(( $(left) - 5 )) "$dlua" scripts/bench_ops_gpu.lua --python "$py" >"$logs/ops.txt" 2>"$logs/ops_err.txt"
  cat "$logs/ops.txt"
  tail -5 "$logs/ops_err.txt"
fi
say "gpu_check finished in $(elapsed) s"
[ "$fails" = 0 ]
