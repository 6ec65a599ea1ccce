/* l_layernorm.c - Lua bindings of the layernorm family (src/ops/layernorm.h):
 * the kernel pairs in dl._nn (shared with the other nn families) and the
 * recording entry points in dl._F (PyTorch's argument order):
 *
 *   dl._nn.layer_norm_forward(x, normalized_shape, w, b, {eps=1e-5}) -> y, mean, rstd
 *   dl._nn.layer_norm_backward(gy, x, mean, rstd, w, normalized_shape, {need=})
 *       -> gx, gw, gb
 *   dl._nn.rms_norm_forward(x, normalized_shape, w, {eps=}) -> y, rstd
 *   dl._nn.rms_norm_backward(gy, x, rstd, w, normalized_shape, {need=}) -> gx, gw
 *   dl._F.layer_norm(x, normalized_shape, weight, bias, eps=1e-5)
 *   dl._F.rms_norm(x, normalized_shape, weight, eps)
 *
 * normalized_shape is an integer or a table of integers; absent tensors are
 * nil; RMS norm's eps defaults to the machine epsilon of its compute dtype
 * (dl_rms_norm_default_eps).  Every argument is checked before any tensor is
 * made. */
#include "l_bind.h"
#include "ops/layernorm.h"

/* --- arguments ------------------------------------------------------------------------ */

/* Reads normalized_shape at idx, eps (the number at eps_idx, or the option
 * "eps" of the table at eps_idx when opt_table; nil: def; eps_idx 0: none)
 * into p. */
static void check_params(lua_State *L, const char *op, int idx, int eps_idx, bool opt_table,
                         double def, bool rms, dl_norm_params *p) {
    int64_t shape[DL_MAX_DIMS];
    int nd = 0;
    if (lua_isinteger(L, idx)) {
        shape[nd++] = lua_tointeger(L, idx);
    } else if (lua_istable(L, idx) && !dlL_totensor(L, idx)) {
        lua_Integer n = luaL_len(L, idx);
        if (n < 1 || n > DL_MAX_DIMS)
            luaL_error(L, "%s: normalized_shape must have 1 to %d sizes, got %d", op, DL_MAX_DIMS,
                       (int)n);
        for (lua_Integer i = 1; i <= n; i++) {
            lua_geti(L, idx, i);
            if (!lua_isinteger(L, -1))
                luaL_error(L, "%s: normalized_shape[%d] must be an integer, got %s", op, (int)i,
                           luaL_typename(L, -1));
            shape[nd++] = lua_tointeger(L, -1);
            lua_pop(L, 1);
        }
    } else {
        luaL_error(L, "%s: normalized_shape must be an integer or a table of integers, got %s", op,
                   luaL_typename(L, idx));
    }
    double eps = def;
    if (eps_idx == 0) {
        /* no eps argument (the backwards) */
    } else if (opt_table) {
        eps = dlL_optnumber(L, eps_idx, "eps", def);
    } else if (!lua_isnoneornil(L, eps_idx)) {
        if (!lua_isnumber(L, eps_idx))
            luaL_error(L, "%s: eps must be a number, got %s", op, luaL_typename(L, eps_idx));
        eps = lua_tonumber(L, eps_idx);
    }
    if (dl_norm_params_init(p, op, nd, shape, eps, rms)) dlL_fail(L);
}

/* RMS norm's default eps for the input at idx */
static double rms_default_eps(lua_State *L, int idx) {
    return dl_rms_norm_default_eps(dlL_checktensor(L, idx)->dtype);
}

/* --- dl._nn ------------------------------------------------------------------------- */

static const char *const eps_keys[] = {"eps", NULL};
static const char *const need_keys[] = {"need", NULL};

/* layer_norm_forward(x, normalized_shape, w, b, {eps=}) -> y, mean, rstd
 * rms_norm_forward(x, normalized_shape, w, {eps=}) -> y, rstd */
static int norm_forward(lua_State *L, bool rms) {
    const char *op = rms ? "rms_norm" : "layer_norm";
    int opts = rms ? 4 : 5;
    dl_tensor *x = dlL_checktensor(L, 1);
    dl_tensor *w = dlL_opttensor(L, 3), *b = rms ? NULL : dlL_opttensor(L, 4);
    dlL_checkoptions(L, opts, op, eps_keys);
    dlL_nomore(L, opts, op);
    dl_norm_params p;
    check_params(L, op, 2, opts, true, rms ? rms_default_eps(L, 1) : 1e-5, rms, &p);
    dl_tensor *y, *mean = NULL, *rstd;
    if (dl_layer_norm_forward(x, w, b, &p, &y, rms ? NULL : &mean, &rstd)) return dlL_fail(L);
    if (!rms) return dlL_pushtensor3(L, y, mean, rstd);
    dlL_pushtensor3(L, y, rstd, NULL);
    lua_pop(L, 1); /* two results */
    return 2;
}

/* layer_norm_backward(gy, x, mean, rstd, w, normalized_shape, {need=}) -> gx, gw, gb
 * rms_norm_backward(gy, x, rstd, w, normalized_shape, {need=}) -> gx, gw */
static int norm_backward(lua_State *L, bool rms) {
    const char *op = rms ? "rms_norm_backward" : "layer_norm_backward";
    int k = rms ? 0 : 1; /* the arguments after mean move by one */
    dl_tensor *gy = dlL_checktensor(L, 1), *x = dlL_checktensor(L, 2);
    dl_tensor *mean = rms ? NULL : dlL_checktensor(L, 3), *rstd = dlL_checktensor(L, 3 + k);
    dl_tensor *w = dlL_opttensor(L, 4 + k);
    dlL_checkoptions(L, 6 + k, op, need_keys);
    dlL_nomore(L, 6 + k, op);
    bool need[3];
    dlL_optneed(L, 6 + k, op, need);
    dl_norm_params p;
    check_params(L, op, 5 + k, 0, false, 0, rms, &p);
    dl_tensor *gx, *gw, *gb;
    if (dl_layer_norm_backward(gy, x, mean, rstd, w, &p, need, &gx, &gw, &gb)) return dlL_fail(L);
    dlL_pushtensor3(L, gx, gw, gb);
    if (rms) lua_pop(L, 1); /* two results */
    return rms ? 2 : 3;
}

static int l_layer_norm_forward(lua_State *L) {
    return norm_forward(L, false);
}
static int l_rms_norm_forward(lua_State *L) {
    return norm_forward(L, true);
}
static int l_layer_norm_backward(lua_State *L) {
    return norm_backward(L, false);
}
static int l_rms_norm_backward(lua_State *L) {
    return norm_backward(L, true);
}

/* --- dl._F --------------------------------------------------------------------------- */

/* F.layer_norm(x, normalized_shape, weight, bias, eps=1e-5) */
static int F_layer_norm(lua_State *L) {
    const char *op = "layer_norm";
    dl_tensor *x = dlL_checktensor(L, 1);
    dl_tensor *w = dlL_opttensor(L, 3), *b = dlL_opttensor(L, 4);
    dlL_nomore(L, 5, op);
    dl_norm_params p;
    check_params(L, op, 2, 5, false, 1e-5, false, &p);
    return dlL_pushtensor(L, dl_layer_norm(x, w, b, &p));
}

/* F.rms_norm(x, normalized_shape, weight, eps) */
static int F_rms_norm(lua_State *L) {
    const char *op = "rms_norm";
    dl_tensor *x = dlL_checktensor(L, 1);
    dl_tensor *w = dlL_opttensor(L, 3);
    dlL_nomore(L, 4, op);
    dl_norm_params p;
    check_params(L, op, 2, 4, false, rms_default_eps(L, 1), true, &p);
    return dlL_pushtensor(L, dl_rms_norm(x, w, &p));
}

void dlL_open_layernorm(lua_State *L) {
    static const luaL_Reg nn[] = {{"layer_norm_forward", l_layer_norm_forward},
                                  {"layer_norm_backward", l_layer_norm_backward},
                                  {"rms_norm_forward", l_rms_norm_forward},
                                  {"rms_norm_backward", l_rms_norm_backward},
                                  {NULL, NULL}};
    static const luaL_Reg F[] = {
        {"layer_norm", F_layer_norm}, {"rms_norm", F_rms_norm}, {NULL, NULL}};
    dlL_register_nn(L, nn, F);
}
