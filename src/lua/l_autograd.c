/* l_autograd.c - autograd from Lua: t:backward(), t:requires_grad_(),
 * dl.no_grad/enable_grad/set_grad_enabled, and the raw functions behind
 * lua/dl/autograd.lua (dl._autograd.backward, .grad, .record_function for
 * custom Functions written in Lua).
 * The engine runs inside the calling C function; a Lua backward of a custom
 * Function is called on the same Lua state, which the binding records for the
 * duration of the call. */
#include "l_bind.h"
#include "autograd/autograd.h"

#include <stdlib.h>
#include <string.h>

static _Thread_local lua_State *engine_state;

/* Reads an array of tensors (or a single tensor) at idx into a new array. */
static dl_tensor **check_tensor_list(lua_State *L, int idx, int *n, int allow_nil) {
    if (dlL_totensor(L, idx)) {
        dl_tensor **v = malloc(sizeof *v);
        if (!v) luaL_error(L, "out of memory");
        v[0] = dlL_totensor(L, idx);
        *n = 1;
        return v;
    }
    luaL_checktype(L, idx, LUA_TTABLE);
    lua_Integer len = luaL_len(L, idx);
    dl_tensor **v = calloc((size_t)(len > 0 ? len : 1), sizeof *v);
    if (!v) luaL_error(L, "out of memory");
    for (lua_Integer i = 1; i <= len; i++) {
        lua_geti(L, idx, i);
        v[i - 1] = dlL_totensor(L, -1);
        if (!v[i - 1] && !(allow_nil && lua_isnil(L, -1))) {
            free(v);
            luaL_error(L, "expected a tensor at position %d of argument %d", (int)i, idx);
        }
        lua_pop(L, 1);
    }
    *n = (int)len;
    return v;
}

/* t:backward([grad] [, {retain_graph=}]) */
static int t_backward(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    int opt = 2;
    dl_tensor *g = NULL;
    if (dlL_totensor(L, 2)) {
        g = dlL_totensor(L, 2);
        opt = 3;
    } else if (lua_isnil(L, 2) && !lua_isnone(L, 3)) {
        opt = 3;
    }
    static const char *const keys[] = {"retain_graph", "gradient", NULL};
    dlL_checkoptions(L, opt, "backward", keys);
    int retain = dlL_optboolean(L, opt, "retain_graph", 0);
    if (!g && dlL_optfield(L, opt, "gradient") != LUA_TNIL) g = dlL_checktensor(L, -1);
    lua_State *prev = engine_state;
    engine_state = L;
    int rc = dl_backward(1, &t, &g, retain);
    engine_state = prev;
    return dlL_done(L, rc);
}

/* dl._autograd.backward(tensors, grads_or_nil, retain_graph) */
static int l_backward(lua_State *L) {
    int n, ng = 0;
    dl_tensor **roots = check_tensor_list(L, 1, &n, 0);
    dl_tensor **grads = NULL;
    if (!lua_isnoneornil(L, 2)) {
        grads = check_tensor_list(L, 2, &ng, 1);
        if (ng != n) {
            free(roots);
            free(grads);
            return luaL_error(L, "backward: %d gradients given for %d tensors", ng, n);
        }
    }
    int retain = lua_toboolean(L, 3);
    lua_State *prev = engine_state;
    engine_state = L;
    int rc = dl_backward(n, roots, grads, retain);
    engine_state = prev;
    free(roots);
    free(grads);
    return dlL_done(L, rc);
}

/* dl._autograd.grad(outputs, inputs, grad_outputs_or_nil, retain_graph, allow_unused)
 * -> array of gradients (nil entries for unused inputs) */
static int l_grad(lua_State *L) {
    int n, ni, ng = 0;
    dl_tensor **roots = check_tensor_list(L, 1, &n, 0);
    dl_tensor **inputs = check_tensor_list(L, 2, &ni, 0);
    dl_tensor **grads = NULL;
    if (!lua_isnoneornil(L, 3)) grads = check_tensor_list(L, 3, &ng, 1);
    dl_tensor **out = calloc((size_t)(ni > 0 ? ni : 1), sizeof *out);
    if ((grads && ng != n) || !out) {
        free(roots);
        free(inputs);
        free(grads);
        free(out);
        return luaL_error(L, "autograd.grad: %d grad_outputs given for %d outputs", ng, n);
    }
    lua_State *prev = engine_state;
    engine_state = L;
    int rc = dl_autograd_grad(n, roots, grads, ni, inputs, out, lua_toboolean(L, 4),
                              lua_toboolean(L, 5));
    engine_state = prev;
    free(roots);
    free(inputs);
    free(grads);
    if (rc) {
        free(out);
        return dlL_fail(L);
    }
    lua_createtable(L, ni, 0);
    for (int j = 0; j < ni; j++) {
        if (out[j]) {
            dlL_pushtensor(L, out[j]);
            out[j] = NULL;
        } else {
            lua_pushnil(L);
        }
        lua_rawseti(L, -2, j + 1);
    }
    free(out);
    return 1;
}

static int t_requires_grad_(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    int on = lua_isnone(L, 2) ? 1 : lua_toboolean(L, 2);
    if (on && !dl_dtype_is_floating(t->dtype))
        return luaL_error(L,
                          "requires_grad_: only floating-point tensors can require gradients "
                          "(dtype %s)",
                          dl_dtype_name(t->dtype));
    if (!on && t->grad_fn)
        return luaL_error(L, "requires_grad_: a tensor computed from others (a non-leaf) always "
                             "requires grad; use detach()");
    t->requires_grad = on;
    lua_settop(L, 1);
    return 1;
}

/* The mode to restore when the guard below is closed. */
static int restore_mode(lua_State *L) {
    dl_set_grad_enabled(lua_toboolean(L, lua_upvalueindex(1)));
    return 0;
}

/* fn(...) with grad mode set to `on`.  A to-be-closed guard restores the
 * previous mode however fn ends, and fn runs unprotected, so an error keeps
 * its full traceback. */
static int run_with_mode(lua_State *L) {
    luaL_checktype(L, 1, LUA_TFUNCTION);
    int on = lua_toboolean(L, lua_upvalueindex(1));
    int nargs = lua_gettop(L) - 1;
    lua_createtable(L, 0, 0);
    lua_createtable(L, 0, 1);
    lua_pushboolean(L, dl_grad_enabled());
    lua_pushcclosure(L, restore_mode, 1);
    lua_setfield(L, -2, "__close");
    lua_setmetatable(L, -2);
    lua_insert(L, 1); /* guard below fn and its arguments */
    lua_toclose(L, 1);
    dl_set_grad_enabled(on);
    lua_call(L, nargs, LUA_MULTRET);
    return lua_gettop(L) - 1; /* the results; the guard closes on return */
}

static int l_set_grad_enabled(lua_State *L) {
    luaL_checktype(L, 1, LUA_TBOOLEAN);
    lua_pushboolean(L, dl_set_grad_enabled(lua_toboolean(L, 1)));
    return 1;
}

static int l_is_grad_enabled(lua_State *L) {
    lua_pushboolean(L, dl_grad_enabled());
    return 1;
}

/* --- custom Functions ---------------------------------------------------------- */

typedef struct {
    lua_State *L; /* main thread, for unref */
    int fn_ref, ctx_ref;
} lua_fn_ctx;

static void lua_fn_ctx_free(void *p) {
    lua_fn_ctx *c = p;
    luaL_unref(c->L, LUA_REGISTRYINDEX, c->fn_ref);
    luaL_unref(c->L, LUA_REGISTRYINDEX, c->ctx_ref);
}

static int lua_fn_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    lua_fn_ctx *c = n->ctx;
    lua_State *L = engine_state;
    if (!L) return dl_error("%s: a Lua backward can only run from a Lua call", n->name);
    if (!lua_checkstack(L, n->n_outputs + 8)) return dl_error("%s: Lua stack overflow", n->name);
    int top = lua_gettop(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, c->fn_ref);
    lua_rawgeti(L, LUA_REGISTRYINDEX, c->ctx_ref);
    for (int o = 0; o < n->n_outputs; o++) {
        dl_tensor *g = gout[o] ? dl_tensor_retain(gout[o])
                               : dl_tensor_zeros(n->outputs[o].ndim, n->outputs[o].shape,
                                                 n->outputs[o].dtype, n->outputs[o].device);
        if (!g) {
            lua_settop(L, top);
            return -1;
        }
        dl_tensor **box = lua_newuserdatauv(L, sizeof *box, 1);
        *box = g;
        luaL_setmetatable(L, DL_TENSOR_MT);
    }
    if (lua_pcall(L, n->n_outputs + 1, n->n_inputs, 0) != LUA_OK) {
        const char *msg = lua_tostring(L, -1);
        dl_error("%s: error in backward: %s", n->name, msg ? msg : "(non-string error)");
        lua_settop(L, top);
        return -1;
    }
    for (int i = 0; i < n->n_inputs; i++) {
        int idx = top + 1 + i;
        dl_tensor *g = dlL_totensor(L, idx);
        if (g && dl_node_needs_grad(n, i))
            gin[i] = dl_tensor_retain(g);
        else if (!g && !lua_isnil(L, idx)) {
            lua_settop(L, top);
            for (int k = 0; k < i; k++) {
                dl_tensor_release(gin[k]);
                gin[k] = NULL;
            }
            return dl_error("%s: backward must return a tensor or nil for input %d", n->name,
                            i + 1);
        }
    }
    lua_settop(L, top);
    return 0;
}

/* dl._autograd.record_function(name, ctx, backward_fn, inputs_array, outputs...)
 * -> outputs (recorded as outputs of one node when an input requires grad) */
static int l_record_function(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    luaL_checktype(L, 3, LUA_TFUNCTION);
    luaL_checktype(L, 4, LUA_TTABLE);
    int nout = lua_gettop(L) - 4;
    int nin = (int)luaL_len(L, 4);
    if (nin > 64) return luaL_error(L, "%s: too many inputs (%d)", name, nin);
    dl_tensor *ins[64];
    for (int i = 0; i < nin; i++) {
        lua_geti(L, 4, i + 1);
        ins[i] = dlL_totensor(L, -1);
        lua_pop(L, 1);
    }
    if (!dl_autograd_needed(nin, ins)) return nout;
    for (int o = 0; o < nout; o++)
        if (!dlL_totensor(L, 5 + o))
            return luaL_error(L, "%s: forward must return tensors (output %d is a %s)", name, o + 1,
                              luaL_typename(L, 5 + o));
    /* names must outlive the node: keep a copy in the registry-anchored ctx */
    lua_pushstring(L, name);
    lua_setfield(L, 2, "__name");
    lua_getfield(L, 2, "__name");
    const char *stable_name = lua_tostring(L, -1);
    lua_pop(L, 1);
    dl_node *n = dl_node_new(stable_name, lua_fn_backward, nin, ins, nout, sizeof(lua_fn_ctx));
    if (!n) return dlL_fail(L);
    lua_fn_ctx *c = n->ctx;
    lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
    c->L = lua_tothread(L, -1);
    lua_pop(L, 1);
    lua_pushvalue(L, 3);
    c->fn_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_pushvalue(L, 2);
    c->ctx_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    n->ctx_free = lua_fn_ctx_free;
    for (int o = 0; o < nout; o++) {
        dl_tensor *t = dlL_totensor(L, 5 + o);
        bool is_input = false;
        for (int i = 0; i < nin; i++) is_input |= ins[i] == t;
        if (is_input || t->grad_fn) { /* returned an input: give it a fresh identity */
            dl_tensor *v =
                dl_tensor_new_view(t->storage, t->offset, t->ndim, t->shape, t->strides, t->dtype);
            if (!v) {
                dl_node_release(n);
                return dlL_fail(L);
            }
            dlL_pushtensor(L, v);
            lua_replace(L, 5 + o);
            t = v;
        }
        if (dl_dtype_is_floating(t->dtype)) dl_node_set_output(n, o, t);
    }
    dl_node_release(n);
    return nout;
}

static int t_grad_fn_name(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    lua_pushstring(L, t->grad_fn ? t->grad_fn->name : NULL); /* NULL: nil */
    return 1;
}

void dlL_open_autograd(lua_State *L) {
    static const luaL_Reg methods[] = {
        {"backward", t_backward},
        {"requires_grad_", t_requires_grad_},
        {NULL, NULL},
    };
    static const luaL_Reg functions[] = {
        {"set_grad_enabled", l_set_grad_enabled},
        {"is_grad_enabled", l_is_grad_enabled},
        {NULL, NULL},
    };
    static const luaL_Reg raw[] = {
        {"backward", l_backward},         {"grad", l_grad}, {"record_function", l_record_function},
        {"grad_fn_name", t_grad_fn_name}, {NULL, NULL},
    };
    dlL_register(L, functions, methods);
    lua_getfield(L, LUA_REGISTRYINDEX, DL_MODULE_KEY);
    lua_pushboolean(L, 0);
    lua_pushcclosure(L, run_with_mode, 1);
    lua_setfield(L, -2, "no_grad");
    lua_pushboolean(L, 1);
    lua_pushcclosure(L, run_with_mode, 1);
    lua_setfield(L, -2, "enable_grad");
    luaL_newlib(L, raw);
    lua_setfield(L, -2, "_autograd");
    lua_pop(L, 1);
}
