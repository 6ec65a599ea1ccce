/* l_embedding.c - Lua bindings of the embedding family (src/ops/embedding.h):
 * kernel entry points in dl._nn and the recording ones in dl._F:
 *
 *   dl._F.embedding(input, weight, {padding_idx=, max_norm=, norm_type=2,
 *                   scale_grad_by_freq=false, sparse=false})
 *   dl._F.embedding_bag(input, weight, offsets, {mode="mean", per_sample_weights=,
 *                       padding_idx=, include_last_offset=false, max_norm=, norm_type=2,
 *                       scale_grad_by_freq=false, sparse=false})
 *   dl._nn.embedding_forward(weight, input) -> out
 *   dl._nn.embedding_backward(grad_output, input, num_weights,
 *                             {padding_idx=, scale_grad_by_freq=}) -> grad_weight
 *   dl._nn.embedding_renorm_(weight, input, max_norm, norm_type=2) -> weight
 *
 * Ids, offsets and padding_idx are 1-based (a negative padding_idx counts
 * from the end, -1 the last row); ids and offsets are int64 (or int32)
 * tensors, copied here into 0-based int64 ones on their device.  sparse=true
 * is refused: dlua has no sparse gradients.  Every argument is checked before
 * any tensor is made. */
#include "l_bind.h"
#include "ops/embedding.h"
#include "ops/index.h"

#include <math.h>
#include <string.h>

/* --- arguments ------------------------------------------------------------------------ */

/* Checks that idx holds an int64 or int32 tensor of ids (raises otherwise). */
static dl_tensor *check_ids_arg(lua_State *L, int idx, const char *op, const char *what) {
    dl_tensor *t = dlL_totensor(L, idx);
    if (!t)
        luaL_error(L, "%s: %s must be a tensor of ids (int64), got %s", op, what,
                   luaL_typename(L, idx));
    if (t->dtype != DL_DTYPE_I64 && t->dtype != DL_DTYPE_I32)
        luaL_error(L, "%s: %s must be an int64 (or int32) tensor of 1-based ids, got %s", op, what,
                   dl_dtype_name(t->dtype));
    return t;
}

/* A new contiguous int64 copy of t minus one, on t's device; NULL with the
 * error set (no Lua error: the caller releases what it holds first). */
static dl_tensor *zero_based(dl_tensor *t) {
    if (!t) return NULL;
    dl_tensor *c = dl_tensor_empty(t->ndim, t->shape, DL_DTYPE_I64, dl_tensor_device(t));
    if (c && (dl_tensor_copy_(c, t) || dl_index_shift_(c, -1))) {
        dl_tensor_release(c);
        c = NULL;
    }
    return c;
}

/* padding_idx from the options at opts (nil: -1), 1-based or negative from
 * the end -> 0-based against num rows (range errors are the op's). */
static int64_t opt_padding(lua_State *L, int opts, const char *op, int64_t num) {
    if (dlL_optfield(L, opts, "padding_idx") == LUA_TNIL) {
        lua_pop(L, 1);
        return -1;
    }
    if (!lua_isinteger(L, -1))
        luaL_error(L, "%s: padding_idx must be an integer, got %s", op, luaL_typename(L, -1));
    lua_Integer v = lua_tointeger(L, -1);
    lua_pop(L, 1);
    if (v == 0) luaL_error(L, "%s: padding_idx 0 is invalid (ids are 1-based; -1 is the last)", op);
    if (v < -num || v > num)
        luaL_error(L, "%s: padding_idx %I is out of range for %I embeddings", op, v,
                   (lua_Integer)num);
    return v > 0 ? v - 1 : num + v;
}

/* The options every embedding shares, from the table at opts; num rows. */
static void opt_common(lua_State *L, int opts, const char *op, int64_t num,
                       dl_embedding_params *p) {
    p->padding_idx = opt_padding(L, opts, op, num);
    if (dlL_optfield(L, opts, "max_norm") != LUA_TNIL) {
        if (!lua_isnumber(L, -1) || !(lua_tonumber(L, -1) > 0))
            luaL_error(L, "%s: max_norm must be a positive number", op);
        p->max_norm = lua_tonumber(L, -1);
    }
    lua_pop(L, 1);
    p->norm_type = dlL_optnumber(L, opts, "norm_type", 2);
    if (!(p->norm_type > 0))
        luaL_error(L, "%s: norm_type must be positive, got %g", op, p->norm_type);
    p->scale_grad_by_freq = dlL_optboolean(L, opts, "scale_grad_by_freq", 0);
    if (dlL_optboolean(L, opts, "sparse", 0))
        luaL_error(L, "%s: sparse=true is not supported (dlua has no sparse gradients)", op);
}

/* --- dl._F --------------------------------------------------------------------------- */

/* F.embedding(input, weight, {padding_idx=, max_norm=, norm_type=, scale_grad_by_freq=, sparse=})
 */
static int F_embedding(lua_State *L) {
    static const char *const keys[] = {"padding_idx",        "max_norm", "norm_type",
                                       "scale_grad_by_freq", "sparse",   NULL};
    const char *op = "embedding";
    dl_tensor *ids = check_ids_arg(L, 1, op, "input");
    dl_tensor *w = dlL_checktensor(L, 2);
    dlL_checkoptions(L, 3, op, keys);
    dlL_nomore(L, 3, op);
    dl_embedding_params p = dl_embedding_default_params();
    opt_common(L, 3, op, w->ndim == 2 ? w->shape[0] : 0, &p);
    dl_tensor *z = zero_based(ids);
    if (!z) return dlL_fail(L);
    dl_tensor *y = dl_embedding(w, z, &p);
    dl_tensor_release(z);
    return dlL_pushtensor(L, y);
}

/* in dl_bag_mode's order */
static const char *const bag_modes[] = {"sum", "mean", "max", NULL};

/* F.embedding_bag(input, weight, offsets, {mode=, per_sample_weights=,
 * padding_idx=, include_last_offset=, max_norm=, norm_type=,
 * scale_grad_by_freq=, sparse=}) */
static int F_embedding_bag(lua_State *L) {
    static const char *const keys[] = {
        "mode",     "per_sample_weights", "padding_idx",        "include_last_offset",
        "max_norm", "norm_type",          "scale_grad_by_freq", "sparse",
        NULL};
    const char *op = "embedding_bag";
    dl_tensor *ids = check_ids_arg(L, 1, op, "input");
    dl_tensor *w = dlL_checktensor(L, 2);
    dl_tensor *offsets = lua_isnoneornil(L, 3) ? NULL : check_ids_arg(L, 3, op, "offsets");
    dlL_checkoptions(L, 4, op, keys);
    dlL_nomore(L, 4, op);
    dl_embedding_params p = dl_embedding_default_params();
    opt_common(L, 4, op, w->ndim == 2 ? w->shape[0] : 0, &p);
    p.include_last_offset = dlL_optboolean(L, 4, "include_last_offset", 0);
    if (dlL_optfield(L, 4, "mode") != LUA_TNIL) {
        const char *m = lua_tostring(L, -1);
        int i = 0;
        while (bag_modes[i] && !(lua_type(L, -1) == LUA_TSTRING && strcmp(m, bag_modes[i]) == 0))
            i++;
        if (!bag_modes[i])
            luaL_error(L, "%s: mode must be 'sum', 'mean' or 'max', got %s", op,
                       lua_type(L, -1) == LUA_TSTRING ? m : luaL_typename(L, -1));
        p.mode = (dl_bag_mode)i;
    }
    lua_pop(L, 1);
    dl_tensor *psw = NULL;
    if (dlL_optfield(L, 4, "per_sample_weights") != LUA_TNIL && !(psw = dlL_totensor(L, -1)))
        luaL_error(L, "%s: per_sample_weights must be a tensor, got %s", op, luaL_typename(L, -1));
    lua_pop(L, 1); /* psw stays referenced by the options table */
    dl_tensor *z = zero_based(ids), *zo = z && offsets ? zero_based(offsets) : NULL;
    dl_tensor *y = z && (zo || !offsets) ? dl_embedding_bag(w, z, zo, psw, &p) : NULL;
    dl_tensor_release(z);
    dl_tensor_release(zo);
    return dlL_pushtensor(L, y);
}

/* --- dl._nn ------------------------------------------------------------------------- */

static int l_embedding_forward(lua_State *L) {
    const char *op = "embedding";
    dl_tensor *w = dlL_checktensor(L, 1);
    dl_tensor *ids = check_ids_arg(L, 2, op, "input");
    dlL_nomore(L, 2, op);
    dl_tensor *z = zero_based(ids);
    dl_tensor *y = z ? dl_embedding_forward(w, z) : NULL;
    dl_tensor_release(z);
    return dlL_pushtensor(L, y);
}

static int l_embedding_backward(lua_State *L) {
    static const char *const keys[] = {"padding_idx", "scale_grad_by_freq", NULL};
    const char *op = "embedding_backward";
    dl_tensor *gy = dlL_checktensor(L, 1);
    dl_tensor *ids = check_ids_arg(L, 2, op, "input");
    lua_Integer num = luaL_checkinteger(L, 3);
    dlL_checkoptions(L, 4, op, keys);
    dlL_nomore(L, 4, op);
    int64_t pad = opt_padding(L, 4, op, num);
    bool by_freq = dlL_optboolean(L, 4, "scale_grad_by_freq", 0);
    dl_tensor *z = zero_based(ids);
    dl_tensor *gw = z ? dl_embedding_backward(gy, z, num, pad, by_freq) : NULL;
    dl_tensor_release(z);
    return dlL_pushtensor(L, gw);
}

static int l_embedding_renorm_(lua_State *L) {
    const char *op = "embedding_renorm_";
    dl_tensor *w = dlL_checktensor(L, 1);
    dl_tensor *ids = check_ids_arg(L, 2, op, "input");
    double max_norm = luaL_checknumber(L, 3), norm_type = luaL_optnumber(L, 4, 2);
    dlL_nomore(L, 4, op);
    dl_tensor *z = zero_based(ids);
    int rc = z ? dl_embedding_renorm_(w, z, max_norm, norm_type) : -1;
    dl_tensor_release(z);
    return dlL_pushself(L, rc);
}

void dlL_open_embedding(lua_State *L) {
    static const luaL_Reg nn[] = {{"embedding_forward", l_embedding_forward},
                                  {"embedding_backward", l_embedding_backward},
                                  {"embedding_renorm_", l_embedding_renorm_},
                                  {NULL, NULL}};
    static const luaL_Reg F[] = {
        {"embedding", F_embedding}, {"embedding_bag", F_embedding_bag}, {NULL, NULL}};
    dlL_register_nn(L, nn, F);
}
