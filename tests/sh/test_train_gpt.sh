#!/usr/bin/env bash
# test_train_gpt.sh - scripts/train_gpt.lua end to end on a tiny generated
# fortunes folder (two categories of short quotes) and a tiny model: the
# losses are finite and fall on a fixed seed, the evaluation is reproducible,
# the checkpoint is written, reloads into dl.models.GPT and gives the printed
# validation loss's model; --sample works with and without the KV cache and
# both give the same text for the same seed; --export-data writes what
# scripts/train_gpt.py reads, and the twin runs the same recipe a few steps
# (under Debian's PyTorch); scripts/bench_text.lua runs on a tiny GPT, with
# and without its twin; bad options and input give one line and status 2.
# Usage: bash test_train_gpt.sh <path-to-dlua> [build-dir]
# Prints "N passed, N failed"; exits non-zero on any failure.

DLUA=$(realpath "${1:?usage: test_train_gpt.sh <path-to-dlua> [build-dir]}")
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"
test_tmpdir train_gpt
GPT="$ROOT/scripts/train_gpt.lua"
PY=${DL_TEST_PYTHON:-/usr/bin/python3}

# --- a tiny corpus: two "categories" of repetitive quotes ---------------------------------------
mkdir -p fort
"$DLUA" -e '
math.randomseed(3)
local words = {"the", "cat", "sat", "on", "a", "mat", "dog", "ran", "to", "sun", "and", "is"}
for _, cat in ipairs {"alpha", "beta"} do
  local f = assert(io.open("fort/" .. cat, "w"))
  for q = 1, 120 do
    local n = math.random(4, 12)
    local t = {}
    for i = 1, n do t[i] = words[math.random(#words)] end
    f:write(table.concat(t, " "), ".\n%\n")
  end
  f:close()
end' || { echo "cannot make the tiny corpus" >&2; exit 1; }

TINY=(--fortunes fort --block-size 16 --n-layer 2 --n-head 2 --n-embd 32 --batch-size 8 --lr 5e-3
      --min-lr 5e-4 --warmup-iters 5 --eval-blocks 16 --log-every 10 --threads 1 --seed 5)

run "$DLUA" "$GPT" --help
check "--help" '[ "$rc" -eq 0 ] && [[ "$out" == *"--max-iters"* ]] && [[ "$out" == *"--sample"* ]]'

# --- training: losses finite and falling, a checkpoint --------------------------------------------
run "$DLUA" "$GPT" "${TINY[@]}" --max-iters 60 --eval-interval 30 --out-dir A --export-data data.safetensors
check "train runs" '[ "$rc" -eq 0 ] && [ -f A/ckpt.safetensors ] && [ -f data.safetensors ]'
first=$(printf '%s\n' "$out" | sed -n 's/^step 10\/60: loss \([0-9.]*\).*/\1/p')
last=$(printf '%s\n' "$out" | sed -n 's/^step 60\/60: loss \([0-9.]*\).*/\1/p')
val30=$(printf '%s\n' "$out" | sed -n 's/^step 30: .*val loss \([0-9.]*\).*/\1/p')
val60=$(printf '%s\n' "$out" | sed -n 's/^step 60: .*val loss \([0-9.]*\).*/\1/p')
check "losses printed" '[ -n "$first" ] && [ -n "$last" ] && [ -n "$val30" ] && [ -n "$val60" ]'
check "training loss falls ($first -> $last)" 'awk -v a="$first" -v b="$last" "BEGIN{exit !(b < 0.8 * a)}"'
check "val loss falls ($val30 -> $val60)" 'awk -v a="$val30" -v b="$val60" "BEGIN{exit !(b < a)}"'
check "no nan" '[[ "$out" != *nan* ]] && [[ "$out" != *inf* ]]'

# the same seed gives the same run
run "$DLUA" "$GPT" "${TINY[@]}" --max-iters 60 --eval-interval 30 --out-dir B
val60b=$(printf '%s\n' "$out" | sed -n 's/^step 60: .*val loss \([0-9.]*\).*/\1/p')
check "reproducible ($val60 vs $val60b)" '[ "$rc" -eq 0 ] && [ "$val60" = "$val60b" ]'

# the checkpoint reloads: config, tokenizer, weights; the stored val loss is the printed one
run "$DLUA" -e '
local ck = require("dl.train.checkpoint").load("A/ckpt.safetensors")
local m = dl.models.GPT(ck.meta.gpt)
m:load_state_dict(ck.model)
local tok = dl.text.tokenizer_from_json(ck.meta.tokenizer)
local ids = dl.tensor({tok:encode("the cat sat.", {as = "table"})}, {dtype = dl.int64})
local logits = m(ids)
print(ck.meta.step, string.format("%.4f", ck.meta.val_loss), logits.shape[3] == tok.vocab_size)'
check "checkpoint reloads" '[ "$rc" -eq 0 ] && [ "$out" = "60	$val60	true" ]'

# --- sampling --------------------------------------------------------------------------------------
run "$DLUA" "$GPT" --sample --out-dir A --prompt "the cat" --max-new-tokens 8 --num-samples 2 --seed 9
check "--sample" '[ "$rc" -eq 0 ] && [[ "$out" == *"--- sample 2"* ]] && [[ "$out" == *"KV cache"* ]]'
with=$(printf '%s\n' "$out" | grep -v '^train_gpt:' | sed 's/ ([0-9]* tokens, [0-9.]* tokens\/s)//')
run "$DLUA" "$GPT" --sample --checkpoint A/ckpt.safetensors --prompt "the cat" --max-new-tokens 8 --num-samples 2 \
    --seed 9 --no-kv-cache
without=$(printf '%s\n' "$out" | grep -v '^train_gpt:' | sed 's/ ([0-9]* tokens, [0-9.]* tokens\/s)//')
check "cached and uncached samples agree" '[ "$rc" -eq 0 ] && [ -n "$with" ] && [ "$with" = "$without" ]'

# --- the PyTorch twin reads the exported data ---------------------------------------------------
if "$PY" -c 'import torch' 2>/dev/null; then
    RUN_TIMEOUT=120 run "$PY" "$ROOT/scripts/train_gpt.py" --data data.safetensors --max-iters 4 --threads 1
    check "train_gpt.py runs" '[ "$rc" -eq 0 ] && [[ "$out" == *"final: train loss"* ]] && [[ "$out" != *nan* ]]'
    run "$PY" "$ROOT/scripts/train_gpt.py" --data A/ckpt.safetensors
    expect_bad "train_gpt.py: not a data file" "not a train_gpt.lua --export-data file"
else
    echo "skipping the PyTorch twin: no torch under $PY"
fi

# --- scripts/bench_text.lua runs (a tiny GPT; the twin under the same Python) --------------------
BENCH=(--layers 1 --width 16 --heads 2 --context 8 --batch 2 --gen-tokens 4 --runs 1 --rounds 1 --threads 1 --no-lstm)
if "$PY" -c 'import torch' 2>/dev/null; then
    RUN_TIMEOUT=120 run "$DLUA" "$ROOT/scripts/bench_text.lua" "${BENCH[@]}" --torch-python "$PY"
    check "bench_text with the twin" '[ "$rc" -eq 0 ] && [[ "$out" =~ "GPT training step | "[0-9]+" | "[0-9]+" | "[0-9.]+x ]] && [[ "$out" =~ "KV cache | "[0-9]+" | "[0-9]+ ]]'
fi
run "$DLUA" "$ROOT/scripts/bench_text.lua" "${BENCH[@]}" --no-torch
check "bench_text alone" '[ "$rc" -eq 0 ] && [[ "$out" == *"GPT training step | "* ]] && [[ "$out" != *"PyTorch gave no figures"* ]]'
run "$DLUA" "$ROOT/scripts/bench_text.lua" --bogus
check "bench_text: bad option" '[ "$rc" -eq 2 ] && [[ "$err" == *"unknown argument --bogus"* ]]'

# --- bad input: one line, status 2 -----------------------------------------------------------------
run "$DLUA" "$GPT" --bogus
expect_bad "unknown option" "unknown option --bogus"
run "$DLUA" "$GPT" --n-layer x
expect_bad "bad integer" "--n-layer"
run "$DLUA" "$GPT" "${TINY[@]}" --n-embd 30 --n-head 4 --max-iters 1
expect_bad "indivisible width" "--n-embd 30 is not divisible by --n-head 4"
run "$DLUA" "$GPT" --fortunes "$TMP/none" --max-iters 1
expect_bad "missing corpus" "--fortunes $TMP/none"
run "$DLUA" "$GPT" "${TINY[@]}" --block-size 100000 --max-iters 1
expect_bad "block longer than the data" "--block-size 100000"
run "$DLUA" "$GPT" --sample --checkpoint nothing.safetensors
expect_bad "missing checkpoint" "--checkpoint nothing.safetensors: no such file"
run "$DLUA" "$GPT" --sample --checkpoint data.safetensors
expect_bad "not a checkpoint" "--checkpoint data.safetensors"
run "$DLUA" "$GPT" --sample --out-dir A --prompt "$(printf 'cat %.0s' $(seq 1 20))"
expect_bad "prompt too long" "--prompt is"
run "$DLUA" "$GPT" extra
expect_bad "positional argument" "unexpected argument 'extra'"

finish
