# shellcheck shell=bash disable=SC2034
# lib.sh - the harness the shell tests share; sourced, not run.
#
#   test_tmpdir NAME     TMP = a new directory (removed at exit), and cd there
#   run CMD...           out, err and rc of CMD, killed after RUN_TIMEOUT
#                        seconds (60); stdin from RUN_STDIN when set
#   ok                   counts a pass
#   fail NAME            counts a failure and prints it with the last run's
#                        rc, stdout tail and stderr head (FAIL_SHOW bytes, 1500)
#   check NAME EXPR      ok when EXPR (evaluated) holds, else fail NAME
#   expect_bad NAME TEXT the last run was a user error: status 2 and exactly
#                        one stderr line, containing TEXT
#   finish               prints "N passed, N failed"; status 0 when none failed
#   tiny_folder DIR N [SIDE]  an ImageFolder of 3 colour classes (red, green,
#                        blue), N SIDExSIDE PNGs each (12), seeded; dies on failure
#
# ROOT is the source tree; TRAIN, PREDICT and EVAL the programs under scripts/.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TRAIN="$ROOT/scripts/train_resnet.lua"
PREDICT="$ROOT/scripts/predict.lua"
EVAL="$ROOT/scripts/eval.lua"
passed=0
failed=0
out=
err=
rc=0

test_tmpdir() {
    TMP=$(mktemp -d "${TMPDIR:-/tmp}/dlua_$1.XXXXXX") || exit 1
    trap 'rm -rf "$TMP"' EXIT
    cd "$TMP" || exit 1
}

run() {
    if [ -n "${RUN_STDIN:-}" ]; then
        out=$(timeout "${RUN_TIMEOUT:-60}" "$@" 2>"$TMP/stderr" <"$RUN_STDIN")
    else
        out=$(timeout "${RUN_TIMEOUT:-60}" "$@" 2>"$TMP/stderr")
    fi
    rc=$?
    err=$(cat "$TMP/stderr")
}

ok() { passed=$((passed + 1)); }

fail() {
    local n=${FAIL_SHOW:-1500}
    failed=$((failed + 1))
    echo "FAIL $1" >&2
    echo "    rc=$rc" >&2
    echo "    stdout: $(printf '%s' "$out" | tail -c "$n")" >&2
    echo "    stderr: $(printf '%s' "$err" | head -c "$n")" >&2
}

check() { if eval "$2"; then ok; else fail "$1"; fi; }

expect_bad() {
    if [ "$rc" -eq 2 ] && [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] && [[ "$err" == *"$2"* ]]; then
        ok
    else
        fail "$1 (expected status 2 and one line with '$2')"
    fi
}

finish() {
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}

tiny_folder() {
    TINY_DIR=$1 TINY_N=$2 TINY_SIDE=${3:-12} "$DLUA" -e '
local dir, n, side = os.getenv("TINY_DIR"), tonumber(os.getenv("TINY_N")), tonumber(os.getenv("TINY_SIDE"))
dl.manual_seed(1)
local colours = {red = {200, 40, 40}, green = {40, 200, 40}, blue = {40, 40, 200}}
for name, c in pairs(colours) do
  os.execute("mkdir -p " .. dir .. "/" .. name)
  for i = 1, n do
    local img = dl.rand(3, side, side):mul(80):add(dl.tensor(c):view(3, 1, 1):float()):sub(40):clamp(0, 255)
    dl.image.save(img:to(dl.uint8), string.format("%s/%s/%02d.png", dir, name, i))
  end
end' || { echo "cannot make the tiny dataset" >&2; exit 1; }
}
