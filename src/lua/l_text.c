/* l_text.c - bindings of the text tokenizers (src/data/tokenizer.h): the
 * hidden dl._text table that lua/dl/text.lua builds on.
 *
 *   _text.trainer(opts) -> trainer   opts: kind "bpe"|"char", vocab_size,
 *                                    min_frequency, pretokenize "gpt2"|"none",
 *                                    special_tokens {..}, unk (1-based index)
 *   trainer:feed(text); trainer:finish() -> tokenizer
 *   _text.load(path), _text.from_json(text) -> tokenizer
 *   _text.pretokenize(s) -> {pieces}
 *   tokenizer: encode(s, allow_special, as_table), encode_list(list,
 *     allow_special, sep_id|nil) -> flat ids, lengths; decode(ids,
 *     skip_special); size, kind, pretokenize, token, token_id, is_special,
 *     specials, unk, merges, num_merges, to_json, save
 *
 * Ids are 1-based here and 0-based in C: the conversion happens in this file
 * only.  Userdata boxes are made before the C objects they hold, so __gc
 * always runs; C buffers are freed before any Lua error is raised. */
#include "l_bind.h"
#include "data/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#define DL_TOKENIZER_MT "dl.Tokenizer"
#define DL_TRAINER_MT "dl.TokenizerTrainer"

static dl_tokenizer *check_tok(lua_State *L, int idx) {
    return dlL_checkbox(L, idx, DL_TOKENIZER_MT, "tokenizer used after it was freed");
}

/* a box for a tokenizer about to be made (nil inside until set) */
static dl_tokenizer **new_tok_box(lua_State *L) {
    dl_tokenizer **box = lua_newuserdatauv(L, sizeof *box, 0);
    *box = NULL;
    luaL_setmetatable(L, DL_TOKENIZER_MT);
    return box;
}

static int tok_gc(lua_State *L) {
    dl_tokenizer **box = luaL_checkudata(L, 1, DL_TOKENIZER_MT);
    dl_tokenizer_free(*box);
    *box = NULL;
    return 0;
}

/* --- training ---------------------------------------------------------------------- */

static dl_tok_trainer *check_trainer(lua_State *L, int idx) {
    return dlL_checkbox(L, idx, DL_TRAINER_MT, "tokenizer trainer used after finish()");
}

static int tr_gc(lua_State *L) {
    dl_tok_trainer **box = luaL_checkudata(L, 1, DL_TRAINER_MT);
    dl_tok_trainer_free(*box);
    *box = NULL;
    return 0;
}

static int l_trainer(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    dl_tok_train_opts o = {0};
    lua_getfield(L, 1, "what");
    const char *what = luaL_optstring(L, -1, "tokenizer");
    lua_getfield(L, 1, "kind");
    const char *kind = luaL_checkstring(L, -1);
    if (strcmp(kind, "bpe") == 0)
        o.kind = DL_TOK_BPE;
    else if (strcmp(kind, "char") == 0)
        o.kind = DL_TOK_CHAR;
    else
        return luaL_error(L, "%s: unknown tokenizer kind '%s'", what, kind);
    o.vocab_size = dlL_optinteger(L, 1, "vocab_size", 0);
    o.min_frequency = dlL_optinteger(L, 1, "min_frequency", 2);
    lua_getfield(L, 1, "pretokenize");
    const char *pre = luaL_optstring(L, -1, "gpt2");
    if (strcmp(pre, "gpt2") == 0)
        o.pretok = DL_PRETOK_GPT2;
    else if (strcmp(pre, "none") == 0)
        o.pretok = DL_PRETOK_NONE;
    else
        return luaL_error(L, "%s: pretokenize must be \"gpt2\" or \"none\", got '%s'", what, pre);
    o.unk = (int)dlL_optinteger(L, 1, "unk", 0) - 1;
    int sp = lua_getfield(L, 1, "special_tokens");
    int n = sp == LUA_TTABLE ? (int)luaL_len(L, -1) : 0;
    if (n > 10000) return luaL_error(L, "%s: too many special tokens", what);
    const char **s = lua_newuserdatauv(L, sizeof(char *) * (size_t)(n ? n : 1), 0);
    size_t *len = lua_newuserdatauv(L, sizeof(size_t) * (size_t)(n ? n : 1), 0);
    for (int i = 0; i < n; i++) {
        if (lua_geti(L, -3, i + 1) != LUA_TSTRING)
            return luaL_error(L, "%s: special token %d is not a string", what, i + 1);
        s[i] = lua_tolstring(L, -1, &len[i]); /* stays alive in the options table */
        lua_pop(L, 1);
    }
    o.n_special = n;
    o.special = s;
    o.special_len = len;
    dl_tok_trainer **box = lua_newuserdatauv(L, sizeof *box, 0);
    *box = NULL;
    luaL_setmetatable(L, DL_TRAINER_MT);
    *box = dl_tok_trainer_new(&o, what);
    if (!*box) return dlL_fail(L);
    return 1;
}

static int tr_feed(lua_State *L) {
    dl_tok_trainer *tr = check_trainer(L, 1);
    size_t n;
    const char *s = luaL_checklstring(L, 2, &n);
    return dlL_done(L, dl_tok_trainer_feed(tr, s, n));
}

static int tr_finish(lua_State *L) {
    dl_tok_trainer **tbox = luaL_checkudata(L, 1, DL_TRAINER_MT);
    dl_tok_trainer *tr = check_trainer(L, 1);
    dl_tokenizer **box = new_tok_box(L);
    *box = dl_tok_trainer_finish(tr);
    dl_tok_trainer_free(tr);
    *tbox = NULL;
    if (!*box) return dlL_fail(L);
    return 1;
}

/* --- files ----------------------------------------------------------------------------- */

static int l_load(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    dl_tokenizer **box = new_tok_box(L);
    *box = dl_tokenizer_load(path);
    if (!*box) return dlL_fail(L);
    return 1;
}

static int l_from_json(lua_State *L) {
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    dl_tokenizer **box = new_tok_box(L);
    *box = dl_tokenizer_from_json(s, n);
    if (!*box) return dlL_fail(L);
    return 1;
}

static int tok_to_json(lua_State *L) {
    dl_tokenizer *t = check_tok(L, 1);
    size_t n;
    char *s = dl_tokenizer_to_json(t, &n);
    if (!s) return dlL_fail(L);
    lua_pushlstring(L, s, n); /* may raise a memory error: s leaks then, as any OOM */
    free(s);
    return 1;
}

static int tok_save(lua_State *L) {
    dl_tokenizer *t = check_tok(L, 1);
    return dlL_done(L, dl_tokenizer_save(t, luaL_checkstring(L, 2)));
}

/* --- encode / decode --------------------------------------------------------------------- */

/* The 0-based token id as a 1-based one, or nil when negative (none). */
static void push_id(lua_State *L, int32_t id) {
    if (id < 0)
        lua_pushnil(L);
    else
        lua_pushinteger(L, (lua_Integer)id + 1);
}

/* A Lua array of the n 0-based ids as 1-based ones. */
static void push_id_table(lua_State *L, const int32_t *ids, size_t n) {
    lua_createtable(L, n > INT32_MAX ? 0 : (int)n, 0);
    for (size_t k = 0; k < n; k++) {
        lua_pushinteger(L, (lua_Integer)ids[k] + 1);
        lua_rawseti(L, -2, (lua_Integer)k + 1);
    }
}

/* A 1-D int64 tensor of ids + 1 (ownership passed to Lua); frees v either way. */
static int push_ids(lua_State *L, dl_tok_ids *v, size_t from, size_t n) {
    int64_t len = (int64_t)n;
    dl_tensor *t = dl_tensor_empty(1, &len, DL_DTYPE_I64, DL_CPU);
    if (!t) {
        dl_tok_ids_free(v);
        return dlL_fail(L);
    }
    int64_t *p = dl_tensor_data_ptr(t);
    for (size_t k = 0; k < n; k++) p[k] = (int64_t)v->ids[from + k] + 1;
    return dlL_pushtensor(L, t);
}

/* tok:encode(s, allow_special, as_table) */
static int tok_encode(lua_State *L) {
    dl_tokenizer *t = check_tok(L, 1);
    size_t n;
    const char *s = luaL_checklstring(L, 2, &n);
    int allow = lua_toboolean(L, 3), as_table = lua_toboolean(L, 4);
    dl_tok_ids v = {0};
    if (dl_tokenizer_encode(t, s, n, allow, &v)) {
        dl_tok_ids_free(&v);
        return dlL_fail(L);
    }
    if (as_table) {
        if (!lua_checkstack(L, 4)) {
            dl_tok_ids_free(&v);
            return luaL_error(L, "encode: out of stack");
        }
        push_id_table(L, v.ids, v.n); /* may raise: v leaks on OOM */
        dl_tok_ids_free(&v);
        return 1;
    }
    push_ids(L, &v, 0, v.n);
    dl_tok_ids_free(&v);
    return 1;
}

/* tok:encode_list({s, ...}, allow_special, sep_id|nil) -> ids (all texts, each
 * followed by sep when given), lengths (per text, sep included) */
static int tok_encode_list(lua_State *L) {
    dl_tokenizer *t = check_tok(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    int allow = lua_toboolean(L, 3);
    lua_Integer sep = luaL_optinteger(L, 4, 0);
    if (sep < 0 || sep > dl_tokenizer_size(t))
        return luaL_error(L, "encode: separator id %d is out of range (1 to %d)", (int)sep,
                          (int)dl_tokenizer_size(t));
    lua_Integer m = luaL_len(L, 2);
    int64_t mm = m;
    dl_tensor *lens = dl_tensor_empty(1, &mm, DL_DTYPE_I64, DL_CPU);
    if (!lens) return dlL_fail(L);
    dlL_pushtensor(L, lens); /* owned by Lua from here */
    int64_t *lp = dl_tensor_data_ptr(lens);
    for (lua_Integer i = 1; i <= m; i++) {
        if (lua_rawgeti(L, 2, i) != LUA_TSTRING)
            return luaL_error(L, "encode: text %d is a %s, not a string", (int)i,
                              luaL_typename(L, -1));
        lua_pop(L, 1);
    }
    dl_tok_ids v = {0};
    for (lua_Integer i = 1; i <= m; i++) {
        lua_rawgeti(L, 2, i);
        size_t n;
        const char *s = lua_tolstring(L, -1, &n);
        size_t before = v.n;
        int rc = dl_tokenizer_encode(t, s, n, allow, &v);
        lua_pop(L, 1);
        if (!rc && sep > 0) rc = dl_tok_ids_push(&v, (int32_t)sep - 1);
        if (rc) {
            dl_tok_ids_free(&v);
            return dlL_fail(L);
        }
        lp[i - 1] = (int64_t)(v.n - before);
    }
    push_ids(L, &v, 0, v.n);
    dl_tok_ids_free(&v);
    lua_insert(L, -2); /* ids, lengths */
    return 2;
}

/* tok:decode(ids, skip_special): ids a CPU contiguous int64 tensor or a table */
static int tok_decode(lua_State *L) {
    dl_tokenizer *t = check_tok(L, 1);
    int skip = lua_toboolean(L, 3);
    int64_t n32 = dl_tokenizer_size(t);
    const int64_t *ids;
    size_t n;
    int64_t *tmp = NULL;
    dl_tensor *x = dlL_totensor(L, 2);
    if (x) {
        if (x->dtype != DL_DTYPE_I64 || dl_tensor_device(x).type != DL_DEVICE_CPU ||
            !dl_tensor_is_contiguous(x))
            return luaL_error(L, "decode: ids must be a CPU contiguous int64 tensor");
        ids = dl_tensor_data_ptr(x);
        n = (size_t)dl_tensor_numel(x);
    } else {
        luaL_checktype(L, 2, LUA_TTABLE);
        n = (size_t)luaL_len(L, 2);
        tmp = lua_newuserdatauv(L, sizeof(int64_t) * (n ? n : 1), 0);
        for (size_t k = 0; k < n; k++) {
            lua_rawgeti(L, 2, (lua_Integer)k + 1);
            int ok;
            lua_Integer v = lua_tointegerx(L, -1, &ok);
            if (!ok)
                return luaL_error(L, "decode: ids[%d] is not an integer (%s)", (int)k + 1,
                                  luaL_typename(L, -1));
            tmp[k] = (int64_t)v;
            lua_pop(L, 1);
        }
        ids = tmp;
    }
    for (size_t k = 0; k < n; k++)
        if (ids[k] < 1 || ids[k] > n32)
            return luaL_error(L, "decode: id %I at position %d is out of range (1 to %d)",
                              (lua_Integer)ids[k], (int)k + 1, (int)n32);
    /* 0-based copy */
    int64_t *zb = lua_newuserdatauv(L, sizeof(int64_t) * (n ? n : 1), 0);
    for (size_t k = 0; k < n; k++) zb[k] = ids[k] - 1;
    size_t len;
    char *s = dl_tokenizer_decode(t, zb, n, skip, &len);
    if (!s) return dlL_fail(L);
    lua_pushlstring(L, s, len);
    free(s);
    return 1;
}

/* --- inspection ------------------------------------------------------------------------- */

static int check_id(lua_State *L, dl_tokenizer *t, int idx) {
    lua_Integer id = luaL_checkinteger(L, idx);
    if (id < 1 || id > dl_tokenizer_size(t))
        return luaL_error(L, "tokenizer: id %d is out of range (1 to %d)", (int)id,
                          (int)dl_tokenizer_size(t));
    return (int)id - 1;
}

static int tok_size(lua_State *L) {
    lua_pushinteger(L, dl_tokenizer_size(check_tok(L, 1)));
    return 1;
}

static int tok_kind(lua_State *L) {
    lua_pushstring(L, dl_tokenizer_kind(check_tok(L, 1)) == DL_TOK_BPE ? "bpe" : "char");
    return 1;
}

static int tok_pretokenize(lua_State *L) {
    lua_pushstring(L, dl_tokenizer_pretok(check_tok(L, 1)) == DL_PRETOK_GPT2 ? "gpt2" : "none");
    return 1;
}

static int tok_token(lua_State *L) {
    dl_tokenizer *t = check_tok(L, 1);
    size_t len;
    const char *s = dl_tokenizer_token(t, check_id(L, t, 2), &len);
    lua_pushlstring(L, s, len);
    return 1;
}

static int tok_token_id(lua_State *L) {
    dl_tokenizer *t = check_tok(L, 1);
    size_t n;
    const char *s = luaL_checklstring(L, 2, &n);
    push_id(L, dl_tokenizer_token_id(t, s, n));
    return 1;
}

static int tok_is_special(lua_State *L) {
    dl_tokenizer *t = check_tok(L, 1);
    lua_pushboolean(L, dl_tokenizer_is_special(t, check_id(L, t, 2)));
    return 1;
}

/* the added tokens' ids in id order */
static int tok_specials(lua_State *L) {
    dl_tokenizer *t = check_tok(L, 1);
    int n = dl_tokenizer_num_special(t);
    lua_createtable(L, n, 0);
    for (int k = 0; k < n; k++) {
        lua_pushinteger(L, (lua_Integer)dl_tokenizer_special(t, k) + 1);
        lua_rawseti(L, -2, k + 1);
    }
    return 1;
}

static int tok_unk(lua_State *L) {
    push_id(L, dl_tokenizer_unk(check_tok(L, 1)));
    return 1;
}

static int tok_num_merges(lua_State *L) {
    lua_pushinteger(L, dl_tokenizer_num_merges(check_tok(L, 1)));
    return 1;
}

/* {{left, right, result}, ...} by rank */
static int tok_merges(lua_State *L) {
    dl_tokenizer *t = check_tok(L, 1);
    int32_t n = dl_tokenizer_num_merges(t);
    lua_createtable(L, n, 0);
    for (int32_t k = 0; k < n; k++) {
        int32_t m[3];
        dl_tokenizer_merge(t, k, m);
        push_id_table(L, m, 3);
        lua_rawseti(L, -2, k + 1);
    }
    return 1;
}

static int l_pretokenize(lua_State *L) {
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    lua_newtable(L);
    int k = 0;
    for (size_t i = 0; i < n;) {
        size_t j = dl_pretok_next(s, n, i);
        lua_pushlstring(L, s + i, j - i);
        lua_rawseti(L, -2, ++k);
        i = j;
    }
    return 1;
}

void dlL_open_text(lua_State *L) {
    lua_getfield(L, LUA_REGISTRYINDEX, DL_MODULE_KEY);
    int mod = lua_gettop(L);

    static const luaL_Reg tmeta[] = {{"__gc", tok_gc}, {"__close", tok_gc}, {NULL, NULL}};
    static const luaL_Reg tmethods[] = {
        {"encode", tok_encode},
        {"encode_list", tok_encode_list},
        {"decode", tok_decode},
        {"size", tok_size},
        {"kind", tok_kind},
        {"pretokenize", tok_pretokenize},
        {"token", tok_token},
        {"token_id", tok_token_id},
        {"is_special", tok_is_special},
        {"specials", tok_specials},
        {"unk", tok_unk},
        {"merges", tok_merges},
        {"num_merges", tok_num_merges},
        {"to_json", tok_to_json},
        {"save", tok_save},
        {"free", tok_gc},
        {NULL, NULL},
    };
    dlL_newclass(L, DL_TOKENIZER_MT, tmeta, tmethods);

    static const luaL_Reg trmeta[] = {{"__gc", tr_gc}, {NULL, NULL}};
    static const luaL_Reg trmethods[] = {{"feed", tr_feed}, {"finish", tr_finish}, {NULL, NULL}};
    dlL_newclass(L, DL_TRAINER_MT, trmeta, trmethods);

    static const luaL_Reg fns[] = {
        {"trainer", l_trainer},         {"load", l_load}, {"from_json", l_from_json},
        {"pretokenize", l_pretokenize}, {NULL, NULL},
    };
    luaL_newlib(L, fns);
    lua_setfield(L, mod, "_text");
    lua_pop(L, 1);
}
