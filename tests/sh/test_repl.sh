#!/usr/bin/env bash
# test_repl.sh - drives the real dlua REPL through a pseudo-terminal (tmux on
# a private socket, a temporary HOME): echo of expressions, multi-line chunks,
# a trailing ';', errors, tab completion of globals, fields and tensor methods,
# Ctrl-C of running code and at the prompt, Ctrl-D, and the history file.
# Usage: bash test_repl.sh <path-to-dlua> [build-dir]
# Prints "N passed, N failed"; exits non-zero on any failure.

DLUA=$(realpath "${1:?usage: test_repl.sh <path-to-dlua> [build-dir]}")
if ! command -v tmux >/dev/null; then
    echo "tmux not found: REPL tests skipped"
    echo "0 passed, 0 failed"
    exit 0
fi
unset TMUX # a private server even when run from inside tmux
SOCK="dlua_test_$$"
HOMEDIR=$(mktemp -d "${TMPDIR:-/tmp}/dlua_repl.XXXXXX")
tm() { tmux -L "$SOCK" -f /dev/null "$@"; }
trap 'tm kill-server 2>/dev/null; rm -rf "$HOMEDIR"' EXIT

passed=0
failed=0
ok() { passed=$((passed + 1)); }
fail() {
    failed=$((failed + 1))
    echo "FAIL $1" >&2
    screen | sed '/^$/d' | tail -15 | sed 's/^/    | /' >&2
}
check() { # check NAME COMMAND...: passes when the command succeeds
    local name=$1
    shift
    if "$@"; then ok; else fail "$name"; fi
}

start() {
    tm new-session -d -s dl -x 120 -y 50 \
        "env HOME='$HOMEDIR' INPUTRC=/dev/null TERM=screen '$DLUA'" || return 1
}
screen() { tm capture-pane -p -J -t dl -S -300 2>/dev/null | sed 's/[[:space:]]*$//'; }
last_line() { screen | sed '/^$/d' | tail -1; }
keys() { tm send-keys -t dl "$@"; }
# type TEXT: literal text (tmux reads a trailing ';' as a command separator)
type_text() {
    local s=$1
    if [[ "$s" == *";" ]]; then s="${s%;}\\;"; fi
    tm send-keys -t dl -l -- "$s"
}
enter() { type_text "$1" && keys Enter; }

# wait_for COND...: polls COND every 0.05 s for at most 10 s (and stops
# waiting once the whole test has run 55 s, so that failures stay quick)
wait_for() {
    local i
    for i in $(seq 200); do
        if "$@"; then return 0; fi
        [ "$SECONDS" -ge 55 ] && return 1
        sleep 0.05
    done
    return 1
}
has_line() { screen | grep -Eqx -- "$1"; }     # some screen line is exactly the regex
has_text() { screen | grep -Fq -- "$1"; }      # the screen contains the text
last_is() { [[ "$(last_line)" =~ ^($1)$ ]]; }  # the last non-blank line matches
at_prompt() { last_is '>'; }
line_count() { screen | grep -Ecx -- "$1"; }
session_gone() { ! tm has-session -t dl 2>/dev/null; }

# --- start: banner and prompt ---
start
check "banner" wait_for has_line 'dlua [0-9]+\.[0-9]+\.[0-9]+ \(Lua 5\.4.*'
check "prompt" wait_for at_prompt

# --- expressions echo, statements run ---
enter '1+1'
check "1+1 echoes 2" wait_for has_line '2'
enter '"a", 2, nil'
check "several values tab-separated" wait_for has_line 'a +2 +nil'
enter 'local y = 5'
wait_for at_prompt
enter 'print("printed")'
check "statement runs" wait_for has_line 'printed'

# --- a multi-line function definition ---
enter 'function f(x)'
check "continuation prompt" wait_for last_is '>>'
enter 'return x*2'
check "still continuing" wait_for last_is '>>'
enter 'end'
wait_for at_prompt
enter 'f(21)'
check "multi-line function" wait_for has_line '42'

# --- a trailing ';' silences the echo ---
enter '99+1;'
enter 'x = dl.ones(3);'
enter 'dl.ones(3);'
enter '"semi" .. "done"'
check "after ';'" wait_for has_line 'semidone'
check "';' suppresses the echo" [ "$(line_count '100|dl\.Tensor.*')" -eq 0 ]

# --- errors are reported and the REPL goes on ---
enter 'error("boom")'
check "error message" wait_for has_line 'stdin:1: boom'
check "error traceback" has_line 'stack traceback:'
enter '6*7+1'
check "works after an error" wait_for has_line '43'
enter 'dl.zeros(2):view(3)'
wait_for at_prompt
enter '"still" .. "alive"'
check "works after a dl error" wait_for has_line 'stillalive'

# --- tab completion ---
type_text 'dl.ze'
keys Tab
check "complete dl.ze -> dl.zeros" wait_for last_is '> dl\.zeros'
keys Tab Tab
check "list dl.zeros*" wait_for has_text 'zeros_like('
keys C-u
wait_for at_prompt
type_text 'pri'
keys Tab
check "complete global pri -> print(" wait_for last_is '> print\('
keys C-u
type_text 'string.fo'
keys Tab
check "complete nested string.fo -> string.format(" wait_for last_is '> string\.format\('
keys C-u
enter 't = dl.ones(2)'
wait_for at_prompt
type_text 't:tran'
keys Tab
check "complete method t:tran -> t:transpose(" wait_for last_is '> t:transpose\('
keys C-u
type_text 's = "abc"'
keys Enter
type_text 's:up'
keys Tab
check "complete string method s:up -> s:upper(" wait_for last_is '> s:upper\('
keys C-u
enter 'tab = setmetatable({own = 1}, {__index = {inherited = function() end}})'
wait_for at_prompt
type_text 'tab.inh'
keys Tab
check "complete through an __index table" wait_for last_is '> tab\.inherited\('
keys C-u
type_text 'dl.aran'
keys Tab
check "complete dl.aran -> dl.arange(" wait_for last_is '> dl\.arange\('
type_text '5, 9):tolist()[4]'
keys Enter
check "completed call runs" wait_for has_line '8'

printf 'print("ran " .. "script")\n' >"$HOMEDIR/script_for_dofile.lua"
type_text "dofile(\"$HOMEDIR/script_for_d"
keys Tab
check "file name completion inside a string" wait_for last_is "> dofile\\(\"$HOMEDIR/script_for_dofile\\.lua\""
type_text ')'
keys Enter
check "completed file name runs" wait_for has_line 'ran script'
enter 'for i = 1, 2 do'
wait_for last_is '>>'
keys Tab
type_text 'print(i * 11)'
keys Enter
check "Tab at the start of a line indents" wait_for has_line '>> {3,}print\(i \* 11\)'
enter 'end'
check "indented loop runs" wait_for has_line '22'

# --- Ctrl-C while code runs: back to a working prompt ---
enter 'while true do end'
sleep 0.3
keys C-c
if ! wait_for has_text 'interrupted!'; then keys C-c; fi # the first one came too early
check "Ctrl-C interrupts a loop" wait_for has_text 'interrupted!'
check "prompt after interrupt" wait_for at_prompt
enter '1+2'
check "works after Ctrl-C" wait_for has_line '3'

# --- Ctrl-C at the prompt abandons the line / the pending chunk ---
type_text 'zzqq'
keys C-c
check "Ctrl-C clears the line" wait_for at_prompt
enter 'function g('
wait_for last_is '>>'
keys C-c
check "Ctrl-C abandons a continuation" wait_for at_prompt
enter '3*3'
check "works after Ctrl-C at the prompt" wait_for has_line '9'
check "abandoned text not run" [ "$(screen | grep -c 'zzqq3')" -eq 0 ]

# --- Ctrl-D exits, history is on disk ---
keys C-d
check "Ctrl-D exits" wait_for session_gone
hist="$HOMEDIR/.dlua_history"
check "history file written" test -s "$hist"
for l in '1+1' 'function f(x)' 'return x*2' 'end' 'f(21)' 't = dl.ones(2)' '3*3'; do
    check "history has '$l'" grep -Fqx -- "$l" "$hist"
done
check "abandoned lines not in history" bash -c "! grep -Eq 'zzqq|function g' '$hist'"

# --- a new session recalls the history with Up; the file stays capped ---
{ for i in $(seq 1500); do echo "-- old $i"; done; cat "$hist"; } >"$hist.new" && mv "$hist.new" "$hist"
start
wait_for at_prompt
keys Up
check "Up recalls the last chunk of the previous session" wait_for last_is '> 3\*3'
keys Enter
check "recalled chunk runs" wait_for has_line '9'
enter '"second" .. "session"'
check "second session evaluates" wait_for has_line 'secondsession'
keys C-d
check "second session exits" wait_for session_gone
check "history capped at 1000 lines" [ "$(wc -l <"$hist")" -le 1000 ]
check "history keeps the newest lines" [ "$(tail -1 "$hist")" == '"second" .. "session"' ]
check "history drops the oldest lines" bash -c "! grep -Fqx -- '-- old 1' '$hist'"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
