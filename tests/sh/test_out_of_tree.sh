#!/usr/bin/env bash
# test_out_of_tree.sh - a build directory outside the source tree (what IDEs
# and packagers configure: cmake -S src -B /elsewhere) gives a dlua and a
# dl.so that find the source tree's Lua library: a script using dl.nn,
# dl.models and dl.data runs from an unrelated working directory, stock lua5.4
# loads the out-of-tree dl.so, and DLUA_LUA_PATH still overrides the lookup.
# Builds the CPU-only targets once (about a minute on 2 cores).
# Usage: test_out_of_tree.sh <dlua> <build-dir>   (both unused: it builds its own)
set -u
. "$(dirname "$0")/lib.sh"
test_tmpdir out_of_tree

B="$TMP/elsewhere/build"
RUN_TIMEOUT=600 run cmake -S "$ROOT" -B "$B" -DCMAKE_BUILD_TYPE=Release -DDL_CUDA=OFF
check "configure out of tree" '[ "$rc" -eq 0 ]'
RUN_TIMEOUT=900 run cmake --build "$B" -j"$(nproc)" --target dlua dl_module
check "build dlua and dl.so out of tree" '[ "$rc" -eq 0 ] && [ -x "$B/dlua" ] && [ -f "$B/dl.so" ]'

cat >"$TMP/use_lib.lua" <<'EOF'
local dl = require "dl"
dl.manual_seed(1)
local net = dl.models.resnet18({num_classes = 3})
net:eval()
local x = dl.randn(4, 3, 32, 32)
local ds = dl.data.TensorDataset(x, dl.tensor({1, 2, 3, 1}))
local loader = dl.data.DataLoader(ds, {batch_size = 2})
local seen, head = 0, dl.nn.Linear(3, 2)
for _, xb, yb in loader:iter() do
  local logits = net(xb)
  assert(logits.shape[1] == 2 and logits.shape[2] == 3, "resnet18 output shape")
  assert(head(logits).shape[2] == 2, "Linear output shape")
  seen = seen + yb:numel()
end
print("ok", seen, dl._lua_root)
EOF

mkdir -p "$TMP/cwd"
cd "$TMP/cwd" || exit 1
run "$B/dlua" "$TMP/use_lib.lua"
check "out-of-tree dlua runs dl.nn, dl.models, dl.data" \
  '[ "$rc" -eq 0 ] && [[ "$out" == "ok	4	$ROOT/lua" ]]'

run env LUA_CPATH="$B/?.so;;" lua5.4 -e 'local dl = require "dl"; print(dl._lua_loaded, dl.nn.Linear(2, 2).weight.shape[1])'
check "stock lua5.4 loads the out-of-tree dl.so" '[ "$rc" -eq 0 ] && [ "$out" = "true	2" ]'

# DLUA_LUA_PATH wins over the build tree's link
cp -r "$ROOT/lua" "$TMP/override"
printf 'return "from the override"\n' >"$TMP/override/dl/marker.lua"
run env DLUA_LUA_PATH="$TMP/override" "$B/dlua" -e 'print(dl._lua_root, (require "dl.marker"))'
check "DLUA_LUA_PATH overrides" '[ "$rc" -eq 0 ] && [ "$out" = "$TMP/override	from the override" ]'

finish
