#!/usr/bin/env bash
# test_train_device.sh - the --device and --amp options of train_resnet.lua,
# eval.lua and predict.lua on whatever machine runs it.  Without a GPU:
# --device cuda (and cuda:N) stops at once with one line naming the reason
# and status 2; --amp on the CPU likewise; --device auto trains a tiny run on
# the CPU and says so; --cuda-graph without a GPU, or on the CPU, stops with
# one line.  With a GPU: --device cuda runs 2 steps (also with --amp bf16,
# --amp fp16 and --channels-last), --cuda-graph runs 8 steps (3 eager, then
# the captured step replayed) with each precision and prints the losses the
# eager run prints, and the checkpoint it writes evaluates and predicts on
# the CPU.
# Usage: bash test_train_device.sh <path-to-dlua> [build-dir]
# Prints "N passed, N failed"; exits non-zero on any failure.

DLUA=$(realpath "${1:?usage: test_train_device.sh <path-to-dlua> [build-dir]}")
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"
test_tmpdir device
RUN_TIMEOUT=120

tiny_folder tiny 4

COMMON=(--data tiny --arch tinycnn --image-size 8 --resize 8 --batch-size 4 --lr 0.05 --workers 1
        --threads 1 --log-every 1 --seed 3 --max-steps 2)

if "$DLUA" -e 'os.exit(dl.cuda.is_available() and 0 or 1)'; then GPU=1; else GPU=0; fi
if "$DLUA" -e 'os.exit(dl.cuda.compiled and 0 or 1)'; then WHY="no GPU on this machine"; else WHY="this dlua is not built with CUDA"; fi

if [ "$GPU" -eq 0 ]; then
    run "$DLUA" "$TRAIN" "${COMMON[@]}" --device cuda --save-dir A
    expect_bad "--device cuda without a GPU" "train_resnet: --device cuda: $WHY"
    check "--device cuda does no work first" '[ -z "$out" ] && [ ! -e A ]'
    run "$DLUA" "$TRAIN" "${COMMON[@]}" --device cuda:1 --save-dir A
    expect_bad "--device cuda:1 without a GPU" "--device cuda:1: $WHY"
    run "$DLUA" "$TRAIN" "${COMMON[@]}" --device auto --save-dir B
    check "--device auto trains on the CPU and says so" '[ "$rc" -eq 0 ] && [[ "$out" == *"device: cpu ("* ]] && [[ "$out" == *"tinycnn on cpu"* ]] && [ -f B/last.safetensors ]'
    run "$DLUA" "$ROOT/scripts/eval.lua" --weights B/last.safetensors --data tiny --workers 0 --device cuda
    expect_bad "eval --device cuda without a GPU" "--device cuda: $WHY"
    run "$DLUA" "$ROOT/scripts/predict.lua" --weights B/last.safetensors --device cuda tiny/red/01.png
    expect_bad "predict --device cuda without a GPU" "--device cuda: $WHY"
    run "$DLUA" "$TRAIN" "${COMMON[@]}" --device cuda --cuda-graph --save-dir A
    expect_bad "--cuda-graph without a GPU" "train_resnet: --device cuda: $WHY"
    run "$DLUA" "$TRAIN" "${COMMON[@]}" --device cpu --cuda-graph --save-dir D
    expect_bad "--cuda-graph on the CPU" "train_resnet: --cuda-graph: needs --device cuda in one process"
else
    run "$DLUA" "$TRAIN" "${COMMON[@]}" --device cuda --save-dir A
    check "--device cuda runs 2 steps" '[ "$rc" -eq 0 ] && [[ "$out" == *"device: cuda:0 ("* ]] && [[ "$out" == *"stopped after 2 steps"* ]]'
    run "$DLUA" "$TRAIN" "${COMMON[@]}" --device auto --save-dir B
    check "--device auto picks the GPU" '[ "$rc" -eq 0 ] && [[ "$out" == *"device: cuda:0 ("* ]]'
    for amp in bf16 fp16; do
        run "$DLUA" "$TRAIN" "${COMMON[@]}" --device cuda --amp $amp --channels-last --save-dir C$amp
        check "--amp $amp --channels-last runs 2 steps" '[ "$rc" -eq 0 ] && [[ "$out" == *"stopped after 2 steps"* ]]'
    done
    run "$DLUA" "$ROOT/scripts/eval.lua" --weights A/last.safetensors --data tiny --workers 0 --device cpu
    check "a checkpoint written on CUDA evaluates on the CPU" '[ "$rc" -eq 0 ] && [[ "$out" == *"top-1: "* ]]'
    run "$DLUA" "$ROOT/scripts/predict.lua" --weights A/last.safetensors --device cuda tiny/red/01.png
    check "predict --device cuda" '[ "$rc" -eq 0 ] && [[ "$out" == *"%"* ]]'
    run "$DLUA" "$TRAIN" "${COMMON[@]}" --device cpu --resume A/last.safetensors --max-steps 3
    check "a checkpoint written on CUDA resumes on the CPU" '[ "$rc" -eq 0 ] && [[ "$out" == *"stopped after 3 steps"* ]]'
    run "$DLUA" "$TRAIN" "${COMMON[@]}" --device cuda:99 --save-dir A
    expect_bad "--device cuda:99" "--device cuda:99: this machine has"
    # CUDA graphs: 3 eager steps, then the captured step replayed; the loss
    # lines (one per step) agree with an eager run's
    GRAPH=(--data tiny --arch tinycnn --image-size 8 --resize 8 --batch-size 4 --lr 0.05 --workers 1
           --threads 1 --log-every 1 --seed 3 --max-steps 8 --device cuda)
    losses() { printf '%s\n' "$1" | grep -E '^\[[0-9]+, +[0-9]+\] loss: ' | sed -E 's/.*loss: ([^ ]+).*/\1/'; }
    for amp in off bf16 fp16; do
        run "$DLUA" "$TRAIN" "${GRAPH[@]}" --amp $amp --channels-last --save-dir E$amp
        eager=$(losses "$out")
        run "$DLUA" "$TRAIN" "${GRAPH[@]}" --amp $amp --channels-last --cuda-graph --save-dir G$amp
        graphed=$(losses "$out")
        check "--cuda-graph --amp $amp runs 8 steps" '[ "$rc" -eq 0 ] && [[ "$out" == *"stopped after 8 steps"* ]] && [ "$(printf "%s\n" "$graphed" | wc -l)" -eq 8 ]'
        check "--cuda-graph --amp $amp: the eager run's losses" \
            'paste <(printf "%s\n" "$eager") <(printf "%s\n" "$graphed") | awk "{ d = \$1 - \$2; if (d < 0) d = -d; if (d > 0.01 || NF != 2) bad = 1 } END { exit bad }"'
    done
fi

run "$DLUA" "$TRAIN" "${COMMON[@]}" --device cpu --amp bf16 --save-dir D
expect_bad "--amp on the CPU" "--amp bf16: mixed precision runs on CUDA only"
run "$DLUA" "$TRAIN" "${COMMON[@]}" --device tpu --save-dir D
expect_bad "--device tpu" "--device tpu: expected auto, cpu, cuda or cuda:N"

finish
