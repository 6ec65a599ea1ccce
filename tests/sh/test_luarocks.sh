#!/usr/bin/env bash
# test_luarocks.sh - the rockspec end to end: `luarocks make --tree T` in a
# clean copy of the checkout (its tracked and unignored files: no build
# output lands in the worktree) builds and installs dl; stock lua5.4 with
# only `luarocks path --tree T` set requires dl, finds the Lua library in
# the tree, trains a Linear-ReLU-Linear model for one SGD step (the loss falls,
# the weights change) and writes a TensorBoard scalar; the tree's dlua runs;
# `luarocks pack` of the installed rock installs into a second tree that works
# the same way; a missing external dependency gives LuaRocks' message naming
# it.  Rebuilds the whole project (a few minutes).
# Usage: bash test_luarocks.sh [path-to-dlua] [build-dir]   (both ignored; standalone is fine)
# Prints "N passed, N failed"; exits non-zero on any failure.

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"
test_tmpdir luarocks

for tool in luarocks lua5.4 cmake; do
    if ! command -v "$tool" >/dev/null; then
        echo "FAIL: $tool is not installed (scripts/setup.sh installs it)" >&2
        exit 1
    fi
done
LR=(luarocks --lua-version 5.4)

# --- a clean copy of the checkout ---------------------------------------------------------
mkdir src
if git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then
    (cd "$ROOT" && git ls-files -z --cached --others --exclude-standard |
        tar --null -T - --ignore-failed-read -cf - 2>/dev/null) | tar -xf - -C src
else
    (cd "$ROOT" && tar --exclude='./build*' --exclude='./.git' -cf - .) | tar -xf - -C src
fi
ROCKSPEC=$(cd src && ls dl-*.rockspec 2>/dev/null | head -1)
check "the checkout has a rockspec ($ROCKSPEC)" '[ -n "$ROCKSPEC" ] && [ -f src/CMakeLists.txt ]'

# --- a missing external dependency: LuaRocks' own message, before any build -----------------
run bash -c "cd src && ${LR[*]} make --tree '$TMP/bad' DNNL_DIR='$TMP/nowhere' 2>&1"
check "a missing oneDNN is named by LuaRocks" '[ "$rc" -ne 0 ] && [[ "$out" == *"DNNL"* ]] && [[ "$out" == *"dnnl"* ]] && [ ! -e src/build.luarocks/CMakeCache.txt ]'

# --- luarocks make ----------------------------------------------------------------------------
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
RUN_TIMEOUT=2400 run bash -c "cd src && ${LR[*]} make --tree '$TMP/tree' > '$TMP/make.log' 2>&1"
if [ "$rc" -ne 0 ]; then
    err=$(tail -c 3000 "$TMP/make.log")
    fail "luarocks make"
    finish
    exit 1
fi
ok
check "dl.so, the Lua library and dlua deployed where LuaRocks puts them" \
    '[ -f tree/lib/lua/5.4/dl.so ] && [ -f tree/share/lua/5.4/dl/nn/init.lua ] && [ -f tree/share/lua/5.4/dl/utils/tensorboard.lua ] && [ -x tree/bin/dlua ]'
check "no C development files in the rock tree" '[ ! -e tree/lib/lua/5.4/libdlua.so ] && [ ! -e tree/lib/lua/5.4/pkgconfig ]'

cat > train.lua <<'EOF'
local dl = require "dl"
local tree = arg[1]
assert(package.searchpath("dl", package.cpath) == tree .. "/lib/lua/5.4/dl.so", "dl.so not the tree's: " .. tostring(package.searchpath("dl", package.cpath)))
assert(dl._lua_root == tree .. "/share/lua/5.4", "Lua library root: " .. tostring(dl._lua_root))
dl.manual_seed(0)
local x, y = dl.randn(32, 4), dl.randn(32, 2)
local model = dl.nn.Sequential(dl.nn.Linear(4, 16), dl.nn.ReLU(), dl.nn.Linear(16, 2))
local opt = dl.optim.SGD(model:parameters(), {lr = 0.1})
local loss_fn = dl.nn.MSELoss()
local w0 = model:parameters()[1]:clone()
local loss0 = loss_fn(model(x), y)
opt:zero_grad()
loss0:backward()
opt:step()
local loss1 = loss_fn(model(x), y)
assert(not dl.equal(w0, model:parameters()[1]), "the first weight did not change")
assert(loss1:item() < loss0:item(), string.format("loss did not fall: %.6f -> %.6f", loss0:item(), loss1:item()))
local tb = dl.utils.tensorboard
local w <close> = tb.SummaryWriter(arg[2])
w:add_scalar("loss", loss1:item(), 1)
w:flush()
local ev = tb.read_events(w:get_filename())
assert(#ev == 2 and ev[2].tag == "loss", "TensorBoard scalar not read back")
print(string.format("loss %.4f -> %.4f", loss0:item(), loss1:item()))
EOF

# only_path TREE CMD...: CMD with only what `luarocks path` sets, run from /
cat > only_path <<'EOS'
#!/usr/bin/env bash
tree=$1
shift
exec env -i HOME="$(dirname "$tree")" PATH=/usr/local/bin:/usr/bin:/bin bash -c \
    'eval "$(luarocks --lua-version 5.4 path --tree "$0")" && cd / && exec "$@"' "$tree" "$@"
EOS
chmod +x only_path

run "$TMP/only_path" "$TMP/tree" lua5.4 -e 'local dl = require "dl"; print(dl.ones(2, 2):sum():item())'
check "stock lua5.4 requires dl with only luarocks path" '[ "$rc" -eq 0 ] && [ "$out" = "4.0" ]'
RUN_TIMEOUT=120 run "$TMP/only_path" "$TMP/tree" lua5.4 "$TMP/train.lua" "$TMP/tree" "$TMP/runs/a"
check "a two-layer model trains a step ($out)" '[ "$rc" -eq 0 ] && [[ "$out" == "loss "* ]]'
run "$TMP/only_path" "$TMP/tree" dlua -e 'print(dl._lua_root)'
check "the tree's dlua finds the Lua library" '[ "$rc" -eq 0 ] && [ "$out" = "$TMP/tree/share/lua/5.4" ]'

# --- a packed binary rock installs into another tree ------------------------------------------------
run bash -c "${LR[*]} pack dl --tree '$TMP/tree' 2>&1"
ROCK=$(ls dl-*.rock 2>/dev/null | head -1)
check "luarocks pack dl" '[ "$rc" -eq 0 ] && [ -n "$ROCK" ]'
run bash -c "${LR[*]} install --tree '$TMP/tree2' '$ROCK' 2>&1"
check "luarocks install of the packed rock" '[ "$rc" -eq 0 ] && [ -f tree2/lib/lua/5.4/dl.so ]'
RUN_TIMEOUT=120 run "$TMP/only_path" "$TMP/tree2" lua5.4 "$TMP/train.lua" "$TMP/tree2" "$TMP/runs/b"
check "the installed rock trains a step ($out)" '[ "$rc" -eq 0 ] && [[ "$out" == "loss "* ]]'

finish
