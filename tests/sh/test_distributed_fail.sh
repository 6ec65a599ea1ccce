#!/usr/bin/env bash
# test_distributed_fail.sh - failures never hang: under mpirun -np 2 with a
# 2-second collective timeout, a rank that stops issuing collectives or is
# killed mid-training ends the job non-zero within seconds, and the message
# names the rank (and, for a timeout, the collective and its number).  A
# rank that fails alone on an error (uncaught, or caught by the script,
# which calls dist.report_failure) or exits mid-training makes the other
# fail at once, with a 60-second timeout, naming the rank and its error;
# DLUA_DIST_DEBUG=1 names the first rank issuing a different collective;
# without the MPI plugin backend "mpi" fails with one line saying what is
# missing.  (tests/dist/fail.lua)
# Usage: bash test_distributed_fail.sh <path-to-dlua> [build-dir]
DLUA=$(realpath "${1:?usage: test_distributed_fail.sh <path-to-dlua> [build-dir]}")
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"
test_tmpdir distributed_fail

# backend "mpi" without the plugin (as in a build without MPI): one line
mkdir empty
DLUA_DIST_PLUGIN_DIR=$TMP/empty run "$DLUA" -e 'local ok, e = pcall(dl.distributed.init_process_group, {backend = "mpi"})
io.stderr:write(tostring(e), "\n") os.exit(ok and 0 or 2)'
expect_bad "backend mpi without the plugin" 'backend "mpi" is not available: dlua_dist_mpi.so was not built'
DLUA_DIST_PLUGIN_DIR=$TMP/empty run "$DLUA" "$TRAIN" --distributed --data "$TMP/empty"
expect_bad "train_resnet --distributed without the plugin" "train_resnet: --distributed: init_process_group: backend \"mpi\" is not available"

# the rest needs mpirun (without it, the checks above are the test)
command -v mpirun >/dev/null || { echo "mpirun not found: the mpirun cases skipped"; finish; exit; }
# shellcheck source-path=SCRIPTDIR source=dist_lib.sh
source "$(dirname "$0")/dist_lib.sh"
RUN_TIMEOUT=30
FAIL="$ROOT/tests/dist/fail.lua"
elapsed() { echo $(($(date +%s) - t0)); }
# mpi's run, timed: elapsed counts from its start.
timed_mpi() {
    t0=$(date +%s)
    mpi "$@"
}
# Checks that the job just run failed on its own (not at the run's timeout)
# within $2 seconds: "$1", then "  $3 (N s)".
failed_within() {
    check "$1" '[ $rc -ne 0 ] && [ $rc -ne 124 ]'
    check "  $3 ($(elapsed) s)" "[ \$(elapsed) -le $2 ]"
}

DL_TEST_MODE=hang timed_mpi 2 "$DLUA" "$FAIL"
failed_within "a rank that stops issuing collectives: the job fails" 15 "within the timeout"
check "  naming rank, collective and number" '[[ "$err" == *"rank 0 of 2: collective #"*" (all_reduce) timed out after 2 s: rank 1 died or did not issue it"* ]]'

DL_TEST_TIMEOUT=60 DL_TEST_MODE=exit timed_mpi 2 "$DLUA" "$FAIL"
failed_within "a rank that exits mid-training: the job fails" 15 "at once, not at the 60 s timeout"
check "  naming the rank" '[[ "$err" == *"[rank 0/2] dlua: "*"rank 0: collective #"*" cannot complete: rank 1 left the group after collective #"*" (its process ended without destroy_process_group)"* ]]'

# a rank that fails alone on an error: the other fails at once (the
# timeout is 60 s), naming the rank and its error
BAD_BATCH="Linear: input has 5 features in its last dimension (shape [4, 5]), expected 4"
for mode in error guard late; do
    ERROR=$BAD_BATCH
    [ $mode = guard ] && ERROR="rank 1 gave up: Linear: input has 3 features"
    DL_TEST_TIMEOUT=60 DL_TEST_MODE=$mode timed_mpi 2 "$DLUA" "$FAIL"
    failed_within "$mode: a rank failing alone ends the job" 20 "at once, not at the 60 s timeout"
    check "  the other names it and its error" '[[ "$err" == *"[rank 0/2] dlua: "*"rank 0: collective #"*" cannot complete: rank 1 failed: $ERROR"* ]]'
    if [ $mode = guard ]; then
        check "  the failing rank printed its own message" '[[ "$err" == *"fail.lua: $ERROR"* ]]'
    else
        check "  the failing rank's message says its rank" '[[ "$err" == *"[rank 1/2] dlua: $ERROR"* ]]'
    fi
done

DL_TEST_MODE=kill timed_mpi 2 "$DLUA" "$FAIL"
failed_within "a rank killed mid-training: the job fails" 15 "within the timeout"
check "  naming the rank" '[[ "$out$err" == *"rank 1"* ]]'

DL_TEST_TIMEOUT=60 DL_TEST_MODE=error timed_mpi 4 "$DLUA" "$FAIL"
check "error at -np 4: the job ends at once ($(elapsed) s)" '[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $(elapsed) -le 20 ]'
check "  naming rank 1 and its error" '[[ "$err" == *"cannot complete: rank 1 failed: $BAD_BATCH"* ]]'

DLUA_DIST_DEBUG=1 DL_TEST_MODE=debug mpi 2 "$DLUA" "$FAIL"
check "DLUA_DIST_DEBUG names the first differing rank" '[ $rc -ne 0 ] && [ $rc -ne 124 ] && [[ "$err" == *"collective #1: rank 0 issued all_reduce(float32, 4 elements, 0) but rank 1 issued #1 broadcast("* ]] && [[ "$out" != *"not reached"* ]]'

finish
