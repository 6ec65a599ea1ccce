#!/usr/bin/env bash
# test_crash_safety.sh - crash safety of training checkpoints.
#
# 1. SIGKILL at random moments: scripts/train_resnet.lua trains tinycnn on a
#    tiny generated ImageFolder (6 steps an epoch, 40 epochs, a checkpoint at every
#    epoch's end).  A chain starts a run, kills it with SIGKILL after a random
#    delay (0 to the uninterrupted run's duration, at least 0.3 s: during
#    start-up, training steps and checkpoint writes, whatever the machine's
#    speed, so that most trials are kills), resumes from the latest checkpoint (--resume), kills again ...
#    until a run finishes.  After every kill the latest checkpoint must load
#    and its loss history must equal the first steps of an uninterrupted run's
#    (same seed, CPU); a finished chain must equal the uninterrupted run's
#    losses and weights exactly.  100 kills in all (DL_CRASH_TRIALS overrides).
#    Kills that landed inside a checkpoint write are counted from the
#    temporary files they left behind; the next save must remove those (a
#    finished chain's folder holds no temporary file).
# 2. A full disk: the save folder is a 512 KB tmpfs (needs root and mount;
#    skipped with a message otherwise).  After a first checkpoint, the disk is
#    filled; the next save must fail with one line saying the disk is full
#    and that the previous checkpoint is intact, and that checkpoint must
#    still load with its old history.
# Usage: bash test_crash_safety.sh <path-to-dlua> [build-dir]
# Prints "N passed, N failed" and the figures; exits non-zero on any failure.

DLUA=$(realpath "${1:?usage: test_crash_safety.sh <path-to-dlua> [build-dir]}")
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"
TRIALS=${DL_CRASH_TRIALS:-100}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/dlua_crash.XXXXXX")
MNT="$TMP/full"
cleanup() {
    mountpoint -q "$MNT" 2>/dev/null && umount "$MNT"
    rm -rf "$TMP"
}
trap cleanup EXIT
cd "$TMP" || exit 1

fail() { # (no single command's output to show here)
    failed=$((failed + 1))
    echo "FAIL $1" >&2
}

# --- a tiny ImageFolder and the uninterrupted run ---------------------------
tiny_folder tiny 8 10

COMMON=(--data tiny --arch tinycnn --image-size 8 --resize 8 --batch-size 4 --lr 0.05 --workers 1
        --threads 1 --log-every 1000 --seed 7 --epochs 40)
t0=$(date +%s%N)
timeout 120 "$DLUA" "$TRAIN" "${COMMON[@]}" --save-dir A >A.out 2>A.err
rc=$?
RUN_MS=$((($(date +%s%N) - t0) / 1000000))
[ "$RUN_MS" -lt 300 ] && RUN_MS=300
echo "the uninterrupted run took $RUN_MS ms: kill delays are drawn below that"
if [ $rc -ne 0 ] || [ ! -s A/last.safetensors ]; then
    echo "the uninterrupted run failed:" >&2
    cat A.err >&2
    exit 1
fi

# check.lua REF CK [final]: exit 0 when CK loads and its loss history is the
# first steps of REF's (all of them, and equal weights, with "final")
cat >check.lua <<'EOF'
local okr, ref = pcall(dl.load, arg[1])
local okc, ck = pcall(dl.load, arg[2])
if not okc then print("unreadable: " .. tostring(ck)) os.exit(1) end
local hr = ref["history.loss"]:tolist()
local hc = ck["history.loss"] and ck["history.loss"]:tolist() or {}
if arg[3] == "final" and #hc ~= #hr then print("history length " .. #hc .. " vs " .. #hr) os.exit(1) end
for i = 1, #hc do
  if hc[i] ~= hr[i] then print(string.format("step %d: %.17g vs %.17g", i, hc[i], hr[i])) os.exit(1) end
end
if arg[3] == "final" then
  for k, v in pairs(ref) do
    if k:match("^model%.") and not dl.equal(v, ck[k]) then print("tensor " .. k .. " differs") os.exit(1) end
  end
end
io.write(#hc)
EOF

# --- 1. SIGKILL at random moments --------------------------------------------
kills=0 chains=0 in_write=0 bad=0 resumes=0
RANDOM=4242 # a fixed sequence of delays: the test is repeatable
while [ "$kills" -lt "$TRIALS" ]; do
    dir="K$chains"
    if [ -s "$dir/last.safetensors" ]; then
        args=(--resume "$dir/last.safetensors")
        resumes=$((resumes + 1))
    else
        args=("${COMMON[@]}" --save-dir "$dir")
    fi
    "$DLUA" "$TRAIN" "${args[@]}" >run.out 2>run.err &
    pid=$!
    ms=$((RANDOM % RUN_MS))
    delay=$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))
    sleep "$delay"
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    rc=$? # 137: killed; anything else: the run had ended by itself
    if [ "$rc" -eq 137 ]; then
        kills=$((kills + 1))
        # the killed writer's temporary file: left here on purpose, the next
        # save to the same path must remove it
        [ -e "$dir/last.safetensors.tmp.$pid" ] && in_write=$((in_write + 1))
        if [ -e "$dir/last.safetensors" ]; then
            msg=$("$DLUA" check.lua A/last.safetensors "$dir/last.safetensors" 2>&1)
            if [ $? -ne 0 ]; then
                bad=$((bad + 1))
                fail "after kill $kills ($delay s) the checkpoint is unreadable or wrong: $msg"
                rm -rf "$dir" # start a new chain rather than stop
                chains=$((chains + 1))
            fi
        fi
    else
        if [ "$rc" -ne 0 ]; then
            fail "a resumed run failed with status $rc: $(tail -3 run.err)"
            bad=$((bad + 1))
        else
            msg=$("$DLUA" check.lua A/last.safetensors "$dir/last.safetensors" final 2>&1)
            if [ $? -ne 0 ]; then
                bad=$((bad + 1))
                fail "chain $chains finished with other losses or weights than the uninterrupted run: $msg"
            fi
            if ls "$dir"/*.tmp.* >/dev/null 2>&1; then
                bad=$((bad + 1))
                fail "chain $chains: killed writers' temporary files were not cleaned up: $(ls "$dir")"
            fi
        fi
        chains=$((chains + 1))
    fi
done
# finish the open chain: its result must equal the uninterrupted run's too
dir="K$chains"
if [ -s "$dir/last.safetensors" ]; then
    timeout 120 "$DLUA" "$TRAIN" --resume "$dir/last.safetensors" >run.out 2>run.err
    msg=$("$DLUA" check.lua A/last.safetensors "$dir/last.safetensors" final 2>&1) ||
        { bad=$((bad + 1)); fail "the last chain, finished: $msg"; }
    chains=$((chains + 1))
fi
if [ "$bad" -eq 0 ]; then ok; fi
echo "crash safety: $kills SIGKILLs ($in_write inside a checkpoint write), $resumes resumes, $chains chains finished, $bad checks failed"
if [ "$in_write" -eq 0 ]; then
    echo "note: no kill landed inside a checkpoint write this time (tests/sh/test_train.sh kills big writes on purpose)"
fi

# --- 2. a full disk while writing a checkpoint --------------------------------
mkdir -p "$MNT"
if [ "$(id -u)" -eq 0 ] && mount -t tmpfs -o size=512k tmpfs "$MNT" 2>/dev/null; then
    timeout 120 "$DLUA" "$TRAIN" "${COMMON[@]}" --save-dir "$MNT/ck" --max-steps 6 >F1.out 2>F1.err
    if [ $? -ne 0 ] || [ ! -s "$MNT/ck/last.safetensors" ]; then
        fail "the first checkpoint on the small disk: $(cat F1.err)"
    else
        before=$(md5sum <"$MNT/ck/last.safetensors")
        dd if=/dev/zero of="$MNT/filler" bs=4k 2>/dev/null # fill the disk
        timeout 120 "$DLUA" "$TRAIN" --resume "$MNT/ck/last.safetensors" --max-steps 12 >F2.out 2>F2.err
        rc=$?
        err=$(cat F2.err)
        if [ "$rc" -ne 0 ] && [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] &&
            [[ "$err" == *"No space left on device"* ]] && [[ "$err" == *"is intact"* ]]; then ok
        else fail "a full disk: expected one line saying so and that the previous checkpoint is intact (rc=$rc): $err"; fi
        after=$(md5sum <"$MNT/ck/last.safetensors")
        msg=$("$DLUA" check.lua A/last.safetensors "$MNT/ck/last.safetensors" 2>&1)
        if [ "$before" == "$after" ] && [ "$msg" == "6" ]; then ok
        else fail "the previous checkpoint after a full disk (history $msg)"; fi
        if ls "$MNT"/ck/*.tmp.* >/dev/null 2>&1; then fail "a temporary file was left on the full disk"; else ok; fi
        echo "full disk: $err"
    fi
else
    echo "full disk: skipped (cannot mount a tmpfs here: needs root)"
fi

finish
