/* tokenizer_json.c - tokenizers to and from JSON.
 *
 * BPE is written as a Hugging Face tokenizer.json (version "1.0": added_tokens,
 * a ByteLevel pre-tokenizer and decoder, a BPE model with vocab and merges),
 * so the `tokenizers` library loads it and dlua loads GPT-2-style files.
 * Token bytes appear in GPT-2's byte-to-character form (byte b is the
 * character b when printable, else U+0100 + k: a space is "Ġ"); added tokens
 * appear as their text.  Ids in the file are 0-based, as here.  What dlua
 * cannot honour is an error, never silently ignored: a normalizer, another
 * pre-tokenizer, add_prefix_space, BPE dropout, byte_fallback,
 * ignore_merges, subword prefixes/suffixes, added tokens with lstrip/rstrip/
 * single_word.
 *
 * CHAR is dlua's own {"type": "dlua.CharTokenizer", "version": 1,
 * "special_tokens": [...], "unk_token": null | "<unk>", "chars": "..."}: ids
 * are the special tokens, then the characters of "chars" in order.
 *
 * Invariant: the loader trusts nothing in the file (fuzzed by
 * tests/fuzz/fuzz_tokenizer.c): every id, string and reference is checked
 * and an error names the field. */
#include "tokenizer_impl.h"
#include "core/error.h"
#include "io/json.h"
#include "core/strbuf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* --- GPT-2's byte <-> character map ----------------------------------------------------- */

static uint32_t byte_char(int b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))
        return (uint32_t)b;
    int k = 0; /* the k-th byte outside those ranges */
    for (int c = 0; c < b; c++)
        if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255))) k++;
    return 256u + (uint32_t)k;
}

/* character -> byte, -1 outside the map (code points < 324) */
static void char_bytes(int16_t inv[324]) {
    for (int c = 0; c < 324; c++) inv[c] = -1;
    for (int b = 0; b < 256; b++) inv[byte_char(b)] = (int16_t)b;
}

/* --- a growing text buffer ---------------------------------------------------------------- */

static void put_utf8(dl_strbuf *b, uint32_t cp) {
    char u[4];
    dl_strbuf_add(b, u, dl_utf8_put(u, cp));
}

/* a JSON string of valid UTF-8 text */
static void put_str(dl_strbuf *b, const char *s, size_t n) {
    dl_strbuf_add(b, "\"", 1);
    size_t start = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = (uint8_t)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        dl_strbuf_add(b, s + start, i - start);
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            dl_strbuf_add(b, e, 2);
        } else if (c == '\n') {
            dl_strbuf_str(b, "\\n");
        } else if (c == '\t') {
            dl_strbuf_str(b, "\\t");
        } else if (c == '\r') {
            dl_strbuf_str(b, "\\r");
        } else {
            dl_strbuf_printf(b, "\\u%04x", c);
        }
        start = i + 1;
    }
    dl_strbuf_add(b, s + start, n - start);
    dl_strbuf_add(b, "\"", 1);
}

/* a token's bytes in the byte-to-character form (inside a JSON string) */
static void put_bytes(dl_strbuf *b, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t cp = byte_char((uint8_t)s[i]);
        if (cp == '"' || cp == '\\') {
            char e[2] = {'\\', (char)cp};
            dl_strbuf_add(b, e, 2);
        } else {
            put_utf8(b, cp);
        }
    }
}

static void write_bpe(const dl_tokenizer *t, dl_strbuf *b) {
    dl_strbuf_str(b, "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n"
                     "  \"added_tokens\": [");
    int first = 1;
    for (int32_t id = 0; id < t->n; id++) {
        if (!(t->flags[id] & DL_TOKF_ADDED)) continue;
        dl_strbuf_printf(b, "%s\n    {\"id\": %d, \"content\": ", first ? "" : ",", (int)id);
        put_str(b, dl_tok_bytes(t, id), t->len[id]);
        dl_strbuf_printf(b,
                         ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, "
                         "\"normalized\": false, \"special\": %s}",
                         (t->flags[id] & DL_TOKF_SPECIAL) ? "true" : "false");
        first = 0;
    }
    const char *regex = t->pretok == DL_PRETOK_GPT2 ? "true" : "false";
    dl_strbuf_str(b, first ? "],\n" : "\n  ],\n");
    dl_strbuf_str(b, "  \"normalizer\": null,\n");
    dl_strbuf_printf(b,
                     "  \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
                     "\"trim_offsets\": true, \"use_regex\": %s},\n",
                     regex);
    dl_strbuf_str(b, "  \"post_processor\": null,\n");
    dl_strbuf_printf(b,
                     "  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, "
                     "\"trim_offsets\": true, \"use_regex\": %s},\n",
                     regex);
    dl_strbuf_str(b, "  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n"
                     "    \"unk_token\": null,\n    \"continuing_subword_prefix\": null,\n"
                     "    \"end_of_word_suffix\": null,\n    \"fuse_unk\": false,\n"
                     "    \"byte_fallback\": false,\n    \"vocab\": {");
    first = 1;
    for (int32_t id = 0; id < t->n; id++) {
        const char *s = dl_tok_bytes(t, id);
        size_t n = t->len[id];
        dl_strbuf_str(b, first ? "\n      " : ",\n      ");
        first = 0;
        if (t->flags[id] & DL_TOKF_ADDED)
            put_str(b, s, n); /* its text, as Hugging Face's trainer writes it */
        else {
            dl_strbuf_add(b, "\"", 1);
            put_bytes(b, s, n);
            dl_strbuf_add(b, "\"", 1);
        }
        dl_strbuf_printf(b, ": %d", (int)id);
    }
    dl_strbuf_str(b, "\n    },\n    \"merges\": [");
    for (int32_t k = 0; k < t->n_merges; k++) {
        dl_strbuf_str(b, k ? ",\n      \"" : "\n      \"");
        put_bytes(b, dl_tok_bytes(t, t->merges[k][0]), t->len[t->merges[k][0]]);
        dl_strbuf_add(b, " ", 1);
        put_bytes(b, dl_tok_bytes(t, t->merges[k][1]), t->len[t->merges[k][1]]);
        dl_strbuf_add(b, "\"", 1);
    }
    dl_strbuf_str(b, t->n_merges ? "\n    ]\n  }\n}\n" : "]\n  }\n}\n");
}

static void write_char(const dl_tokenizer *t, dl_strbuf *b) {
    dl_strbuf_str(
        b, "{\n  \"type\": \"dlua.CharTokenizer\",\n  \"version\": 1,\n  \"special_tokens\": [");
    int first = 1;
    for (int32_t id = 0; id < t->n; id++) {
        if (!(t->flags[id] & DL_TOKF_ADDED)) continue;
        if (!first) dl_strbuf_str(b, ", ");
        first = 0;
        put_str(b, dl_tok_bytes(t, id), t->len[id]);
    }
    dl_strbuf_str(b, "],\n  \"unk_token\": ");
    if (t->unk >= 0)
        put_str(b, dl_tok_bytes(t, t->unk), t->len[t->unk]);
    else
        dl_strbuf_str(b, "null");
    dl_strbuf_str(b, ",\n  \"chars\": ");
    dl_strbuf chars = {0};
    for (int32_t id = 0; id < t->n; id++)
        if (!(t->flags[id] & DL_TOKF_ADDED)) dl_strbuf_add(&chars, dl_tok_bytes(t, id), t->len[id]);
    if (chars.oom) b->oom = 1;
    put_str(b, chars.s ? chars.s : "", chars.len);
    free(chars.s);
    dl_strbuf_str(b, "\n}\n");
}

char *dl_tokenizer_to_json(const dl_tokenizer *t, size_t *len) {
    dl_strbuf b = {0};
    if (t->kind == DL_TOK_BPE)
        write_bpe(t, &b);
    else
        write_char(t, &b);
    if (b.oom) {
        free(b.s);
        dl_error("tokenizer: out of memory writing JSON");
        return NULL;
    }
    *len = b.len;
    return b.s;
}

/* --- reading ------------------------------------------------------------------------------- */

#define WHAT "tokenizer JSON"

static int bad(const char *fmt, ...) DL_PRINTF(1, 2);
static int bad(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    dl_verror(WHAT, fmt, ap);
    va_end(ap);
    return -1;
}

/* a member that must be absent, null or `ok` (a literal check by the caller) */
static const dl_json *member(const dl_json *o, const char *k) {
    const dl_json *v = dl_json_get(o, k);
    return v && v->type != DL_JSON_NULL ? v : NULL;
}

static int want_false(const dl_json *o, const char *where, const char *k) {
    const dl_json *v = member(o, k);
    if (!v) return 0;
    if (v->type != DL_JSON_BOOL) return bad("%s.%s must be a boolean", where, k);
    if (v->boolean) return bad("%s.%s = true is not supported", where, k);
    return 0;
}

static int is_str(const dl_json *v, const char *s) {
    return v && v->type == DL_JSON_STRING && v->len == strlen(s) && memcmp(v->str, s, v->len) == 0;
}

/* Turns byte-to-character text into bytes (out has room for n bytes);
 * -1 when a character is outside the map. */
static int64_t text_to_bytes(const int16_t inv[324], const char *s, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t l;
        int32_t cp = dl_utf8_next((const uint8_t *)s, n, i, &l);
        if (cp < 0 || cp >= 324 || inv[cp] < 0) return -1;
        out[o++] = (char)inv[cp];
        i += l;
    }
    return (int64_t)o;
}

static int get_id(const dl_json *v, const char *where, int32_t *id) {
    if (!v || v->type != DL_JSON_NUMBER || !v->is_integer || v->int_overflow || v->integer < 0 ||
        v->integer >= INT32_MAX - 1)
        return bad("%s: an id must be an integer from 0 to %d", where, INT32_MAX - 2);
    *id = (int32_t)v->integer;
    return 0;
}

typedef struct {
    const char *s; /* NULL: unassigned */
    size_t len;
    uint8_t flags;
    int from_vocab; /* s is byte-to-character text still to decode */
} slot;

static dl_tokenizer *read_bpe(const dl_json *root) {
    const dl_json *model = dl_json_get(root, "model");
    if (!model || model->type != DL_JSON_OBJECT) {
        bad("\"model\" must be an object");
        return NULL;
    }
    const dl_json *mt = member(model, "type");
    if (mt && !is_str(mt, "BPE")) {
        bad("model.type must be \"BPE\"");
        return NULL;
    }
    if (member(root, "normalizer")) {
        bad("a normalizer is not supported");
        return NULL;
    }
    const dl_json *pre = member(root, "pre_tokenizer");
    if (!pre || pre->type != DL_JSON_OBJECT || !is_str(dl_json_get(pre, "type"), "ByteLevel")) {
        bad("pre_tokenizer must be {\"type\": \"ByteLevel\", ...} (a byte-level BPE)");
        return NULL;
    }
    if (want_false(pre, "pre_tokenizer", "add_prefix_space")) return NULL;
    dl_pretok pretok = DL_PRETOK_GPT2;
    const dl_json *re = member(pre, "use_regex");
    if (re) {
        if (re->type != DL_JSON_BOOL) {
            bad("pre_tokenizer.use_regex must be a boolean");
            return NULL;
        }
        pretok = re->boolean ? DL_PRETOK_GPT2 : DL_PRETOK_NONE;
    }
    const dl_json *drop = member(model, "dropout");
    if (drop && !(drop->type == DL_JSON_NUMBER && drop->number == 0)) {
        bad("model.dropout is not supported");
        return NULL;
    }
    if (want_false(model, "model", "byte_fallback") || want_false(model, "model", "ignore_merges"))
        return NULL;
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const dl_json *v = member(model, affixes[i]);
        if (v && !is_str(v, "")) {
            bad("model.%s is not supported", affixes[i]);
            return NULL;
        }
    }
    const dl_json *vocab = dl_json_get(model, "vocab");
    if (!vocab || vocab->type != DL_JSON_OBJECT) {
        bad("model.vocab must be an object");
        return NULL;
    }
    const dl_json *added = member(root, "added_tokens");
    if (added && added->type != DL_JSON_ARRAY) {
        bad("added_tokens must be an array");
        return NULL;
    }
    size_t nadded = added ? added->count : 0;
    /* ids: the largest one sizes the table */
    int64_t n = 0;
    for (size_t i = 0; i < vocab->count; i++) {
        int32_t id;
        if (get_id(vocab->items[i], "model.vocab", &id)) return NULL;
        if (id + 1 > n) n = id + 1;
    }
    for (size_t i = 0; i < nadded; i++) {
        const dl_json *a = added->items[i];
        int32_t id;
        if (a->type != DL_JSON_OBJECT) {
            bad("added_tokens[%zu] must be an object", i);
            return NULL;
        }
        if (get_id(dl_json_get(a, "id"), "added_tokens", &id)) return NULL;
        if (id + 1 > n) n = id + 1;
    }
    if (n > (int64_t)(vocab->count + nadded)) {
        bad("the ids are not 0..n-1 (largest id %lld for %zu tokens)", (long long)n - 1,
            vocab->count + nadded);
        return NULL;
    }
    slot *slots = calloc((size_t)(n ? n : 1), sizeof *slots);
    char *tmp = NULL;
    dl_tokenizer *t = NULL;
    if (!slots) {
        dl_error(WHAT ": out of memory");
        return NULL;
    }
    for (size_t i = 0; i < nadded; i++) {
        const dl_json *a = added->items[i];
        int32_t id;
        get_id(dl_json_get(a, "id"), "added_tokens", &id);
        const dl_json *c = dl_json_get(a, "content");
        if (!c || c->type != DL_JSON_STRING || c->len == 0) {
            bad("added_tokens[%zu].content must be a non-empty string", i);
            goto fail;
        }
        if (want_false(a, "added_tokens[]", "lstrip") ||
            want_false(a, "added_tokens[]", "rstrip") ||
            want_false(a, "added_tokens[]", "single_word"))
            goto fail;
        const dl_json *sp = member(a, "special");
        if (sp && sp->type != DL_JSON_BOOL) {
            bad("added_tokens[%zu].special must be a boolean", i);
            goto fail;
        }
        if (slots[id].s) {
            bad("added_tokens: id %d appears twice", (int)id);
            goto fail;
        }
        slots[id] = (slot){c->str, c->len,
                           (uint8_t)(DL_TOKF_ADDED | (sp && sp->boolean ? DL_TOKF_SPECIAL : 0)), 0};
    }
    for (size_t i = 0; i < vocab->count; i++) {
        int32_t id;
        get_id(vocab->items[i], "model.vocab", &id);
        if (slots[id].flags & DL_TOKF_ADDED) continue; /* an added token's own entry */
        if (slots[id].s) {
            bad("model.vocab: id %d appears twice", (int)id);
            goto fail;
        }
        slots[id] = (slot){vocab->keys[i], vocab->key_lens[i], 0, 1};
    }
    t = dl_tok_alloc(DL_TOK_BPE);
    if (!t) goto fail;
    t->pretok = pretok;
    int16_t inv[324];
    char_bytes(inv);
    size_t tmp_cap = 0;
    for (int64_t id = 0; id < n; id++) {
        slot *s = &slots[id];
        if (!s->s) {
            bad("id %lld has no token", (long long)id);
            goto fail;
        }
        const char *bytes = s->s;
        size_t len = s->len;
        if (s->from_vocab) {
            if (s->len > tmp_cap) {
                tmp_cap = s->len * 2;
                char *nt = realloc(tmp, tmp_cap);
                if (!nt) {
                    dl_error(WHAT ": out of memory");
                    goto fail;
                }
                tmp = nt;
            }
            int64_t l = text_to_bytes(inv, s->s, s->len, tmp);
            if (l <= 0) {
                bad("model.vocab: token \"%.*s\" (id %lld) is not in the byte-level alphabet",
                    (int)(s->len > 60 ? 60 : s->len), s->s, (long long)id);
                goto fail;
            }
            bytes = tmp;
            len = (size_t)l;
        }
        if (dl_tok_add(t, bytes, len, s->flags) < 0) goto fail;
    }
    if (dl_tok_finish(t, WHAT)) goto fail;
    const dl_json *merges = dl_json_get(model, "merges");
    if (!merges || merges->type != DL_JSON_ARRAY) {
        bad("model.merges must be an array");
        goto fail;
    }
    for (size_t k = 0; k < merges->count; k++) {
        const dl_json *m = merges->items[k];
        const char *part[2];
        size_t plen[2];
        if (m->type == DL_JSON_STRING) {
            const char *sp = memchr(m->str, ' ', m->len);
            if (!sp || memchr(sp + 1, ' ', m->len - (size_t)(sp + 1 - m->str))) {
                bad("model.merges[%zu] must be two tokens separated by one space", k);
                goto fail;
            }
            part[0] = m->str, plen[0] = (size_t)(sp - m->str);
            part[1] = sp + 1, plen[1] = m->len - plen[0] - 1;
        } else if (m->type == DL_JSON_ARRAY && m->count == 2 &&
                   m->items[0]->type == DL_JSON_STRING && m->items[1]->type == DL_JSON_STRING) {
            for (int j = 0; j < 2; j++) part[j] = m->items[j]->str, plen[j] = m->items[j]->len;
        } else {
            bad("model.merges[%zu] must be \"a b\" or [\"a\", \"b\"]", k);
            goto fail;
        }
        if (plen[0] + plen[1] > tmp_cap) {
            tmp_cap = (plen[0] + plen[1]) * 2;
            char *nt = realloc(tmp, tmp_cap);
            if (!nt) {
                dl_error(WHAT ": out of memory");
                goto fail;
            }
            tmp = nt;
        }
        int32_t ids[2];
        size_t off = 0;
        for (int j = 0; j < 2; j++) {
            int64_t l = text_to_bytes(inv, part[j], plen[j], tmp + off);
            int32_t id = l > 0 ? dl_tokenizer_token_id(t, tmp + off, (size_t)l) : -1;
            if (id < 0 || (t->flags[id] & DL_TOKF_ADDED)) {
                bad("model.merges[%zu]: \"%.*s\" is not a token of model.vocab", k,
                    (int)(plen[j] > 60 ? 60 : plen[j]), part[j]);
                goto fail;
            }
            ids[j] = id;
            off += (size_t)l;
        }
        int32_t r = dl_tokenizer_token_id(t, tmp, off);
        if (r < 0 || (t->flags[r] & DL_TOKF_ADDED)) {
            bad("model.merges[%zu]: the merged token is not in model.vocab", k);
            goto fail;
        }
        if (dl_pmap_get(&t->merge_map, ids[0], ids[1]) >= 0) {
            bad("model.merges[%zu] repeats an earlier merge", k);
            goto fail;
        }
        if (dl_tok_add_merge(t, ids[0], ids[1], r)) goto fail;
    }
    free(slots);
    free(tmp);
    return t;
fail:
    free(slots);
    free(tmp);
    dl_tokenizer_free(t);
    return NULL;
}

static dl_tokenizer *read_char(const dl_json *root) {
    const dl_json *v = dl_json_get(root, "version");
    if (!v || v->type != DL_JSON_NUMBER || !v->is_integer || v->integer != 1) {
        bad("unknown dlua.CharTokenizer version (this dlua reads version 1)");
        return NULL;
    }
    const dl_json *sp = dl_json_get(root, "special_tokens");
    const dl_json *unk = member(root, "unk_token");
    const dl_json *chars = dl_json_get(root, "chars");
    if (!sp || sp->type != DL_JSON_ARRAY) {
        bad("special_tokens must be an array");
        return NULL;
    }
    if (!chars || chars->type != DL_JSON_STRING) {
        bad("chars must be a string");
        return NULL;
    }
    if (unk && unk->type != DL_JSON_STRING) {
        bad("unk_token must be a string or null");
        return NULL;
    }
    dl_tokenizer *t = dl_tok_alloc(DL_TOK_CHAR);
    if (!t) return NULL;
    for (size_t i = 0; i < sp->count; i++) {
        const dl_json *s = sp->items[i];
        if (s->type != DL_JSON_STRING || s->len == 0) {
            bad("special_tokens[%zu] must be a non-empty string", i);
            goto fail;
        }
        int32_t id = dl_tok_add(t, s->str, s->len, DL_TOKF_ADDED | DL_TOKF_SPECIAL);
        if (id < 0) goto fail;
        if (unk && unk->len == s->len && memcmp(unk->str, s->str, s->len) == 0) t->unk = id;
    }
    if (unk && t->unk < 0) {
        bad("unk_token is not one of special_tokens");
        goto fail;
    }
    for (size_t i = 0; i < chars->len;) {
        size_t l;
        dl_utf8_next((const uint8_t *)chars->str, chars->len, i,
                     &l); /* valid: the parser checked */
        if (dl_tok_add(t, chars->str + i, l, 0) < 0) goto fail;
        i += l;
    }
    if (dl_tok_finish(t, WHAT)) goto fail;
    return t;
fail:
    dl_tokenizer_free(t);
    return NULL;
}

dl_tokenizer *dl_tokenizer_from_json(const char *buf, size_t n) {
    dl_json *root = dl_json_parse(buf, n);
    if (!root) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s", dl_last_error());
        dl_error(WHAT ": %s", msg);
        return NULL;
    }
    dl_tokenizer *t = NULL;
    if (root->type != DL_JSON_OBJECT)
        bad("the top level must be an object");
    else if (dl_json_get(root, "model"))
        t = read_bpe(root);
    else if (is_str(dl_json_get(root, "type"), "dlua.CharTokenizer"))
        t = read_char(root);
    else
        bad("neither a tokenizer.json (no \"model\") nor a dlua.CharTokenizer file");
    dl_json_free(root);
    return t;
}

/* --- files ---------------------------------------------------------------------------------- */

int dl_tokenizer_save(const dl_tokenizer *t, const char *path) {
    size_t n;
    char *text = dl_tokenizer_to_json(t, &n);
    if (!text) return -1;
    size_t tl = strlen(path) + 32;
    char *tmp = malloc(tl);
    if (!tmp) {
        free(text);
        return dl_error("save: out of memory");
    }
    snprintf(tmp, tl, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    int rc = 0;
    if (!f) {
        rc = dl_error("save: cannot write '%s': %s", path, strerror(errno));
    } else {
        size_t w = fwrite(text, 1, n, f);
        int err = errno;
        if (w != n || fflush(f) != 0)
            rc = dl_error("save: cannot write '%s': %s", path, strerror(err));
        if (fclose(f) != 0 && !rc)
            rc = dl_error("save: cannot write '%s': %s", path, strerror(errno));
        if (!rc && rename(tmp, path) != 0)
            rc = dl_error("save: cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
        if (rc) remove(tmp);
    }
    free(tmp);
    free(text);
    return rc;
}

dl_tokenizer *dl_tokenizer_load(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        dl_error("load_tokenizer: cannot open '%s': %s", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 65536;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                dl_error("load_tokenizer: '%s': out of memory", path);
                return NULL;
            }
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        dl_error("load_tokenizer: cannot read '%s'", path);
        return NULL;
    }
    dl_tokenizer *t = dl_tokenizer_from_json(buf, n);
    free(buf);
    if (!t) {
        char msg[600];
        snprintf(msg, sizeof msg, "%s", dl_last_error());
        dl_error("load_tokenizer: '%s': %s", path, msg);
    }
    return t;
}
