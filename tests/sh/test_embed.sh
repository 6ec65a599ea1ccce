#!/usr/bin/env bash
# test_embed.sh - installation and embedding: `cmake --install` into a
# temporary prefix, then everything is used from the *installed* tree only:
# the files are where they belong, dlua.pc answers pkg-config, dlua.h compiles
# alone as C and C++, the example host (tests/embed/host.c) builds with
# `cc host.c $(pkg-config --cflags --libs dlua)` and passes (shared libdlua,
# then static libdlua.a), and the installed dlua runs from another directory.
# Usage: test_embed.sh <dlua> <build-dir>
set -u
DLUA=$1
BUILD=$2
SRC=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/dlua_embed.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
PREFIX=$TMP/prefix
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL $*" >&2; }
check() { # name expected actual
  if [ "$2" = "$3" ]; then ok; else bad "$1: expected [$2] got [$3]"; fi
}
finish() {
  echo "$pass passed, $fail failed"
  [ "$fail" = 0 ]
  exit
}

# --- install ----------------------------------------------------------------
if ! cmake --install "$BUILD" --prefix "$PREFIX" >"$TMP/install.log" 2>&1; then
  bad "cmake --install"; cat "$TMP/install.log" >&2; finish
fi
pc=$(find "$PREFIX" -name dlua.pc | head -1)
libdir=$(dirname "$(dirname "$pc")")
for f in bin/dlua include/dlua.h; do
  [ -f "$PREFIX/$f" ] && ok || bad "missing $f"
done
for f in libdlua.so libdlua.a lua/5.4/dl.so; do
  [ -e "$libdir/$f" ] && ok || bad "missing $libdir/$f"
done
[ -f "$PREFIX/share/dlua/lua/dl/models/resnet.lua" ] && ok || bad "missing the Lua library"
grep -q "pkgconfig/dlua.pc" "$BUILD/install_manifest.txt" && ok || bad "dlua.pc not in the manifest"

# --- pkg-config -------------------------------------------------------------
export PKG_CONFIG_PATH=$libdir/pkgconfig
version=$("$DLUA" -e 'io.write(dl.__version__)')
check "pkg-config --modversion" "$version" "$(pkg-config --modversion dlua 2>&1)"
check "includedir" "$PREFIX/include" "$(pkg-config --variable=includedir dlua)"
check "luadir" "$PREFIX/share/dlua/lua" "$(pkg-config --variable=luadir dlua)"
CFLAGS_LIBS=$(pkg-config --cflags --libs dlua) || bad "pkg-config --cflags --libs dlua"
case " $CFLAGS_LIBS " in *" -I$PREFIX/include "*) ok ;; *) bad "cflags: $CFLAGS_LIBS" ;; esac

# --- the header alone, as C and as C++ ----------------------------------------
printf '#include <dlua.h>\nint main(void) { return dl_tensor_ndim(0); }\n' >"$TMP/h.c"
cc -std=c99 -Wall -Wextra -pedantic -Werror -c "$TMP/h.c" -o "$TMP/h.o" \
  $(pkg-config --cflags dlua) 2>"$TMP/err" && ok || { bad "dlua.h as C99"; cat "$TMP/err" >&2; }
if command -v c++ >/dev/null; then
  cp "$TMP/h.c" "$TMP/h.cpp"
  c++ -Wall -Wextra -pedantic -Werror -c "$TMP/h.cpp" -o "$TMP/hpp.o" \
    $(pkg-config --cflags dlua) 2>"$TMP/err" && ok || { bad "dlua.h as C++"; cat "$TMP/err" >&2; }
fi

# --- the installed dlua, from another directory -------------------------------
out=$(cd / && "$PREFIX/bin/dlua" -v 2>&1)
case "$out" in "dlua $version (Lua 5.4"*"backends: cpu (oneDNN "*) ok ;; *) bad "installed dlua -v: $out" ;; esac
out=$(cd / && "$PREFIX/bin/dlua" -e 'print(dl.nn ~= nil, dl.ones(2):sum():item())' 2>&1)
check "installed dlua from /" "true	2.0" "$out"
out=$(cd / && LUA_CPATH="$libdir/lua/5.4/?.so" lua5.4 -e 'print(require("dl").ones(3):numel())' 2>&1)
check "stock lua5.4 loads the installed dl.so" "3" "$out"

# --- the example host ----------------------------------------------------------
arch=resnet18 # model.lua's "mlp" is the same test without convolutions (quick runs)
host_src=$SRC/tests/embed/host.c
model=$SRC/tests/embed/model.lua
if cc -std=c11 -Wall -Wextra -Werror "$host_src" -o "$TMP/host" \
  $(pkg-config --cflags --libs dlua) -lpthread -lm \
  -Wl,-rpath,"$(pkg-config --variable=libdir dlua)" 2>"$TMP/err"; then
  ok
  out=$(cd / && timeout 300 "$TMP/host" "$model" "$arch" 2>"$TMP/err")
  rc=$?
  if [ $rc = 0 ] && [[ "$out" == *" 0 failed"* ]]; then ok; else
    bad "host (shared libdlua) rc=$rc: $out"; grep -v '^(expected)' "$TMP/err" | head -30 >&2; fi
  # it really runs on the installed library
  ldd "$TMP/host" | grep -q "$libdir/libdlua.so" && ok || bad "host is not linked to $libdir"
else
  bad "building the host against the installed tree"; cat "$TMP/err" >&2
fi

# static: libdlua.a and the private libraries; the Lua library is located
# through DLUA_LUA_PATH (a static host has no libdlua.so to find it beside)
static_libs=$(pkg-config --static --libs dlua | sed 's/ -ldlua / /; s/^-ldlua //')
if cc -std=c11 -Wall -Wextra -Werror "$host_src" -o "$TMP/host_static" \
  $(pkg-config --cflags dlua) "$libdir/libdlua.a" $static_libs -lpthread -lm 2>"$TMP/err"; then
  ok
  ldd "$TMP/host_static" | grep -q libdlua && bad "static host links libdlua.so" || ok
  out=$(cd / && DLUA_LUA_PATH=$(pkg-config --variable=luadir dlua) timeout 300 \
    "$TMP/host_static" "$model" "$arch" 2>"$TMP/err")
  rc=$?
  if [ $rc = 0 ] && [[ "$out" == *" 0 failed"* ]]; then ok; else
    bad "host (static libdlua) rc=$rc: $out"; grep -v '^(expected)' "$TMP/err" | head -30 >&2; fi
else
  bad "static link of the host"; cat "$TMP/err" >&2
fi

finish
