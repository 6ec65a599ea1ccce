/* l_state.c - dl_state, the embedding half of the public API (dlua.h): a Lua
 * state with the standard libraries and dl loaded, driven from C.
 *
 * Invariants:
 *  - Nothing here raises a Lua error outside a protected call: every step
 *    that can fail (name lookups, which may run metamethods; pushing tensors;
 *    checking results) runs inside lua_pcall with a traceback handler, and the
 *    stack is back at its base when a function returns.
 *  - Each API call that runs Lua "enters" the state: the calling thread
 *    becomes its owner for low-memory collections, the state's own random
 *    generator and grad mode become the thread's for the call, and both are
 *    put back on the way out (calls nest: a host callback may re-enter).
 *  - Failures leave the full message in S->error and a copy (truncated) in
 *    dl_last_error(); successes clear S->error. */
#include "l_bind.h"
#include "autograd/autograd.h"
#include "core/rng.h"
#include "dlua.h"

#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int luaopen_dl(lua_State *L);

_Static_assert(DL_OK == LUA_OK && DL_ERR_RUN == LUA_ERRRUN && DL_ERR_SYNTAX == LUA_ERRSYNTAX &&
                   DL_ERR_MEM == LUA_ERRMEM && DL_ERR_ERR == LUA_ERRERR &&
                   DL_ERR_FILE == LUA_ERRFILE,
               "dlua.h's status codes are Lua's");

struct dl_state {
    lua_State *L;
    char *error;       /* message of the last failure, or NULL */
    dl_generator gen;  /* this state's default generator */
    bool grad_enabled; /* this state's grad mode between calls */
    dl_output_fn output;
    void *output_ctx;
    bool warn_on;  /* warn("@on") seen */
    char *warnbuf; /* a warning being assembled from pieces */
    size_t warnlen;
};

/* --- entering and leaving ---------------------------------------------------- */

typedef struct {
    dl_generator *gen;
    bool grad;
} saved_thread;

static saved_thread enter(dl_state *S) {
    saved_thread s;
    dlL_adopt_state(S->L);
    s.gen = dl_set_thread_generator(&S->gen);
    s.grad = dl_set_grad_enabled(S->grad_enabled);
    return s;
}

static void leave(dl_state *S, saved_thread s) {
    S->grad_enabled = dl_set_grad_enabled(s.grad);
    dl_set_thread_generator(s.gen);
}

/* --- errors ------------------------------------------------------------------ */

static void set_error(dl_state *S, const char *msg) {
    free(S->error);
    S->error = strdup(msg ? msg : "(no message)");
    dl_error("%s", msg ? msg : "(no message)");
}

static void clear_error(dl_state *S) {
    free(S->error);
    S->error = NULL;
}

/* Takes the error object on top of the stack as S's error and pops it. */
static int fail_with_top(dl_state *S, int status) {
    lua_State *L = S->L;
    const char *msg = lua_tostring(L, -1);
    set_error(S, msg                    ? msg
                 : status == LUA_ERRMEM ? "not enough memory"
                                        : "(error object is not a string)");
    lua_pop(L, 1);
    return status;
}

int dlL_msghandler(lua_State *L) {
    const char *msg = lua_tostring(L, 1);
    if (msg == NULL) {
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) return 1;
        msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    luaL_traceback(L, L, msg, 1);
    return 1;
}

/* Calls the function below narg arguments with dlL_msghandler; leaves nres
 * results (or pops the error into S->error).  Returns the Lua status. */
static int docall(dl_state *S, int narg, int nres) {
    lua_State *L = S->L;
    int base = lua_gettop(L) - narg;
    lua_pushcfunction(L, dlL_msghandler);
    lua_insert(L, base);
    int status = lua_pcall(L, narg, nres, base);
    lua_remove(L, base);
    if (status != LUA_OK) return fail_with_top(S, status);
    clear_error(S);
    return LUA_OK;
}

/* Calls fn(ud) protected, on S's state entered from the calling thread;
 * returns docall's status (an error is kept in S). */
static int run_protected(dl_state *S, lua_CFunction fn, void *ud) {
    saved_thread saved = enter(S);
    lua_pushcfunction(S->L, fn);
    lua_pushlightuserdata(S->L, ud);
    int status = docall(S, 1, 0);
    leave(S, saved);
    return status;
}

static int bad_arg(dl_state *S, const char *msg) {
    if (S)
        set_error(S, msg);
    else
        dl_error("%s", msg);
    return DL_ERR_ARG;
}

/* --- output ------------------------------------------------------------------- */

static void emit(dl_state *S, int kind, const char *text, size_t len) {
    if (S->output) {
        S->output(S->output_ctx, kind, text, len);
    } else {
        FILE *f = kind == DL_OUTPUT_PRINT ? stdout : stderr;
        if (kind == DL_OUTPUT_WARNING) fputs("Lua warning: ", f);
        fwrite(text, 1, len, f);
        fflush(f);
    }
}

void dlL_pushprintline(lua_State *L) {
    int n = lua_gettop(L);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (int i = 1; i <= n; i++) {
        if (i > 1) luaL_addchar(&b, '\t');
        luaL_tolstring(L, i, NULL);
        luaL_addvalue(&b);
    }
    luaL_addchar(&b, '\n');
    luaL_pushresult(&b);
}

/* print(...): Lua's print, one line delivered to the sink in one piece. */
static int l_print(lua_State *L) {
    dl_state *S = lua_touserdata(L, lua_upvalueindex(1));
    dlL_pushprintline(L);
    size_t len;
    const char *s = lua_tolstring(L, -1, &len);
    emit(S, DL_OUTPUT_PRINT, s, len);
    return 0;
}

/* Warning function: pieces are joined until the last one; "@on"/"@off" as a
 * whole message switch warnings on and off (off at first, as in lua.c). */
static void warnf(void *ud, const char *msg, int tocont) {
    dl_state *S = ud;
    if (!S->warnbuf && !tocont && msg[0] == '@') {
        if (strcmp(msg, "@on") == 0)
            S->warn_on = true;
        else if (strcmp(msg, "@off") == 0)
            S->warn_on = false;
        return;
    }
    size_t n = strlen(msg);
    char *grown = realloc(S->warnbuf, S->warnlen + n + 2);
    if (grown) {
        memcpy(grown + S->warnlen, msg, n);
        S->warnbuf = grown;
        S->warnlen += n;
    }
    if (tocont) return;
    if (S->warnbuf) {
        S->warnbuf[S->warnlen++] = '\n';
        S->warnbuf[S->warnlen] = '\0';
        if (S->warn_on) emit(S, DL_OUTPUT_WARNING, S->warnbuf, S->warnlen);
    }
    free(S->warnbuf);
    S->warnbuf = NULL;
    S->warnlen = 0;
}

void dl_state_set_output(dl_state *S, dl_output_fn fn, void *ctx) {
    if (!S) return;
    S->output = fn;
    S->output_ctx = ctx;
}

/* --- opening and closing -------------------------------------------------------- */

/* os.exit in an embedded state: an error for the host to see, not an exit. */
static int l_exit(lua_State *L) {
    return luaL_error(L, "os.exit: an embedded dlua state cannot exit the host program");
}

static int open_libs(lua_State *L) {
    dl_state *S = lua_touserdata(L, 1);
    luaL_openlibs(L);
    luaL_requiref(L, "dl", luaopen_dl, 1);
    lua_pop(L, 1);
    lua_pushlightuserdata(L, S);
    lua_pushcclosure(L, l_print, 1);
    lua_setglobal(L, "print");
    lua_getglobal(L, "os");
    lua_pushcfunction(L, l_exit);
    lua_setfield(L, -2, "exit");
    lua_pop(L, 1);
    return 0;
}

dl_state *dl_state_open(void) {
    dl_state *S = dl_zalloc(sizeof *S, "dl_state_open: out of memory");
    if (!S) return NULL;
    S->gen.seed = DL_DEFAULT_SEED;
    S->grad_enabled = true;
    S->L = luaL_newstate();
    if (!S->L) {
        free(S);
        dl_error("dl_state_open: cannot create a Lua state (out of memory)");
        return NULL;
    }
    lua_setwarnf(S->L, warnf, S);
    int status = run_protected(S, open_libs, S);
    if (status != LUA_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "dl_state_open: %s", S->error ? S->error : "failed");
        dl_state_close(S);
        dl_error("%s", msg);
        return NULL;
    }
    return S;
}

void dl_state_close(dl_state *S) {
    if (!S) return;
    if (S->L) {
        saved_thread saved = enter(S);
        lua_close(S->L); /* finalizers release the tensors Lua held */
        S->L = NULL;
        dl_set_grad_enabled(saved.grad);
        dl_set_thread_generator(saved.gen);
    }
    free(S->error);
    free(S->warnbuf);
    free(S);
    dl_cpu_cache_empty(); /* the freed tensors' host buffers go back to the system */
}

const char *dl_state_error(dl_state *S) {
    return S && S->error ? S->error : "";
}

lua_State *dl_state_lua(dl_state *S) {
    return S ? S->L : NULL;
}

/* --- running code ---------------------------------------------------------------- */

/* Loads a chunk (the code, or the file at path) on S's thread and runs it. */
static int load_and_run(dl_state *S, const char *text, bool is_path) {
    saved_thread saved = enter(S);
    int status = is_path ? luaL_loadfile(S->L, text) : luaL_loadstring(S->L, text);
    if (status == LUA_OK)
        status = docall(S, 0, 0);
    else
        fail_with_top(S, status);
    leave(S, saved);
    return status;
}

int dl_state_dostring(dl_state *S, const char *code) {
    if (!S) return bad_arg(S, "dl_state_dostring: state is NULL");
    if (!code) return bad_arg(S, "dl_state_dostring: code is NULL");
    return load_and_run(S, code, false);
}

int dl_state_dofile(dl_state *S, const char *path) {
    if (!S) return bad_arg(S, "dl_state_dofile: state is NULL");
    if (!path) return bad_arg(S, "dl_state_dofile: path is NULL");
    return load_and_run(S, path, true);
}

/* --- tensors in and out ------------------------------------------------------------ */

typedef struct {
    const char *name;
    dl_tensor *tensor;
} global_args;

static int set_global(lua_State *L) {
    global_args *a = lua_touserdata(L, 1);
    dlL_pushopttensor(L, dl_tensor_retain(a->tensor));
    lua_setglobal(L, a->name);
    return 0;
}

int dl_state_set_tensor(dl_state *S, const char *global, dl_tensor *t) {
    if (!S) return bad_arg(S, "dl_state_set_tensor: state is NULL");
    if (!global) return bad_arg(S, "dl_state_set_tensor: global name is NULL");
    global_args a = {global, t};
    int status = run_protected(S, set_global, &a);
    return status;
}

static int get_global(lua_State *L) {
    global_args *a = lua_touserdata(L, 1);
    lua_getglobal(L, a->name);
    dl_tensor *t = dlL_totensor(L, -1);
    if (!t)
        return luaL_error(L, "dl_state_get_tensor: global '%s' is %s, not a tensor", a->name,
                          lua_isnil(L, -1) ? "nil" : luaL_typename(L, -1));
    a->tensor = dl_tensor_retain(t); /* nothing can fail after this */
    return 0;
}

dl_tensor *dl_state_get_tensor(dl_state *S, const char *global) {
    if (!S) {
        bad_arg(S, "dl_state_get_tensor: state is NULL");
        return NULL;
    }
    if (!global) {
        bad_arg(S, "dl_state_get_tensor: global name is NULL");
        return NULL;
    }
    global_args a = {global, NULL};
    int status = run_protected(S, get_global, &a);
    return status == LUA_OK ? a.tensor : NULL;
}

/* --- calling functions --------------------------------------------------------------- */

typedef struct {
    const char *function;
    int nargs;
    dl_tensor *const *args;
    int nresults;
    dl_tensor **results;
} call_args;

/* Raises unless the value on top can be indexed (a table, or anything with
 * an __index metamethod); `what` names it in the message. */
static void check_indexable(lua_State *L, const char *path, size_t prefix) {
    if (lua_istable(L, -1)) return;
    if (luaL_getmetafield(L, -1, "__index") != LUA_TNIL) {
        lua_pop(L, 1);
        return;
    }
    lua_pushlstring(L, path, prefix);
    luaL_error(L, "dl_state_call: cannot look up '%s': '%s' is %s", path, lua_tostring(L, -1),
               lua_isnil(L, -2) ? "nil" : luaL_typename(L, -2));
}

/* Pushes the callee named by path: "f", "a.b.c", or "a.b:m" - the method
 * then the object, returning 1 (one extra argument, self); else returns 0. */
static int push_callee(lua_State *L, const char *path) {
    const char *colon = strchr(path, ':');
    const char *end = colon ? colon : path + strlen(path);
    if (end == path || end[-1] == '.' || (colon && (!colon[1] || strpbrk(colon + 1, ".:"))))
        luaL_error(L, "dl_state_call: invalid function name '%s'", path);
    lua_pushglobaltable(L);
    for (const char *p = path; p < end;) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        size_t len = dot ? (size_t)(dot - p) : (size_t)(end - p);
        if (len == 0) luaL_error(L, "dl_state_call: invalid function name '%s'", path);
        if (p != path) check_indexable(L, path, (size_t)(p - 1 - path));
        lua_pushlstring(L, p, len);
        lua_gettable(L, -2);
        lua_remove(L, -2);
        p = dot ? dot + 1 : end;
    }
    if (!colon) return 0;
    check_indexable(L, path, (size_t)(colon - path));
    lua_getfield(L, -1, colon + 1);
    lua_insert(L, -2); /* method, self */
    return 1;
}

static int is_callable(lua_State *L, int idx) {
    if (lua_isfunction(L, idx)) return 1;
    if (luaL_getmetafield(L, idx, "__call") == LUA_TNIL) return 0;
    lua_pop(L, 1);
    return 1;
}

static int call_function(lua_State *L) {
    call_args *a = lua_touserdata(L, 1);
    lua_settop(L, 0);
    int self = push_callee(L, a->function);
    if (!is_callable(L, 1))
        return luaL_error(L, "dl_state_call: '%s' is not a function (a %s value)", a->function,
                          lua_isnil(L, 1) ? "nil" : luaL_typename(L, 1));
    luaL_checkstack(L, a->nargs + a->nresults + 4, "dl_state_call: too many arguments");
    for (int i = 0; i < a->nargs; i++) dlL_pushopttensor(L, dl_tensor_retain(a->args[i]));
    lua_call(L, self + a->nargs, a->nresults);
    /* results at 1..nresults: check them all (numbers become tensors, still
     * owned by Lua), then take references - nothing can fail after that */
    for (int i = 1; i <= a->nresults; i++) {
        if (dlL_totensor(L, i)) continue;
        if (lua_type(L, i) == LUA_TNUMBER) {
            dl_tensor *t;
            if (lua_isinteger(L, i)) {
                t = dl_tensor_empty(0, NULL, DL_DTYPE_I64, DL_CPU);
                if (t) *(int64_t *)dl_tensor_data_ptr(t) = (int64_t)lua_tointeger(L, i);
            } else {
                t = dl_tensor_scalar(lua_tonumber(L, i), DL_DTYPE_F64);
            }
            dlL_pushtensor(L, t);
            lua_replace(L, i);
            continue;
        }
        return luaL_error(L, "dl_state_call: result %d of '%s' is %s, not a tensor", i, a->function,
                          lua_isnil(L, i) ? "nil" : luaL_typename(L, i));
    }
    for (int i = 0; i < a->nresults; i++) a->results[i] = dl_tensor_retain(dlL_totensor(L, i + 1));
    return 0;
}

int dl_state_call(dl_state *S, const char *function, int nargs, dl_tensor *const *args,
                  int nresults, dl_tensor **results) {
    if (results && nresults > 0)
        for (int i = 0; i < nresults; i++) results[i] = NULL;
    if (!S) return bad_arg(S, "dl_state_call: state is NULL");
    if (!function) return bad_arg(S, "dl_state_call: function name is NULL");
    if (nargs < 0 || (nargs > 0 && !args))
        return bad_arg(S, "dl_state_call: nargs is negative, or args is NULL");
    if (nresults < 0 || (nresults > 0 && !results))
        return bad_arg(S, "dl_state_call: nresults is negative, or results is NULL");
    call_args a = {function, nargs, args, nresults, results};
    int status = run_protected(S, call_function, &a);
    if (status != LUA_OK)
        for (int i = 0; i < nresults; i++) results[i] = NULL;
    return status;
}
