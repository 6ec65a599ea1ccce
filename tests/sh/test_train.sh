#!/usr/bin/env bash
# test_train.sh - scripts/train_resnet.lua, predict.lua and eval.lua end to end
# on a tiny generated ImageFolder (3 colour classes, 8x8 inputs, the tinycnn
# model): the loss falls, checkpoints and the plot are written, --max-steps
# and Ctrl-C stop with a checkpoint and --resume reproduces the uninterrupted
# run's losses and weights exactly; --help; bad input gives one line and a
# non-zero status; predict names the true class; eval agrees with training's
# validation; --tensorboard logs every step, validation and weight histograms;
# SIGKILL while a checkpoint is written never leaves it unreadable.
# Usage: bash test_train.sh <path-to-dlua> [build-dir]
# Prints "N passed, N failed"; exits non-zero on any failure.

DLUA=$(realpath "${1:?usage: test_train.sh <path-to-dlua> [build-dir]}")
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"
test_tmpdir train

# --- a tiny ImageFolder: 3 classes told apart by colour ----------------------
"$DLUA" -e '
dl.manual_seed(1)
local colours = {red = {200, 40, 40}, green = {40, 200, 40}, blue = {40, 40, 200}}
for split, n in pairs {train = 12, val = 6} do
  for name, c in pairs(colours) do
    os.execute("mkdir -p tiny/" .. split .. "/" .. name)
    for i = 1, n do
      local img = dl.rand(3, 12, 12):mul(80):add(dl.tensor(c):view(3, 1, 1):float()):sub(40):clamp(0, 255)
      dl.image.save(img:to(dl.uint8), string.format("tiny/%s/%s/%02d.png", split, name, i))
    end
  end
end' || { echo "cannot make the tiny dataset" >&2; exit 1; }

COMMON=(--data tiny/train --val tiny/val --arch tinycnn --image-size 8 --resize 8 --batch-size 4
        --lr 0.05 --workers 2 --threads 1 --log-every 1 --seed 7)

# lua snippet helpers: history of a checkpoint, equality of two checkpoints
cat > same.lua <<'EOF'
-- same.lua A B [n]: exit 0 when A and B hold equal model tensors and equal
-- loss histories (the first n steps of B when n is given)
local a, b = dl.load(arg[1]), dl.load(arg[2])
local n = tonumber(arg[3])
local ha, hb = a["history.loss"]:tolist(), b["history.loss"]:tolist()
if n then for i = #hb, n + 1, -1 do hb[i] = nil end end
if #ha ~= #hb then print("history lengths " .. #ha .. " vs " .. #hb) os.exit(1) end
for i = 1, #ha do
  if ha[i] ~= hb[i] then print(string.format("step %d: %.17g vs %.17g", i, ha[i], hb[i])) os.exit(1) end
end
if not n then
  for k, v in pairs(a) do
    if k:match("^model%.") and not dl.equal(v, b[k]) then print("tensor " .. k .. " differs") os.exit(1) end
  end
end
EOF
cat > falls.lua <<'EOF'
local h = dl.load(arg[1])["history.loss"]:tolist()
local first = (h[1] + h[2] + h[3]) / 3
local last = (h[#h] + h[#h - 1] + h[#h - 2]) / 3
print(string.format("%d steps, loss %.3f -> %.3f", #h, first, last))
os.exit(last < 0.7 * first and 0 or 1)
EOF

# --- --help ------------------------------------------------------------------------------
run "$DLUA" "$TRAIN" --help
missing=""
for o in data val arch weights num-classes epochs batch-size lr momentum weight-decay lr-schedule \
         warmup-epochs workers device amp augment image-size seed log-every save-dir resume plot max-steps; do
    [[ "$out" == *"--$o "* || "$out" == *"--[no-]$o "* ]] || missing="$missing $o"
done
check "--help lists every option (missing:$missing)" '[ "$rc" -eq 0 ] && [ -z "$missing" ] && [[ "$out" == *"(default: 32)"* ]] && [[ "$out" == *"none|step|cosine"* ]]'

# --- an uninterrupted run ---------------------------------------------------------------------
run "$DLUA" "$TRAIN" "${COMMON[@]}" --epochs 3 --save-dir A --plot A/curves.png
check "training runs to the end" '[ "$rc" -eq 0 ] && [[ "$out" == *"Finished Training"* ]]'
check "the seed's loss line" '[[ "$out" == *"[1,     1] loss: "* ]] && [[ "$out" == *"[3,     9] loss: "* ]]'
CR=$'\r'
A_out=$out
check "plain progress when not a terminal" '[[ "$out" == *"img/s"* ]] && [[ "$out" != *"$CR"* ]]'
check "validation each epoch" '[ "$(printf "%s\n" "$out" | grep -c "; val top-1")" -eq 3 ]'
check "final summary" '[[ "$out" == *"final val top-1: "* ]] && [[ "$out" == *"checkpoint: A/last.safetensors"* ]] && [[ "$out" == *"plot: A/curves.png"* ]]'
check "checkpoints and plot written" '[ -s A/last.safetensors ] && [ -s A/best.safetensors ] && [ -s A/curves.png ]'
run "$DLUA" falls.lua A/last.safetensors
check "the loss falls ($out)" '[ "$rc" -eq 0 ]'
run "$DLUA" -e 'local t, m = dl.load("A/last.safetensors"); local j = require("dl.train.json").decode(m.train)
  io.write(table.concat({m.format, j.step, j.position.epoch, j.position.batch, j.arch, #j.classes, j.options.lr,
  tostring(t.rng_state ~= nil)}, " "))'
check "checkpoint metadata" '[ "$out" == "dlua-train-checkpoint-1 27 4 0 tinycnn 3 0.05 true" ]'
run "$DLUA" -e 'local img = dl.image.load("A/curves.png"); print(img.shape[1], img.shape[2], img.shape[3])'
check "the plot is a PNG" '[ "$out" == "3	560	1280" ]'

# --- fine-tuning from a weights file ----------------------------------------------------------------
run "$DLUA" -e 'local sd = dl.load("A/best.safetensors"); local m = {}
  for k, v in pairs(sd) do if k:match("^model%.") then m[k:sub(7)] = v end end
  dl.save("weights.safetensors", m)'
run "$DLUA" "$TRAIN" "${COMMON[@]}" --epochs 1 --max-steps 2 --weights weights.safetensors --save-dir W1
check "--weights loads a state dict" '[ "$rc" -eq 0 ] && [[ "$out" == *"weights: weights.safetensors loaded"* ]]'
run "$DLUA" "$TRAIN" "${COMMON[@]}" --epochs 1 --max-steps 2 --weights weights.safetensors --num-classes 5 --save-dir W2
check "--weights with another class count replaces the classifier" '[ "$rc" -eq 0 ] && [[ "$out" == *"new 5-class classifier (the file'"'"'s has 3)"* ]]'
run "$DLUA" -e 'local t = dl.load("W2/last.safetensors"); io.write(t["model.fc.weight"].shape[1])'
check "the new classifier is saved" '[ "$out" == "5" ]'

# --- --max-steps, then --resume (mid-epoch and at an epoch boundary) ----------------------------------
run "$DLUA" "$TRAIN" "${COMMON[@]}" --epochs 3 --save-dir B --max-steps 5
check "--max-steps stops with a checkpoint" '[ "$rc" -eq 0 ] && [[ "$out" == *"stopped after 5 steps"* ]] && [[ "$out" == *"resume with: "*"--resume B/last.safetensors"* ]] && [ -s B/last.safetensors ]'
run "$DLUA" "$TRAIN" --resume B/last.safetensors --max-steps 9
check "resume mid-epoch, stop at the epoch's end" '[ "$rc" -eq 0 ] && [[ "$out" == *"resuming from B/last.safetensors: epoch 1, batch 5, step 5"* ]] && [[ "$out" == *"stopped after 9 steps"* ]]'
run "$DLUA" "$TRAIN" --resume B/last.safetensors
check "resume at an epoch boundary runs to the end" '[ "$rc" -eq 0 ] && [[ "$out" == *"resuming from B/last.safetensors: epoch 2, batch 0, step 9"* ]] && [[ "$out" == *"Finished Training"* ]]'
run "$DLUA" same.lua A/last.safetensors B/last.safetensors
check "resumed losses and weights equal the uninterrupted run's ($out)" '[ "$rc" -eq 0 ]'

# --- Ctrl-C: finishes the step, writes a checkpoint, says how to resume ------------------------------
"$DLUA" "$TRAIN" "${COMMON[@]}" --epochs 100000 --save-dir C >C.out 2>C.err &
pid=$!
for _ in $(seq 200); do
    grep -q "^\[1,     3\]" C.out 2>/dev/null && break
    sleep 0.05
done
kill -INT $pid
wait $pid
rc=$?
out=$(cat C.out)
err=$(cat C.err)
check "Ctrl-C exits with 130 and a resume hint" '[ "$rc" -eq 130 ] && [[ "$out" == *"interrupted at step "* ]] && [[ "$out" == *"resume with: "*"--resume C/last.safetensors"* ]] && [[ "$err" == *"interrupt: finishing this step"* ]]'
k=$(printf '%s\n' "$out" | sed -n 's/^interrupted at step \([0-9]*\);.*/\1/p')
run "$DLUA" "$TRAIN" --resume C/last.safetensors --max-steps $((k + 4))
check "resume after Ctrl-C" '[ "$rc" -eq 0 ] && [[ "$out" == *"stopped after $((k + 4)) steps"* ]]'
run "$DLUA" "$TRAIN" "${COMMON[@]}" --epochs 100000 --save-dir D --max-steps $((k + 4))
run "$DLUA" same.lua D/last.safetensors C/last.safetensors
check "losses after Ctrl-C + resume equal an uninterrupted run's ($out)" '[ "$rc" -eq 0 ]'

# --- a terminal gets the live bar -------------------------------------------------------------------
out=$(DL_PROGRESS=bar timeout 60 "$DLUA" "$TRAIN" "${COMMON[@]}" --epochs 1 --save-dir E 2>/dev/null)
rc=$?
check "live bar redrawn with \\r on a terminal" '[ "$rc" -eq 0 ] && [[ "$out" == *"$CR"*"epoch 1/1 ["* ]] && [[ "$out" == *"img/s"*"data"*"loss"* ]]'

# --- bad input: one clear line, status 2 ------------------------------------------------------------
run "$DLUA" "$TRAIN" --data "$TMP/no_such_folder" --save-dir F
expect_bad "missing --data" "--data $TMP/no_such_folder: "
mkdir -p empty
run "$DLUA" "$TRAIN" --data empty --save-dir F
expect_bad "empty --data" "--data empty: "
mkdir -p empty2/cls
run "$DLUA" "$TRAIN" --data empty2 --save-dir F
expect_bad "--data with an empty class folder" "--data empty2: "
run "$DLUA" "$TRAIN" "${COMMON[@]}" --arch resnet51 --save-dir F
expect_bad "unknown --arch" "unknown --arch 'resnet51' (available: "
run "$DLUA" "$TRAIN" "${COMMON[@]}" --arch resnet18 --weights A/last.safetensors --save-dir F
expect_bad "weights of another model" "--weights A/last.safetensors does not fit resnet18: "
run "$DLUA" "$TRAIN" "${COMMON[@]}" --save-dir /dev/null/sub
expect_bad "unwritable --save-dir" "--save-dir /dev/null/sub is not writable"
run "$DLUA" "$TRAIN" --resume "$TMP/none.safetensors"
expect_bad "missing --resume file" "no such file"
run "$DLUA" "$TRAIN" --resume A/curves.png
expect_bad "--resume of a non-checkpoint" "--resume A/curves.png: "
run "$DLUA" "$TRAIN" --epochs zero
expect_bad "bad option value" "--epochs: expected an integer, got 'zero'"
run "$DLUA" "$TRAIN" --epoch 3
expect_bad "unknown option" "unknown option --epoch"
run "$DLUA" "$TRAIN" "${COMMON[@]}" --device cuda --save-dir F
if "$DLUA" -e 'os.exit(dl.cuda.is_available() and 0 or 1)'; then ok; else expect_bad "--device cuda without CUDA" "--device cuda: "; fi

# --- predict and eval ------------------------------------------------------------------------------
run "$DLUA" "$ROOT/scripts/predict.lua" --weights A/best.safetensors tiny/val/green/01.png tiny/val/red/02.png tiny/val/blue/03.png
first=$(printf '%s\n' "$out" | awk '/^  1\./{print $2}' | tr '\n' ' ')
check "predict names the true class first ($first)" '[ "$rc" -eq 0 ] && [ "$first" == "green red blue " ] && [[ "$out" == *"%"* ]]'
printf 'bleu\nvert\nrouge\n' > names.txt
run "$DLUA" "$ROOT/scripts/predict.lua" --weights weights.safetensors --arch tinycnn --image-size 8 --resize 8 --classes names.txt --top 2 tiny/val/blue/01.png
check "predict with a plain state dict and --classes" '[ "$rc" -eq 0 ] && [ "$(printf "%s\n" "$out" | sed -n 2p | awk "{print \$2}")" == "bleu" ] && [ "$(printf "%s\n" "$out" | wc -l)" -eq 3 ]'
run "$DLUA" "$ROOT/scripts/predict.lua" --weights weights.safetensors tiny/val/blue/01.png
expect_bad "predict with a plain state dict needs --arch" "say which model it is with --arch"
run "$DLUA" "$ROOT/scripts/predict.lua" --weights A/best.safetensors
expect_bad "predict without images" "no images given"
run "$DLUA" "$ROOT/scripts/predict.lua" --weights A/best.safetensors nope.png
expect_bad "predict on a missing image" "nope.png"
run "$DLUA" "$ROOT/scripts/eval.lua" --weights A/last.safetensors --data tiny/val --workers 0
top1=$(printf '%s\n' "$out" | sed -n 's/^top-1: \(.*\)%$/\1/p')
want=$(printf '%s\n' "$A_out" | sed -n 's/^final val top-1: \([0-9.]*\)%.*/\1/p')
check "eval prints top-1/top-3 equal to training's last validation ($top1 vs $want)" '[ "$rc" -eq 0 ] && [ -n "$top1" ] && [ "$top1" == "$want" ] && [[ "$out" == *"top-3: "* ]]'
run "$DLUA" "$ROOT/scripts/eval.lua" --weights A/last.safetensors --data "$TMP/nothing"
expect_bad "eval on a missing folder" "--data $TMP/nothing: "

# --- --tensorboard DIR: what was trained is in the event file ----------------------------------------
if [ "$("$DLUA" -e 'io.write(dl._tensorboard.available() and 1 or 0)')" = 0 ]; then
run "$DLUA" "$TRAIN" "${COMMON[@]}" --epochs 1 --save-dir TBC --tensorboard TB
expect_bad "--tensorboard in a build without protobuf-c" "built without protobuf-c"
else
run "$DLUA" "$TRAIN" "${COMMON[@]}" --epochs 2 --save-dir TBC --tensorboard TB
check "--tensorboard: training runs and names the log dir" '[ "$rc" -eq 0 ] && [[ "$out" == *"tensorboard: TB (view with: tensorboard --logdir TB)"* ]]'
tb_val=$(printf '%s\n' "$out" | sed -n 's/.*; val top-1 \([0-9.]*\)%, top-3 \([0-9.]*\)%.*/\1 \2/p' | tr '\n' ' ')
cat > tbcheck.lua <<'EOF'
-- tbcheck.lua FILE CHECKPOINT "top1 top5 ...": the event file holds every
-- step's loss (as in the checkpoint's history), lr, images/s, the inputs,
-- each epoch's validation and weight histograms
local tb = dl.utils.tensorboard
local ev = tb.read_events(arg[1])
local by = {}
for _, e in ipairs(ev) do
  if e.tag then by[e.tag] = by[e.tag] or {}; table.insert(by[e.tag], e) end
end
local hist = dl.load(arg[2])["history.loss"]:tolist()
local function need(c, msg) if not c then print(msg) os.exit(1) end end
need(by["train/loss"] and #by["train/loss"] == #hist, "train/loss: " .. #(by["train/loss"] or {}) .. " vs " .. #hist .. " steps")
for i, e in ipairs(by["train/loss"]) do
  need(e.step == i and e.value == string.unpack("f", string.pack("f", hist[i])), "loss at step " .. i)
end
need(#by["train/lr"] == #hist and by["train/lr"][1].value > 0, "train/lr")
need(by["train/images_per_s"] and by["train/images_per_s"][1].value > 0, "train/images_per_s")
need(by["inputs/1"] and #by["inputs/1"] == 1 and by["inputs/1"][1].width == 8 and by["inputs/4"], "inputs")
local i = 0
for v in arg[3]:gmatch("%S+") do
  i = i + 1
  local top1, top5 = by["val/top1"][(i + 1) // 2], by["val/top5"][(i + 1) // 2]
  local want = tonumber(v) / 100
  local got = (i % 2 == 1 and top1 or top5).value
  need(math.abs(got - want) < 6e-5, string.format("val %d: %g vs %g", i, got, want))
end
need(i == 4 and #by["val/top1"] == 2 and by["val/top1"][2].step == 2, "val per epoch")
local nh = 0
for tag, es in pairs(by) do
  if tag:match("^weights/") then
    need(#es == 2 and es[1].kind == "histogram" and es[1].num > 0, tag)
    nh = nh + 1
  end
end
need(nh >= 4, "weight histograms: " .. nh)
print("ok " .. #ev)
EOF
run "$DLUA" tbcheck.lua "$(ls TB/*tfevents* | head -1)" TBC/last.safetensors "$tb_val"
check "--tensorboard: loss per step, lr, images/s, inputs, val top-1/top-5 per epoch, weight histograms ($out)" '[ "$rc" -eq 0 ] && [[ "$out" == "ok "* ]]'
touch afile
run "$DLUA" "$TRAIN" "${COMMON[@]}" --epochs 1 --save-dir TBC2 --tensorboard afile/x
expect_bad "--tensorboard on a file" "--tensorboard afile/x: "
fi

# --- SIGKILL while a checkpoint is written never leaves it unreadable --------------------------------
cat > writer.lua <<'EOF'
local big = {}
for i = 1, 8 do big["model.w" .. i] = dl.rand(1024, 1024) end
local n = 0
while true do
  n = n + 1
  dl.save("K/last.safetensors", big, {n = tostring(n)})
end
EOF
mkdir -p K
good=1
for delay in first 0.35 0.5 0.65 0.8 1.0; do
    "$DLUA" writer.lua &
    pid=$!
    if [ "$delay" = first ]; then
        # the first round waits (up to 60 s: a loaded machine is slow) for one
        # finished save, then kills the writer in the middle of the next ones
        for _ in $(seq 600); do [ -e K/last.safetensors ] && break; sleep 0.1; done
        sleep 0.2
    else
        sleep $delay
    fi
    kill -KILL $pid
    wait $pid 2>/dev/null
    if [ -e K/last.safetensors ]; then
        "$DLUA" -e 'local t, m = dl.load("K/last.safetensors"); assert(t["model.w8"].shape[1] == 1024 and tonumber(m.n) >= 1)' \
            2>/dev/null || good=0
    fi
done
check "SIGKILL during checkpoint writes leaves a readable last.safetensors" '[ "$good" -eq 1 ] && [ -e K/last.safetensors ]'

finish
