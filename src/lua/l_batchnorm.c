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
 *
 * Absent tensors are nil.  Options are checked (unknown keys are errors)
 * before any tensor is created. */
#include "l_bind.h"
#include "ops/batchnorm.h"

/* --- batch_norm --------------------------------------------------------------------- */

/* batch_norm_forward(x, w, b, rm, rv, {training=false, momentum=0.1, eps=1e-5,
 *                    cumulative=false, num_batches_tracked=}) */
static int l_batch_norm_forward(lua_State *L) {
    static const char *const keys[] = {
        "training", "momentum", "eps", "cumulative", "num_batches_tracked", NULL};
    const char *op = "batch_norm";
    dl_tensor *x = dlL_checktensor(L, 1);
    dl_tensor *w = dlL_opttensor(L, 2), *b = dlL_opttensor(L, 3);
    dl_tensor *rm = dlL_opttensor(L, 4), *rv = dlL_opttensor(L, 5);
    dlL_checkoptions(L, 6, op, keys);
    bool training = dlL_optboolean(L, 6, "training", 0);
    dl_batch_norm_params p = dl_batch_norm_default_params();
    p.momentum = dlL_optnumber(L, 6, "momentum", p.momentum);
    p.eps = dlL_optnumber(L, 6, "eps", p.eps);
    p.cumulative = dlL_optboolean(L, 6, "cumulative", 0);
    p.num_batches_tracked = dlL_optinteger(L, 6, "num_batches_tracked", 0);
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

/* --- dl._F ----------------------------------------------------------------------- */

/* F.batch_norm(x, running_mean, running_var, weight, bias, training=false,
 *              momentum=0.1, eps=1e-5)  (PyTorch's argument order) */
static int F_batch_norm(lua_State *L) {
    dl_tensor *x = dlL_checktensor(L, 1);
    dl_tensor *rm = dlL_opttensor(L, 2), *rv = dlL_opttensor(L, 3);
    dl_tensor *w = dlL_opttensor(L, 4), *b = dlL_opttensor(L, 5);
    bool training = lua_toboolean(L, 6);
    dl_batch_norm_params p = dl_batch_norm_default_params();
    p.momentum = luaL_optnumber(L, 7, p.momentum);
    p.eps = luaL_optnumber(L, 8, p.eps);
    if (!training && (!rm || !rv))
        return luaL_error(L, "batch_norm: running_mean and running_var are required when not "
                             "training");
    return dlL_pushtensor(L, dl_batch_norm(x, w, b, rm, rv, training, &p));
}

void dlL_open_batchnorm(lua_State *L) {
    static const luaL_Reg nn[] = {{"batch_norm_forward", l_batch_norm_forward},
                                  {"batch_norm_backward", l_batch_norm_backward},
                                  {NULL, NULL}};
    static const luaL_Reg F[] = {{"batch_norm", F_batch_norm}, {NULL, NULL}};
    dlL_register_nn(L, nn, F);
}
