/* l_train.c - bindings the training programs (scripts/train_resnet.lua and
 * lua/dl/train/) need beyond tensors:
 *   dl.get_rng_state() -> int64 tensor {seed, offset} of the default generator
 *   dl.set_rng_state(t)   restores it (a tensor from get_rng_state)
 * and, in the private table dl._train:
 *   sigint_watch(true|false)  installs (or removes) a SIGINT handler that only
 *                             counts: the program polls sigint_pending() and
 *                             stops at a safe point; a second Ctrl-C restores
 *                             the default action and kills the process
 *   sigint_pending() -> count of SIGINTs since sigint_watch(true)
 *   isatty(fd) -> boolean
 *   json_decode(s) -> value   (objects -> tables, arrays -> 1-based lists,
 *                             null -> nil, integers stay integers)
 *   plot_rect(img, x, y, w, h, {r,g,b} [, alpha])
 *   plot_line(img, x0, y0, x1, y1, {r,g,b} [, width])
 *   plot_text(img, x, y, s, {r,g,b} [, scale [, vertical]])
 *   text_width(s [, scale]) -> pixels
 * Plot coordinates are 0-based pixels (a drawing convention, not an index);
 * see src/io/plot.h.  Every argument is checked before anything is drawn. */
#include "l_bind.h"
#include "core/rng.h"
#include "io/json.h"
#include "io/plot.h"

#include <math.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

/* --- RNG state ------------------------------------------------------------------------- */

static int l_get_rng_state(lua_State *L) {
    if (lua_gettop(L) > 0) return luaL_error(L, "get_rng_state: takes no arguments");
    dl_generator *g = dl_default_generator();
    int64_t shape[1] = {2};
    dl_tensor *t = dl_tensor_empty(1, shape, DL_DTYPE_I64, DL_CPU);
    if (!t) return dlL_fail(L);
    int64_t *p = dl_tensor_data_ptr(t);
    p[0] = (int64_t)g->seed;
    p[1] = (int64_t)g->offset;
    return dlL_pushtensor(L, t);
}

static int l_set_rng_state(lua_State *L) {
    dl_tensor *t = dlL_totensor(L, 1);
    if (!t)
        return luaL_error(L, "set_rng_state: expected the tensor get_rng_state returns, got %s",
                          luaL_typename(L, 1));
    if (t->dtype != DL_DTYPE_I64 || t->ndim != 1 || t->shape[0] != 2 ||
        dl_tensor_device(t).type != DL_DEVICE_CPU)
        return luaL_error(L, "set_rng_state: expected an int64 CPU tensor of 2 elements "
                             "{seed, offset}");
    int64_t seed = dl_load_i64(dl_tensor_data_ptr(t), DL_DTYPE_I64);
    int64_t offset = dl_load_i64((char *)dl_tensor_data_ptr(t) + t->strides[0] * 8, DL_DTYPE_I64);
    dl_generator *g = dl_default_generator();
    g->seed = (uint64_t)seed;
    g->offset = (uint64_t)offset;
    return 0;
}

/* --- SIGINT ---------------------------------------------------------------------------- */

static volatile sig_atomic_t sigint_count = 0;
static struct sigaction sigint_old;
static int sigint_installed = 0;

void dlL_die_of_signal(int sig, const char *msg, size_t len) {
    if (write(STDERR_FILENO, msg, len) < 0) { /* nothing to do */
    }
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    raise(sig);
}

static void on_sigint(int sig) {
    if (++sigint_count >= 2) {
        static const char msg[] = "\ninterrupted again: quitting now\n";
        dlL_die_of_signal(sig, msg, sizeof msg - 1);
        return;
    }
    static const char msg[] = "\ninterrupt: finishing this step, then saving a checkpoint "
                              "(Ctrl-C again quits at once)\n";
    if (write(STDERR_FILENO, msg, sizeof msg - 1) < 0) { /* nothing to do */
    }
}

static int l_sigint_watch(lua_State *L) {
    luaL_checktype(L, 1, LUA_TBOOLEAN);
    int on = lua_toboolean(L, 1);
    if (on && !sigint_installed) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_sigint;
        sa.sa_flags = SA_RESTART;
        sigemptyset(&sa.sa_mask);
        sigint_count = 0;
        if (sigaction(SIGINT, &sa, &sigint_old) != 0)
            return luaL_error(L, "sigint_watch: cannot install the handler");
        sigint_installed = 1;
    } else if (!on && sigint_installed) {
        sigaction(SIGINT, &sigint_old, NULL);
        sigint_installed = 0;
    }
    return 0;
}

static int l_sigint_pending(lua_State *L) {
    lua_pushinteger(L, sigint_count);
    return 1;
}

static int l_isatty(lua_State *L) {
    lua_Integer fd = luaL_checkinteger(L, 1);
    lua_pushboolean(L, fd >= 0 && fd <= 1024 && isatty((int)fd));
    return 1;
}

/* --- JSON ------------------------------------------------------------------------------ */

static void push_json(lua_State *L, const dl_json *v) {
    luaL_checkstack(L, 4, "json_decode: nesting too deep");
    switch (v->type) {
    case DL_JSON_NULL: lua_pushnil(L); break;
    case DL_JSON_BOOL: lua_pushboolean(L, v->boolean); break;
    case DL_JSON_NUMBER:
        if (v->is_integer && !v->int_overflow)
            lua_pushinteger(L, (lua_Integer)v->integer);
        else
            lua_pushnumber(L, v->number);
        break;
    case DL_JSON_STRING: lua_pushlstring(L, v->str, v->len); break;
    case DL_JSON_ARRAY:
        lua_createtable(L, (int)v->count, 0);
        for (size_t i = 0; i < v->count; i++) {
            push_json(L, v->items[i]);
            lua_rawseti(L, -2, (lua_Integer)i + 1);
        }
        break;
    case DL_JSON_OBJECT:
        lua_createtable(L, 0, (int)v->count);
        for (size_t i = 0; i < v->count; i++) {
            lua_pushlstring(L, v->keys[i], v->key_lens[i]);
            push_json(L, v->items[i]);
            lua_rawset(L, -3);
        }
        break;
    }
}

#define DL_JSON_BOX_MT "dl.train.json"

static int json_box_gc(lua_State *L) {
    dl_json **box = luaL_checkudata(L, 1, DL_JSON_BOX_MT);
    dl_json_free(*box);
    *box = NULL;
    return 0;
}

static int l_json_decode(lua_State *L) {
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    dl_json **box = lua_newuserdatauv(L, sizeof *box, 0); /* frees the tree on errors */
    *box = NULL;
    luaL_setmetatable(L, DL_JSON_BOX_MT);
    dl_json *v = dl_json_parse(s, n);
    if (!v) return luaL_error(L, "json_decode: %s", dl_last_error());
    *box = v;
    push_json(L, v);
    dl_json_free(v);
    *box = NULL;
    return 1;
}

/* --- plotting -------------------------------------------------------------------------- */

static dl_tensor *check_image(lua_State *L, int idx, const char *op) {
    dl_tensor *t = dlL_totensor(L, idx);
    if (!t) luaL_error(L, "%s: expected an image tensor, got %s", op, luaL_typename(L, idx));
    return t;
}

/* A finite coordinate (a non-finite one is passed on: the C side skips it). */
static double check_coord(lua_State *L, int idx, const char *op) {
    if (lua_type(L, idx) != LUA_TNUMBER)
        luaL_error(L, "%s: argument %d must be a number, got %s", op, idx, luaL_typename(L, idx));
    return lua_tonumber(L, idx);
}

static void check_color(lua_State *L, int idx, const char *op, uint8_t rgb[3]) {
    if (!lua_istable(L, idx))
        luaL_error(L, "%s: colour must be a table {r, g, b}, got %s", op, luaL_typename(L, idx));
    for (int k = 0; k < 3; k++) {
        lua_rawgeti(L, idx, k + 1);
        lua_Number v = lua_tonumber(L, -1);
        if (!lua_isnumber(L, -1) || !(v >= 0 && v <= 255))
            luaL_error(L, "%s: colour components must be numbers in 0..255", op);
        rgb[k] = (uint8_t)lrint(v);
        lua_pop(L, 1);
    }
}

/* The arguments plot_rect and plot_line share: (image, four coordinates,
 * colour [, a number that defaults to 1]). */
typedef struct {
    dl_tensor *img;
    double c[4];
    uint8_t rgb[3];
    double extra;
} shape_args;

static shape_args check_shape_args(lua_State *L, const char *op) {
    shape_args a;
    a.img = check_image(L, 1, op);
    for (int i = 0; i < 4; i++) a.c[i] = check_coord(L, 2 + i, op);
    check_color(L, 6, op, a.rgb);
    a.extra = luaL_optnumber(L, 7, 1.0);
    return a;
}

/* plot_rect(img, x, y, w, h, rgb [, alpha]) */
static int l_plot_rect(lua_State *L) {
    shape_args a = check_shape_args(L, "plot_rect");
    return dlL_done(L, dl_plot_fill_rect(a.img, a.c[0], a.c[1], a.c[2], a.c[3], a.rgb, a.extra));
}

/* plot_line(img, x0, y0, x1, y1, rgb [, width]) */
static int l_plot_line(lua_State *L) {
    shape_args a = check_shape_args(L, "plot_line");
    if (!(a.extra > 0 && a.extra <= 64))
        return luaL_error(L, "plot_line: width must be in (0, 64]");
    return dlL_done(L, dl_plot_line(a.img, a.c[0], a.c[1], a.c[2], a.c[3], a.rgb, a.extra));
}

static int check_scale(lua_State *L, int idx, const char *op) {
    lua_Integer s = luaL_optinteger(L, idx, 1);
    if (s < 1 || s > 16) return luaL_error(L, "%s: scale must be 1..16, got %d", op, (int)s);
    return (int)s;
}

static int l_plot_text(lua_State *L) {
    const char *op = "plot_text";
    dl_tensor *img = check_image(L, 1, op);
    double x = check_coord(L, 2, op), y = check_coord(L, 3, op);
    size_t n;
    const char *s = luaL_checklstring(L, 4, &n);
    uint8_t rgb[3];
    check_color(L, 5, op, rgb);
    int scale = check_scale(L, 6, op);
    int vertical = lua_toboolean(L, 7);
    if (!isfinite(x) || !isfinite(y) || fabs(x) > 1e9 || fabs(y) > 1e9) return 0;
    return dlL_done(
        L, dl_plot_text(img, (int64_t)floor(x), (int64_t)floor(y), s, n, rgb, scale, vertical));
}

static int l_text_width(lua_State *L) {
    size_t n;
    luaL_checklstring(L, 1, &n);
    int scale = check_scale(L, 2, "text_width");
    lua_pushinteger(L, (lua_Integer)dl_plot_text_width(n, scale));
    return 1;
}

void dlL_open_train(lua_State *L) {
    static const luaL_Reg json_box_meta[] = {{"__gc", json_box_gc}, {NULL, NULL}};
    dlL_newclass(L, DL_JSON_BOX_MT, json_box_meta, NULL);

    static const luaL_Reg functions[] = {
        {"get_rng_state", l_get_rng_state},
        {"set_rng_state", l_set_rng_state},
        {NULL, NULL},
    };
    dlL_register(L, functions, NULL);

    static const luaL_Reg priv[] = {
        {"sigint_watch", l_sigint_watch},
        {"sigint_pending", l_sigint_pending},
        {"isatty", l_isatty},
        {"json_decode", l_json_decode},
        {"plot_rect", l_plot_rect},
        {"plot_line", l_plot_line},
        {"plot_text", l_plot_text},
        {"text_width", l_text_width},
        {NULL, NULL},
    };
    lua_getfield(L, LUA_REGISTRYINDEX, DL_MODULE_KEY);
    luaL_newlib(L, priv);
    lua_setfield(L, -2, "_train");
    lua_pop(L, 1);
}
