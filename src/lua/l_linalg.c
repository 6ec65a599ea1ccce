/* l_linalg.c - bindings of the linear-algebra family: matmul, mm, bmm, addmm,
 * dot, mv, outer, each both a module function (dl.matmul(a, b)) and a tensor
 * method (a:matmul(b)).  Arguments are checked here (tensor types, the
 * options table); shapes and dtypes are checked by src/ops/linalg.c.  No
 * temporaries are held, so a failing op needs nothing released. */
#include "l_bind.h"
#include "ops/linalg.h"

typedef dl_tensor *(*binary_op)(dl_tensor *, dl_tensor *);

static int binary(lua_State *L, binary_op f) {
    dl_tensor *a = dlL_checktensor(L, 1);
    dl_tensor *b = dlL_checktensor(L, 2);
    return dlL_pushtensor(L, f(a, b));
}

static int l_matmul(lua_State *L) {
    return binary(L, dl_matmul);
}
static int l_mm(lua_State *L) {
    return binary(L, dl_mm);
}
static int l_bmm(lua_State *L) {
    return binary(L, dl_bmm);
}
static int l_dot(lua_State *L) {
    return binary(L, dl_dot);
}
static int l_mv(lua_State *L) {
    return binary(L, dl_mv);
}
static int l_outer(lua_State *L) {
    return binary(L, dl_outer);
}

/* dl.addmm(input, m1, m2, {beta=1, alpha=1}) */
static int l_addmm(lua_State *L) {
    static const char *const opts[] = {"beta", "alpha", NULL};
    dl_tensor *input = dlL_checktensor(L, 1);
    dl_tensor *m1 = dlL_checktensor(L, 2);
    dl_tensor *m2 = dlL_checktensor(L, 3);
    dlL_checkoptions(L, 4, "addmm", opts);
    double beta = dlL_optnumber(L, 4, "beta", 1.0);
    double alpha = dlL_optnumber(L, 4, "alpha", 1.0);
    return dlL_pushtensor(L, dl_addmm(input, m1, m2, beta, alpha));
}

void dlL_open_linalg(lua_State *L) {
    static const luaL_Reg fns[] = {
        {"matmul", l_matmul}, {"mm", l_mm}, {"bmm", l_bmm},     {"addmm", l_addmm},
        {"dot", l_dot},       {"mv", l_mv}, {"outer", l_outer}, {NULL, NULL},
    };
    dlL_register(L, fns, fns);
}
