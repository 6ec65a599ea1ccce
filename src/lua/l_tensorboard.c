/* l_tensorboard.c - the hidden dl._tensorboard table that
 * lua/dl/utils/tensorboard.lua (SummaryWriter) builds on: an event-file
 * writer userdata, the event reader, CRC-32C.
 *
 * Invariants: the writer userdata is created before the file is opened, so
 * __gc/__close always run and close it once; a closed writer refuses further
 * adds with an error.  Arguments arrive already checked and named by the Lua
 * side (tags are strings, steps integers, images PNG bytes); what is checked
 * again here is what C would otherwise misread. */
#include "l_bind.h"
#include "core/error.h"
#include "io/tfevent.h"

#include <math.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DL_TFWRITER_MT "dl.TFEventWriter"

typedef struct {
    dl_tfevent_writer *w;
} writer_box;

/* dl_last_error() as a Lua error without a position prefix: the messages
 * already name SummaryWriter's method and the file */
static int tb_fail(lua_State *L) {
    const char *msg = dl_last_error();
    lua_pushstring(L, msg[0] ? msg : "SummaryWriter: unknown error");
    return lua_error(L);
}

/* rc != 0: tb_fail; else no results */
static int tb_done(lua_State *L, int rc) {
    return rc ? tb_fail(L) : 0;
}

static dl_tfevent_writer *check_open(lua_State *L, const char *op) {
    writer_box *b = luaL_checkudata(L, 1, DL_TFWRITER_MT);
    if (!b->w) luaL_error(L, "SummaryWriter.%s: the writer is closed", op);
    return b->w;
}

static double opt_wall(lua_State *L, int idx) {
    if (lua_isnoneornil(L, idx)) return -1;
    double t = luaL_checknumber(L, idx);
    if (!isfinite(t) || t < 0) luaL_argerror(L, idx, "walltime must be a finite number >= 0");
    return t;
}

/* _tensorboard.open(dir, suffix, flush_secs, max_queue) */
static int l_open(lua_State *L) {
    const char *dir = luaL_checkstring(L, 1);
    const char *suffix = luaL_optstring(L, 2, "");
    double flush_secs = luaL_optnumber(L, 3, 120);
    lua_Integer max_queue = luaL_optinteger(L, 4, 10);
    writer_box *b = lua_newuserdatauv(L, sizeof *b, 0);
    b->w = NULL;
    luaL_setmetatable(L, DL_TFWRITER_MT);
    b->w =
        dl_tfevent_open(dir, suffix, flush_secs, (int)(max_queue > 1 << 20 ? 1 << 20 : max_queue));
    if (!b->w) return tb_fail(L);
    return 1;
}

static int w_close(lua_State *L) {
    writer_box *b = luaL_checkudata(L, 1, DL_TFWRITER_MT);
    dl_tfevent_writer *w = b->w;
    b->w = NULL;
    return tb_done(L, dl_tfevent_close(w));
}

static int w_gc(lua_State *L) {
    writer_box *b = luaL_checkudata(L, 1, DL_TFWRITER_MT);
    dl_tfevent_close(b->w); /* no error from a collector */
    b->w = NULL;
    return 0;
}

static int w_path(lua_State *L) {
    lua_pushstring(L, dl_tfevent_path(check_open(L, "path")));
    return 1;
}

static int w_flush(lua_State *L) {
    return tb_done(L, dl_tfevent_flush(check_open(L, "flush")));
}

/* w:scalar(tag, value, step, wall) */
static int w_scalar(lua_State *L) {
    dl_tfevent_writer *w = check_open(L, "add_scalar");
    const char *tag = luaL_checkstring(L, 2);
    float v = (float)luaL_checknumber(L, 3);
    return tb_done(L, dl_tfevent_add_scalar(w, tag, v, luaL_checkinteger(L, 4), opt_wall(L, 5)));
}

/* w:image(tag, png, height, width, channels, step, wall) */
static int w_image(lua_State *L) {
    dl_tfevent_writer *w = check_open(L, "add_image");
    const char *tag = luaL_checkstring(L, 2);
    size_t n;
    const char *png = luaL_checklstring(L, 3, &n);
    int h = (int)luaL_checkinteger(L, 4), wd = (int)luaL_checkinteger(L, 5);
    int c = (int)luaL_checkinteger(L, 6);
    return tb_done(L, dl_tfevent_add_image(w, tag, h, wd, c, (const uint8_t *)png, n,
                                           luaL_checkinteger(L, 7), opt_wall(L, 8)));
}

/* w:histogram(tag, values (contiguous float64 CPU tensor), step, wall) */
static int w_histogram(lua_State *L) {
    dl_tfevent_writer *w = check_open(L, "add_histogram");
    const char *tag = luaL_checkstring(L, 2);
    dl_tensor *t = dlL_checktensor(L, 3);
    if (t->dtype != DL_DTYPE_F64 || !dl_tensor_is_contiguous(t) ||
        dl_tensor_device(t).type != DL_DEVICE_CPU)
        return luaL_argerror(L, 3, "add_histogram: values must be a contiguous float64 CPU tensor");
    return tb_done(L, dl_tfevent_add_histogram(w, tag, dl_tensor_data_ptr(t),
                                               (size_t)dl_tensor_numel(t), luaL_checkinteger(L, 4),
                                               opt_wall(L, 5)));
}

/* w:text(tag, text, step, wall) */
static int w_text(lua_State *L) {
    dl_tfevent_writer *w = check_open(L, "add_text");
    const char *tag = luaL_checkstring(L, 2);
    size_t n;
    const char *s = luaL_checklstring(L, 3, &n);
    return tb_done(L, dl_tfevent_add_text(w, tag, s, n, luaL_checkinteger(L, 4), opt_wall(L, 5)));
}

/* v at idx (number, string or boolean; checked by the Lua side) */
static void to_hp_value(lua_State *L, int idx, dl_tfhp_value *v) {
    memset(v, 0, sizeof *v);
    switch (lua_type(L, idx)) {
    case LUA_TSTRING:
        v->type = DL_TFHP_STRING;
        v->string = lua_tostring(L, idx); /* kept alive by the argument table */
        break;
    case LUA_TBOOLEAN:
        v->type = DL_TFHP_BOOL;
        v->boolean = lua_toboolean(L, idx);
        break;
    case LUA_TNUMBER:
        v->type = DL_TFHP_NUMBER;
        v->number = lua_tonumber(L, idx);
        break;
    default:
        luaL_error(L, "SummaryWriter.add_hparams: a value must be a number, string or boolean");
    }
}

/* w:hparams({{name, value, domain = {...}}, ...}, {metric tag, ...}, step, wall) */
static int w_hparams(lua_State *L) {
    dl_tfevent_writer *w = check_open(L, "add_hparams");
    luaL_checktype(L, 2, LUA_TTABLE);
    luaL_checktype(L, 3, LUA_TTABLE);
    int64_t step = luaL_checkinteger(L, 4);
    double wall = opt_wall(L, 5);
    size_t n = lua_rawlen(L, 2), nm = lua_rawlen(L, 3), nd = 0;
    for (size_t i = 1; i <= n; i++) {
        luaL_argcheck(L, lua_rawgeti(L, 2, (lua_Integer)i) == LUA_TTABLE, 2, "hparam entries");
        if (lua_getfield(L, -1, "domain") == LUA_TTABLE) nd += lua_rawlen(L, -1);
        lua_pop(L, 2);
    }
    /* userdata: freed by the collector even when an error is raised below */
    dl_tfhparam *hp = lua_newuserdatauv(
        L, (n + 1) * sizeof *hp + (nd + 1) * sizeof(dl_tfhp_value) + (nm + 1) * sizeof(char *), 0);
    dl_tfhp_value *dom = (dl_tfhp_value *)(hp + n + 1);
    const char **metrics = (const char **)(dom + nd + 1);
    size_t d = 0;
    for (size_t i = 0; i < n; i++) {
        lua_rawgeti(L, 2, (lua_Integer)i + 1);
        lua_rawgeti(L, -1, 1);
        hp[i].name = luaL_checkstring(L, -1);
        lua_rawgeti(L, -2, 2);
        to_hp_value(L, -1, &hp[i].value);
        hp[i].domain = dom + d;
        hp[i].n_domain = 0;
        if (lua_getfield(L, -3, "domain") == LUA_TTABLE) {
            size_t k = lua_rawlen(L, -1);
            for (size_t j = 1; j <= k; j++, d++) {
                lua_rawgeti(L, -1, (lua_Integer)j);
                to_hp_value(L, -1, &dom[d]);
                lua_pop(L, 1);
            }
            hp[i].n_domain = k;
        }
        lua_pop(L, 4);
    }
    for (size_t i = 0; i < nm; i++) {
        lua_rawgeti(L, 3, (lua_Integer)i + 1);
        metrics[i] = luaL_checkstring(L, -1);
        lua_pop(L, 1);
    }
    return tb_done(L, dl_tfevent_add_hparams(w, hp, n, metrics, nm, step, wall));
}

/* --- reading ------------------------------------------------------------------------- */

static void set_num(lua_State *L, const char *k, double v) {
    lua_pushnumber(L, v);
    lua_setfield(L, -2, k);
}

static void set_list(lua_State *L, const char *k, const double *v, size_t n) {
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_pushnumber(L, v[i]);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, k);
}

/* appends one table per value to the list at stack index 2 */
static int read_cb(void *ud, const dl_tfevent_value *v) {
    lua_State *L = ud;
    static const char *const kinds[] = {"event", "scalar", "image", "histogram", "text", "other"};
    lua_createtable(L, 0, 8);
    set_num(L, "wall_time", v->wall_time);
    lua_pushinteger(L, v->step);
    lua_setfield(L, -2, "step");
    lua_pushstring(L, v->file_version ? "file_version" : kinds[v->kind]);
    lua_setfield(L, -2, "kind");
    if (v->file_version) {
        lua_pushstring(L, v->file_version);
        lua_setfield(L, -2, "file_version");
    }
    if (v->tag) {
        lua_pushstring(L, v->tag);
        lua_setfield(L, -2, "tag");
    }
    switch (v->kind) {
    case DL_TFV_SCALAR: set_num(L, "value", v->scalar); break;
    case DL_TFV_IMAGE:
        set_num(L, "height", v->height);
        set_num(L, "width", v->width);
        set_num(L, "channels", v->channels);
        lua_pushlstring(L, (const char *)v->png, v->png_len);
        lua_setfield(L, -2, "png");
        break;
    case DL_TFV_HISTOGRAM:
        set_num(L, "min", v->min);
        set_num(L, "max", v->max);
        set_num(L, "num", v->num);
        set_num(L, "sum", v->sum);
        set_num(L, "sum_squares", v->sum_squares);
        set_list(L, "bucket_limit", v->bucket_limit, v->n_buckets);
        set_list(L, "bucket", v->bucket, v->n_buckets);
        break;
    case DL_TFV_TEXT:
        lua_pushlstring(L, v->text, v->text_len);
        lua_setfield(L, -2, "text");
        break;
    default: break;
    }
    lua_rawseti(L, 2, (lua_Integer)lua_rawlen(L, 2) + 1);
    return 0;
}

/* _tensorboard.read(path) -> list of values, truncated (boolean) */
static int l_read(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    lua_settop(L, 1);
    lua_newtable(L);
    int truncated = 0;
    if (dl_tfevent_read(path, read_cb, L, &truncated) < 0) return tb_fail(L);
    lua_pushboolean(L, truncated);
    return 2;
}

/* _tensorboard.crc32c(bytes) -> integer; _tensorboard.mask(crc) -> integer */
static int l_crc32c(lua_State *L) {
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    lua_pushinteger(L, dl_crc32c(0, s, n));
    return 1;
}

static int l_mask(lua_State *L) {
    lua_pushinteger(L, dl_crc32c_mask((uint32_t)luaL_checkinteger(L, 1)));
    return 1;
}

static int l_hostname(lua_State *L) {
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    lua_pushstring(L, host);
    return 1;
}

/* seconds since the epoch, microseconds included (add_hparams' run names) */
static int l_time(lua_State *L) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    lua_pushnumber(L, (double)ts.tv_sec + ts.tv_nsec * 1e-9);
    return 1;
}

static int l_available(lua_State *L) {
    lua_pushboolean(L, dl_tfevent_available());
    return 1;
}

void dlL_open_tensorboard(lua_State *L) {
    static const luaL_Reg meta[] = {{"__gc", w_gc}, {"__close", w_gc}, {NULL, NULL}};
    static const luaL_Reg methods[] = {
        {"path", w_path},     {"flush", w_flush},     {"close", w_close},
        {"scalar", w_scalar}, {"image", w_image},     {"histogram", w_histogram},
        {"text", w_text},     {"hparams", w_hparams}, {NULL, NULL},
    };
    dlL_newclass(L, DL_TFWRITER_MT, meta, methods);
    static const luaL_Reg fns[] = {
        {"open", l_open},           {"read", l_read},
        {"crc32c", l_crc32c},       {"mask", l_mask},
        {"available", l_available}, {"hostname", l_hostname},
        {"time", l_time},           {NULL, NULL},
    };
    dlL_register_in(L, "_tensorboard", fns);
}
