#!/usr/bin/env bash
# test_distributed_train.sh - mpirun -np 2 dlua scripts/train_resnet.lua on a
# tiny generated ImageFolder (tinycnn, 8x8): trains to the end with output
# from rank 0 only, the checkpoint is written by rank 0, and a run stopped by
# --max-steps then resumed on both ranks reaches the uninterrupted run's
# losses and weights exactly; --sync-bn converts tinycnn's two batch norms
# and trains; a rank failing alone (a corrupt image) ends
# the job at once, the other naming it.  Skipped (77) only when mpirun is
# absent.
# Usage: bash test_distributed_train.sh <path-to-dlua> [build-dir]
DLUA=$(realpath "${1:?usage: test_distributed_train.sh <path-to-dlua> [build-dir]}")
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source-path=SCRIPTDIR source=dist_lib.sh
source "$(dirname "$0")/dist_lib.sh"
test_tmpdir distributed_train
RUN_TIMEOUT=120

tiny_folder tiny 12

cat > same.lua <<'LUA'
-- same.lua A B: exit 0 when checkpoints A and B hold equal model tensors and loss histories
local a, b = dl.load(arg[1]), dl.load(arg[2])
local ha, hb = a["history.loss"]:tolist(), b["history.loss"]:tolist()
if #ha ~= #hb then print("history lengths " .. #ha .. " vs " .. #hb) os.exit(1) end
for i = 1, #ha do
  if ha[i] ~= hb[i] then print(string.format("step %d: %.17g vs %.17g", i, ha[i], hb[i])) os.exit(1) end
end
for k, v in pairs(a) do
  if k:match("^model%.") and not dl.equal(v, b[k]) then print("tensor " .. k .. " differs") os.exit(1) end
end
print(#ha .. " steps equal")
LUA

COMMON=(--data tiny --arch tinycnn --image-size 8 --resize 8 --batch-size 8 --lr 0.05 --epochs 2
        --workers 0 --threads 1 --log-every 1 --seed 3 --dist-timeout 60)

mpi 2 "$DLUA" "$TRAIN" "${COMMON[@]}" --save-dir A --plot A/curves.png
check "trains to the end on 2 ranks" '[ $rc -eq 0 ] && [[ "$out" == *"distributed: 2 ranks (mpi), 4 images per rank per step"* ]]'
check "  output from rank 0 only" '[ "$(grep -c "Finished Training" <<<"$out")" -eq 1 ] && [ "$(grep -c "^train_resnet: 3 classes" <<<"$out")" -eq 1 ]'
check "  rank 0 wrote the checkpoint and the plot" '[ -s A/last.safetensors ] && [ -s A/curves.png ]'
check "  5 steps an epoch (36 images / 8)" '[[ "$out" == *"stopped"* ]] || [[ "$out" == *"[2,     5] loss"* ]]'

mpi 2 "$DLUA" "$TRAIN" "${COMMON[@]}" --save-dir E --max-steps 2 --sync-bn
check "--sync-bn trains with SyncBatchNorm on 2 ranks" '[ $rc -eq 0 ] && [[ "$out" == *"per rank per step, 2 SyncBatchNorm layers"* ]] && [[ "$out" == *"stopped after 2 steps"* ]]'

mpi 2 "$DLUA" "$TRAIN" "${COMMON[@]}" --save-dir B --max-steps 3
check "--max-steps 3 stops both ranks with a checkpoint" '[ $rc -eq 0 ] && [[ "$out" == *"stopped after 3 steps"* ]] && [ -s B/last.safetensors ]'
mpi 2 "$DLUA" "$TRAIN" --resume B/last.safetensors
check "--resume on both ranks runs to the end" '[ $rc -eq 0 ] && [[ "$out" == *"resuming from B/last.safetensors: epoch 1, batch 3, step 3"* ]] && [[ "$out" == *"Finished Training"* ]]'
run "$DLUA" same.lua A/last.safetensors B/last.safetensors
check "resumed losses and weights equal the uninterrupted run's ($out)" '[ $rc -eq 0 ]'

# a bad option: one line, prefixed with the rank
mpi 2 "$DLUA" "$TRAIN" "${COMMON[@]}" --save-dir C --data "$TMP/none"
check "a bad --data: status 2, each rank's line prefixed [rank r/2]" '[ $rc -ne 0 ] && [[ "$err" == *"[rank 0/2] train_resnet: "* ]] && [[ "$err" == *"[rank 1/2] train_resnet: "* ]]'

# one rank fails on a corrupt image: the other fails at once (the timeout is 60 s), naming it
cp -r tiny corrupt && head -c 50 tiny/red/01.png >corrupt/red/03.png
t0=$(date +%s)
mpi 2 "$DLUA" "$TRAIN" "${COMMON[@]}" --epochs 1 --save-dir D --data corrupt
check "a corrupt image on one rank ends the job at once ($(($(date +%s) - t0)) s)" '[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $(($(date +%s) - t0)) -le 30 ]'
check "  the other rank names the failing rank and the file" '[[ "$err" == *"cannot complete: rank "*" failed: train_resnet: error: "*"corrupt/red/03.png"* ]]'

finish
