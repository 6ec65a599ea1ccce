/* json.c - the strict JSON reader of json.h: a recursive-descent parser over
 * a byte buffer.  Invariants: the parser never reads past buf[n); every
 * allocation is owned by the tree as soon as it is made, so an error frees
 * the partial tree with dl_json_free; depth is bounded by DL_JSON_MAX_DEPTH. */
#include "json.h"
#include "core/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *s;
    size_t n, pos;
    int depth;
} parser;

static int fail(parser *p, const char *what) {
    return dl_error("%s at byte %zu", what, p->pos);
}

static void skip_ws(parser *p) {
    while (p->pos < p->n) {
        char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static dl_json *new_value(dl_json_type t) {
    dl_json *v = calloc(1, sizeof *v);
    if (v)
        v->type = t;
    else
        dl_error("out of memory parsing JSON");
    return v;
}

bool dl_utf8_valid(const char *str, size_t n, size_t *bad) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len;
        uint32_t cp, min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            len = 2, cp = c & 0x1F, min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            len = 3, cp = c & 0x0F, min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            len = 4, cp = c & 0x07, min = 0x10000;
        } else {
            goto invalid;
        }
        if (n - i < len) goto invalid;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) goto invalid;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) goto invalid;
        i += len;
    }
    return true;
invalid:
    if (bad) *bad = i;
    return false;
}

size_t dl_utf8_put(char *out, uint32_t cp) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static int hex4(parser *p, uint32_t *out) {
    if (p->n - p->pos < 4) return fail(p, "truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p->s[p->pos + i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (uint32_t)(c - 'A' + 10);
        else
            return fail(p, "bad hex digit in \\u escape");
    }
    p->pos += 4;
    *out = v;
    return 0;
}

/* Parses a string starting at the opening quote into a fresh buffer. */
static int parse_string(parser *p, char **out, size_t *out_len) {
    p->pos++; /* opening quote */
    size_t start = p->pos, end = start;
    /* find the closing quote to size the buffer (decoded text is never longer) */
    while (end < p->n && p->s[end] != '"') end += p->s[end] == '\\' ? 2 : 1;
    if (end >= p->n) return fail(p, "unterminated string");
    if (!dl_utf8_valid(p->s + start, end - start, NULL))
        return fail(p, "string is not valid UTF-8");
    char *buf = malloc(end - start + 1);
    if (!buf) return dl_error("out of memory parsing JSON");
    size_t len = 0;
    while (p->pos < end) {
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c < 0x20) {
            free(buf);
            return fail(p, "control character in string");
        }
        if (c != '\\') {
            buf[len++] = (char)c;
            p->pos++;
            continue;
        }
        p->pos++;
        char e = p->s[p->pos++];
        switch (e) {
        case '"': buf[len++] = '"'; break;
        case '\\': buf[len++] = '\\'; break;
        case '/': buf[len++] = '/'; break;
        case 'b': buf[len++] = '\b'; break;
        case 'f': buf[len++] = '\f'; break;
        case 'n': buf[len++] = '\n'; break;
        case 'r': buf[len++] = '\r'; break;
        case 't': buf[len++] = '\t'; break;
        case 'u': {
            uint32_t cp;
            if (hex4(p, &cp)) goto bad;
            if (cp >= 0xDC00 && cp <= 0xDFFF) {
                fail(p, "lone low surrogate in \\u escape");
                goto bad;
            }
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                uint32_t lo;
                if (p->n - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u') {
                    fail(p, "lone high surrogate in \\u escape");
                    goto bad;
                }
                p->pos += 2;
                if (hex4(p, &lo)) goto bad;
                if (lo < 0xDC00 || lo > 0xDFFF) {
                    fail(p, "bad low surrogate in \\u escape");
                    goto bad;
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            /* 6 escape bytes never decode to more than 4 (12 to 4 for pairs) */
            len += dl_utf8_put(buf + len, cp);
            break;
        }
        default:
            p->pos--;
            fail(p, "bad escape in string");
            goto bad;
        }
    }
    p->pos = end + 1;
    buf[len] = '\0';
    *out = buf;
    *out_len = len;
    return 0;
bad:
    free(buf);
    return -1;
}

static int parse_number(parser *p, dl_json *v) {
    size_t start = p->pos;
    const char *s = p->s;
    bool integer = true;
    if (p->pos < p->n && s[p->pos] == '-') p->pos++;
    if (p->pos >= p->n || s[p->pos] < '0' || s[p->pos] > '9') return fail(p, "bad number");
    if (s[p->pos] == '0')
        p->pos++;
    else
        while (p->pos < p->n && s[p->pos] >= '0' && s[p->pos] <= '9') p->pos++;
    if (p->pos < p->n && s[p->pos] == '.') {
        integer = false;
        p->pos++;
        if (p->pos >= p->n || s[p->pos] < '0' || s[p->pos] > '9') return fail(p, "bad number");
        while (p->pos < p->n && s[p->pos] >= '0' && s[p->pos] <= '9') p->pos++;
    }
    if (p->pos < p->n && (s[p->pos] == 'e' || s[p->pos] == 'E')) {
        integer = false;
        p->pos++;
        if (p->pos < p->n && (s[p->pos] == '+' || s[p->pos] == '-')) p->pos++;
        if (p->pos >= p->n || s[p->pos] < '0' || s[p->pos] > '9') return fail(p, "bad number");
        while (p->pos < p->n && s[p->pos] >= '0' && s[p->pos] <= '9') p->pos++;
    }
    size_t len = p->pos - start;
    char tmp[64];
    if (len >= sizeof tmp) {
        /* absurdly long literal: only its magnitude matters */
        v->number = s[start] == '-' ? -HUGE_VAL : HUGE_VAL;
        v->is_integer = integer;
        v->int_overflow = integer;
        return 0;
    }
    memcpy(tmp, s + start, len);
    tmp[len] = '\0';
    v->number = strtod(tmp, NULL);
    v->is_integer = integer;
    if (integer) {
        bool neg = tmp[0] == '-';
        uint64_t acc = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
        for (const char *c = tmp + neg; *c; c++) {
            uint64_t d = (uint64_t)(*c - '0');
            if (acc > (limit - d) / 10) {
                v->int_overflow = true;
                return 0;
            }
            acc = acc * 10 + d;
        }
        v->integer = neg ? (int64_t)(0 - acc) : (int64_t)acc;
    }
    return 0;
}

static int parse_value(parser *p, dl_json **out);

static int push_item(dl_json *c, dl_json *item, char *key, size_t key_len, size_t *cap) {
    if (c->count == *cap) {
        size_t ncap = *cap ? *cap * 2 : 4;
        dl_json **items = realloc(c->items, ncap * sizeof *items);
        if (!items) goto oom;
        c->items = items;
        if (c->type == DL_JSON_OBJECT) {
            char **keys = realloc(c->keys, ncap * sizeof *keys);
            if (!keys) goto oom;
            c->keys = keys;
            size_t *lens = realloc(c->key_lens, ncap * sizeof *lens);
            if (!lens) goto oom;
            c->key_lens = lens;
        }
        *cap = ncap;
    }
    c->items[c->count] = item;
    if (c->type == DL_JSON_OBJECT) {
        c->keys[c->count] = key;
        c->key_lens[c->count] = key_len;
    }
    c->count++;
    return 0;
oom:
    dl_json_free(item);
    free(key);
    return dl_error("out of memory parsing JSON");
}

static int parse_container(parser *p, dl_json *c) {
    char close = c->type == DL_JSON_OBJECT ? '}' : ']';
    size_t cap = 0;
    if (++p->depth > DL_JSON_MAX_DEPTH) return fail(p, "JSON nested too deeply");
    p->pos++;
    skip_ws(p);
    if (p->pos < p->n && p->s[p->pos] == close) {
        p->pos++;
        p->depth--;
        return 0;
    }
    for (;;) {
        char *key = NULL;
        size_t key_len = 0;
        skip_ws(p);
        if (c->type == DL_JSON_OBJECT) {
            if (p->pos >= p->n || p->s[p->pos] != '"') return fail(p, "expected a string key");
            if (parse_string(p, &key, &key_len)) return -1;
            skip_ws(p);
            if (p->pos >= p->n || p->s[p->pos] != ':') {
                free(key);
                return fail(p, "expected ':'");
            }
            p->pos++;
        }
        dl_json *item = NULL;
        if (parse_value(p, &item)) {
            free(key);
            return -1;
        }
        if (push_item(c, item, key, key_len, &cap)) return -1;
        skip_ws(p);
        if (p->pos >= p->n) return fail(p, "unexpected end of input");
        if (p->s[p->pos] == ',') {
            p->pos++;
            continue;
        }
        if (p->s[p->pos] == close) {
            p->pos++;
            p->depth--;
            return 0;
        }
        return fail(p, c->type == DL_JSON_OBJECT ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int literal(parser *p, const char *word) {
    size_t len = strlen(word);
    if (p->n - p->pos < len || memcmp(p->s + p->pos, word, len) != 0)
        return fail(p, "unexpected character");
    p->pos += len;
    return 0;
}

static int parse_value(parser *p, dl_json **out) {
    skip_ws(p);
    if (p->pos >= p->n) return fail(p, "unexpected end of input");
    char c = p->s[p->pos];
    dl_json *v;
    int rc;
    switch (c) {
    case '{':
    case '[':
        v = new_value(c == '{' ? DL_JSON_OBJECT : DL_JSON_ARRAY);
        if (!v) return -1;
        rc = parse_container(p, v);
        break;
    case '"':
        v = new_value(DL_JSON_STRING);
        if (!v) return -1;
        rc = parse_string(p, &v->str, &v->len);
        break;
    case 't':
    case 'f':
        v = new_value(DL_JSON_BOOL);
        if (!v) return -1;
        v->boolean = c == 't';
        rc = literal(p, c == 't' ? "true" : "false");
        break;
    case 'n':
        v = new_value(DL_JSON_NULL);
        if (!v) return -1;
        rc = literal(p, "null");
        break;
    default:
        if (c != '-' && (c < '0' || c > '9')) return fail(p, "unexpected character");
        v = new_value(DL_JSON_NUMBER);
        if (!v) return -1;
        rc = parse_number(p, v);
    }
    if (rc) {
        dl_json_free(v);
        return -1;
    }
    *out = v;
    return 0;
}

dl_json *dl_json_parse(const char *buf, size_t n) {
    parser p = {buf, n, 0, 0};
    dl_json *v = NULL;
    if (parse_value(&p, &v)) return NULL;
    skip_ws(&p);
    if (p.pos != n) {
        dl_json_free(v);
        fail(&p, "unexpected data after the JSON value");
        return NULL;
    }
    return v;
}

void dl_json_free(dl_json *v) {
    if (!v) return;
    for (size_t i = 0; i < v->count; i++) {
        dl_json_free(v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->key_lens);
    free(v->str);
    free(v);
}

const dl_json *dl_json_get(const dl_json *obj, const char *key) {
    if (!obj || obj->type != DL_JSON_OBJECT) return NULL;
    size_t len = strlen(key);
    for (size_t i = 0; i < obj->count; i++)
        if (obj->key_lens[i] == len && memcmp(obj->keys[i], key, len) == 0) return obj->items[i];
    return NULL;
}

const char *dl_json_type_name(dl_json_type t) {
    switch (t) {
    case DL_JSON_NULL: return "null";
    case DL_JSON_BOOL: return "boolean";
    case DL_JSON_NUMBER: return "number";
    case DL_JSON_STRING: return "string";
    case DL_JSON_ARRAY: return "array";
    case DL_JSON_OBJECT: return "object";
    }
    return "?";
}
