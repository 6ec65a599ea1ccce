/* l_loss.c - Lua bindings of the loss family (src/ops/loss.h), in dl._nn
 * (shared with the other nn families; created when absent) and dl._F:
 *   nll_loss_forward(logp, target [, opts])
 *   nll_loss_backward(gloss, logp, target [, opts]) -> gx
 *   cross_entropy_forward(x, target [, opts])
 *   cross_entropy_backward(gloss, x, target [, opts]) -> gx [, gtarget (probabilities)]
 *       opts: {weight=, ignore_index=-100, reduction="mean", label_smoothing=0}
 *   mse_loss_forward(x, y [, {reduction=}])   mse_loss_backward(gloss, x, y [, opts]) -> gx, gy
 *   l1_loss_forward / l1_loss_backward        (the same)
 *   binary_cross_entropy_with_logits_forward(x, y [, {weight=, pos_weight=, reduction=}])
 *   binary_cross_entropy_with_logits_backward(gloss, x, y [, opts]) -> gx, gy
 * Class-index targets are int64 tensors of 1-based labels 1..C;
 * ignore_index is compared against those labels.  The binding converts them
 * to a 0-based copy for C, and a label outside 1..C that is not ignore_index
 * is an error naming the op, the label and C.  The converted copy is held
 * in a to-be-closed stack slot, released on return or on any error.
 * Every argument is checked before any tensor is made; dims are 1-based
 * (negatives from the end). */
#include "l_bind.h"
#include "ops/loss.h"

typedef struct {
    dl_tensor *weight;     /* borrowed from the options table */
    dl_tensor *pos_weight; /* borrowed */
    lua_Integer ignore_index;
    dl_reduction reduction;
    double label_smoothing;
} loss_opts;

/* An optional tensor option (borrowed: the options table keeps it alive). */
static dl_tensor *opt_tensor(lua_State *L, int idx, const char *op, const char *key) {
    dl_tensor *t = NULL;
    if (dlL_optfield(L, idx, key) != LUA_TNIL) {
        t = dlL_totensor(L, -1);
        if (!t)
            luaL_error(L, "%s: option '%s' must be a tensor, got %s", op, key,
                       luaL_typename(L, -1));
    }
    lua_pop(L, 1);
    return t;
}

/* Reads the options table at idx (none/nil allowed; keys must be allowed). */
static loss_opts read_loss_opts(lua_State *L, int idx, const char *op, const char *const *keys) {
    loss_opts o = {NULL, NULL, -100, DL_REDUCTION_MEAN, 0.0};
    dlL_nomore(L, idx, op);
    dlL_checkoptions(L, idx, op, keys);
    if (lua_isnoneornil(L, idx)) return o;
    o.weight = opt_tensor(L, idx, op, "weight");
    o.pos_weight = opt_tensor(L, idx, op, "pos_weight");
    o.ignore_index = dlL_optinteger(L, idx, "ignore_index", -100);
    o.label_smoothing = dlL_optnumber(L, idx, "label_smoothing", 0.0);
    int ty = dlL_optfield(L, idx, "reduction");
    if (ty != LUA_TNIL) {
        if (ty != LUA_TSTRING)
            luaL_error(L, "%s: option 'reduction' must be a string, got %s", op,
                       lua_typename(L, ty));
        if (dl_reduction_parse(op, lua_tostring(L, -1), &o.reduction)) dlL_fail(L);
    }
    lua_pop(L, 1);
    return o;
}

static const char *const keys_class[] = {"weight", "ignore_index", "reduction", NULL};
static const char *const keys_ce[] = {"weight", "ignore_index", "reduction", "label_smoothing",
                                      NULL};
static const char *const keys_plain[] = {"reduction", NULL};
static const char *const keys_bce[] = {"weight", "pos_weight", "reduction", NULL};

/* The number of classes of a class-loss input (-1 for a 0-dim input, which
 * the op itself rejects). */
static int64_t num_classes(const dl_tensor *x) {
    if (x->ndim == 0) return -1;
    return x->ndim == 1 ? x->shape[0] : x->shape[1];
}

/* A class-index target of 1-based labels -> a new int64 tensor of 0-based
 * labels (dl_class_labels_to_targets: every entry minus one, ignore_index
 * included).  Raises on a wrong dtype or, on the CPU, a label outside 1..C
 * that is not ignore_index (on CUDA it is reported at the next
 * synchronisation).  op: a string literal. */
static dl_tensor *convert_target(lua_State *L, const char *op, dl_tensor *target, int64_t C,
                                 lua_Integer ignore) {
    dl_tensor *t = dl_class_labels_to_targets(op, target, C, (int64_t)ignore);
    if (!t) dlL_fail(L);
    return t;
}

/* t (a temporary the binding made; NULL raises) anchored on the stack as a
 * to-be-closed tensor: released when the binding returns or raises, so no
 * error path can leak it.  Returns t, valid until then. */
static dl_tensor *hold(lua_State *L, dl_tensor *t) {
    dlL_pushtensor(L, t);
    lua_toclose(L, -1);
    return t;
}

static int64_t c_ignore(lua_Integer ignore) {
    return (int64_t)((uint64_t)ignore - 1u);
}

/* --- nll_loss, cross_entropy ----------------------------------------------------------------- */

static int l_nll_loss_forward(lua_State *L) {
    const char *op = "nll_loss";
    dl_tensor *logp = dlL_checktensor(L, 1), *target = dlL_checktensor(L, 2);
    loss_opts o = read_loss_opts(L, 3, op, keys_class);
    dl_tensor *t = hold(L, convert_target(L, op, target, num_classes(logp), o.ignore_index));
    return dlL_pushtensor(L, dl_nll_loss(logp, t, o.weight, c_ignore(o.ignore_index), o.reduction));
}

static int l_nll_loss_backward(lua_State *L) {
    const char *op = "nll_loss_backward";
    dl_tensor *g = dlL_checktensor(L, 1), *logp = dlL_checktensor(L, 2);
    dl_tensor *target = dlL_checktensor(L, 3);
    loss_opts o = read_loss_opts(L, 4, op, keys_class);
    dl_tensor *t = hold(L, convert_target(L, op, target, num_classes(logp), o.ignore_index));
    return dlL_pushtensor(
        L, dl_nll_loss_backward(g, logp, t, o.weight, c_ignore(o.ignore_index), o.reduction));
}

/* The target C sees: probabilities as given (retained), labels converted. */
static dl_tensor *ce_target(lua_State *L, const char *op, dl_tensor *x, dl_tensor *target,
                            const loss_opts *o) {
    if (dl_dtype_is_floating(target->dtype)) return dl_tensor_retain(target);
    if (target->dtype != DL_DTYPE_I64)
        luaL_error(L,
                   "%s: target must be int64 class labels (1..C) or floating-point class "
                   "probabilities, got %s",
                   op, dl_dtype_name(target->dtype));
    return convert_target(L, op, target, num_classes(x), o->ignore_index);
}

static int l_cross_entropy_forward(lua_State *L) {
    const char *op = "cross_entropy";
    dl_tensor *x = dlL_checktensor(L, 1), *target = dlL_checktensor(L, 2);
    loss_opts o = read_loss_opts(L, 3, op, keys_ce);
    dl_tensor *t = hold(L, ce_target(L, op, x, target, &o));
    return dlL_pushtensor(L, dl_cross_entropy(x, t, o.weight, c_ignore(o.ignore_index), o.reduction,
                                              o.label_smoothing));
}

static int l_cross_entropy_backward(lua_State *L) {
    const char *op = "cross_entropy_backward";
    dl_tensor *g = dlL_checktensor(L, 1), *x = dlL_checktensor(L, 2);
    dl_tensor *target = dlL_checktensor(L, 3);
    loss_opts o = read_loss_opts(L, 4, op, keys_ce);
    dl_tensor *t = hold(L, ce_target(L, op, x, target, &o));
    dl_tensor *gx, *gt;
    if (dl_cross_entropy_backward(g, x, t, o.weight, c_ignore(o.ignore_index), o.reduction,
                                  o.label_smoothing, &gx, &gt))
        return dlL_fail(L);
    dlL_pushtensor(L, gx);
    if (!gt) return 1;
    dlL_pushtensor(L, gt);
    return 2;
}

/* --- pointwise losses ------------------------------------------------------------------------ */

typedef dl_tensor *(*pw_fwd_fn)(dl_tensor *, dl_tensor *, dl_reduction);
typedef int (*pw_backward_fn)(dl_tensor *, dl_tensor *, dl_tensor *, dl_reduction, dl_tensor **,
                              dl_tensor **);

static int pw_forward(lua_State *L, const char *op, pw_fwd_fn fn) {
    dl_tensor *x = dlL_checktensor(L, 1), *y = dlL_checktensor(L, 2);
    loss_opts o = read_loss_opts(L, 3, op, keys_plain);
    return dlL_pushtensor(L, fn(x, y, o.reduction));
}

static int push_pair(lua_State *L, int rc, dl_tensor *a, dl_tensor *b) {
    if (rc) return dlL_fail(L);
    dlL_pushtensor(L, a);
    dlL_pushtensor(L, b);
    return 2;
}

static int pw_backward(lua_State *L, const char *op, pw_backward_fn fn) {
    dl_tensor *g = dlL_checktensor(L, 1), *x = dlL_checktensor(L, 2), *y = dlL_checktensor(L, 3);
    loss_opts o = read_loss_opts(L, 4, op, keys_plain);
    dl_tensor *gx, *gy;
    int rc = fn(g, x, y, o.reduction, &gx, &gy);
    return push_pair(L, rc, gx, gy);
}

static int l_mse_loss_forward(lua_State *L) {
    return pw_forward(L, "mse_loss", dl_mse_loss);
}
static int l_mse_loss_backward(lua_State *L) {
    return pw_backward(L, "mse_loss_backward", dl_mse_loss_backward);
}
static int l_l1_loss_forward(lua_State *L) {
    return pw_forward(L, "l1_loss", dl_l1_loss);
}
static int l_l1_loss_backward(lua_State *L) {
    return pw_backward(L, "l1_loss_backward", dl_l1_loss_backward);
}

static int l_bce_logits_forward(lua_State *L) {
    const char *op = "binary_cross_entropy_with_logits";
    dl_tensor *x = dlL_checktensor(L, 1), *y = dlL_checktensor(L, 2);
    loss_opts o = read_loss_opts(L, 3, op, keys_bce);
    return dlL_pushtensor(
        L, dl_binary_cross_entropy_with_logits(x, y, o.weight, o.pos_weight, o.reduction));
}

static int l_bce_logits_backward(lua_State *L) {
    const char *op = "binary_cross_entropy_with_logits_backward";
    dl_tensor *g = dlL_checktensor(L, 1), *x = dlL_checktensor(L, 2), *y = dlL_checktensor(L, 3);
    loss_opts o = read_loss_opts(L, 4, op, keys_bce);
    dl_tensor *gx, *gy;
    int rc = dl_binary_cross_entropy_with_logits_backward(g, x, y, o.weight, o.pos_weight,
                                                          o.reduction, &gx, &gy);
    return push_pair(L, rc, gx, gy);
}

void dlL_open_loss(lua_State *L) {
    static const luaL_Reg nn[] = {
        {"nll_loss_forward", l_nll_loss_forward},
        {"nll_loss_backward", l_nll_loss_backward},
        {"cross_entropy_forward", l_cross_entropy_forward},
        {"cross_entropy_backward", l_cross_entropy_backward},
        {"mse_loss_forward", l_mse_loss_forward},
        {"mse_loss_backward", l_mse_loss_backward},
        {"l1_loss_forward", l_l1_loss_forward},
        {"l1_loss_backward", l_l1_loss_backward},
        {"binary_cross_entropy_with_logits_forward", l_bce_logits_forward},
        {"binary_cross_entropy_with_logits_backward", l_bce_logits_backward},
        {NULL, NULL}};
    static const luaL_Reg F[] = {{"nll_loss", l_nll_loss_forward},
                                 {"cross_entropy", l_cross_entropy_forward},
                                 {"mse_loss", l_mse_loss_forward},
                                 {"l1_loss", l_l1_loss_forward},
                                 {"binary_cross_entropy_with_logits", l_bce_logits_forward},
                                 {NULL, NULL}};
    dlL_register_nn(L, nn, F);
}
