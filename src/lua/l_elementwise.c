/* l_elementwise.c - Lua bindings of the elementwise op family
 * (src/ops/elementwise.h): unary math, binary arithmetic with broadcasting,
 * comparisons, logical ops, clamp, where, masked_fill, equal/isclose/allclose,
 * their in-place `_` methods, and the Tensor operators + - * / ^ // % and
 * unary minus; dl._nn.elementwise_vectorized([on]), the CUDA maps' switch.
 *
 * Each op is a module function (dl.add(a, b)) and a method (t:add(b)); in-place
 * forms are methods only and return self.  A Lua number or boolean operand
 * becomes a 0-dim tensor typed the way PyTorch types a scalar against the
 * other operand, so it never widens a tensor's dtype within its category.
 * Arguments are all checked before any tensor is made; C failures release
 * what is held and raise dl_last_error(). */
#include "l_bind.h"
#include "ops/elementwise.h"

#include <string.h>

/* --- operands ------------------------------------------------------------------ */

static void check_operand(lua_State *L, int idx, const char *op) {
    if (dlL_totensor(L, idx) || dlL_isscalar(L, idx)) return;
    luaL_argerror(
        L, idx,
        lua_pushfstring(L, "%s: tensor or number expected, got %s", op, luaL_typename(L, idx)));
}

/* A new reference for the (checked) operand at idx: the tensor itself, or a
 * Lua number/boolean as a 0-dim tensor of the dtype PyTorch gives that scalar
 * against `like` (NULL: int64, float32 or bool).  NULL with an error set. */
static dl_tensor *operand(lua_State *L, int idx, const dl_tensor *like) {
    dl_tensor *t = dlL_totensor(L, idx);
    if (t) return dl_tensor_retain(t);
    if (lua_isboolean(L, idx)) {
        dl_dtype dt = like ? dl_promote_with_scalar(like->dtype, false, true) : DL_DTYPE_BOOL;
        if (like && like->ndim > 0 && (like->dtype == DL_DTYPE_F16 || like->dtype == DL_DTYPE_BF16))
            dt = DL_DTYPE_F32;
        return dl_tensor_scalar(lua_toboolean(L, idx), dt);
    }
    int isint = lua_isinteger(L, idx);
    dl_dtype dt = like ? dl_promote_with_scalar(like->dtype, !isint, false)
                       : (isint ? DL_DTYPE_I64 : DL_DTYPE_F32);
    /* Against a float16/bfloat16 tensor the scalar keeps float32 precision, as
     * PyTorch computes with the unrounded scalar; a 0-dim float32 operand does
     * not change the (half) result type. */
    if (like && like->ndim > 0 && (like->dtype == DL_DTYPE_F16 || like->dtype == DL_DTYPE_BF16))
        dt = DL_DTYPE_F32;
    if (isint && !dl_dtype_is_floating(dt)) {
        /* Against a dimensioned tensor an integer keeps its value in int64:
         * being 0-dim it never widens the tensor's integer dtype, and the op
         * casts it to the common dtype (wrapping, as PyTorch does) or straight
         * to float for true division.  Against a 0-dim tensor it takes that
         * tensor's dtype, so two 0-dim operands do not promote. */
        if (!like || like->ndim > 0) dt = DL_DTYPE_I64;
        dl_tensor *s = dl_tensor_empty(0, NULL, dt, DL_CPU);
        if (s) dl_store_i64(dl_tensor_data_ptr(s), dt, lua_tointeger(L, idx));
        return s;
    }
    return dl_tensor_scalar(lua_tonumber(L, idx), dt);
}

static int no_more_args(lua_State *L, int idx, const char *op) {
    if (!lua_isnoneornil(L, idx))
        return luaL_argerror(L, idx, lua_pushfstring(L, "%s: unexpected argument", op));
    return 0;
}

/* --- binary ------------------------------------------------------------------------ */

/* Runs op on the operands at ia and ib (already checked); in place writes into
 * the tensor at ia and returns it. */
static int do_binary(lua_State *L, dl_binary_op op, int inplace, double alpha, int ia, int ib) {
    dl_tensor *ta = dlL_totensor(L, ia), *tb = dlL_totensor(L, ib);
    if (!ta && !tb)
        return luaL_error(L, "%s: expected a tensor operand, got %s and %s", dl_binary_op_name(op),
                          luaL_typename(L, ia), luaL_typename(L, ib));
    if ((op == DL_BINARY_SUB) && (lua_isboolean(L, ia) || lua_isboolean(L, ib)))
        return luaL_error(L, "sub: subtraction with a bool is not supported (use logical_xor, "
                             "or logical_not to invert a mask)");
    /* pow(tensor, number) has PyTorch's scalar-exponent rule */
    int scalar_exponent = op == DL_BINARY_POW && !tb;
    dl_tensor *a = operand(L, ia, tb);
    dl_tensor *b = a ? operand(L, ib, ta) : NULL;
    if (!a || !b) {
        dl_tensor_release(a);
        return dlL_fail(L);
    }
    if (inplace) {
        int rc = scalar_exponent ? dl_pow_scalar_(a, b) : dl_binary_(op, a, b, alpha);
        dl_tensor_release(a);
        dl_tensor_release(b);
        if (rc) return dlL_fail(L);
        lua_pushvalue(L, ia);
        return 1;
    }
    dl_tensor *r = scalar_exponent ? dl_pow_scalar(a, b) : dl_binary(op, a, b, alpha);
    dl_tensor_release(a);
    dl_tensor_release(b);
    return dlL_pushtensor(L, r);
}

/* upvalues: op, in-place flag, Lua name.  (a, b [, options]) */
static int l_binary(lua_State *L) {
    dl_binary_op op = (dl_binary_op)lua_tointeger(L, lua_upvalueindex(1));
    int inplace = lua_toboolean(L, lua_upvalueindex(2));
    const char *name = lua_tostring(L, lua_upvalueindex(3));
    if (inplace)
        dlL_checktensor(L, 1);
    else
        check_operand(L, 1, name);
    check_operand(L, 2, name);
    double alpha = 1;
    if (op == DL_BINARY_ADD || op == DL_BINARY_SUB) {
        static const char *const keys[] = {"alpha", NULL};
        dlL_checkoptions(L, 3, name, keys);
        alpha = dlL_optnumber(L, 3, "alpha", 1);
    } else if (op == DL_BINARY_DIV) {
        static const char *const keys[] = {"rounding_mode", NULL};
        dlL_checkoptions(L, 3, name, keys);
        int ty = dlL_optfield(L, 3, "rounding_mode");
        const char *mode = ty == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        if (mode && strcmp(mode, "floor") == 0)
            op = DL_BINARY_DIV_FLOOR;
        else if (mode && strcmp(mode, "trunc") == 0)
            op = DL_BINARY_DIV_TRUNC;
        else if (ty != LUA_TNIL)
            return luaL_error(L, "%s: rounding_mode must be \"floor\", \"trunc\" or nil, got %s",
                              name, mode ? mode : luaL_typename(L, -1));
        lua_pop(L, 1);
    } else {
        no_more_args(L, 3, name);
    }
    no_more_args(L, 4, name);
    return do_binary(L, op, inplace, alpha, 1, 2);
}

/* Tensor operators: upvalue op.  Lua calls them with the two operands in
 * source order, either of which may be a number. */
static int l_operator(lua_State *L) {
    dl_binary_op op = (dl_binary_op)lua_tointeger(L, lua_upvalueindex(1));
    const char *name = dl_binary_op_name(op);
    check_operand(L, 1, name);
    check_operand(L, 2, name);
    return do_binary(L, op, 0, 1, 1, 2);
}

static int l_unm(lua_State *L) {
    return dlL_pushtensor(L, dl_unary(DL_UNARY_NEG, dlL_checktensor(L, 1)));
}

/* --- unary ---------------------------------------------------------------------------- */

/* upvalues: op, in-place flag, Lua name.  (x) */
static int l_unary(lua_State *L) {
    dl_unary_op op = (dl_unary_op)lua_tointeger(L, lua_upvalueindex(1));
    int inplace = lua_toboolean(L, lua_upvalueindex(2));
    const char *name = lua_tostring(L, lua_upvalueindex(3));
    dl_tensor *t = dlL_checktensor(L, 1);
    no_more_args(L, 2, name);
    if (!inplace) return dlL_pushtensor(L, dl_unary(op, t));
    return dlL_pushself(L, dl_unary_(op, t));
}

/* --- clamp ------------------------------------------------------------------------------ */

static void check_bound(lua_State *L, int idx, const char *op, const char *what) {
    if (lua_isnil(L, idx) || dlL_totensor(L, idx) || lua_type(L, idx) == LUA_TNUMBER) return;
    luaL_error(L, "%s: %s must be a number or a tensor, got %s", op, what, luaL_typename(L, idx));
}

/* upvalues: which bounds (0 both, 1 min only, 2 max only), in-place flag, name.
 * clamp(x, min, max) | clamp(x, {min=, max=}) | clamp_min(x, min) | clamp_max(x, max) */
static int l_clamp(lua_State *L) {
    int which = (int)lua_tointeger(L, lua_upvalueindex(1));
    int inplace = lua_toboolean(L, lua_upvalueindex(2));
    const char *name = lua_tostring(L, lua_upvalueindex(3));
    dl_tensor *x = dlL_checktensor(L, 1);
    no_more_args(L, 4, name);
    lua_settop(L, 3);
    if (which == 0 && lua_istable(L, 2) && !dlL_totensor(L, 2)) {
        static const char *const keys[] = {"min", "max", NULL};
        dlL_checkoptions(L, 2, name, keys);
        no_more_args(L, 3, name);
        lua_getfield(L, 2, "min");
        lua_getfield(L, 2, "max");
        lua_replace(L, 3);
        lua_replace(L, 2);
    } else if (which != 0) {
        if (lua_isnil(L, 2))
            return luaL_argerror(L, 2, lua_pushfstring(L, "%s: bound expected", name));
        no_more_args(L, 3, name);
        if (which == 2) { /* the bound is max: move it to slot 3 */
            lua_copy(L, 2, 3);
            lua_pushnil(L);
            lua_replace(L, 2);
        }
    }
    check_bound(L, 2, name, "min");
    check_bound(L, 3, name, "max");
    if (lua_isnil(L, 2) && lua_isnil(L, 3))
        return luaL_error(L, "%s: at least one of min and max must be given", name);
    dl_tensor *lo = lua_isnil(L, 2) ? NULL : operand(L, 2, x);
    if (!lua_isnil(L, 2) && !lo) return dlL_fail(L);
    dl_tensor *hi = lua_isnil(L, 3) ? NULL : operand(L, 3, x);
    if (!lua_isnil(L, 3) && !hi) {
        dl_tensor_release(lo);
        return dlL_fail(L);
    }
    if (inplace) {
        int rc = dl_clamp_(x, lo, hi);
        dl_tensor_release(lo);
        dl_tensor_release(hi);
        return dlL_pushself(L, rc);
    }
    dl_tensor *r = dl_clamp(x, lo, hi);
    dl_tensor_release(lo);
    dl_tensor_release(hi);
    return dlL_pushtensor(L, r);
}

/* --- where, masked_fill ------------------------------------------------------------------ */

/* dl.where(cond, a, b): a and b tensors or numbers. */
static int l_where(lua_State *L) {
    dl_tensor *cond = dlL_checktensor(L, 1);
    check_operand(L, 2, "where");
    check_operand(L, 3, "where");
    no_more_args(L, 4, "where");
    dl_tensor *ta = dlL_totensor(L, 2), *tb = dlL_totensor(L, 3);
    dl_tensor *a = operand(L, 2, tb);
    dl_tensor *b = a ? operand(L, 3, ta) : NULL;
    if (!a || !b) {
        dl_tensor_release(a);
        return dlL_fail(L);
    }
    dl_tensor *r = dl_where(cond, a, b);
    dl_tensor_release(a);
    dl_tensor_release(b);
    return dlL_pushtensor(L, r);
}

/* t:where(cond, other) == dl.where(cond, t, other) */
static int l_where_method(lua_State *L) {
    dlL_checktensor(L, 1);
    lua_settop(L, 3);
    lua_pushvalue(L, 2);
    lua_pushvalue(L, 1);
    lua_pushvalue(L, 3);
    lua_rotate(L, 1, -3);
    lua_settop(L, 3);
    return l_where(L);
}

/* upvalue: in-place flag.  masked_fill(x, mask, value) */
static int l_masked_fill(lua_State *L) {
    int inplace = lua_toboolean(L, lua_upvalueindex(1));
    const char *name = inplace ? "masked_fill_" : "masked_fill";
    dl_tensor *x = dlL_checktensor(L, 1);
    dl_tensor *mask = dlL_checktensor(L, 2);
    check_operand(L, 3, name);
    no_more_args(L, 4, name);
    dl_tensor *v = operand(L, 3, x);
    if (!v) return dlL_fail(L);
    if (inplace) {
        int rc = dl_masked_fill_(x, mask, v);
        dl_tensor_release(v);
        return dlL_pushself(L, rc);
    }
    dl_tensor *r = dl_masked_fill(x, mask, v);
    dl_tensor_release(v);
    return dlL_pushtensor(L, r);
}

/* --- equal, isclose, allclose ---------------------------------------------------------------- */

static int l_equal(lua_State *L) {
    dl_tensor *a = dlL_checktensor(L, 1), *b = dlL_checktensor(L, 2);
    no_more_args(L, 3, "equal");
    bool eq;
    if (dl_equal(a, b, &eq)) return dlL_fail(L);
    lua_pushboolean(L, eq);
    return 1;
}

/* upvalue: 1 for allclose (a Lua boolean), 0 for isclose (a bool tensor).
 * (a, b [, {rtol=1e-5, atol=1e-8, equal_nan=false}]) */
static int l_close(lua_State *L) {
    int all = lua_toboolean(L, lua_upvalueindex(1));
    const char *name = all ? "allclose" : "isclose";
    dl_tensor *a = dlL_checktensor(L, 1);
    check_operand(L, 2, name);
    static const char *const keys[] = {"rtol", "atol", "equal_nan", NULL};
    dlL_checkoptions(L, 3, name, keys);
    double rtol = dlL_optnumber(L, 3, "rtol", 1e-5), atol = dlL_optnumber(L, 3, "atol", 1e-8);
    int equal_nan = dlL_optboolean(L, 3, "equal_nan", 0);
    no_more_args(L, 4, name);
    dl_tensor *b = operand(L, 2, a);
    if (!b) return dlL_fail(L);
    if (!all) {
        dl_tensor *r = dl_isclose(a, b, rtol, atol, equal_nan);
        dl_tensor_release(b);
        return dlL_pushtensor(L, r);
    }
    bool close;
    int rc = dl_allclose(a, b, rtol, atol, equal_nan, &close);
    dl_tensor_release(b);
    if (rc) return dlL_fail(L);
    lua_pushboolean(L, close);
    return 1;
}

/* --- registration ------------------------------------------------------------------------ */

enum { FN = 1, METHOD = 2, INPLACE = 4 };

static const struct {
    const char *name;
    dl_binary_op op;
    int forms;
} binary_ops[] = {
    {"add", DL_BINARY_ADD, FN | METHOD | INPLACE},
    {"sub", DL_BINARY_SUB, FN | METHOD | INPLACE},
    {"mul", DL_BINARY_MUL, FN | METHOD | INPLACE},
    {"div", DL_BINARY_DIV, FN | METHOD | INPLACE},
    {"true_divide", DL_BINARY_DIV, FN | METHOD | INPLACE},
    {"floor_divide", DL_BINARY_DIV_FLOOR, FN | METHOD | INPLACE},
    {"pow", DL_BINARY_POW, FN | METHOD | INPLACE},
    {"maximum", DL_BINARY_MAXIMUM, FN | METHOD},
    {"minimum", DL_BINARY_MINIMUM, FN | METHOD},
    {"remainder", DL_BINARY_REMAINDER, FN | METHOD | INPLACE},
    {"fmod", DL_BINARY_FMOD, FN | METHOD | INPLACE},
    {"atan2", DL_BINARY_ATAN2, FN | METHOD | INPLACE},
    {"eq", DL_BINARY_EQ, FN | METHOD | INPLACE},
    {"ne", DL_BINARY_NE, FN | METHOD | INPLACE},
    {"lt", DL_BINARY_LT, FN | METHOD | INPLACE},
    {"le", DL_BINARY_LE, FN | METHOD | INPLACE},
    {"gt", DL_BINARY_GT, FN | METHOD | INPLACE},
    {"ge", DL_BINARY_GE, FN | METHOD | INPLACE},
    {"logical_and", DL_BINARY_LOGICAL_AND, FN | METHOD | INPLACE},
    {"logical_or", DL_BINARY_LOGICAL_OR, FN | METHOD | INPLACE},
    {"logical_xor", DL_BINARY_LOGICAL_XOR, FN | METHOD | INPLACE},
};

static const struct {
    const char *name;
    dl_unary_op op;
    int forms;
} unary_ops[] = {
    {"neg", DL_UNARY_NEG, FN | METHOD | INPLACE},
    {"negative", DL_UNARY_NEG, FN | METHOD | INPLACE},
    {"abs", DL_UNARY_ABS, FN | METHOD | INPLACE},
    {"sign", DL_UNARY_SIGN, FN | METHOD | INPLACE},
    {"relu", DL_UNARY_RELU, FN | METHOD | INPLACE},
    {"floor", DL_UNARY_FLOOR, FN | METHOD | INPLACE},
    {"ceil", DL_UNARY_CEIL, FN | METHOD | INPLACE},
    {"round", DL_UNARY_ROUND, FN | METHOD | INPLACE},
    {"trunc", DL_UNARY_TRUNC, FN | METHOD | INPLACE},
    {"square", DL_UNARY_SQUARE, FN | METHOD | INPLACE},
    {"exp", DL_UNARY_EXP, FN | METHOD | INPLACE},
    {"exp2", DL_UNARY_EXP2, FN | METHOD | INPLACE},
    {"expm1", DL_UNARY_EXPM1, FN | METHOD | INPLACE},
    {"log", DL_UNARY_LOG, FN | METHOD | INPLACE},
    {"log2", DL_UNARY_LOG2, FN | METHOD | INPLACE},
    {"log10", DL_UNARY_LOG10, FN | METHOD | INPLACE},
    {"log1p", DL_UNARY_LOG1P, FN | METHOD | INPLACE},
    {"sqrt", DL_UNARY_SQRT, FN | METHOD | INPLACE},
    {"rsqrt", DL_UNARY_RSQRT, FN | METHOD | INPLACE},
    {"reciprocal", DL_UNARY_RECIPROCAL, FN | METHOD | INPLACE},
    {"sin", DL_UNARY_SIN, FN | METHOD | INPLACE},
    {"cos", DL_UNARY_COS, FN | METHOD | INPLACE},
    {"tan", DL_UNARY_TAN, FN | METHOD | INPLACE},
    {"asin", DL_UNARY_ASIN, FN | METHOD | INPLACE},
    {"acos", DL_UNARY_ACOS, FN | METHOD | INPLACE},
    {"atan", DL_UNARY_ATAN, FN | METHOD | INPLACE},
    {"sinh", DL_UNARY_SINH, FN | METHOD | INPLACE},
    {"cosh", DL_UNARY_COSH, FN | METHOD | INPLACE},
    {"tanh", DL_UNARY_TANH, FN | METHOD | INPLACE},
    {"sigmoid", DL_UNARY_SIGMOID, FN | METHOD | INPLACE},
    {"erf", DL_UNARY_ERF, FN | METHOD | INPLACE},
    {"erfc", DL_UNARY_ERFC, FN | METHOD | INPLACE},
    {"frac", DL_UNARY_FRAC, FN | METHOD | INPLACE},
    {"logical_not", DL_UNARY_LOGICAL_NOT, FN | METHOD | INPLACE},
    {"isnan", DL_UNARY_ISNAN, FN | METHOD},
    {"isinf", DL_UNARY_ISINF, FN | METHOD},
    {"isfinite", DL_UNARY_ISFINITE, FN | METHOD},
};

static const struct {
    const char *name;
    int which, inplace;
} clamp_ops[] = {
    {"clamp", 0, 0},     {"clamp_", 0, 1},     {"clip", 0, 0},      {"clip_", 0, 1},
    {"clamp_min", 1, 0}, {"clamp_min_", 1, 1}, {"clamp_max", 2, 0}, {"clamp_max_", 2, 1},
};

/* Sets the closure fn(upvalues: op, inplace, name) as name (+ "_" when in
 * place) in the tables at mod and methods, as forms says. */
static void set_op(lua_State *L, int mod, int methods, lua_CFunction fn, const char *name, int op,
                   int inplace, int in_module) {
    if (inplace)
        lua_pushfstring(L, "%s_", name);
    else
        lua_pushstring(L, name);
    int key = lua_gettop(L);
    lua_pushinteger(L, op);
    lua_pushboolean(L, inplace);
    lua_pushvalue(L, key);
    lua_pushcclosure(L, fn, 3);
    if (in_module) {
        lua_pushvalue(L, -1);
        lua_setfield(L, mod, lua_tostring(L, key));
    }
    lua_setfield(L, methods, lua_tostring(L, key));
    lua_pop(L, 1);
}

/* dl._nn.elementwise_vectorized([on]) -> whether CUDA's elementwise maps run
 * vectorized (16-byte packs, int indices) before the call; nil without a
 * CUDA backend (nothing to set) */
static int l_elementwise_vectorized(lua_State *L) {
    int on = -1;
    if (!lua_isnoneornil(L, 1)) {
        luaL_checktype(L, 1, LUA_TBOOLEAN);
        on = lua_toboolean(L, 1);
    }
    int was = dl_elementwise_vectorized(on);
    if (was < 0)
        lua_pushnil(L);
    else
        lua_pushboolean(L, was);
    return 1;
}

void dlL_open_elementwise(lua_State *L) {
    lua_getfield(L, LUA_REGISTRYINDEX, DL_MODULE_KEY);
    int mod = lua_gettop(L);
    luaL_getmetatable(L, DL_TENSOR_MT);
    int meta = lua_gettop(L);
    lua_getfield(L, meta, "methods");
    int methods = lua_gettop(L);

    for (size_t i = 0; i < sizeof binary_ops / sizeof binary_ops[0]; i++) {
        set_op(L, mod, methods, l_binary, binary_ops[i].name, binary_ops[i].op, 0,
               binary_ops[i].forms & FN);
        if (binary_ops[i].forms & INPLACE)
            set_op(L, mod, methods, l_binary, binary_ops[i].name, binary_ops[i].op, 1, 0);
    }
    for (size_t i = 0; i < sizeof unary_ops / sizeof unary_ops[0]; i++) {
        set_op(L, mod, methods, l_unary, unary_ops[i].name, unary_ops[i].op, 0,
               unary_ops[i].forms & FN);
        if (unary_ops[i].forms & INPLACE)
            set_op(L, mod, methods, l_unary, unary_ops[i].name, unary_ops[i].op, 1, 0);
    }
    for (size_t i = 0; i < sizeof clamp_ops / sizeof clamp_ops[0]; i++) {
        lua_pushinteger(L, clamp_ops[i].which);
        lua_pushboolean(L, clamp_ops[i].inplace);
        lua_pushstring(L, clamp_ops[i].name);
        lua_pushcclosure(L, l_clamp, 3);
        if (!clamp_ops[i].inplace) {
            lua_pushvalue(L, -1);
            lua_setfield(L, mod, clamp_ops[i].name);
        }
        lua_setfield(L, methods, clamp_ops[i].name);
    }

    static const luaL_Reg functions[] = {
        {"where", l_where},
        {"equal", l_equal},
        {NULL, NULL},
    };
    static const luaL_Reg tensor_methods[] = {
        {"where", l_where_method},
        {"equal", l_equal},
        {NULL, NULL},
    };
    dlL_register(L, functions, tensor_methods);
    static const luaL_Reg nn[] = {{"elementwise_vectorized", l_elementwise_vectorized},
                                  {NULL, NULL}};
    dlL_register_nn(L, nn, NULL);
    for (int inplace = 0; inplace <= 1; inplace++) {
        const char *n = inplace ? "masked_fill_" : "masked_fill";
        lua_pushboolean(L, inplace);
        lua_pushcclosure(L, l_masked_fill, 1);
        if (!inplace) {
            lua_pushvalue(L, -1);
            lua_setfield(L, mod, n);
        }
        lua_setfield(L, methods, n);
    }
    for (int all = 0; all <= 1; all++) {
        const char *n = all ? "allclose" : "isclose";
        lua_pushboolean(L, all);
        lua_pushcclosure(L, l_close, 1);
        lua_pushvalue(L, -1);
        lua_setfield(L, mod, n);
        lua_setfield(L, methods, n);
    }

    /* operators */
    static const struct {
        const char *event;
        dl_binary_op op;
    } operators[] = {
        {"__add", DL_BINARY_ADD},       {"__sub", DL_BINARY_SUB}, {"__mul", DL_BINARY_MUL},
        {"__div", DL_BINARY_DIV},       {"__pow", DL_BINARY_POW}, {"__idiv", DL_BINARY_DIV_FLOOR},
        {"__mod", DL_BINARY_REMAINDER},
    };
    for (size_t i = 0; i < sizeof operators / sizeof operators[0]; i++) {
        lua_pushinteger(L, operators[i].op);
        lua_pushcclosure(L, l_operator, 1);
        lua_setfield(L, meta, operators[i].event);
    }
    lua_pushcfunction(L, l_unm);
    lua_setfield(L, meta, "__unm");
    lua_settop(L, mod - 1);
}
