#!/usr/bin/env bash
# test_bad_input_cli.sh - the bad-input catalogue of the command-line
# programs: dlua itself (missing or broken scripts, unknown options, errors in
# -e), the REPL (errors, then more input still works), train_resnet.lua
# (options, files, a checkpoint of another architecture, a NaN loss, a corrupt
# image), predict.lua and eval.lua.  Each bad run ends with a non-zero status
# and a first stderr line naming the culprit; the programs' own user errors
# are exactly one line with status 2.
# Usage: bash test_bad_input_cli.sh <path-to-dlua> [build-dir]
# Prints "N passed, N failed"; exits non-zero on any failure.

DLUA=$(realpath "${1:?usage: test_bad_input_cli.sh <path-to-dlua> [build-dir]}")
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"
test_tmpdir badcli
RUN_STDIN=/dev/null
FAIL_SHOW=600
# bad NAME TEXT: a non-zero status and a first stderr line containing TEXT
bad() {
    local first
    first=$(printf '%s\n' "$err" | head -1)
    if [ "$rc" -ne 0 ] && [ "$rc" -lt 124 ] && [[ "$first" == *"$2"* ]]; then ok; else fail "$1 (expected '$2')"; fi
}

# --- fixtures: a tiny ImageFolder, a checkpoint, broken files ----------------
"$DLUA" -e '
dl.manual_seed(1)
for _, name in ipairs({"red", "green", "blue"}) do
  os.execute("mkdir -p tiny/" .. name)
  for i = 1, 4 do dl.image.save(dl.rand(3, 10, 10):mul(255):to(dl.uint8), string.format("tiny/%s/%02d.png", name, i)) end
end' || { echo "cannot make the fixtures" >&2; exit 1; }
COMMON=(--data tiny --arch tinycnn --image-size 8 --resize 8 --batch-size 4 --workers 0 --threads 1 --epochs 1 --log-every 100)
timeout 60 "$DLUA" "$TRAIN" "${COMMON[@]}" --save-dir A >/dev/null 2>&1 || { echo "cannot train the fixture checkpoint" >&2; exit 1; }
head -c 100 A/last.safetensors >trunc.safetensors
: >empty.safetensors
cp -r tiny corrupt && head -c 50 tiny/red/01.png >corrupt/red/03.png
printf 'x = = 1\n' >syntax.lua
printf 'local t = dl.ones(2, 3)\nreturn t:view(4, 2)\n' >runtime.lua

# --- dlua ------------------------------------------------------------------------
run "$DLUA" nope.lua
bad "dlua: missing script" "cannot open nope.lua"
run "$DLUA" syntax.lua
bad "dlua: syntax error" "syntax.lua:1:"
run "$DLUA" runtime.lua
bad "dlua: error in a script" "runtime.lua:2: view"
run "$DLUA" --bogus
bad "dlua: unknown option" "unrecognized option '--bogus'"
run "$DLUA" -e 'x = dl.ones(2) + dl.ones(3)'
bad "dlua -e: shapes" "add: shapes [2] and [3] cannot be broadcast"
run "$DLUA" -l no_such_module -e 'print(1)'
bad "dlua -l: missing module" "no_such_module"
run "$DLUA" -e 'dl.load("nowhere.safetensors")'
bad "dlua -e: missing file" "load: nowhere.safetensors: cannot open"

# --- the REPL: errors, then more input works ----------------------------------
out=$(printf '%s\n' 'x = dl.ones(2) + dl.ones(3)' 'dl.load("trunc.safetensors")' \
    'dl.image.load("corrupt/red/03.png")' 'dl.nn.functional.cross_entropy(dl.ones(2, 3), dl.tensor({1, 9}))' \
    'print("still", dl.arange(1, 5):sum():item())' | timeout 60 "$DLUA" -i 2>"$TMP/stderr")
rc=$?
err=$(cat "$TMP/stderr")
if [ "$rc" -eq 0 ] && [[ "$out" == *"still	10"* ]] && [[ "$err" == *"add: shapes"* ]] &&
    [[ "$err" == *"load: trunc.safetensors"* ]] && [[ "$err" == *"corrupt/red/03.png"* ]] &&
    [[ "$err" == *"target label 9 is out of range"* ]]; then ok
else fail "REPL: four errors, then it still computes"; fi

# --- train_resnet ----------------------------------------------------------------
run "$DLUA" "$TRAIN" "${COMMON[@]}" --batch-size 0 --save-dir N
expect_bad "train: --batch-size 0" "--batch-size: must be at least 1, got 0"
run "$DLUA" "$TRAIN" "${COMMON[@]}" --lr -1 --save-dir N
expect_bad "train: negative --lr" "--lr: must be at least 0, got -1"
run "$DLUA" "$TRAIN" "${COMMON[@]}" --image-size 0 --save-dir N
expect_bad "train: --image-size 0" "--image-size: must be at least 1"
run "$DLUA" "$TRAIN" "${COMMON[@]}" --workers -1 --save-dir N
expect_bad "train: --workers -1" "--workers: must be at least 0"
run "$DLUA" "$TRAIN" "${COMMON[@]}" --data tiny/red/01.png --save-dir N
expect_bad "train: --data is a file" "is not a folder"
run "$DLUA" "$TRAIN" --resume trunc.safetensors
expect_bad "train: truncated --resume" "--resume trunc.safetensors: "
run "$DLUA" "$TRAIN" --resume empty.safetensors
expect_bad "train: empty --resume" "file is 0 bytes"
run "$DLUA" "$TRAIN" --resume tiny
expect_bad "train: --resume a folder" "not a regular file"
run "$DLUA" "$TRAIN" "${COMMON[@]}" --weights trunc.safetensors --save-dir N
expect_bad "train: truncated --weights" "--weights trunc.safetensors: "
run "$DLUA" "$TRAIN" "${COMMON[@]}" --weights tiny/red/01.png --save-dir N
expect_bad "train: a PNG as --weights" "not a safetensors file?"
run "$DLUA" "$TRAIN" "${COMMON[@]}" --arch resnet18 --resume A/last.safetensors
expect_bad "train: a checkpoint of another architecture" "does not fit resnet18"
run "$DLUA" "$TRAIN" "${COMMON[@]}" --lr 1e30 --save-dir N
expect_bad "train: a NaN loss stops at once" "the loss became NaN at epoch 1"
run "$DLUA" "$TRAIN" "${COMMON[@]}" --data corrupt --workers 2 --save-dir N
bad "train: a corrupt image names the file" "corrupt/red/03.png"

# --- predict and eval ------------------------------------------------------------
run "$DLUA" "$PREDICT" --weights A/last.safetensors corrupt/red/03.png
expect_bad "predict: a corrupt image" "image: 'corrupt/red/03.png': truncated PNG file"
run "$DLUA" "$PREDICT" --weights nope.safetensors tiny/red/01.png
expect_bad "predict: missing --weights" "nope.safetensors: no such file"
run "$DLUA" "$PREDICT" --weights tiny/red/01.png tiny/red/02.png
expect_bad "predict: a PNG as --weights" "tiny/red/01.png"
run "$DLUA" "$EVAL" --weights trunc.safetensors --data tiny
expect_bad "eval: truncated --weights" "load: trunc.safetensors: "
run "$DLUA" "$EVAL" --weights A/last.safetensors --data tiny/red/01.png
expect_bad "eval: --data is a file" "is not a folder"

finish
