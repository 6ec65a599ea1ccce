#!/usr/bin/env bash
# test_readme.sh - the README's Lua tour runs as written, and its first
# commands print what the README says.
# Usage: test_readme.sh <dlua> <build-dir>
set -u
DLUA=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
pass=0
fail=0
tour=$(mktemp --suffix=.lua)
trap 'rm -f "$tour"' EXIT
awk '/^```lua$/{on=1; next} /^```$/{on=0} on' "$ROOT/README.md" > "$tour"
if [ -s "$tour" ] && out=$("$DLUA" "$tour" 2>&1); then pass=$((pass + 1)); else
  fail=$((fail + 1)); echo "FAIL README tour: $out" >&2; fi

out=$("$DLUA" -e 'print(dl.arange(1, 7):view(2, 3):sum(2))' 2>&1)
if [ "$out" = "tensor([ 6, 15], shape={2})" ]; then pass=$((pass + 1)); else
  fail=$((fail + 1)); echo "FAIL sum(2) prints [$out]" >&2; fi

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
