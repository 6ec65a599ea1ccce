/* dlua.c - the dlua executable: a Lua 5.4 interpreter with the dl module
 * preloaded as the global `dl`.
 *
 * Command line (as `lua`): `dlua [options] [script [args]]` with -e stat,
 * -l mod (or -l g=mod), -i, -v, -E, -W, -h/--help, `--` and `-` (stdin).
 * The script sees its arguments in `arg` (arg[0] the script, interpreter
 * arguments at negative indices) and as `...`.  DLUA_INIT (a chunk, or
 * @file) runs before the options unless -E is given.
 *
 * REPL (no script and no -e on a terminal, or -i): GNU readline through its
 * callback interface, so that Ctrl-C at the prompt is a plain flag seen by our
 * own select loop and never a jump out of readline.  Expressions echo their
 * values (`return <line>` is tried first), a trailing `;` silences the echo,
 * incomplete chunks continue with `>> `, tab completes globals, fields after
 * `.` and methods after `:`, history lives in $HOME/.dlua_history.
 *
 * Invariants: everything runs under lua_pcall with a traceback handler
 * (pmain); a Lua error never exits the REPL; while Lua code runs, SIGINT sets
 * a hook that raises "interrupted!" at the next Lua instruction (a third
 * Ctrl-C that Lua has not seen yet kills the process, for code stuck in C).
 * An error that ends a rank of a distributed job is reported to the other
 * ranks (dl_dist_report_failure) so they fail at once. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include <readline/history.h>
#include <readline/readline.h>

#include "core/parallel.h"
#include "dist/dist.h"
#include "ops/device.h"
#include "lua/l_bind.h"

int luaopen_dl(lua_State *L);

#define DLUA_HISTORY_FILE ".dlua_history"
#define DLUA_HISTORY_MAX 1000
#define DLUA_PROMPT "> "
#define DLUA_PROMPT2 ">> "
#define DLUA_CHUNKNAME "=stdin"

static const char *progname = "dlua"; /* NULL inside the REPL: messages unprefixed */

/* --- messages and protected calls ------------------------------------------ */

/* Outside the REPL, a rank of a distributed job says which it is:
 * "[rank 1/2] dlua: ..." (as train_resnet's messages). */
/* One fprintf, so the line is one write: ranks sharing a terminal or a log
 * do not interleave their lines' pieces. */
static void print_message(const char *pname, const char *msg) {
    fflush(stdout);
    char rank[48] = "";
    if (pname && dl_dist_is_initialized() && dl_dist_world_size() > 1)
        snprintf(rank, sizeof rank, "[rank %d/%d] ", dl_dist_rank(), dl_dist_world_size());
    fprintf(stderr, "%s%s%s%s\n", rank, pname ? pname : "", pname ? ": " : "", msg);
    fflush(stderr);
}

/* The first line of the last error reported outside the REPL: what a
 * distributed job's other ranks are told when this one fails. */
static char last_error[400];

/* Set when "interrupted!" was raised: the message then starts on a new line. */
static volatile sig_atomic_t was_interrupted = 0;

/* Prints the error message on top of the stack, if status is an error. */
static int report(lua_State *L, int status) {
    if (status != LUA_OK) {
        if (was_interrupted && isatty(STDERR_FILENO)) fputs("\n", stderr); /* after the echoed ^C */
        was_interrupted = 0;
        const char *msg = lua_tostring(L, -1);
        if (!msg) msg = "(error object is not a string)";
        print_message(progname, msg);
        if (progname) snprintf(last_error, sizeof last_error, "%.*s", (int)strcspn(msg, "\n"), msg);
        lua_pop(L, 1);
    }
    return status;
}

/* --- interrupting running Lua code ----------------------------------------- */

static lua_State *volatile running_L = NULL;
static volatile sig_atomic_t unseen_interrupts = 0;

/* The hook SIGINT installs: clears itself and raises the error. */
static void interrupt_hook(lua_State *L, lua_Debug *ar) {
    (void)ar;
    lua_sethook(L, NULL, 0, 0);
    unseen_interrupts = 0;
    was_interrupted = 1;
    luaL_error(L, "interrupted!");
}

static void on_sigint_running(int sig) {
    if (++unseen_interrupts >= 3) { /* Lua never got control back: give up */
        static const char msg[] = "\ndlua: interrupted 3 times, exiting\n";
        dlL_die_of_signal(sig, msg, sizeof msg - 1);
        return;
    }
    /* lua_sethook is safe to call from a signal handler */
    if (running_L)
        lua_sethook(running_L, interrupt_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
}

/* Calls the function below narg arguments with the traceback handler, with
 * Ctrl-C turned into a Lua error while it runs. */
static int docall(lua_State *L, int narg, int nres) {
    int base = lua_gettop(L) - narg;
    lua_pushcfunction(L, dlL_msghandler);
    lua_insert(L, base);
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint_running;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    running_L = L;
    unseen_interrupts = 0;
    was_interrupted = 0;
    sigaction(SIGINT, &sa, &old);
    int status = lua_pcall(L, narg, nres, base);
    sigaction(SIGINT, &old, NULL);
    /* a Ctrl-C that came after the last Lua instruction must not leak into the next call */
    if (lua_gethook(L) == interrupt_hook) lua_sethook(L, NULL, 0, 0);
    running_L = NULL;
    lua_remove(L, base);
    return status;
}

static int dochunk(lua_State *L, int status) {
    if (status == LUA_OK) status = docall(L, 0, 0);
    return report(L, status);
}

static int dofile(lua_State *L, const char *name) {
    return dochunk(L, luaL_loadfile(L, name));
}

static int dostring(lua_State *L, const char *s, const char *name) {
    return dochunk(L, luaL_loadbuffer(L, s, strlen(s), name));
}

/* -l mod or -l g=mod: require mod into global g (default: mod). */
static int dolibrary(lua_State *L, const char *spec) {
    const char *eq = strchr(spec, '=');
    const char *modname = eq ? eq + 1 : spec;
    lua_getglobal(L, "require");
    lua_pushstring(L, modname);
    int status = docall(L, 1, 1);
    if (status == LUA_OK) {
        if (eq)
            lua_pushlstring(L, spec, (size_t)(eq - spec));
        else
            lua_pushstring(L, spec);
        lua_insert(L, -2);
        lua_setglobal(L, lua_tostring(L, -2));
        lua_pop(L, 1);
    }
    return report(L, status);
}

/* --- command line ----------------------------------------------------------- */

static void print_usage(FILE *f) {
    fprintf(f, "usage: dlua [options] [script [args]]\n"
               "Available options are:\n"
               "  -e stat   execute string 'stat'\n"
               "  -i        enter interactive mode after executing 'script'\n"
               "  -l mod    require library 'mod' into global 'mod'\n"
               "  -l g=mod  require library 'mod' into global 'g'\n"
               "  -v        show version information and the backends compiled in\n"
               "  -E        ignore environment variables (DLUA_INIT, LUA_PATH, ...)\n"
               "  -W        turn warnings on\n"
               "  -h, --help  show this help\n"
               "  --        stop handling options\n"
               "  -         stop handling options and execute stdin\n"
               "With no script and no -e, dlua starts an interactive session when\n"
               "stdin is a terminal and runs stdin as a script otherwise.\n");
}

static void print_version(void) {
    printf("dlua %s (%s) -- deep learning in Lua\n", DL_VERSION, LUA_RELEASE);
    fflush(stdout);
}

/* -v's second line: the backends compiled in and the library versions. */
static void print_build(void) {
    char info[512];
    printf("backends: %s\n", dl_backends_info(info, sizeof info));
    fflush(stdout);
}

/* The REPL banner's second line: which backends this session computes on. */
static void print_backends(void) {
    char name[256];
    printf("cpu: %d threads", dl_get_num_threads());
    if (!dl_cuda_compiled())
        printf("; cuda: not in this build\n");
    else if (dl_cuda_available_devices() == 0)
        printf("; cuda: no GPU found, running on the CPU\n");
    else
        printf("; cuda: %d device(s), %s\n", dl_cuda_available_devices(),
               dl_cuda_name(0, name, sizeof name) ? name : "?");
    fflush(stdout);
}

enum {
    ARG_ERROR = 1, /* bad option: *first is its index */
    ARG_I = 2,     /* -i */
    ARG_V = 4,     /* -v (or -i) */
    ARG_E = 8,     /* some -e */
    ARG_NOENV = 16,
    ARG_HELP = 32,
};

/* Scans the options; sets *first to the index of the script (0 when there is
 * none) or, on ARG_ERROR, of the bad option. */
static int collectargs(char **argv, int *first) {
    int args = 0;
    *first = 0;
    for (int i = 1; argv[i] != NULL; i++) {
        const char *a = argv[i];
        *first = i;
        if (a[0] != '-') return args; /* the script */
        switch (a[1]) {
        case '\0': return args; /* "-": the script is stdin */
        case '-':
            if (strcmp(a, "--help") == 0) {
                args |= ARG_HELP;
                break;
            }
            if (a[2] != '\0') return ARG_ERROR;
            *first = argv[i + 1] ? i + 1 : 0;
            return args;
        case 'h':
            if (a[2] != '\0') return ARG_ERROR;
            args |= ARG_HELP;
            break;
        case 'E':
            if (a[2] != '\0') return ARG_ERROR;
            args |= ARG_NOENV;
            break;
        case 'W':
            if (a[2] != '\0') return ARG_ERROR;
            break;
        case 'i': args |= ARG_I; __attribute__((fallthrough));
        case 'v':
            if (a[2] != '\0') return ARG_ERROR;
            args |= ARG_V;
            break;
        case 'e': args |= ARG_E; __attribute__((fallthrough));
        case 'l':
            if (a[2] == '\0') { /* the argument is the next word */
                i++;
                if (argv[i] == NULL || argv[i][0] == '-') return ARG_ERROR;
            }
            break;
        default: return ARG_ERROR;
        }
    }
    *first = 0;
    return args;
}

/* Runs -e, -l and -W in order, up to (not including) argv[n]. */
static int runargs(lua_State *L, char **argv, int n) {
    for (int i = 1; i < n; i++) {
        int opt = argv[i][1];
        if (opt == 'W') {
            lua_warning(L, "@on", 0);
        } else if (opt == 'e' || opt == 'l') {
            const char *extra = argv[i] + 2;
            if (*extra == '\0') extra = argv[++i];
            int status = opt == 'e' ? dostring(L, extra, "=(command line)") : dolibrary(L, extra);
            if (status != LUA_OK) return 0;
        }
    }
    return 1;
}

static int handle_init(lua_State *L) {
    const char *init = getenv("DLUA_INIT");
    if (init == NULL) return LUA_OK;
    if (init[0] == '@') return dofile(L, init + 1);
    return dostring(L, init, "=DLUA_INIT");
}

/* arg[0] is the script, arg[1..] its arguments, arg[-1..] the interpreter's. */
static void createargtable(lua_State *L, char **argv, int argc, int script) {
    lua_createtable(L, argc - script - 1 > 0 ? argc - script - 1 : 0, script + 1);
    for (int i = 0; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i - script);
    }
    lua_setglobal(L, "arg");
}

/* Pushes arg[1..#arg] as the script's varargs. */
static int pushargs(lua_State *L) {
    if (lua_getglobal(L, "arg") != LUA_TTABLE) luaL_error(L, "'arg' is not a table");
    int n = (int)luaL_len(L, -1);
    luaL_checkstack(L, n + 3, "too many arguments to script");
    int i;
    for (i = 1; i <= n; i++) lua_rawgeti(L, -i, i);
    lua_remove(L, -i);
    return n;
}

static int handle_script(lua_State *L, char **argv) {
    const char *fname = strcmp(argv[0], "-") == 0 ? NULL : argv[0];
    int status = luaL_loadfile(L, fname); /* skips a first line starting with '#' */
    if (status == LUA_OK) {
        int n = pushargs(L);
        status = docall(L, n, LUA_MULTRET);
    }
    return report(L, status);
}

/* --- REPL: reading lines ----------------------------------------------------- */

enum { READ_OK, READ_EOF, READ_INTR };

typedef struct {
    int tty;        /* stdin is a terminal: readline, prompts, history */
    char *histfile; /* NULL: history is not saved */
} repl_state;

static int sig_pipe[2] = {-1, -1}; /* written by the handlers below, watched by select */
static volatile sig_atomic_t got_sigint = 0, got_sigwinch = 0, got_sigtstp = 0;

static void on_signal_reading(int sig) {
    int saved = errno;
    if (sig == SIGINT)
        got_sigint = 1;
    else if (sig == SIGTSTP)
        got_sigtstp = 1;
    else
        got_sigwinch = 1;
    if (sig_pipe[1] >= 0 && write(sig_pipe[1], "", 1) < 0) { /* pipe full: flag is enough */
    }
    errno = saved;
}

static void drain_sig_pipe(void) {
    char buf[64];
    while (read(sig_pipe[0], buf, sizeof buf) > 0) {
    }
}

static char *rl_result;
static int rl_finished;

static void on_rl_line(char *line) {
    rl_result = line;
    rl_finished = 1;
    rl_callback_handler_remove(); /* terminal back to normal while the chunk runs */
}

/* Ctrl-Z at the prompt: give the terminal back, stop, and take it again. */
static void suspend_at_prompt(void) {
    struct sigaction dfl, ours;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    rl_cleanup_after_signal();
    sigaction(SIGTSTP, &dfl, &ours);
    raise(SIGTSTP); /* stopped here until SIGCONT */
    sigaction(SIGTSTP, &ours, NULL);
    rl_reset_after_signal();
    rl_forced_update_display();
}

/* One line from the terminal with readline; *line is malloc'd. */
static int tty_read_line(const char *prompt, char **line) {
    int fd = fileno(rl_instream ? rl_instream : stdin);
    got_sigint = 0;
    got_sigtstp = 0;
    drain_sig_pipe();
    if (got_sigwinch) {
        got_sigwinch = 0;
        rl_reset_screen_size();
    }
    fflush(stdout);
    fflush(stderr);
    rl_result = NULL;
    rl_finished = 0;
    rl_callback_handler_install(prompt, on_rl_line);
    while (!rl_finished) {
        fd_set fds;
        FD_ZERO(&fds);
        FD_SET(fd, &fds);
        FD_SET(sig_pipe[0], &fds);
        int n = select((fd > sig_pipe[0] ? fd : sig_pipe[0]) + 1, &fds, NULL, NULL, NULL);
        if (n < 0 && errno != EINTR) {
            rl_callback_handler_remove();
            return READ_EOF;
        }
        if (n > 0 && FD_ISSET(sig_pipe[0], &fds)) drain_sig_pipe();
        if (got_sigwinch) {
            got_sigwinch = 0;
            rl_resize_terminal();
        }
        if (got_sigtstp) {
            got_sigtstp = 0;
            suspend_at_prompt();
        }
        if (got_sigint) { /* abandon the line: show it ended with ^C, then a fresh prompt */
            got_sigint = 0;
            rl_callback_sigcleanup();
            rl_free_line_state();
            rl_point = rl_end;
            rl_redisplay();
            fputs("^C\n", rl_outstream ? rl_outstream : stdout);
            rl_replace_line("", 0);
            rl_callback_handler_remove();
            return READ_INTR;
        }
        if (n > 0 && FD_ISSET(fd, &fds)) rl_callback_read_char();
    }
    *line = rl_result;
    if (rl_result == NULL) {
        fputs("\n", stdout); /* Ctrl-D: leave the cursor on a fresh line */
        return READ_EOF;
    }
    return READ_OK;
}

/* One line from a pipe or file: no prompt, no editing. */
static int plain_read_line(char **line) {
    char *buf = NULL;
    size_t cap = 0;
    fflush(stdout);
    ssize_t n = getline(&buf, &cap, stdin);
    if (n < 0) {
        free(buf);
        return READ_EOF;
    }
    if (n > 0 && buf[n - 1] == '\n') buf[--n] = '\0';
    if (n > 0 && buf[n - 1] == '\r') buf[--n] = '\0';
    *line = buf;
    return READ_OK;
}

static int read_line(repl_state *r, const char *prompt, char **line) {
    if (!r->tty) return plain_read_line(line);
    /* Ctrl-Z is ours only at the prompt: running code stops as usual */
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal_reading;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTSTP, &sa, &old);
    int rc = tty_read_line(prompt, line);
    sigaction(SIGTSTP, &old, NULL);
    return rc;
}

/* --- REPL: history ------------------------------------------------------------ */

static void history_open(repl_state *r) {
    using_history();
    stifle_history(DLUA_HISTORY_MAX);
    const char *home = getenv("HOME");
    if (home == NULL || home[0] == '\0') return;
    size_t n = strlen(home) + sizeof(DLUA_HISTORY_FILE) + 2;
    r->histfile = malloc(n);
    if (r->histfile == NULL) return;
    snprintf(r->histfile, n, "%s/%s", home, DLUA_HISTORY_FILE);
    read_history(r->histfile); /* a missing file is fine */
}

/* Adds an entered chunk to the history and appends it to the file. */
static void history_add(repl_state *r, const char *chunk) {
    if (!r->tty || chunk[strspn(chunk, " \t\n")] == '\0') return;
    HIST_ENTRY *last = history_length > 0 ? history_get(history_base + history_length - 1) : NULL;
    if (last && strcmp(last->line, chunk) == 0) return; /* no immediate repeats */
    add_history(chunk);
    if (r->histfile == NULL) return;
    int fd = open(r->histfile, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) return;
    close(fd);
    if (append_history(1, r->histfile) == 0) history_truncate_file(r->histfile, DLUA_HISTORY_MAX);
}

/* --- REPL: tab completion ------------------------------------------------------ */

static lua_State *complete_L;
static char **candidates;
static int ncandidates, next_candidate;

static const char *const lua_keywords[] = {
    "and",      "break",  "do",   "else", "elseif", "end",   "false", "for",
    "function", "goto",   "if",   "in",   "local",  "nil",   "not",   "or",
    "repeat",   "return", "then", "true", "until",  "while", NULL,
};

static int is_identifier(const char *s, size_t n) {
    if (n == 0 || (s[0] >= '0' && s[0] <= '9')) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9')))
            return 0;
    }
    for (int k = 0; lua_keywords[k]; k++)
        if (strlen(lua_keywords[k]) == n && memcmp(lua_keywords[k], s, n) == 0) return 0;
    return 1;
}

/* Records name -> suffix in the set at index `set`, unless already there
 * (the first table along an __index chain wins, as for lookups). */
static void add_candidate(lua_State *L, int set, const char *name, const char *suffix) {
    if (lua_getfield(L, set, name) == LUA_TNIL) {
        lua_pushstring(L, suffix);
        lua_setfield(L, set, name);
    }
    lua_pop(L, 1);
}

static int is_callable(lua_State *L, int idx) {
    if (lua_type(L, idx) == LUA_TFUNCTION) return 1;
    if (luaL_getmetafield(L, idx, "__call") == LUA_TNIL) return 0;
    lua_pop(L, 1);
    return 1;
}

/* Adds the identifier keys of the table at obj (and of the tables along its
 * __index chain) that start with part; functions get a "(" suffix. */
static void add_fields(lua_State *L, int obj, int set, const char *part, int functions_only,
                       int depth) {
    size_t plen = strlen(part);
    obj = lua_absindex(L, obj);
    if (depth > 8) return;
    if (lua_type(L, obj) == LUA_TTABLE) {
        lua_pushnil(L);
        while (lua_next(L, obj)) {
            if (lua_type(L, -2) == LUA_TSTRING) {
                size_t n;
                const char *k = lua_tolstring(L, -2, &n);
                int fn = is_callable(L, -1);
                if (n >= plen && memcmp(k, part, plen) == 0 && is_identifier(k, n) &&
                    (k[0] != '_' || part[0] == '_') && (fn || !functions_only))
                    add_candidate(L, set, k, fn ? "(" : "");
            }
            lua_pop(L, 1);
        }
    }
    if (lua_getmetatable(L, obj)) {
        if (lua_getfield(L, -1, "__index") == LUA_TTABLE)
            add_fields(L, -1, set, part, functions_only, depth + 1);
        lua_pop(L, 2);
    }
}

/* Methods for `value:`: a table's own functions and its __index chain; for
 * other values (strings, tensors) the metatable's `methods` table (where the
 * tensor methods live, __index being a C function) and __index table. */
static void add_methods(lua_State *L, int obj, int set, const char *part) {
    obj = lua_absindex(L, obj);
    if (lua_type(L, obj) == LUA_TTABLE) {
        add_fields(L, obj, set, part, 1, 0);
        return;
    }
    if (!lua_getmetatable(L, obj)) return;
    if (lua_getfield(L, -1, "methods") == LUA_TTABLE) add_fields(L, -1, set, part, 1, 0);
    lua_pop(L, 1);
    if (lua_getfield(L, -1, "__index") == LUA_TTABLE) add_fields(L, -1, set, part, 1, 0);
    lua_pop(L, 2);
}

/* completions(text) -> sequence of full completions of text (protected:
 * walking a path may run __index metamethods, e.g. dl's lazy submodules). */
static int l_completions(lua_State *L) {
    const char *text = luaL_checkstring(L, 1);
    lua_newtable(L);
    int set = lua_gettop(L);
    const char *sep = NULL;
    for (const char *p = text; *p; p++)
        if (*p == '.' || *p == ':') sep = p;
    const char *part = sep ? sep + 1 : text;
    if (sep == NULL) {
        lua_pushglobaltable(L);
        add_fields(L, -1, set, part, 0, 0);
        lua_pop(L, 1);
        for (int k = 0; lua_keywords[k]; k++)
            if (strncmp(lua_keywords[k], part, strlen(part)) == 0)
                add_candidate(L, set, lua_keywords[k], "");
    } else {
        lua_pushglobaltable(L);
        for (const char *p = text; p < sep;) { /* walk a.b.c */
            const char *q = p;
            while (q < sep && *q != '.' && *q != ':') q++;
            if (q < sep && *q == ':') return 0; /* ':' only before the last name */
            if (!is_identifier(p, (size_t)(q - p))) return 0;
            int tt = lua_type(L, -1);
            if (tt != LUA_TTABLE && tt != LUA_TUSERDATA) return 0;
            lua_pushlstring(L, p, (size_t)(q - p));
            lua_gettable(L, -2);
            lua_remove(L, -2);
            p = q + 1;
        }
        if (*sep == ':')
            add_methods(L, -1, set, part);
        else
            add_fields(L, -1, set, part, 0, 0);
        lua_pop(L, 1);
    }
    lua_pushlstring(L, text, (size_t)(part - text));
    int prefix = lua_gettop(L);
    lua_newtable(L);
    lua_Integer i = 0;
    lua_pushnil(L);
    while (lua_next(L, set)) {
        lua_pushfstring(L, "%s%s%s", lua_tostring(L, prefix), lua_tostring(L, -2),
                        lua_tostring(L, -1));
        lua_rawseti(L, -4, ++i);
        lua_pop(L, 1);
    }
    return 1;
}

static void free_candidates(void) {
    for (int i = 0; i < ncandidates; i++) free(candidates[i]);
    free(candidates);
    candidates = NULL;
    ncandidates = 0;
}

static char *candidate_generator(const char *text, int state) {
    (void)text; /* candidates are already filtered */
    if (state == 0) next_candidate = 0;
    if (next_candidate >= ncandidates) return NULL;
    return strdup(candidates[next_candidate++]);
}

/* Inside a string literal only quotes break words, so that a file name
 * completes whole (readline would otherwise stop at its '/'). */
static char *word_break_characters(void) {
    static char in_string[] = "\"'";
    char quote = 0;
    for (int i = 0; i < rl_point && rl_line_buffer[i]; i++) {
        char c = rl_line_buffer[i];
        if (quote) {
            if (c == '\\' && rl_line_buffer[i + 1])
                i++;
            else if (c == quote)
                quote = 0;
        } else if (c == '"' || c == '\'') {
            quote = c;
        }
    }
    return quote ? in_string : NULL;
}

static char **complete(const char *text, int start, int end) {
    (void)end;
    rl_completion_suppress_append = 1;              /* no space after a completion */
    if (rl_completion_quote_character) return NULL; /* inside a string: file names */
    rl_attempted_completion_over = 1;
    if (text[0] == '\0' && (int)strspn(rl_line_buffer, " \t") >= start) {
        char **m = malloc(2 * sizeof *m); /* Tab in leading blanks indents */
        if (m == NULL || (m[0] = strdup("\t")) == NULL) {
            free(m);
            return NULL;
        }
        m[1] = NULL;
        return m;
    }
    lua_State *L = complete_L;
    free_candidates();
    int top = lua_gettop(L);
    lua_pushcfunction(L, l_completions);
    lua_pushstring(L, text);
    if (lua_pcall(L, 1, 1, 0) == LUA_OK && lua_istable(L, -1)) {
        int n = (int)lua_rawlen(L, -1);
        candidates = n > 0 ? malloc((size_t)n * sizeof *candidates) : NULL;
        for (int i = 1; candidates && i <= n; i++) {
            lua_rawgeti(L, -1, i);
            char *s = strdup(lua_tostring(L, -1));
            if (s) candidates[ncandidates++] = s;
            lua_pop(L, 1);
        }
    }
    lua_settop(L, top);
    if (ncandidates == 0) return NULL;
    return rl_completion_matches(text, candidate_generator);
}

/* Lists matches by their last name only (`zeros(` rather than `dl.zeros(`). */
static void display_matches(char **matches, int n, int maxlen) {
    char **shown = malloc((size_t)(n + 2) * sizeof *shown);
    if (shown == NULL) {
        rl_display_match_list(matches, n, maxlen);
    } else {
        int width = 0;
        shown[0] = matches[0];
        for (int i = 1; i <= n; i++) {
            char *tail = matches[i];
            for (char *p = matches[i]; *p; p++)
                if (*p == '.' || *p == ':') tail = p + 1;
            shown[i] = tail;
            if ((int)strlen(tail) > width) width = (int)strlen(tail);
        }
        shown[n + 1] = NULL;
        rl_display_match_list(shown, n, width);
        free(shown);
    }
    rl_forced_update_display();
}

/* --- REPL: evaluation -------------------------------------------------------- */

enum { CHUNK_EOF = -1, CHUNK_INTR = -2 };

/* A syntax error at <eof> means the chunk is not finished yet. */
static int incomplete(lua_State *L, int status) {
    if (status != LUA_ERRSYNTAX) return 0;
    size_t n;
    const char *msg = lua_tolstring(L, -1, &n);
    static const char mark[] = "<eof>";
    return n >= sizeof mark - 1 && strcmp(msg + n - (sizeof mark - 1), mark) == 0;
}

/* Reads and compiles one chunk: pushes the function (LUA_OK) or an error
 * message (a load status), or pushes nothing and returns CHUNK_EOF/CHUNK_INTR.
 * *quiet is set when the chunk ends with ';'. */
static int load_chunk(lua_State *L, repl_state *r, int *quiet) {
    char *line;
    int rc = read_line(r, DLUA_PROMPT, &line);
    if (rc != READ_OK) return rc == READ_EOF ? CHUNK_EOF : CHUNK_INTR;
    lua_pushstring(L, line);
    free(line);
    size_t len;
    const char *chunk = lua_tolstring(L, -1, &len);
    const char *ret = lua_pushfstring(L, "return %s", chunk);
    int status = luaL_loadbuffer(L, ret, strlen(ret), DLUA_CHUNKNAME);
    if (status == LUA_OK) {
        lua_remove(L, -2); /* the "return ..." text */
    } else {
        lua_pop(L, 2); /* its error and text */
        for (;;) {
            chunk = lua_tolstring(L, -1, &len);
            status = luaL_loadbuffer(L, chunk, len, DLUA_CHUNKNAME);
            if (!incomplete(L, status)) break;
            rc = read_line(r, DLUA_PROMPT2, &line);
            if (rc == READ_INTR) {
                lua_pop(L, 2);
                return CHUNK_INTR;
            }
            if (rc == READ_EOF) break; /* report the incomplete chunk's error */
            lua_pop(L, 1);
            lua_pushliteral(L, "\n");
            lua_pushstring(L, line);
            free(line);
            lua_concat(L, 3);
        }
    }
    /* stack: chunk text, function or error */
    chunk = lua_tolstring(L, -2, &len);
    while (len > 0 && (chunk[len - 1] == ' ' || chunk[len - 1] == '\t' || chunk[len - 1] == '\n'))
        len--;
    *quiet = len > 0 && chunk[len - 1] == ';';
    history_add(r, chunk);
    lua_remove(L, -2);
    return status;
}

/* Prints the values on the stack above base, tab-separated, via tostring. */
static int l_print_values(lua_State *L) {
    dlL_pushprintline(L);
    size_t len;
    const char *s = lua_tolstring(L, -1, &len);
    fwrite(s, 1, len, stdout);
    fflush(stdout);
    return 0;
}

static void print_results(lua_State *L, int base) {
    int n = lua_gettop(L) - base;
    if (n <= 0) return;
    lua_pushcfunction(L, l_print_values);
    lua_insert(L, base + 1);
    report(L, docall(L, n, 0));
}

static void repl_setup_terminal(lua_State *L) {
    complete_L = L;
    rl_readline_name = "dlua"; /* for $if dlua in ~/.inputrc */
    rl_catch_signals = 0;      /* our select loop sees SIGINT and SIGWINCH */
    rl_catch_sigwinch = 0;
    rl_attempted_completion_function = complete;
    rl_completion_display_matches_hook = display_matches;
    rl_completion_word_break_hook = word_break_characters;
    rl_basic_word_break_characters = " \t\n\"\\'`@$><=;|&{(,)}[]+-*/%^~#";
    rl_completer_quote_characters = "\"'";
    if (pipe2(sig_pipe, O_NONBLOCK | O_CLOEXEC) != 0) sig_pipe[0] = sig_pipe[1] = -1;
}

static int dl_repl(lua_State *L) {
    repl_state r = {isatty(STDIN_FILENO), NULL};
    const char *saved_progname = progname;
    progname = NULL;
    struct sigaction sa, old_int, old_winch;
    int handlers = 0;
    if (r.tty) {
        repl_setup_terminal(L);
        if (sig_pipe[0] < 0) {
            r.tty = 0; /* no pipe for signals: fall back to plain reading */
        } else {
            memset(&sa, 0, sizeof sa);
            sa.sa_handler = on_signal_reading;
            sigemptyset(&sa.sa_mask);
            sigaction(SIGINT, &sa, &old_int);
            sigaction(SIGWINCH, &sa, &old_winch);
            handlers = 1;
        }
        history_open(&r);
    }
    int base = lua_gettop(L);
    for (;;) {
        int quiet = 0;
        int status = load_chunk(L, &r, &quiet);
        if (status == CHUNK_EOF) break;
        if (status == CHUNK_INTR) continue;
        if (status == LUA_OK) status = docall(L, 0, LUA_MULTRET);
        if (status == LUA_OK) {
            if (!quiet) print_results(L, base);
        } else {
            report(L, status);
        }
        lua_settop(L, base);
    }
    lua_settop(L, base);
    if (handlers) {
        sigaction(SIGINT, &old_int, NULL);
        sigaction(SIGWINCH, &old_winch, NULL);
    }
    free_candidates();
    free(r.histfile);
    progname = saved_progname;
    return LUA_OK;
}

/* --- main ------------------------------------------------------------------ */

typedef struct {
    int argc;
    char **argv;
    int ok;
} main_args;

static int pmain(lua_State *L) {
    main_args *m = lua_touserdata(L, 1);
    char **argv = m->argv;
    int argc = m->argc;
    int script;
    int args = collectargs(argv, &script);
    if (args == ARG_ERROR) {
        const char *bad = argv[script];
        if ((bad[1] == 'e' || bad[1] == 'l') && bad[2] == '\0')
            fprintf(stderr, "%s: '%s' needs argument\n", progname, bad);
        else
            fprintf(stderr, "%s: unrecognized option '%s'\n", progname, bad);
        print_usage(stderr);
        return 0;
    }
    if (args & ARG_HELP) {
        print_usage(stdout);
        m->ok = 1;
        return 0;
    }
    int optlim = script > 0 ? script : argc;
    luaL_checkversion(L);
    if (args & ARG_NOENV) { /* package.path/cpath ignore LUA_PATH/LUA_CPATH */
        lua_pushboolean(L, 1);
        lua_setfield(L, LUA_REGISTRYINDEX, "LUA_NOENV");
    }
    luaL_openlibs(L);
    luaL_requiref(L, "dl", luaopen_dl, 1);
    lua_pop(L, 1);
    createargtable(L, argv, argc, script);
    if (args & ARG_V) {
        print_version();
        if (!(args & ARG_I)) print_build(); /* -i shows the session's backends instead */
    }
    if (!(args & ARG_NOENV) && handle_init(L) != LUA_OK) return 0;
    if (!runargs(L, argv, optlim)) return 0;
    if (script > 0 && handle_script(L, argv + script) != LUA_OK) return 0;
    if (args & ARG_I) {
        if (isatty(STDIN_FILENO)) print_backends();
        dl_repl(L);
    } else if (script == 0 && !(args & (ARG_E | ARG_V))) {
        if (isatty(STDIN_FILENO)) {
            print_version();
            print_backends();
            dl_repl(L);
        } else if (dofile(L, NULL) != LUA_OK) {
            return 0;
        }
    }
    m->ok = 1;
    return 0;
}

int main(int argc, char **argv) {
    if (argv[0] && argv[0][0]) { /* messages say "dlua: ...", whatever the path */
        const char *slash = strrchr(argv[0], '/');
        progname = slash ? slash + 1 : argv[0];
    }
    lua_State *L = luaL_newstate();
    if (!L) {
        print_message(progname, "cannot create state: not enough memory");
        return EXIT_FAILURE;
    }
    main_args m = {argc, argv, 0};
    lua_pushcfunction(L, pmain);
    lua_pushlightuserdata(L, &m);
    int status = lua_pcall(L, 1, 0, 0);
    report(L, status);
    /* a rank of a distributed job that fails alone: the others learn it now
     * instead of at their collectives' deadline (src/dist/dist.h) */
    if (!(status == LUA_OK && m.ok) && dl_dist_is_initialized())
        dl_dist_report_failure(last_error[0] ? last_error : "dlua: the script failed");
    lua_close(L);
    return (status == LUA_OK && m.ok) ? EXIT_SUCCESS : EXIT_FAILURE;
}
