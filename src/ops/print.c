/* print.c - tensors as text (see print.h).
 *
 * The rules follow PyTorch's torch/_tensor_str.py so that the bracketed body
 * matches str(tensor) character for character:
 *  - A tensor with more than `threshold` elements is summarised: along every
 *    dimension longer than 2*edgeitems only the first and last edgeitems
 *    entries are shown, with "..." between them.
 *  - One formatter (mode and column width) is chosen from the elements that
 *    are shown.  Floats look at their nonzero finite values: all integral ->
 *    "1." style (scientific when max/min > 1000 or max > 1e8), otherwise
 *    "%.4f" (scientific when max/min > 1000, max > 1e8 or min < 1e-4).  The
 *    sci_mode option then overrides the mode but not the width, as in PyTorch.
 *    Integers print plainly, bools as True/False.
 *  - Every element is right-aligned to the common width; rows wrap so that
 *    a line holds floor((linewidth - indent) / (width + 2)) elements.
 * Elements are read through the tensor's strides, so any view prints without
 * a copy; tensors on other devices are copied to the CPU first (one copy of
 * the whole tensor), so a CUDA tensor prints as its CPU copy plus
 * device='cuda:N'. */
#include "print.h"
#include "core/strbuf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- options ----------------------------------------------------------- */

static dl_print_options print_opts = {4, 1000, 3, 80, -1};

void dl_print_options_get(dl_print_options *o) {
    *o = print_opts;
}

int dl_print_options_set(const dl_print_options *o) {
    if (o->precision < 0 || o->precision > 30)
        return dl_error("set_printoptions: precision must be in 0..30, got %d", o->precision);
    if (!(o->threshold >= 0))
        return dl_error("set_printoptions: threshold must be a non-negative number, got %g",
                        o->threshold);
    if (o->edgeitems < 1 || o->edgeitems > 1000)
        return dl_error("set_printoptions: edgeitems must be in 1..1000, got %d", o->edgeitems);
    if (o->linewidth < 1)
        return dl_error("set_printoptions: linewidth must be positive, got %d", o->linewidth);
    if (o->sci_mode < -1 || o->sci_mode > 1)
        return dl_error("set_printoptions: sci_mode must be -1, 0 or 1, got %d", o->sci_mode);
    print_opts = *o;
    return 0;
}

int dl_print_options_profile(const char *name, dl_print_options *o) {
    if (strcmp(name, "default") == 0) {
        o->precision = 4;
        o->threshold = 1000;
        o->edgeitems = 3;
        o->linewidth = 80;
    } else if (strcmp(name, "short") == 0) {
        o->precision = 2;
        o->threshold = 1000;
        o->edgeitems = 2;
        o->linewidth = 80;
    } else if (strcmp(name, "full") == 0) {
        o->precision = 4;
        o->threshold = INFINITY;
        o->edgeitems = 3;
        o->linewidth = 80;
    } else {
        return dl_error("set_printoptions: unknown profile '%s' (expected default, short or full)",
                        name);
    }
    return 0;
}

/* --- a growable string ------------------------------------------------- */

static void sb_chars(dl_strbuf *b, char c, int n) {
    char chunk[64];
    memset(chunk, c, sizeof chunk);
    while (n > 0) {
        int k = n < (int)sizeof chunk ? n : (int)sizeof chunk;
        dl_strbuf_add(b, chunk, (size_t)k);
        n -= k;
    }
}

/* --- the formatter ------------------------------------------------------- */

/* Longest element text: "%.30f" of 1.8e308 is 309 + 1 + 30 characters. */
#define ELEM_BUF 400

typedef struct {
    const dl_tensor *t; /* on the CPU */
    dl_print_options o;
    int summarize;
    int floating;
    int int_mode, sci_mode; /* floats only */
    int width;
} formatter;

/* The indices shown along dimension d: all of them, or the first and last
 * edgeitems when summarising a long dimension.  *split is the number of
 * leading ones (where "..." goes), or -1 when nothing is skipped. */
static int64_t shown_count(const formatter *f, int d, int64_t *split) {
    int64_t n = f->t->shape[d], e = f->o.edgeitems;
    if (f->summarize && n > 2 * e) {
        *split = e;
        return 2 * e;
    }
    *split = -1;
    return n;
}

static int64_t shown_index(const formatter *f, int d, int64_t k) {
    int64_t n = f->t->shape[d], e = f->o.edgeitems;
    if (f->summarize && n > 2 * e && k >= e) return n - 2 * e + k;
    return k;
}

typedef void (*visit_fn)(formatter *f, const char *p, void *ctx);

/* Calls fn on every shown element in row-major order. */
static void visit(formatter *f, int d, const char *p, visit_fn fn, void *ctx) {
    if (d == f->t->ndim) {
        fn(f, p, ctx);
        return;
    }
    int64_t split, n = shown_count(f, d, &split);
    int64_t step = f->t->strides[d] * (int64_t)dl_dtype_size(f->t->dtype);
    for (int64_t k = 0; k < n; k++) visit(f, d + 1, p + shown_index(f, d, k) * step, fn, ctx);
}

typedef struct {
    double min, max; /* of |x| over nonzero finite x */
    int64_t count;
    int integral;
} float_stats;

static void collect_stats(formatter *f, const char *p, void *ctx) {
    float_stats *s = ctx;
    double v = dl_load_f64(p, f->t->dtype);
    if (!isfinite(v) || v == 0) return;
    double a = fabs(v);
    if (s->count == 0 || a < s->min) s->min = a;
    if (s->count == 0 || a > s->max) s->max = a;
    if (v != ceil(v)) s->integral = 0;
    s->count++;
}

/* Width pass: `mode` 0 fixed, 1 scientific, 2 integral ("%.0f" plus the point). */
static void collect_width(formatter *f, const char *p, void *ctx) {
    int mode = *(int *)ctx, len;
    char buf[ELEM_BUF];
    if (f->floating) {
        double v = dl_load_f64(p, f->t->dtype);
        if (!isfinite(v) || v == 0) return;
        if (mode == 1)
            len = snprintf(buf, sizeof buf, "%.*e", f->o.precision, v);
        else if (mode == 2)
            len = snprintf(buf, sizeof buf, "%.0f", v) + 1;
        else
            len = snprintf(buf, sizeof buf, "%.*f", f->o.precision, v);
    } else if (f->t->dtype == DL_DTYPE_BOOL) {
        len = dl_load_i64(p, f->t->dtype) ? 4 : 5;
    } else {
        len = snprintf(buf, sizeof buf, "%lld", (long long)dl_load_i64(p, f->t->dtype));
    }
    if (len > f->width) f->width = len;
}

static void formatter_init(formatter *f, const dl_tensor *t) {
    f->t = t;
    dl_print_options_get(&f->o);
    f->summarize = (double)dl_tensor_numel(t) > f->o.threshold;
    f->floating = dl_dtype_is_floating(t->dtype);
    f->int_mode = 1;
    f->sci_mode = 0;
    f->width = 1;
    const char *base = dl_tensor_data_ptr(t);
    if (!f->floating) {
        int mode = 0;
        visit(f, 0, base, collect_width, &mode);
        return;
    }
    float_stats s = {0, 0, 0, 1};
    visit(f, 0, base, collect_stats, &s);
    if (s.count == 0) return; /* only zeros and non-finite values: "0.", "nan" */
    f->int_mode = s.integral;
    double ratio = s.max / s.min;
    if (f->int_mode)
        f->sci_mode = ratio > 1000.0 || s.max > 1.0e8;
    else
        f->sci_mode = ratio > 1000.0 || s.max > 1.0e8 || s.min < 1.0e-4;
    int mode = f->sci_mode ? 1 : f->int_mode ? 2 : 0;
    visit(f, 0, base, collect_width, &mode);
    if (f->o.sci_mode >= 0) f->sci_mode = f->o.sci_mode;
}

/* The element at p, right-aligned to the formatter's width, into buf. */
static int format_elem(const formatter *f, const char *p, char *buf) {
    char raw[ELEM_BUF];
    int len;
    if (f->floating) {
        double v = dl_load_f64(p, f->t->dtype);
        if (isnan(v))
            len = snprintf(raw, sizeof raw, "nan");
        else if (isinf(v))
            len = snprintf(raw, sizeof raw, v > 0 ? "inf" : "-inf");
        else if (f->sci_mode)
            len = snprintf(raw, sizeof raw, "%.*e", f->o.precision, v);
        else if (f->int_mode)
            len = snprintf(raw, sizeof raw, "%.0f.", v);
        else
            len = snprintf(raw, sizeof raw, "%.*f", f->o.precision, v);
    } else if (f->t->dtype == DL_DTYPE_BOOL) {
        len = snprintf(raw, sizeof raw, "%s", dl_load_i64(p, f->t->dtype) ? "True" : "False");
    } else {
        len = snprintf(raw, sizeof raw, "%lld", (long long)dl_load_i64(p, f->t->dtype));
    }
    int pad = f->width > len ? f->width - len : 0;
    memset(buf, ' ', (size_t)pad);
    memcpy(buf + pad, raw, (size_t)len + 1);
    return pad + len;
}

/* --- layout --------------------------------------------------------------- */

static void row_separator(dl_strbuf *b, int line_full, int indent) {
    if (line_full) {
        dl_strbuf_str(b, ",\n");
        sb_chars(b, ' ', indent + 1);
    } else {
        dl_strbuf_str(b, ", ");
    }
}

static void slice_separator(dl_strbuf *b, int newlines, int indent) {
    dl_strbuf_str(b, ",");
    sb_chars(b, '\n', newlines);
    sb_chars(b, ' ', indent + 1);
}

static void render(const formatter *f, dl_strbuf *b, int d, const char *p, int indent) {
    const dl_tensor *t = f->t;
    char buf[ELEM_BUF];
    if (t->ndim == 0) {
        int n = format_elem(f, p, buf);
        dl_strbuf_add(b, buf, (size_t)n);
        return;
    }
    int64_t step = t->strides[d] * (int64_t)dl_dtype_size(t->dtype);
    int64_t split, n = shown_count(f, d, &split);
    dl_strbuf_str(b, "[");
    if (d == t->ndim - 1) { /* a row of elements, wrapped; " ..." counts as one */
        int avail = f->o.linewidth - indent, elem = f->width + 2;
        int64_t per_line = avail > 0 ? avail / elem : 0;
        if (per_line < 1) per_line = 1;
        int64_t item = 0;
        for (int64_t k = 0; k < n; k++) {
            if (k > 0) row_separator(b, ++item % per_line == 0, indent);
            if (k == split) {
                dl_strbuf_str(b, " ...");
                row_separator(b, ++item % per_line == 0, indent);
            }
            int len = format_elem(f, p + shown_index(f, d, k) * step, buf);
            dl_strbuf_add(b, buf, (size_t)len);
        }
    } else { /* slices, separated by one blank line per dimension below */
        int newlines = t->ndim - d - 1;
        for (int64_t k = 0; k < n; k++) {
            if (k > 0) slice_separator(b, newlines, indent);
            if (k == split) {
                dl_strbuf_str(b, "...");
                slice_separator(b, newlines, indent);
            }
            render(f, b, d + 1, p + shown_index(f, d, k) * step, indent + 1);
        }
    }
    dl_strbuf_str(b, "]");
}

static dl_tensor *on_cpu(dl_tensor *t) {
    return dl_tensor_device(t).type == DL_DEVICE_CPU ? dl_tensor_retain(t)
                                                     : dl_tensor_to_device(t, DL_CPU);
}

static void body_into(dl_strbuf *b, const dl_tensor *t, int indent) {
    if (dl_tensor_numel(t) == 0) {
        dl_strbuf_str(b, "[]");
        return;
    }
    formatter f;
    formatter_init(&f, t);
    render(&f, b, 0, dl_tensor_data_ptr(t), indent);
}

static char *finish(dl_strbuf *b) {
    if (b->oom || !b->s) {
        free(b->s);
        dl_error("tostring: out of memory");
        return NULL;
    }
    return b->s;
}

/* Appends ", suffix" or, when the line would pass the width, ",\n" + indent. */
static void add_suffix(dl_strbuf *b, const char *suffix, int indent, int linewidth) {
    if (b->oom) return;
    const char *nl = strrchr(b->s, '\n');
    int last = (int)(nl ? b->len - (size_t)(nl - b->s) - 1 : b->len) + 2;
    int slen = (int)strlen(suffix);
    if (last + slen + 2 > linewidth) {
        dl_strbuf_str(b, ",\n");
        sb_chars(b, ' ', indent);
    } else {
        dl_strbuf_str(b, ", ");
    }
    dl_strbuf_str(b, suffix);
}

char *dl_tensor_format(dl_tensor *t) {
    static const char prefix[] = "tensor(";
    const int indent = (int)sizeof prefix - 1;
    dl_tensor *c = on_cpu(t);
    if (!c) return NULL;
    dl_strbuf b = {0};
    dl_strbuf_str(&b, prefix);
    body_into(&b, c, indent);
    int64_t numel = dl_tensor_numel(c);
    dl_tensor_release(c);

    char suffix[256];
    size_t n = (size_t)snprintf(suffix, sizeof suffix, "shape={");
    for (int i = 0; i < t->ndim; i++)
        n += (size_t)snprintf(suffix + n, sizeof suffix - n, "%s%lld", i ? ", " : "",
                              (long long)t->shape[i]);
    snprintf(suffix + n, sizeof suffix - n, "}");
    int width = print_opts.linewidth;
    add_suffix(&b, suffix, indent, width);
    /* then PyTorch's suffixes in PyTorch's order: device, dtype, requires_grad */
    dl_device dev = dl_tensor_device(t);
    if (dev.type != DL_DEVICE_CPU) {
        char name[64];
        snprintf(suffix, sizeof suffix, "device='%s'", dl_device_name(dev, name, sizeof name));
        add_suffix(&b, suffix, indent, width);
    }
    /* Defaults are not shown, as in PyTorch; an empty tensor has no elements
     * to tell an integer type by, so it shows any dtype but float32. */
    int show_dtype = numel == 0 ? t->dtype != DL_DTYPE_F32
                                : t->dtype != DL_DTYPE_F32 && t->dtype != DL_DTYPE_I64 &&
                                      t->dtype != DL_DTYPE_BOOL;
    if (show_dtype) {
        snprintf(suffix, sizeof suffix, "dtype=dl.%s", dl_dtype_name(t->dtype));
        add_suffix(&b, suffix, indent, width);
    }
    if (t->requires_grad) add_suffix(&b, "requires_grad=true", indent, width);
    dl_strbuf_str(&b, ")");
    return finish(&b);
}
