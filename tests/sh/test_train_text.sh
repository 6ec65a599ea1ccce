#!/usr/bin/env bash
# test_train_text.sh - scripts/train_text.lua end to end on a tiny generated
# fortunes folder (three categories told apart by their words): the bag and
# the transformer (mean and CLS pooling) train, the loss falls and the
# validation accuracy is well above chance on a fixed seed, the confusion
# matrix accounts for every validation quote, a run is reproducible;
# --export-data is read by scripts/train_text.py (the PyTorch twin, under
# Debian's PyTorch) which trains the same recipe; bad options and input give
# one line and status 2.
# Usage: bash test_train_text.sh <path-to-dlua> [build-dir]
# Prints "N passed, N failed"; exits non-zero on any failure.

DLUA=$(realpath "${1:?usage: test_train_text.sh <path-to-dlua> [build-dir]}")
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"
test_tmpdir train_text
TEXT="$ROOT/scripts/train_text.lua"
PY=${DL_TEST_PYTHON:-/usr/bin/python3}

# --- three categories, each with its own words (and some shared ones) -----------------------------
mkdir -p fort
"$DLUA" -e '
math.randomseed(4)
local own = {cats = {"cat", "purr", "mouse", "whisker"}, ships = {"sail", "mast", "harbor", "wave"},
  code = {"compile", "bug", "stack", "loop"}}
local shared = {"the", "a", "is", "on", "and", "very"}
for name, words in pairs(own) do
  local f = assert(io.open("fort/" .. name, "w"))
  for q = 1, 40 do
    local t = {}
    for i = 1, math.random(4, 9) do
      t[i] = math.random() < 0.4 and words[math.random(#words)] or shared[math.random(#shared)]
    end
    f:write(table.concat(t, " "), ".\n%\n")
  end
  f:close()
end' || { echo "cannot make the tiny corpus" >&2; exit 1; }

TINY=(--fortunes fort --categories cats,ships,code --vocab-size 300 --dim 16 --batch-size 8 --threads 1 --seed 3)

run "$DLUA" "$TEXT" --help
check "--help" '[ "$rc" -eq 0 ] && [[ "$out" == *"--model"* ]] && [[ "$out" == *"--categories"* ]]'

accuracy() { printf '%s\n' "$out" | sed -n 's/^final: val accuracy \([0-9.]*\)%.*/\1/p'; }
loss_at() { printf '%s\n' "$out" | sed -n "s/^epoch $1\/[0-9]*: train loss \([0-9.]*\).*/\1/p"; }
# learns NAME EPOCHS MIN: the run in $out trained: status 0, the accuracy (in
# $acc) and the first and last epochs' losses printed, the loss down by 30%,
# the accuracy above MIN %.
learns() {
    # shellcheck disable=SC2034 # min is read by check's eval
    local name=$1 min=$3 l1 ln
    acc=$(accuracy)
    l1=$(loss_at 1)
    ln=$(loss_at "$2")
    check "$name trains" '[ "$rc" -eq 0 ] && [ -n "$acc" ] && [ -n "$l1" ] && [ -n "$ln" ]'
    check "$name loss falls ($l1 -> $ln)" 'awk -v a="$l1" -v b="$ln" "BEGIN{exit !(b < 0.7 * a)}"'
    check "$name accuracy above chance ($acc%)" 'awk -v a="$acc" -v m="$min" "BEGIN{exit !(a > m)}"'
}

# --- the bag: learns, the matrix adds up, reproducible, exported -------------------------------------
run "$DLUA" "$TEXT" "${TINY[@]}" --model bag --epochs 8 --export-data bag.safetensors
learns bag 8 70
check "bag data exported" '[ -f bag.safetensors ]'
# 3 classes x 40 quotes, 20% held out per class: 8 each; the rows of the matrix sum to 8
rows=$(printf '%s\n' "$out" | awk '/^true \\ pred/{f=1; next} f && NF == 4 {print $2 + $3 + $4}' | tr '\n' ' ')
check "confusion matrix rows ($rows)" '[ "$rows" = "8 8 8 " ]'
first_run=$out
run "$DLUA" "$TEXT" "${TINY[@]}" --model bag --epochs 8
check "bag reproducible" '[ "$rc" -eq 0 ] && [ "$(printf "%s" "$out" | grep -v "(.*s)" | grep -v time)" = "$(printf "%s" "$first_run" | grep -v "(.*s)" | grep -v time | grep -v "PyTorch twin")" ]'

# --- the transformer, mean and CLS pooling -----------------------------------------------------------
run "$DLUA" "$TEXT" "${TINY[@]}" --model transformer --layers 1 --heads 2 --epochs 12 --lr 3e-3 --dropout 0 \
    --export-data tr.safetensors
learns transformer 12 60
run "$DLUA" "$TEXT" "${TINY[@]}" --model transformer --pool cls --layers 1 --heads 2 --epochs 12 --lr 3e-3 --dropout 0
acc=$(accuracy)
check "cls pooling ($acc%)" '[ "$rc" -eq 0 ] && awk -v a="$acc" "BEGIN{exit !(a > 50)}"'

# --- the PyTorch twin reads the exported data --------------------------------------------------------
if "$PY" -c 'import torch' 2>/dev/null; then
    RUN_TIMEOUT=120 run "$PY" "$ROOT/scripts/train_text.py" --data bag.safetensors --threads 1
    acc=$(accuracy)
    check "train_text.py bag ($acc%)" '[ "$rc" -eq 0 ] && awk -v a="$acc" "BEGIN{exit !(a > 70)}"'
    RUN_TIMEOUT=120 run "$PY" "$ROOT/scripts/train_text.py" --data tr.safetensors --threads 1 --epochs 2
    check "train_text.py transformer" '[ "$rc" -eq 0 ] && [[ "$out" == *"final: val accuracy"* ]]'
    run "$PY" "$ROOT/scripts/train_text.py" --data "$TMP/none.safetensors"
    expect_bad "train_text.py: missing data" "no such file"
else
    echo "skipping the PyTorch twin: no torch under $PY"
fi

# --- bad input ---------------------------------------------------------------------------------------
run "$DLUA" "$TEXT" --model lstm
expect_bad "unknown model" "--model: expected one of bag, transformer"
run "$DLUA" "$TEXT" "${TINY[@]}" --categories cats
expect_bad "one category" "--categories needs at least two names"
run "$DLUA" "$TEXT" "${TINY[@]}" --categories cats,nope
expect_bad "unknown category" "no category 'nope'"
run "$DLUA" "$TEXT" "${TINY[@]}" --model transformer --dim 10 --heads 4
expect_bad "indivisible width" "--dim 10 is not divisible by --heads 4"
run "$DLUA" "$TEXT" --fortunes "$TMP/none"
expect_bad "missing corpus" "$TMP/none"
run "$DLUA" "$TEXT" --epochs -1
expect_bad "negative epochs" "--epochs"
run "$DLUA" "$TEXT" extra
expect_bad "positional argument" "unexpected argument 'extra'"

finish
