/* l_optim.c - bindings of the fused optimizer steps (src/ops/optim.h), for
 * lua/dl/optim/init.lua (not a public API):
 *   dl._optim.sgd_step(params, grads, bufs|nil, fresh|nil,
 *                      {lr=, momentum=, dampening=, weight_decay=, nesterov=, maximize=,
 *                       lr_tensor=, skip_if=})
 *   dl._optim.adam_step(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs|nil, steps,
 *                       {lr=, beta1=, beta2=, eps=, weight_decay=, decoupled=, amsgrad=,
 *                        maximize=})
 * params, grads and the state lists are arrays of tensors of one length;
 * fresh is an array of booleans, steps an array of integers (the step count
 * after this step).  The tensors are updated in place; nothing is returned.
 * The C arrays live in userdata on the Lua stack, so an error leaks nothing;
 * the tensors stay referenced by the caller's tables during the call. */
#include "l_bind.h"
#include "ops/optim.h"

static const char *const sgd_keys[] = {"lr",           "momentum", "dampening",
                                       "weight_decay", "nesterov", "maximize",
                                       "lr_tensor",    "skip_if",  NULL};
static const char *const adam_keys[] = {"lr",        "beta1",   "beta2",    "eps", "weight_decay",
                                        "decoupled", "amsgrad", "maximize", NULL};

/* The length of the array at idx (a table, checked). */
static int array_len(lua_State *L, int idx, const char *op, const char *what) {
    if (!lua_istable(L, idx))
        luaL_argerror(L, idx,
                      lua_pushfstring(L, "%s: %s (array of tensors) expected, got %s", op, what,
                                      luaL_typename(L, idx)));
    lua_Integer n = luaL_len(L, idx);
    if (n > 1 << 24) luaL_argerror(L, idx, lua_pushfstring(L, "%s: too many %s", op, what));
    return (int)n;
}

/* n tensors from the array at idx into a new userdata array (left on the stack). */
static dl_tensor **read_tensors(lua_State *L, int idx, int n, const char *op, const char *what) {
    if (array_len(L, idx, op, what) != n)
        luaL_argerror(L, idx,
                      lua_pushfstring(L, "%s: %s has %d entries, expected %d", op, what,
                                      (int)luaL_len(L, idx), n));
    dl_tensor **ts = lua_newuserdatauv(L, (size_t)(n > 0 ? n : 1) * sizeof *ts, 0);
    for (int i = 0; i < n; i++) {
        lua_geti(L, idx, i + 1);
        ts[i] = dlL_totensor(L, -1);
        if (!ts[i])
            luaL_argerror(L, idx,
                          lua_pushfstring(L, "%s: %s[%d] is a %s, expected a tensor", op, what,
                                          i + 1, luaL_typename(L, -1)));
        lua_pop(L, 1);
    }
    return ts;
}

/* Option key of the table at idx: a tensor or nil (the table keeps it alive). */
static dl_tensor *sgd_tensor_opt(lua_State *L, int idx, const char *key) {
    dl_tensor *t = NULL;
    if (dlL_optfield(L, idx, key) != LUA_TNIL) {
        t = dlL_totensor(L, -1);
        if (!t) luaL_error(L, "sgd_step: option '%s' must be a tensor", key);
    }
    lua_pop(L, 1);
    return t;
}

static int l_sgd_step(lua_State *L) {
    const char *op = "sgd_step";
    int n = array_len(L, 1, op, "params");
    dlL_checkoptions(L, 5, op, sgd_keys);
    dl_sgd_options o = {
        .lr = dlL_optnumber(L, 5, "lr", 0),
        .momentum = dlL_optnumber(L, 5, "momentum", 0),
        .dampening = dlL_optnumber(L, 5, "dampening", 0),
        .weight_decay = dlL_optnumber(L, 5, "weight_decay", 0),
        .nesterov = dlL_optboolean(L, 5, "nesterov", 0),
        .maximize = dlL_optboolean(L, 5, "maximize", 0),
    };
    o.lr_tensor = sgd_tensor_opt(L, 5, "lr_tensor");
    o.skip_if = sgd_tensor_opt(L, 5, "skip_if");
    dl_tensor **params = read_tensors(L, 1, n, op, "params");
    dl_tensor **grads = read_tensors(L, 2, n, op, "grads");
    dl_tensor **bufs = NULL;
    bool *fresh = NULL;
    if (o.momentum != 0) {
        bufs = read_tensors(L, 3, n, op, "momentum buffers");
        if (array_len(L, 4, op, "fresh flags") != n)
            return luaL_argerror(L, 4, "sgd_step: one fresh flag per parameter expected");
        fresh = lua_newuserdatauv(L, (size_t)(n > 0 ? n : 1) * sizeof *fresh, 0);
        for (int i = 0; i < n; i++) {
            lua_geti(L, 4, i + 1);
            fresh[i] = lua_toboolean(L, -1);
            lua_pop(L, 1);
        }
    }
    return dlL_done(L, dl_sgd_step(n, params, grads, bufs, fresh, &o));
}

static int l_adam_step(lua_State *L) {
    const char *op = "adam_step";
    int n = array_len(L, 1, op, "params");
    dlL_checkoptions(L, 7, op, adam_keys);
    dl_adam_options o = {
        .lr = dlL_optnumber(L, 7, "lr", 1e-3),
        .beta1 = dlL_optnumber(L, 7, "beta1", 0.9),
        .beta2 = dlL_optnumber(L, 7, "beta2", 0.999),
        .eps = dlL_optnumber(L, 7, "eps", 1e-8),
        .weight_decay = dlL_optnumber(L, 7, "weight_decay", 0),
        .decoupled = dlL_optboolean(L, 7, "decoupled", 0),
        .amsgrad = dlL_optboolean(L, 7, "amsgrad", 0),
        .maximize = dlL_optboolean(L, 7, "maximize", 0),
    };
    dl_tensor **params = read_tensors(L, 1, n, op, "params");
    dl_tensor **grads = read_tensors(L, 2, n, op, "grads");
    dl_tensor **m = read_tensors(L, 3, n, op, "exp_avgs");
    dl_tensor **v = read_tensors(L, 4, n, op, "exp_avg_sqs");
    dl_tensor **mx = o.amsgrad ? read_tensors(L, 5, n, op, "max_exp_avg_sqs") : NULL;
    if (array_len(L, 6, op, "steps") != n)
        return luaL_argerror(L, 6, "adam_step: one step count per parameter expected");
    int64_t *steps = lua_newuserdatauv(L, (size_t)(n > 0 ? n : 1) * sizeof *steps, 0);
    for (int i = 0; i < n; i++) {
        lua_geti(L, 6, i + 1);
        int ok;
        steps[i] = lua_tointegerx(L, -1, &ok);
        if (!ok) return luaL_argerror(L, 6, "adam_step: step counts must be integers");
        lua_pop(L, 1);
    }
    return dlL_done(L, dl_adam_step(n, params, grads, m, v, mx, steps, &o));
}

void dlL_open_optim(lua_State *L) {
    static const luaL_Reg fns[] = {
        {"sgd_step", l_sgd_step},
        {"adam_step", l_adam_step},
        {NULL, NULL},
    };
    dlL_register_in(L, "_optim", fns);
}
