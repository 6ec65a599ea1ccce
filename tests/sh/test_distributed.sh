#!/usr/bin/env bash
# test_distributed.sh - dl.distributed under mpirun -np 2 and -np 4 (one
# thread per rank): collectives against closed forms, bit-identical on every
# rank (tests/dist/collectives.lua); DistributedDataParallel against one
# process at the whole batch, with SGD and Adam, tiny/default/huge buckets,
# no_sync accumulation, unused and mismatched parameters (ddp.lua);
# DistributedSampler (sampler.lua); SyncBatchNorm against one process's
# BatchNorm (syncbn.lua); each once more alone on the "local"
# backend.  Skipped (77) only when mpirun is absent.
# Usage: bash test_distributed.sh <path-to-dlua> [build-dir]
DLUA=$(realpath "${1:?usage: test_distributed.sh <path-to-dlua> [build-dir]}")
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source-path=SCRIPTDIR source=dist_lib.sh
source "$(dirname "$0")/dist_lib.sh"
test_tmpdir distributed
cd "$ROOT/tests/lua" || exit 1 # testlib.lua
RUN_TIMEOUT=90

for script in collectives ddp sampler syncbn; do
    for np in 2 4; do
        mpi "$np" "$DLUA" "$ROOT/tests/dist/$script.lua"
        check "$script.lua at -np $np" '[ $rc -eq 0 ] && [ "$(grep -c "passed, 0 failed" <<<"$out")" -eq '"$np"' ]'
    done
    DL_TEST_BACKEND=local run "$DLUA" "$ROOT/tests/dist/$script.lua"
    check "$script.lua on the local backend" '[ $rc -eq 0 ] && [[ "$out" == *"passed, 0 failed"* ]]'
done

# DLUA_DIST_DEBUG=1 costs a check per collective but changes no result
DLUA_DIST_DEBUG=1 mpi 2 "$DLUA" "$ROOT/tests/dist/collectives.lua"
check "collectives.lua with DLUA_DIST_DEBUG=1" '[ $rc -eq 0 ] && [ "$(grep -c "passed, 0 failed" <<<"$out")" -eq 2 ]'

finish
