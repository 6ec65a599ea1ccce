/* l_onnx.c - Lua bindings of the ONNX reader/writer (src/io/onnx.h), in
 * dl._onnx; lua/dl/onnx.lua builds modules from what these return.
 *
 *   missing() -> nil, or one line saying what this build lacks for ONNX
 *   load_model(path) / decode_model(bytes [, name]) -> model table
 *   load_tensor(path) / decode_tensor(bytes [, name]) -> tensor, name
 *       (nil, reason when dlua cannot hold it: a dtype it lacks)
 *   save_model(path, model table) / encode_model(model table) -> bytes
 *   save_tensor(path, t [, name]): a TensorProto file
 *
 * The model table mirrors ModelProto with plain Lua values:
 *   {ir_version=, producer_name=, producer_version=, domain=, model_version=,
 *    opset_import = {{domain=, version=}, ...}, metadata = {key = value},
 *    functions = n (model-local functions: counted, not read), graph = G}
 *   G = {name=, node = {N...}, initializer = {I...}, input = {V...},
 *        output = {V...}, value_info = {V...}, sparse_initializers = n}
 *   N = {name=, op_type=, domain=, input = {names}, output = {names},
 *        attribute = {{name=, type="INT"|"FLOATS"|..., value=}, ...}}
 *   I = {name=, tensor=t} or {name=, unsupported="reason"}
 *   V = {name=, kind="tensor"|"sequence"|"map"|"optional"|"sparse_tensor"|nil,
 *        elem_type=int, shape = {dim...} or nil}; a dim is an integer
 *        (dim_value), a string (dim_param) or false (unknown)
 * Attribute values: FLOAT number, INT integer, STRING string, TENSOR tensor
 * (or {unsupported=}), GRAPH a G table, plural kinds arrays of those; a
 * SPARSE_TENSOR or TYPE_PROTO attribute has value false.
 *
 * Invariants: the decoded message is held by a userdata with __gc while the
 * tables are built, and the encoder's allocations by an arena userdata, so a
 * Lua error half-way leaks nothing. */
#include "l_bind.h"
#include "io/onnx.h"

#include <stdlib.h>
#include <string.h>

#define DL_ONNX_HOLD_MT "dl.onnx_hold"
#define DL_ONNX_ARENA_MT "dl.onnx_arena"

static int l_missing(lua_State *L) {
    lua_pushstring(L, dl_onnx_missing()); /* NULL: nil */
    return 1;
}

#ifdef DL_WITH_ONNX

/* --- holding decoded messages --------------------------------------------------------- */

typedef struct {
    Onnx__ModelProto *model;
    Onnx__TensorProto *tensor;
    uint8_t *buf;
} hold;

static int hold_gc(lua_State *L) {
    hold *h = luaL_checkudata(L, 1, DL_ONNX_HOLD_MT);
    dl_onnx_model_free(h->model);
    dl_onnx_tensor_free(h->tensor);
    free(h->buf);
    h->model = NULL, h->tensor = NULL, h->buf = NULL;
    return 0;
}

static hold *new_hold(lua_State *L) {
    hold *h = lua_newuserdatauv(L, sizeof *h, 0);
    h->model = NULL, h->tensor = NULL, h->buf = NULL;
    luaL_setmetatable(L, DL_ONNX_HOLD_MT);
    return h;
}

/* --- messages -> Lua ------------------------------------------------------------------ */

static void set_str(lua_State *L, const char *key, const char *s) {
    lua_pushstring(L, s ? s : "");
    lua_setfield(L, -2, key);
}

static void push_strings(lua_State *L, size_t n, char **s) {
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_pushstring(L, s[i] ? s[i] : "");
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
}

/* A tensor, or {unsupported = reason}; a malformed tensor raises. */
static void push_tensor(lua_State *L, const Onnx__TensorProto *tp) {
    dl_tensor *t = NULL;
    int rc = dl_onnx_tensor_to_dl(tp, &t);
    if (rc < 0) dlL_fail(L);
    if (rc > 0) {
        lua_createtable(L, 0, 1);
        lua_pushstring(L, dl_last_error());
        lua_setfield(L, -2, "unsupported");
        return;
    }
    dlL_pushtensor(L, t);
}

static void push_type(lua_State *L, const Onnx__TypeProto *tp);

static void push_shape(lua_State *L, const Onnx__TensorShapeProto *s) {
    lua_createtable(L, (int)s->n_dim, 0);
    for (size_t i = 0; i < s->n_dim; i++) {
        const Onnx__TensorShapeProto__Dimension *d = s->dim[i];
        if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE)
            lua_pushinteger(L, d->dim_value);
        else if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
                 d->dim_param)
            lua_pushstring(L, d->dim_param);
        else
            lua_pushboolean(L, 0);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
}

/* Fills the table on top with kind, elem_type, shape / elem of a TypeProto. */
static void fill_type(lua_State *L, const Onnx__TypeProto *tp) {
    if (!tp) return;
    const char *kind = NULL;
    switch (tp->value_case) {
    case ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE:
        kind = "tensor";
        if (tp->tensor_type->has_elem_type) {
            lua_pushinteger(L, tp->tensor_type->elem_type);
            lua_setfield(L, -2, "elem_type");
        }
        if (tp->tensor_type->shape) {
            push_shape(L, tp->tensor_type->shape);
            lua_setfield(L, -2, "shape");
        }
        break;
    case ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE:
        kind = "sequence";
        push_type(L, tp->sequence_type->elem_type);
        lua_setfield(L, -2, "elem");
        break;
    case ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE:
        kind = "optional";
        push_type(L, tp->optional_type->elem_type);
        lua_setfield(L, -2, "elem");
        break;
    case ONNX__TYPE_PROTO__VALUE_MAP_TYPE: kind = "map"; break;
    case ONNX__TYPE_PROTO__VALUE_SPARSE_TENSOR_TYPE: kind = "sparse_tensor"; break;
    default: break;
    }
    if (kind) set_str(L, "kind", kind);
}

static void push_type(lua_State *L, const Onnx__TypeProto *tp) {
    lua_createtable(L, 0, 3);
    fill_type(L, tp);
}

static void push_value_infos(lua_State *L, size_t n, Onnx__ValueInfoProto **v) {
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_createtable(L, 0, 4);
        set_str(L, "name", v[i]->name);
        fill_type(L, v[i]->type);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
}

static void push_graph(lua_State *L, const Onnx__GraphProto *g);

static const char *attr_type_name(int t) {
    static const char *const names[] = {
        "UNDEFINED",      "FLOAT",      "INT",        "STRING",  "TENSOR", "GRAPH",
        "FLOATS",         "INTS",       "STRINGS",    "TENSORS", "GRAPHS", "SPARSE_TENSOR",
        "SPARSE_TENSORS", "TYPE_PROTO", "TYPE_PROTOS"};
    if (t < 0 || t >= (int)(sizeof names / sizeof *names)) return "UNDEFINED";
    return names[t];
}

static void push_attribute_value(lua_State *L, const Onnx__AttributeProto *a) {
    size_t i;
    switch (a->has_type ? (int)a->type : 0) {
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT: lua_pushnumber(L, a->f); break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT: lua_pushinteger(L, a->i); break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING:
        lua_pushlstring(L, (const char *)a->s.data, a->s.data ? a->s.len : 0);
        break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR:
        if (a->t)
            push_tensor(L, a->t);
        else
            lua_pushboolean(L, 0);
        break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH:
        if (a->g)
            push_graph(L, a->g);
        else
            lua_pushboolean(L, 0);
        break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS:
        lua_createtable(L, (int)a->n_floats, 0);
        for (i = 0; i < a->n_floats; i++) {
            lua_pushnumber(L, a->floats[i]);
            lua_rawseti(L, -2, (lua_Integer)i + 1);
        }
        break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS:
        lua_createtable(L, (int)a->n_ints, 0);
        for (i = 0; i < a->n_ints; i++) {
            lua_pushinteger(L, a->ints[i]);
            lua_rawseti(L, -2, (lua_Integer)i + 1);
        }
        break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS:
        lua_createtable(L, (int)a->n_strings, 0);
        for (i = 0; i < a->n_strings; i++) {
            lua_pushlstring(L, (const char *)a->strings[i].data,
                            a->strings[i].data ? a->strings[i].len : 0);
            lua_rawseti(L, -2, (lua_Integer)i + 1);
        }
        break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSORS:
        lua_createtable(L, (int)a->n_tensors, 0);
        for (i = 0; i < a->n_tensors; i++) {
            push_tensor(L, a->tensors[i]);
            lua_rawseti(L, -2, (lua_Integer)i + 1);
        }
        break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS:
        lua_createtable(L, (int)a->n_graphs, 0);
        for (i = 0; i < a->n_graphs; i++) {
            push_graph(L, a->graphs[i]);
            lua_rawseti(L, -2, (lua_Integer)i + 1);
        }
        break;
    default: lua_pushboolean(L, 0); break;
    }
}

static void push_node(lua_State *L, const Onnx__NodeProto *n) {
    lua_createtable(L, 0, 7);
    set_str(L, "name", n->name);
    set_str(L, "op_type", n->op_type);
    set_str(L, "domain", n->domain);
    push_strings(L, n->n_input, n->input);
    lua_setfield(L, -2, "input");
    push_strings(L, n->n_output, n->output);
    lua_setfield(L, -2, "output");
    lua_createtable(L, (int)n->n_attribute, 0);
    for (size_t i = 0; i < n->n_attribute; i++) {
        const Onnx__AttributeProto *a = n->attribute[i];
        lua_createtable(L, 0, 4);
        set_str(L, "name", a->name);
        set_str(L, "type", attr_type_name(a->has_type ? (int)a->type : 0));
        if (a->ref_attr_name && a->ref_attr_name[0]) set_str(L, "ref_attr_name", a->ref_attr_name);
        push_attribute_value(L, a);
        lua_setfield(L, -2, "value");
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, "attribute");
}

static void push_graph(lua_State *L, const Onnx__GraphProto *g) {
    luaL_checkstack(L, 16, "onnx: graph nesting");
    lua_createtable(L, 0, 8);
    set_str(L, "name", g->name);
    lua_createtable(L, (int)g->n_node, 0);
    for (size_t i = 0; i < g->n_node; i++) {
        push_node(L, g->node[i]);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, "node");
    lua_createtable(L, (int)g->n_initializer, 0);
    for (size_t i = 0; i < g->n_initializer; i++) {
        lua_createtable(L, 0, 2);
        set_str(L, "name", g->initializer[i]->name);
        push_tensor(L, g->initializer[i]);
        if (dlL_totensor(L, -1))
            lua_setfield(L, -2, "tensor");
        else {
            lua_getfield(L, -1, "unsupported");
            lua_setfield(L, -3, "unsupported");
            lua_pop(L, 1);
        }
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, "initializer");
    lua_pushinteger(L, (lua_Integer)g->n_sparse_initializer);
    lua_setfield(L, -2, "sparse_initializers");
    push_value_infos(L, g->n_input, g->input);
    lua_setfield(L, -2, "input");
    push_value_infos(L, g->n_output, g->output);
    lua_setfield(L, -2, "output");
    push_value_infos(L, g->n_value_info, g->value_info);
    lua_setfield(L, -2, "value_info");
}

static void push_model(lua_State *L, const Onnx__ModelProto *m) {
    lua_createtable(L, 0, 10);
    lua_pushinteger(L, m->has_ir_version ? m->ir_version : 0);
    lua_setfield(L, -2, "ir_version");
    set_str(L, "producer_name", m->producer_name);
    set_str(L, "producer_version", m->producer_version);
    set_str(L, "domain", m->domain);
    lua_pushinteger(L, m->has_model_version ? m->model_version : 0);
    lua_setfield(L, -2, "model_version");
    lua_createtable(L, (int)m->n_opset_import, 0);
    for (size_t i = 0; i < m->n_opset_import; i++) {
        lua_createtable(L, 0, 2);
        set_str(L, "domain", m->opset_import[i]->domain);
        lua_pushinteger(L, m->opset_import[i]->has_version ? m->opset_import[i]->version : 0);
        lua_setfield(L, -2, "version");
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, "opset_import");
    lua_createtable(L, 0, (int)m->n_metadata_props);
    for (size_t i = 0; i < m->n_metadata_props; i++) {
        lua_pushstring(L, m->metadata_props[i]->value ? m->metadata_props[i]->value : "");
        lua_setfield(L, -2, m->metadata_props[i]->key ? m->metadata_props[i]->key : "");
    }
    lua_setfield(L, -2, "metadata");
    lua_pushinteger(L, (lua_Integer)m->n_functions);
    lua_setfield(L, -2, "functions");
    if (m->graph) {
        push_graph(L, m->graph);
        lua_setfield(L, -2, "graph");
    }
}

/* Reads the bytes of argument 1: a path (load_*) or the bytes (decode_*). */
static const uint8_t *input_bytes(lua_State *L, hold *h, int from_file, size_t *len,
                                  const char **name) {
    if (from_file) {
        const char *path = luaL_checkstring(L, 1);
        *name = path;
        if (dl_onnx_read_file(path, &h->buf, len)) dlL_fail(L);
        return h->buf;
    }
    const char *s = lua_tolstring(L, 1, len);
    *name = lua_tostring(L, 2);
    return (const uint8_t *)s;
}

/* Checks the arguments (path, or bytes [, name]) before anything is made. */
static void check_input_args(lua_State *L, int from_file) {
    if (from_file) {
        luaL_checkstring(L, 1);
        lua_settop(L, 1);
    } else {
        luaL_checkstring(L, 1);
        luaL_optstring(L, 2, "(bytes)");
        if (lua_isnoneornil(L, 2)) {
            lua_settop(L, 1);
            lua_pushliteral(L, "(bytes)");
        }
        lua_settop(L, 2);
    }
}

static int model_any(lua_State *L, int from_file) {
    check_input_args(L, from_file);
    hold *h = new_hold(L);
    size_t len;
    const char *name;
    const uint8_t *b = input_bytes(L, h, from_file, &len, &name);
    h->model = dl_onnx_model_decode(b, len, name);
    if (!h->model) return dlL_fail(L);
    push_model(L, h->model);
    dl_onnx_model_free(h->model); /* early: the userdata's __gc frees what is left */
    h->model = NULL;
    return 1;
}

static int tensor_any(lua_State *L, int from_file) {
    check_input_args(L, from_file);
    hold *h = new_hold(L);
    size_t len;
    const char *name;
    const uint8_t *b = input_bytes(L, h, from_file, &len, &name);
    h->tensor = dl_onnx_tensor_decode(b, len, name);
    if (!h->tensor) return dlL_fail(L);
    push_tensor(L, h->tensor);
    if (!dlL_totensor(L, -1)) {
        lua_getfield(L, -1, "unsupported");
        lua_pushnil(L);
        lua_replace(L, -3);
        return 2;
    }
    lua_pushstring(L, h->tensor->name ? h->tensor->name : "");
    return 2;
}

static int l_load_model(lua_State *L) {
    return model_any(L, 1);
}
static int l_decode_model(lua_State *L) {
    return model_any(L, 0);
}
static int l_load_tensor(lua_State *L) {
    return tensor_any(L, 1);
}
static int l_decode_tensor(lua_State *L) {
    return tensor_any(L, 0);
}

/* --- Lua -> messages (export) --------------------------------------------------------- */

typedef struct {
    void **p;
    size_t n, cap;
} arena;

static int arena_gc(lua_State *L) {
    arena *a = luaL_checkudata(L, 1, DL_ONNX_ARENA_MT);
    for (size_t i = 0; i < a->n; i++) free(a->p[i]);
    free(a->p);
    a->p = NULL, a->n = a->cap = 0;
    return 0;
}

/* Remembers p (malloc'ed) for the arena to free; raises (freeing p) on OOM. */
static void *arena_keep(lua_State *L, arena *a, void *p) {
    if (!p) luaL_error(L, "onnx: out of memory while encoding");
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        void **np = realloc(a->p, cap * sizeof *np);
        if (!np) {
            free(p);
            luaL_error(L, "onnx: out of memory while encoding");
        }
        a->p = np, a->cap = cap;
    }
    a->p[a->n++] = p;
    return p;
}

static void *arena_alloc(lua_State *L, arena *a, size_t n) {
    return arena_keep(L, a, calloc(n ? n : 1, 1));
}

typedef struct {
    lua_State *L;
    arena *a;
} enc;

/* A copy of the string field `key` of the table at idx ("" when absent). */
static char *get_str(enc *e, int idx, const char *key) {
    lua_getfield(e->L, idx, key);
    size_t n = 0;
    const char *s = "";
    if (!lua_isnil(e->L, -1)) {
        if (lua_type(e->L, -1) != LUA_TSTRING)
            luaL_error(e->L, "onnx export: field '%s' must be a string, got %s", key,
                       luaL_typename(e->L, -1));
        s = lua_tolstring(e->L, -1, &n);
    }
    char *r = arena_alloc(e->L, e->a, n + 1);
    memcpy(r, s, n);
    lua_pop(e->L, 1);
    return r;
}

/* The array field `key` of the table at idx: pushes it and returns its
 * length (0 and a pushed nil when absent). */
static size_t get_array(enc *e, int idx, const char *key) {
    lua_getfield(e->L, idx, key);
    if (lua_isnil(e->L, -1)) return 0;
    if (!lua_istable(e->L, -1))
        luaL_error(e->L, "onnx export: field '%s' must be a table, got %s", key,
                   luaL_typename(e->L, -1));
    return (size_t)lua_rawlen(e->L, -1);
}

static char **get_strings(enc *e, int idx, const char *key, size_t *n) {
    *n = get_array(e, idx, key);
    char **r = arena_alloc(e->L, e->a, *n * sizeof *r);
    for (size_t i = 0; i < *n; i++) {
        lua_rawgeti(e->L, -1, (lua_Integer)i + 1);
        size_t len;
        const char *s = lua_tolstring(e->L, -1, &len);
        if (!s) luaL_error(e->L, "onnx export: %s[%d] must be a string", key, (int)i + 1);
        r[i] = arena_alloc(e->L, e->a, len + 1);
        memcpy(r[i], s, len);
        lua_pop(e->L, 1);
    }
    lua_pop(e->L, 1);
    return r;
}

static Onnx__TensorProto *enc_tensor(enc *e, int idx, const char *name) {
    dl_tensor *t = dlL_totensor(e->L, idx);
    if (!t) luaL_error(e->L, "onnx export: tensor expected for '%s'", name);
    Onnx__TensorProto *tp = arena_alloc(e->L, e->a, sizeof *tp);
    onnx__tensor_proto__init(tp);
    if (dl_onnx_tensor_from_dl(t, tp)) dlL_fail(e->L);
    arena_keep(e->L, e->a, tp->raw_data.data);
    arena_keep(e->L, e->a, tp->dims);
    size_t n = strlen(name);
    tp->name = arena_alloc(e->L, e->a, n + 1);
    memcpy(tp->name, name, n);
    return tp;
}

static Onnx__TypeProto *enc_type(enc *e, int idx) {
    lua_State *L = e->L;
    Onnx__TypeProto *tp = arena_alloc(L, e->a, sizeof *tp);
    onnx__type_proto__init(tp);
    Onnx__TypeProto__Tensor *tt = arena_alloc(L, e->a, sizeof *tt);
    onnx__type_proto__tensor__init(tt);
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    lua_getfield(L, idx, "elem_type");
    tt->has_elem_type = 1;
    tt->elem_type = (int32_t)luaL_checkinteger(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, idx, "shape");
    if (lua_istable(L, -1)) {
        size_t n = (size_t)lua_rawlen(L, -1);
        Onnx__TensorShapeProto *s = arena_alloc(L, e->a, sizeof *s);
        onnx__tensor_shape_proto__init(s);
        s->n_dim = n;
        s->dim = arena_alloc(L, e->a, n * sizeof *s->dim);
        for (size_t i = 0; i < n; i++) {
            Onnx__TensorShapeProto__Dimension *d = arena_alloc(L, e->a, sizeof *d);
            onnx__tensor_shape_proto__dimension__init(d);
            lua_rawgeti(L, -1, (lua_Integer)i + 1);
            if (lua_isinteger(L, -1)) {
                d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
                d->dim_value = lua_tointeger(L, -1);
            } else if (lua_type(L, -1) == LUA_TSTRING) {
                size_t len;
                const char *p = lua_tolstring(L, -1, &len);
                d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
                d->dim_param = arena_alloc(L, e->a, len + 1);
                memcpy(d->dim_param, p, len);
            }
            lua_pop(L, 1);
            s->dim[i] = d;
        }
        tt->shape = s;
    }
    lua_pop(L, 1);
    return tp;
}

static Onnx__ValueInfoProto **enc_value_infos(enc *e, int idx, const char *key, size_t *n) {
    lua_State *L = e->L;
    *n = get_array(e, idx, key);
    Onnx__ValueInfoProto **r = arena_alloc(L, e->a, *n * sizeof *r);
    for (size_t i = 0; i < *n; i++) {
        lua_rawgeti(L, -1, (lua_Integer)i + 1);
        luaL_checktype(L, -1, LUA_TTABLE);
        Onnx__ValueInfoProto *v = arena_alloc(L, e->a, sizeof *v);
        onnx__value_info_proto__init(v);
        v->name = get_str(e, lua_gettop(L), "name");
        v->type = enc_type(e, lua_gettop(L));
        r[i] = v;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return r;
}

static int attr_type_of(const char *s) {
    for (int t = 1; t <= 14; t++)
        if (strcmp(attr_type_name(t), s) == 0) return t;
    return 0;
}

static Onnx__AttributeProto *enc_attribute(enc *e, int idx) {
    lua_State *L = e->L;
    Onnx__AttributeProto *a = arena_alloc(L, e->a, sizeof *a);
    onnx__attribute_proto__init(a);
    a->name = get_str(e, idx, "name");
    char *ty = get_str(e, idx, "type");
    int t = attr_type_of(ty);
    a->has_type = 1;
    a->type = (Onnx__AttributeProto__AttributeType)t;
    lua_getfield(L, idx, "value");
    int v = lua_gettop(L);
    size_t n, i;
    switch (t) {
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT:
        a->has_f = 1;
        a->f = (float)luaL_checknumber(L, v);
        break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT:
        a->has_i = 1;
        a->i = luaL_checkinteger(L, v);
        break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING: {
        size_t len;
        const char *s = luaL_checklstring(L, v, &len);
        a->has_s = 1;
        a->s.len = len;
        a->s.data = arena_alloc(L, e->a, len + 1);
        memcpy(a->s.data, s, len);
        break;
    }
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR: a->t = enc_tensor(e, v, ""); break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS:
        luaL_checktype(L, v, LUA_TTABLE);
        n = (size_t)lua_rawlen(L, v);
        a->n_floats = n;
        a->floats = arena_alloc(L, e->a, n * sizeof(float));
        for (i = 0; i < n; i++) {
            lua_rawgeti(L, v, (lua_Integer)i + 1);
            a->floats[i] = (float)luaL_checknumber(L, -1);
            lua_pop(L, 1);
        }
        break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS:
        luaL_checktype(L, v, LUA_TTABLE);
        n = (size_t)lua_rawlen(L, v);
        a->n_ints = n;
        a->ints = arena_alloc(L, e->a, n * sizeof(int64_t));
        for (i = 0; i < n; i++) {
            lua_rawgeti(L, v, (lua_Integer)i + 1);
            a->ints[i] = luaL_checkinteger(L, -1);
            lua_pop(L, 1);
        }
        break;
    default:
        luaL_error(L, "onnx export: attribute '%s' of type '%s' cannot be written", a->name, ty);
    }
    lua_pop(L, 1);
    return a;
}

static Onnx__NodeProto *enc_node(enc *e, int idx) {
    lua_State *L = e->L;
    Onnx__NodeProto *n = arena_alloc(L, e->a, sizeof *n);
    onnx__node_proto__init(n);
    n->name = get_str(e, idx, "name");
    n->op_type = get_str(e, idx, "op_type");
    n->domain = get_str(e, idx, "domain");
    n->input = get_strings(e, idx, "input", &n->n_input);
    n->output = get_strings(e, idx, "output", &n->n_output);
    n->n_attribute = get_array(e, idx, "attribute");
    n->attribute = arena_alloc(L, e->a, n->n_attribute * sizeof *n->attribute);
    for (size_t i = 0; i < n->n_attribute; i++) {
        lua_rawgeti(L, -1, (lua_Integer)i + 1);
        luaL_checktype(L, -1, LUA_TTABLE);
        n->attribute[i] = enc_attribute(e, lua_gettop(L));
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return n;
}

static Onnx__GraphProto *enc_graph(enc *e, int idx) {
    lua_State *L = e->L;
    Onnx__GraphProto *g = arena_alloc(L, e->a, sizeof *g);
    onnx__graph_proto__init(g);
    g->name = get_str(e, idx, "name");
    g->n_node = get_array(e, idx, "node");
    g->node = arena_alloc(L, e->a, g->n_node * sizeof *g->node);
    for (size_t i = 0; i < g->n_node; i++) {
        lua_rawgeti(L, -1, (lua_Integer)i + 1);
        luaL_checktype(L, -1, LUA_TTABLE);
        g->node[i] = enc_node(e, lua_gettop(L));
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    g->n_initializer = get_array(e, idx, "initializer");
    g->initializer = arena_alloc(L, e->a, g->n_initializer * sizeof *g->initializer);
    for (size_t i = 0; i < g->n_initializer; i++) {
        lua_rawgeti(L, -1, (lua_Integer)i + 1);
        luaL_checktype(L, -1, LUA_TTABLE);
        int it = lua_gettop(L);
        lua_getfield(L, it, "name");
        const char *name = luaL_checkstring(L, -1);
        lua_getfield(L, it, "tensor");
        g->initializer[i] = enc_tensor(e, lua_gettop(L), name);
        lua_pop(L, 3);
    }
    lua_pop(L, 1);
    g->input = enc_value_infos(e, idx, "input", &g->n_input);
    g->output = enc_value_infos(e, idx, "output", &g->n_output);
    return g;
}

static Onnx__ModelProto *enc_model(enc *e, int idx) {
    lua_State *L = e->L;
    luaL_checktype(L, idx, LUA_TTABLE);
    Onnx__ModelProto *m = arena_alloc(L, e->a, sizeof *m);
    onnx__model_proto__init(m);
    lua_getfield(L, idx, "ir_version");
    m->has_ir_version = 1;
    m->ir_version = luaL_optinteger(L, -1, 8);
    lua_pop(L, 1);
    m->producer_name = get_str(e, idx, "producer_name");
    m->producer_version = get_str(e, idx, "producer_version");
    m->n_opset_import = get_array(e, idx, "opset_import");
    m->opset_import = arena_alloc(L, e->a, m->n_opset_import * sizeof *m->opset_import);
    for (size_t i = 0; i < m->n_opset_import; i++) {
        lua_rawgeti(L, -1, (lua_Integer)i + 1);
        luaL_checktype(L, -1, LUA_TTABLE);
        Onnx__OperatorSetIdProto *o = arena_alloc(L, e->a, sizeof *o);
        onnx__operator_set_id_proto__init(o);
        o->domain = get_str(e, lua_gettop(L), "domain");
        lua_getfield(L, -1, "version");
        o->has_version = 1;
        o->version = luaL_checkinteger(L, -1);
        lua_pop(L, 2);
        m->opset_import[i] = o;
    }
    lua_pop(L, 1);
    lua_getfield(L, idx, "graph");
    luaL_checktype(L, -1, LUA_TTABLE);
    m->graph = enc_graph(e, lua_gettop(L));
    lua_pop(L, 1);
    return m;
}

/* Encodes the model table at 1 (path or nothing at 2); leaves the buffer in
 * the arena and returns it. */
static uint8_t *encode_any(lua_State *L, int model_idx, size_t *len) {
    arena *a = lua_newuserdatauv(L, sizeof *a, 0);
    a->p = NULL, a->n = a->cap = 0;
    luaL_setmetatable(L, DL_ONNX_ARENA_MT);
    enc e = {L, a};
    Onnx__ModelProto *m = enc_model(&e, model_idx);
    uint8_t *buf = dl_onnx_model_encode(m, len);
    if (!buf) dlL_fail(L);
    return arena_keep(L, a, buf);
}

static int l_encode_model(lua_State *L) {
    size_t len;
    uint8_t *buf = encode_any(L, 1, &len);
    lua_pushlstring(L, (const char *)buf, len);
    return 1;
}

/* Writes buf to path.tmp, then renames it to path (a crash never leaves a
 * half-written file under the name). */
static void write_file(lua_State *L, const char *path, const uint8_t *buf, size_t len,
                       const char *op) {
    const char *tmp = lua_pushfstring(L, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) luaL_error(L, "onnx.%s: cannot write '%s'", op, tmp);
    int bad = len && fwrite(buf, 1, len, f) != len;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        remove(tmp);
        luaL_error(L, "onnx.%s: cannot write '%s'", op, path);
    }
    lua_pop(L, 1);
}

/* save_model(path, model) -> bytes written */
static int l_save_model(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    size_t len;
    uint8_t *buf = encode_any(L, 2, &len);
    write_file(L, path, buf, len, "export");
    lua_pushinteger(L, (lua_Integer)len);
    return 1;
}

/* save_tensor(path, t [, name]): a serialized TensorProto (raw_data), as
 * ONNX's test data sets hold them; written to path.tmp and renamed. */
static int l_save_tensor(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    dlL_checktensor(L, 2);
    const char *name = luaL_optstring(L, 3, "");
    lua_settop(L, 3);
    arena *a = lua_newuserdatauv(L, sizeof *a, 0);
    a->p = NULL, a->n = a->cap = 0;
    luaL_setmetatable(L, DL_ONNX_ARENA_MT);
    enc e = {L, a};
    lua_pushvalue(L, 2);
    Onnx__TensorProto *tp = enc_tensor(&e, lua_gettop(L), name);
    size_t len = onnx__tensor_proto__get_packed_size(tp);
    uint8_t *buf = arena_alloc(L, a, len);
    onnx__tensor_proto__pack(tp, buf);
    write_file(L, path, buf, len, "save_tensor");
    return 0;
}

#else /* without ONNX */

static int l_unavailable(lua_State *L) {
    return luaL_error(L, "%s", dl_onnx_missing());
}
#define l_load_model l_unavailable
#define l_decode_model l_unavailable
#define l_load_tensor l_unavailable
#define l_decode_tensor l_unavailable
#define l_encode_model l_unavailable
#define l_save_model l_unavailable
#define l_save_tensor l_unavailable

#endif

void dlL_open_onnx(lua_State *L) {
#ifdef DL_WITH_ONNX
    static const luaL_Reg hold_meta[] = {{"__gc", hold_gc}, {NULL, NULL}};
    static const luaL_Reg arena_meta[] = {{"__gc", arena_gc}, {NULL, NULL}};
    dlL_newclass(L, DL_ONNX_HOLD_MT, hold_meta, NULL);
    dlL_newclass(L, DL_ONNX_ARENA_MT, arena_meta, NULL);
#endif
    static const luaL_Reg fns[] = {{"missing", l_missing},
                                   {"load_model", l_load_model},
                                   {"decode_model", l_decode_model},
                                   {"load_tensor", l_load_tensor},
                                   {"decode_tensor", l_decode_tensor},
                                   {"encode_model", l_encode_model},
                                   {"save_model", l_save_model},
                                   {"save_tensor", l_save_tensor},
                                   {NULL, NULL}};
    dlL_register_in(L, "_onnx", fns);
}
