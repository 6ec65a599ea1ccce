/* l_attention.c - Lua bindings of the attention family (src/ops/attention.h),
 * in dl._F (recording autograd) and dl._nn (the kernel pair's forward, for
 * tests: it also returns the per-row log-sum-exp):
 *   dl._F.scaled_dot_product_attention(q, k, v [, {attn_mask=, dropout_p=0,
 *       is_causal=false, scale=}]) -> out
 *   dl._nn.scaled_dot_product_attention_forward(q, k, v [, opts]) -> out, lse
 * Every option is checked before any tensor is made; a bool attn_mask is true
 * where a key takes part (PyTorch's SDPA convention). */
#include "l_bind.h"
#include "ops/attention.h"

#include <math.h>

static const char *const SDPA_KEYS[] = {"attn_mask", "dropout_p", "is_causal", "scale", NULL};

/* q, k, v at 1..3 and the options table at 4 into o. */
static void check_sdpa_args(lua_State *L, const char *op, dl_tensor **q, dl_tensor **k,
                            dl_tensor **v, dl_sdpa_options *o) {
    *q = dlL_checktensor(L, 1);
    *k = dlL_checktensor(L, 2);
    *v = dlL_checktensor(L, 3);
    if (!lua_isnoneornil(L, 4) && !lua_istable(L, 4))
        luaL_error(L, "%s: options must be a table, got %s", op, luaL_typename(L, 4));
    dlL_checkoptions(L, 4, op, SDPA_KEYS);
    dlL_nomore(L, 4, op);
    *o = (dl_sdpa_options){0};
    int t = dlL_optfield(L, 4, "attn_mask");
    if (t != LUA_TNIL) {
        o->attn_mask = dlL_totensor(L, -1);
        if (!o->attn_mask)
            luaL_error(L, "%s: attn_mask must be a tensor, got %s", op, luaL_typename(L, -1));
    }
    lua_pop(L, 1); /* the options table keeps the mask alive */
    t = dlL_optfield(L, 4, "dropout_p");
    if (t != LUA_TNIL && t != LUA_TNUMBER)
        luaL_error(L, "%s: dropout_p must be a number, got %s", op, luaL_typename(L, -1));
    o->dropout_p = t == LUA_TNUMBER ? lua_tonumber(L, -1) : 0;
    lua_pop(L, 1);
    t = dlL_optfield(L, 4, "is_causal");
    if (t != LUA_TNIL && t != LUA_TBOOLEAN)
        luaL_error(L, "%s: is_causal must be a boolean, got %s", op, luaL_typename(L, -1));
    o->is_causal = lua_toboolean(L, -1);
    lua_pop(L, 1);
    t = dlL_optfield(L, 4, "scale");
    if (t != LUA_TNIL && t != LUA_TNUMBER)
        luaL_error(L, "%s: scale must be a number or nil, got %s", op, luaL_typename(L, -1));
    o->has_scale = t == LUA_TNUMBER;
    o->scale = o->has_scale ? lua_tonumber(L, -1) : NAN;
    lua_pop(L, 1);
}

static int F_sdpa(lua_State *L) {
    dl_tensor *q, *k, *v;
    dl_sdpa_options o;
    check_sdpa_args(L, "scaled_dot_product_attention", &q, &k, &v, &o);
    return dlL_pushtensor(L, dl_scaled_dot_product_attention(q, k, v, &o));
}

static int l_sdpa_forward(lua_State *L) {
    dl_tensor *q, *k, *v, *out, *lse;
    dl_sdpa_options o;
    dl_sdpa_state st;
    check_sdpa_args(L, "scaled_dot_product_attention", &q, &k, &v, &o);
    if (dl_sdpa_forward(q, k, v, &o, &out, &lse, &st)) return dlL_fail(L);
    dlL_pushtensor(L, out);
    dlL_pushtensor(L, lse);
    return 2;
}

void dlL_open_attention(lua_State *L) {
    static const luaL_Reg nn[] = {{"scaled_dot_product_attention_forward", l_sdpa_forward},
                                  {NULL, NULL}};
    static const luaL_Reg F[] = {{"scaled_dot_product_attention", F_sdpa}, {NULL, NULL}};
    dlL_register_nn(L, nn, F);
}
