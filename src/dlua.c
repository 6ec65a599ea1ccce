/* dlua.c - the dlua executable: a Lua 5.4 interpreter with the dl module
 * preloaded as the global `dl`.  Runs scripts (`dlua script.lua args`), -e
 * statements, -l modules, and the interactive REPL.  Everything runs under
 * lua_pcall with a traceback handler; an error exits non-zero. */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int luaopen_dl(lua_State *L);

static const char *progname = "dlua";

static int msghandler(lua_State *L) {
    const char *msg = lua_tostring(L, 1);
    if (msg == NULL) {
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) return 1;
        msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    luaL_traceback(L, L, msg, 1);
    return 1;
}

static int report(lua_State *L, int status) {
    if (status != LUA_OK) {
        fprintf(stderr, "%s: %s\n", progname, lua_tostring(L, -1));
        fflush(stderr);
        lua_pop(L, 1);
    }
    return status;
}

static int docall(lua_State *L, int narg, int nres) {
    int base = lua_gettop(L) - narg;
    lua_pushcfunction(L, msghandler);
    lua_insert(L, base);
    int status = lua_pcall(L, narg, nres, base);
    lua_remove(L, base);
    return status;
}

static int dostring(lua_State *L, const char *s, const char *name) {
    int status = luaL_loadbuffer(L, s, strlen(s), name);
    if (status == LUA_OK) status = docall(L, 0, 0);
    return report(L, status);
}

static int dolibrary(lua_State *L, const char *name) {
    lua_getglobal(L, "require");
    lua_pushstring(L, name);
    int status = docall(L, 1, 1);
    if (status == LUA_OK) lua_setglobal(L, name);
    return report(L, status);
}

static void createargtable(lua_State *L, char **argv, int argc, int script) {
    lua_createtable(L, argc - script - 1, script + 1);
    for (int i = 0; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i - script);
    }
    lua_setglobal(L, "arg");
}

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
    const char *fname = argv[0];
    if (strcmp(fname, "-") == 0) fname = NULL;
    int status = luaL_loadfile(L, fname);
    if (status == LUA_OK) {
        int n = pushargs(L);
        status = docall(L, n, LUA_MULTRET);
    }
    return report(L, status);
}

static void print_usage(const char *badoption) {
    if (badoption[1] == 'e' || badoption[1] == 'l')
        fprintf(stderr, "%s: '%s' needs argument\n", progname, badoption);
    else fprintf(stderr, "%s: unrecognized option '%s'\n", progname, badoption);
    fprintf(stderr,
            "usage: %s [options] [script [args]]\n"
            "Available options are:\n"
            "  -e stat   execute string 'stat'\n"
            "  -i        enter interactive mode after executing 'script'\n"
            "  -l mod    require library 'mod' into global 'mod'\n"
            "  -v        show version information\n"
            "  --        stop handling options\n"
            "  -         stop handling options and execute stdin\n",
            progname);
}

static void print_version(void) {
    printf("dlua %s (%s) -- deep learning in Lua\n", DL_VERSION, LUA_RELEASE);
}

int dl_repl(lua_State *L); /* below */

typedef struct {
    int interactive, version, has_e, script;
} args_info;

/* Returns -1 on a bad option. */
static int collectargs(char **argv, args_info *a) {
    int i;
    for (i = 1; argv[i] != NULL; i++) {
        if (argv[i][0] != '-') {
            a->script = i;
            return 0;
        }
        switch (argv[i][1]) {
        case '-':
            if (argv[i][2] != '\0') return -i;
            a->script = argv[i + 1] ? i + 1 : 0;
            return 0;
        case '\0': a->script = i; return 0;
        case 'i': a->interactive = 1; /* -i implies -v */
            __attribute__((fallthrough));
        case 'v':
            if (argv[i][2] != '\0') return -i;
            a->version = 1;
            break;
        case 'e': a->has_e = 1;
            __attribute__((fallthrough));
        case 'l':
            if (argv[i][2] == '\0') {
                i++;
                if (argv[i] == NULL || argv[i][0] == '-') return -(i - 1);
            }
            break;
        default: return -i;
        }
    }
    a->script = 0;
    return 0;
}

static int runargs(lua_State *L, char **argv, int n) {
    for (int i = 1; i < n; i++) {
        if (argv[i][0] != '-') continue;
        int opt = argv[i][1];
        if (opt == 'e' || opt == 'l') {
            const char *extra = argv[i] + 2;
            if (*extra == '\0') extra = argv[++i];
            int status = opt == 'e' ? dostring(L, extra, "=(command line)") : dolibrary(L, extra);
            if (status != LUA_OK) return 0;
        }
    }
    return 1;
}

typedef struct {
    int argc;
    char **argv;
    int status;
} main_args;

static int pmain(lua_State *L) {
    main_args *m = lua_touserdata(L, 1);
    char **argv = m->argv;
    int argc = m->argc;
    args_info a = {0};
    int bad = collectargs(argv, &a);
    if (bad < 0) {
        print_usage(argv[-bad]);
        return 0;
    }
    luaL_checkversion(L);
    luaL_openlibs(L);
    luaL_requiref(L, "dl", luaopen_dl, 1);
    lua_pop(L, 1);
    createargtable(L, argv, argc, a.script);
    if (a.version) print_version();
    if (!runargs(L, argv, a.script > 0 ? a.script : argc)) return 0;
    if (a.script && handle_script(L, argv + a.script) != LUA_OK) return 0;
    if (a.interactive) {
        if (dl_repl(L) != LUA_OK) return 0;
    } else if (a.script == 0 && !a.has_e && !a.version) {
        if (dl_repl(L) != LUA_OK) return 0;
    }
    m->status = 1;
    return 0;
}

/* A plain line-reading loop; the readline REPL replaces it. */
int dl_repl(lua_State *L) {
    char line[4096];
    fputs("> ", stdout);
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
        dostring(L, line, "=stdin");
        fputs("> ", stdout);
        fflush(stdout);
    }
    return LUA_OK;
}

int main(int argc, char **argv) {
    if (argv[0] && argv[0][0]) progname = argv[0];
    lua_State *L = luaL_newstate();
    if (!L) {
        fprintf(stderr, "%s: cannot create state: not enough memory\n", progname);
        return EXIT_FAILURE;
    }
    main_args m = {argc, argv, 0};
    lua_pushcfunction(L, pmain);
    lua_pushlightuserdata(L, &m);
    int status = lua_pcall(L, 1, 1, 0);
    report(L, status);
    lua_close(L);
    return (status == LUA_OK && m.status) ? EXIT_SUCCESS : EXIT_FAILURE;
}
