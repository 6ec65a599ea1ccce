#!/usr/bin/env bash
# test_module.sh - stock lua5.4 loads the dl C module with require "dl", and it
# finds its Lua library (lua/dl) without LUA_PATH; an installed tree works too.
# Usage: test_module.sh <dlua> <build-dir>
set -u
DLUA=$1
BUILD=$2
pass=0
fail=0
check() { # name expected actual
  if [ "$2" = "$3" ]; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAIL $1: expected [$2] got [$3]" >&2; fi
}

out=$(cd "$BUILD" && lua5.4 -e 'local dl = require "dl"; print(dl.ones(2, 2):numel())' 2>&1)
check "require from the build dir" "4" "$out"

out=$(LUA_CPATH="$BUILD/?.so;;" lua5.4 -e 'local dl = require "dl"; print(dl._lua_loaded, dl.ones(2, 2):tolist()[2][2])' 2>&1)
check "require via LUA_CPATH finds lua/dl" "true	1.0" "$out"

out=$("$DLUA" -e 'print(dl._lua_loaded, package.loaded.dl == dl)' 2>&1)
check "dlua preloads dl" "true	true" "$out"

# an installed tree: lib/lua/5.4/dl.so + share/dlua/lua
PREFIX=$(mktemp -d)
trap 'rm -rf "$PREFIX"' EXIT
if cmake --install "$BUILD" --prefix "$PREFIX" >/dev/null 2>&1; then
  so=$(find "$PREFIX" -name dl.so | head -1)
  out=$(cd / && LUA_CPATH="$(dirname "$so")/?.so;;" lua5.4 -e 'local dl = require "dl"; print(dl._lua_loaded)' 2>&1)
  check "installed dl.so finds share/dlua/lua" "true" "$out"
  out=$(cd / && "$PREFIX/bin/dlua" -e 'print(dl._lua_loaded, dl._lua_root:sub(1, #arg[0]) ~= nil)' 2>&1)
  check "installed dlua finds share/dlua/lua" "true	true" "$out"
else
  fail=$((fail + 1)); echo "FAIL cmake --install" >&2
fi

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
