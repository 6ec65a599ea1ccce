/* l_batchnorm.c - Lua bindings of the batchnorm family
 * (src/ops/batchnorm.h): the kernel pair in dl._nn (shared with the other nn
 * families) and the recording entry point in dl._F:
 *
 *   dl._nn.batch_norm_forward(x, w, b, rm, rv, {training=, momentum=, eps=,
 *                             cumulative=, num_batches_tracked=})
 *       -> y, save_mean, save_invstd (training) | y (evaluation)
 *   dl._nn.batch_norm_backward(gy, x, w, rm, rv, save_mean, save_invstd,
 *                              {training=, eps=, need=}) -> gx, gw, gb
 *   dl._F.batch_norm(x, running_mean, running_var, weight, bias, training,
 *                    momentum, eps)  (PyTorch's argument order)
 *   dl._F.batch_norm_relu(x, running_mean, running_var, weight, bias,
 *                         training, momentum, eps) -> relu(batch_norm(x))
 *   dl._F.batch_norm_add_relu(x, residual, running_mean, running_var, weight,
 *                             bias, training, momentum, eps)
 *       -> relu(batch_norm(x) + residual), both one autograd node
 *   dl._nn.batch_norm_relu_forward(x, residual, w, b, rm, rv, {..., keep_mask=true})
 *       -> y, save_mean, save_invstd, mask, impl (the fused forms' kernel pair)
 *   dl._nn.batch_norm_relu_backward(gy, x, y, w, b, mean, stat, mask, impl,
 *                                   {training=, eps=, residual=, need=})
 *       -> gx, gw, gb, gresidual
 *   dl._nn.batch_norm_impl([name]) -> the CUDA training implementation
 *       ("auto", "native" or "cudnn") before the call; sets it when given
 *
 * Absent tensors are nil.  Options are checked (unknown keys are errors)
 * before any tensor is created. */
#include "l_bind.h"
#include "ops/batchnorm.h"

/* --- batch_norm --------------------------------------------------------------------- */

/* The forwards' options at idx: {training=false, momentum=0.1, eps=1e-5,
 * cumulative=false, num_batches_tracked=} (and keep_mask= when fused). */
static dl_batch_norm_params opt_params(lua_State *L, int idx, const char *op, bool fused,
                                       bool *training) {
    static const char *const keys[] = {
        "training", "momentum", "eps", "cumulative", "num_batches_tracked", NULL, NULL};
    static const char *const fused_keys[] = {
        "training", "momentum", "eps", "cumulative", "num_batches_tracked", "keep_mask", NULL};
    dlL_checkoptions(L, idx, op, fused ? fused_keys : keys);
    *training = dlL_optboolean(L, idx, "training", 0);
    dl_batch_norm_params p = dl_batch_norm_default_params();
    p.momentum = dlL_optnumber(L, idx, "momentum", p.momentum);
    p.eps = dlL_optnumber(L, idx, "eps", p.eps);
    p.cumulative = dlL_optboolean(L, idx, "cumulative", 0);
    p.num_batches_tracked = dlL_optinteger(L, idx, "num_batches_tracked", 0);
    return p;
}

/* batch_norm_forward(x, w, b, rm, rv, {training=false, momentum=0.1, eps=1e-5,
 *                    cumulative=false, num_batches_tracked=}) */
static int l_batch_norm_forward(lua_State *L) {
    dl_tensor *x = dlL_checktensor(L, 1);
    dl_tensor *w = dlL_opttensor(L, 2), *b = dlL_opttensor(L, 3);
    dl_tensor *rm = dlL_opttensor(L, 4), *rv = dlL_opttensor(L, 5);
    bool training;
    dl_batch_norm_params p = opt_params(L, 6, "batch_norm", false, &training);
    if (!training) return dlL_pushtensor(L, dl_batch_norm_forward_eval(x, w, b, rm, rv, p.eps));
    dl_tensor *y, *mean, *invstd;
    if (dl_batch_norm_forward_train(x, w, b, rm, rv, &p, &y, &mean, &invstd)) return dlL_fail(L);
    return dlL_pushtensor3(L, y, mean, invstd);
}

/* batch_norm_backward(gy, x, w, rm, rv, save_mean, save_invstd,
 *                     {training=false, eps=1e-5, need=}) -> gx, gw, gb */
static int l_batch_norm_backward(lua_State *L) {
    static const char *const keys[] = {"training", "eps", "need", NULL};
    const char *op = "batch_norm_backward";
    dl_tensor *gy = dlL_checktensor(L, 1);
    dl_tensor *x = dlL_checktensor(L, 2);
    dl_tensor *w = dlL_opttensor(L, 3), *rm = dlL_opttensor(L, 4), *rv = dlL_opttensor(L, 5);
    dl_tensor *sm = dlL_opttensor(L, 6), *si = dlL_opttensor(L, 7);
    dlL_checkoptions(L, 8, op, keys);
    bool training = dlL_optboolean(L, 8, "training", 0);
    double eps = dlL_optnumber(L, 8, "eps", 1e-5);
    bool need[3];
    dlL_optneed(L, 8, op, need);
    dl_tensor *gx, *gw, *gb;
    if (dl_batch_norm_backward(gy, x, w, rm, rv, sm, si, training, eps, need, &gx, &gw, &gb))
        return dlL_fail(L);
    return dlL_pushtensor3(L, gx, gw, gb);
}

/* batch_norm_relu_forward(x, residual, w, b, rm, rv, {..., keep_mask=true})
 *     -> y, save_mean, save_invstd (nil in evaluation), mask, impl */
static int l_batch_norm_relu_forward(lua_State *L) {
    dl_tensor *x = dlL_checktensor(L, 1), *r = dlL_opttensor(L, 2);
    dl_tensor *w = dlL_opttensor(L, 3), *b = dlL_opttensor(L, 4);
    dl_tensor *rm = dlL_opttensor(L, 5), *rv = dlL_opttensor(L, 6);
    bool training;
    dl_batch_norm_params p = opt_params(L, 7, "batch_norm_relu", true, &training);
    bool keep = dlL_optboolean(L, 7, "keep_mask", 1);
    dl_tensor *y, *mean, *invstd, *mask;
    int impl;
    if (dl_batch_norm_relu_forward(x, r, w, b, rm, rv, training, &p, keep, &y, &mean, &invstd,
                                   &mask, &impl))
        return dlL_fail(L);
    dlL_pushtensor3(L, y, mean, invstd);
    dlL_pushopttensor(L, mask);
    lua_pushinteger(L, impl);
    return 5;
}

/* batch_norm_relu_backward(gy, x, y, w, b, mean, stat, mask, impl,
 *     {training=false, eps=1e-5, residual=false, need=}) -> gx, gw, gb, gres
 * (mean, stat: save_mean, save_invstd in training, else the running ones) */
static int l_batch_norm_relu_backward(lua_State *L) {
    static const char *const keys[] = {"training", "eps", "residual", "need", NULL};
    const char *op = "batch_norm_relu_backward";
    dl_tensor *gy = dlL_checktensor(L, 1), *x = dlL_checktensor(L, 2);
    dl_tensor *y = dlL_opttensor(L, 3), *w = dlL_opttensor(L, 4), *b = dlL_opttensor(L, 5);
    dl_tensor *mean = dlL_opttensor(L, 6), *stat = dlL_opttensor(L, 7);
    dl_tensor *mask = dlL_opttensor(L, 8);
    int impl = (int)luaL_checkinteger(L, 9);
    dlL_checkoptions(L, 10, op, keys);
    bool training = dlL_optboolean(L, 10, "training", 0);
    double eps = dlL_optnumber(L, 10, "eps", 1e-5);
    bool residual = dlL_optboolean(L, 10, "residual", 0);
    bool need[4] = {true, true, true, residual};
    dlL_optneed(L, 10, op, need);
    dl_tensor *gx, *gw, *gb, *gr;
    if (dl_batch_norm_relu_backward(gy, x, y, w, b, mean, stat, mask, impl, residual, training, eps,
                                    need, &gx, &gw, &gb, &gr))
        return dlL_fail(L);
    dlL_pushtensor3(L, gx, gw, gb);
    dlL_pushopttensor(L, gr);
    return 4;
}

/* --- dl._F ----------------------------------------------------------------------- */

/* The arguments from running_mean on, at index i: running_mean,
 * running_var, weight, bias, training=false, momentum=0.1, eps=1e-5. */
typedef struct {
    dl_tensor *rm, *rv, *w, *b;
    bool training;
    dl_batch_norm_params p;
} F_args;

static F_args F_check_args(lua_State *L, int i, const char *op) {
    F_args a;
    a.rm = dlL_opttensor(L, i);
    a.rv = dlL_opttensor(L, i + 1);
    a.w = dlL_opttensor(L, i + 2);
    a.b = dlL_opttensor(L, i + 3);
    a.training = lua_toboolean(L, i + 4);
    a.p = dl_batch_norm_default_params();
    a.p.momentum = luaL_optnumber(L, i + 5, a.p.momentum);
    a.p.eps = luaL_optnumber(L, i + 6, a.p.eps);
    if (!a.training && (!a.rm || !a.rv))
        luaL_error(L, "%s: running_mean and running_var are required when not training", op);
    return a;
}

/* F.batch_norm(x, running_mean, running_var, weight, bias, training=false,
 *              momentum=0.1, eps=1e-5)  (PyTorch's argument order) */
static int F_batch_norm(lua_State *L) {
    dl_tensor *x = dlL_checktensor(L, 1);
    F_args a = F_check_args(L, 2, "batch_norm");
    return dlL_pushtensor(L, dl_batch_norm(x, a.w, a.b, a.rm, a.rv, a.training, &a.p));
}

/* F.batch_norm_relu(x, running_mean, running_var, weight, bias, ...) */
static int F_batch_norm_relu(lua_State *L) {
    dl_tensor *x = dlL_checktensor(L, 1);
    F_args a = F_check_args(L, 2, "batch_norm_relu");
    return dlL_pushtensor(L, dl_batch_norm_relu(x, NULL, a.w, a.b, a.rm, a.rv, a.training, &a.p));
}

/* F.batch_norm_add_relu(x, residual, running_mean, running_var, weight, bias, ...) */
static int F_batch_norm_add_relu(lua_State *L) {
    dl_tensor *x = dlL_checktensor(L, 1);
    dl_tensor *r = dlL_checktensor(L, 2);
    F_args a = F_check_args(L, 3, "batch_norm_add_relu");
    return dlL_pushtensor(L, dl_batch_norm_relu(x, r, a.w, a.b, a.rm, a.rv, a.training, &a.p));
}

/* batch_norm_impl([name]) -> the implementation before the call */
static int l_batch_norm_impl(lua_State *L) {
    lua_pushstring(L, dl_batch_norm_impl_get());
    if (!lua_isnoneornil(L, 1) && dl_batch_norm_impl_set(luaL_checkstring(L, 1)))
        return dlL_fail(L);
    return 1;
}

void dlL_open_batchnorm(lua_State *L) {
    static const luaL_Reg nn[] = {{"batch_norm_forward", l_batch_norm_forward},
                                  {"batch_norm_backward", l_batch_norm_backward},
                                  {"batch_norm_relu_forward", l_batch_norm_relu_forward},
                                  {"batch_norm_relu_backward", l_batch_norm_relu_backward},
                                  {"batch_norm_impl", l_batch_norm_impl},
                                  {NULL, NULL}};
    static const luaL_Reg F[] = {{"batch_norm", F_batch_norm},
                                 {"batch_norm_relu", F_batch_norm_relu},
                                 {"batch_norm_add_relu", F_batch_norm_add_relu},
                                 {NULL, NULL}};
    dlL_register_nn(L, nn, F);
}
