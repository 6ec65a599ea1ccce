#!/usr/bin/env bash
# test_cli.sh - the dlua command line: scripts and `arg`, -e -l -i -v -E -W,
# -h/--help, `--`, `-` (stdin), shebang scripts, errors with tracebacks,
# os.exit statuses, DLUA_INIT and Ctrl-C (SIGINT) of a running script.
# Usage: bash test_cli.sh <path-to-dlua> [build-dir]
# Prints "N passed, N failed"; exits non-zero on any failure.

DLUA=$(realpath "${1:?usage: test_cli.sh <path-to-dlua> [build-dir]}")
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"
test_tmpdir cli
RUN_TIMEOUT=10
FAIL_SHOW=600
# run_in STDIN CMD...: the same with STDIN fed to the command
run_in() {
    local input=$1
    shift
    out=$(printf '%s' "$input" | timeout 10 "$@" 2>"$TMP/stderr")
    rc=$?
    err=$(cat "$TMP/stderr")
}
expect_out() { if [ "$rc" -eq 0 ] && [ "$out" == "$2" ]; then ok; else fail "$1 (expected stdout '$2')"; fi; }
expect_rc() { if [ "$rc" -eq "$2" ]; then ok; else fail "$1 (expected status $2)"; fi; }
expect_err() {
    if [ "$rc" -ne 0 ] && [[ "$err" == *"$2"* ]]; then ok; else fail "$1 (expected failure with '$2')"; fi
}
has() { [[ "$1" == *"$2"* ]]; }

# --- -e and the dl global ---
run "$DLUA" -e 'print(dl.arange(1, 7):view(2, 3):tolist()[2][3])'
expect_out "-e with dl" "6"
run "$DLUA" -e 'io.write(type(dl), " ", tostring(package.loaded.dl == dl))' -e 'print(" second")'
expect_out "two -e in order" "table true second"
run "$DLUA" -e'print(7*6)'
expect_out "-e with attached argument" "42"

# --- script arguments and arg ---
cat >args.lua <<'EOF'
print(arg[0], arg[1], arg[2], #arg, select('#', ...), ...)
print(arg[-1], arg[-2], arg[-3] ~= nil, arg[-4])
EOF
run "$DLUA" -e 'x=1' args.lua a 'b c'
expect_out "script args and arg indices" "$(printf 'args.lua\ta\tb c\t2\t2\ta\tb c\nx=1\t-e\ttrue\tnil')"
run "$DLUA" args.lua -e -v
expect_out "options after the script belong to it" \
    "$(printf 'args.lua\t-e\t-v\t2\t2\t-e\t-v\n%s\tnil\tfalse\tnil' "$DLUA")"
run "$DLUA" -e 'io.write("e;")' -- args.lua -i
expect_out "-- stops option handling" \
    "$(printf 'e;args.lua\t-i\tnil\t1\t1\t-i\n--\tio.write("e;")\ttrue\t%s' "$DLUA")"
run "$DLUA" -e 'print(arg[0] == arg[-0], #arg, arg[1])'
expect_out "arg without a script" "$(printf 'true\t2\t-e')"

# --- shebang script run directly, dlua found on PATH ---
mkdir -p bin
ln -s "$DLUA" bin/dlua
printf '#!/usr/bin/env dlua\nprint("hello from " .. arg[0], dl.ones(2):tolist()[2], ...)\n' >hello.lua
chmod +x hello.lua
run env PATH="$TMP/bin:$PATH" ./hello.lua x
expect_out "shebang script" "$(printf 'hello from ./hello.lua\t1.0\tx')"

# --- stdin ---
run_in 'print("stdin", arg[0], ...)' "$DLUA" - a b
expect_out "- runs stdin with args" "$(printf 'stdin\t-\ta\tb')"
run_in 'print(1+1)' "$DLUA"
expect_out "piped stdin without arguments runs as a script" "2"
run_in $'1+1\nx = 5;\nx\n99+1;\nerror("boom")\n"after", 2, nil\nfunction f(a)\n  return a * 2\nend\nf(21)\n' "$DLUA" -i
banner=$(printf '%s\n' "$out" | head -1)
echoed=$(printf '%s\n' "$out" | tail -n +2)
if [ "$rc" -eq 0 ] && [[ "$banner" == "dlua "* ]] && [ "$echoed" == "$(printf '2\n5\nafter\t2\tnil\n42')" ] &&
    has "$err" "stdin:1: boom" && has "$err" "stack traceback"; then ok; else fail "-i on a pipe: echo, ';', errors, multi-line"; fi
run_in $'print("from stdin")\n' "$DLUA" -e 'print("from -e")' -i
if [ "$rc" -eq 0 ] && has "$out" "from -e" && has "$out" "from stdin"; then ok; else fail "-e then -i"; fi

# --- errors ---
cat >err.lua <<'EOF'
local function inner() error("kaboom") end
local function outer() inner() end
outer()
print("not reached")
EOF
run "$DLUA" err.lua
if [ "$rc" -ne 0 ] && [ -z "$out" ] && has "$err" "dlua: err.lua:1: kaboom" && has "$err" "stack traceback" &&
    has "$err" "err.lua:3: in main chunk"; then ok; else fail "runtime error: message and traceback"; fi
printf 'x = = 1\n' >syntax.lua
run "$DLUA" syntax.lua
expect_err "syntax error" "dlua: syntax.lua:1: unexpected symbol near '='"
run "$DLUA" no_such_file.lua
expect_err "missing script" "cannot open no_such_file.lua"
run "$DLUA" -e 'error({})'
expect_err "non-string error object" "(error object is a table value)"
run "$DLUA" -e 'error(setmetatable({}, {__tostring = function() return "custom error" end}))'
expect_err "error object with __tostring" "custom error"
run "$DLUA" -e 'error("first")' -e 'print("not reached")'
if [ "$rc" -ne 0 ] && [ -z "$out" ] && has "$err" "(command line):1: first"; then ok; else fail "an -e error stops"; fi
run "$DLUA" -e 'dl.zeros(2):view(3)'
expect_err "dl error surfaces as Lua error" "dlua: "

# --- -l ---
printf 'return {value = 42}\n' >mymod.lua
run "$DLUA" -l mymod -e 'print(mymod.value)'
expect_out "-l mod" "42"
run "$DLUA" -l m=mymod -e 'print(m.value, mymod)'
expect_out "-l g=mod" "$(printf '42\tnil')"
run "$DLUA" -lmymod -e 'print(mymod.value + 1)'
expect_out "-lmod attached" "43"
run "$DLUA" -l no_such_module
expect_err "-l missing module" "module 'no_such_module' not found"

# --- -v, -h, bad options ---
run "$DLUA" -v
if [ "$rc" -eq 0 ] && [[ "$out" =~ ^dlua\ [0-9]+\.[0-9]+\.[0-9]+\ \(Lua\ 5\.4 ]]; then ok; else fail "-v"; fi
for h in -h --help; do
    run "$DLUA" $h
    if [ "$rc" -eq 0 ] && has "$out" "usage: dlua [options] [script [args]]" && has "$out" "-e stat"; then ok; else fail "$h"; fi
done
run "$DLUA" -z
if [ "$rc" -ne 0 ] && has "$err" "unrecognized option '-z'" && has "$err" "usage:"; then ok; else fail "bad option"; fi
run "$DLUA" --bogus
expect_err "bad long option" "unrecognized option '--bogus'"
run "$DLUA" -vx
expect_err "option with extra characters" "unrecognized option '-vx'"
run "$DLUA" -e
if [ "$rc" -ne 0 ] && has "$err" "'-e' needs argument" && has "$err" "usage:"; then ok; else fail "-e without argument"; fi
run "$DLUA" -l
expect_err "-l without argument" "'-l' needs argument"

# --- os.exit ---
run "$DLUA" -e 'os.exit(3)'
expect_rc "os.exit(3)" 3
run "$DLUA" -e 'os.exit(true)'
expect_rc "os.exit(true)" 0
run "$DLUA" -e 'os.exit(false)'
expect_rc "os.exit(false)" 1
printf 'print("before")\nos.exit(5)\nprint("after")\n' >exit.lua
run "$DLUA" exit.lua
if [ "$rc" -eq 5 ] && [ "$out" == "before" ]; then ok; else fail "os.exit in a script"; fi

# --- DLUA_INIT, -E, -W ---
run env DLUA_INIT='init_var = 7' "$DLUA" -e 'print(init_var)'
expect_out "DLUA_INIT chunk" "7"
printf 'init_var = "from file"\n' >init.lua
run env DLUA_INIT=@init.lua "$DLUA" -e 'print(init_var)'
expect_out "DLUA_INIT @file" "from file"
run env DLUA_INIT='init_var = 7' "$DLUA" -E -e 'print(init_var)'
expect_out "-E ignores DLUA_INIT" "nil"
run "$DLUA" -W -e 'warn("careful")'
if [ "$rc" -eq 0 ] && has "$err" "Lua warning: careful"; then ok; else fail "-W"; fi
run "$DLUA" -e 'warn("careful")'
if [ "$rc" -eq 0 ] && [ -z "$err" ]; then ok; else fail "warnings off by default"; fi

# --- SIGINT interrupts a running script with a traceback ---
rm -f started
"$DLUA" -e 'io.open("started", "w"):close() while true do end' 2>"$TMP/sigerr" &
pid=$!
for _ in $(seq 100); do [ -e started ] && break; sleep 0.05; done
kill -INT "$pid"
for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid"; fi
wait "$pid"
rc=$?
out=""
err=$(cat "$TMP/sigerr")
if [ "$rc" -eq 1 ] && has "$err" "interrupted!" && has "$err" "stack traceback"; then ok; else fail "SIGINT"; fi

finish
