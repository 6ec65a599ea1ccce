/* host.c - an example host program embedding dlua, and the test of the
 * public API (dlua.h).  Built against the *installed* tree by
 * tests/sh/test_embed.sh with `cc host.c $(pkg-config --cflags --libs dlua)`.
 *
 *   host <model.lua> [resnet18|mlp]
 *
 * 1. The example: a state runs model.lua, the host wraps its own float buffer
 *    as an image batch (no copy), calls classify() for logits and checks them
 *    against the same computation done from Lua (reference()).
 * 2. Two states in two threads run models at the same time; their logits
 *    equal those of the same work done one state at a time.
 * 3. Errors - a script error, a syntax error, a missing file, a missing
 *    function, a bad tensor shape from the host, bad results, bad arguments -
 *    each come back as a status and a message, and the host carries on.
 * Prints "N passed, N failed"; exits non-zero on any failure. */
#include <dlua.h>

#include <lauxlib.h> /* the raw Lua API, through dl_state_lua */
#include <lua.h>

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed, failed;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (cond) {                                                                                \
            passed++;                                                                              \
        } else {                                                                                   \
            failed++;                                                                              \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

static const char *script;                     /* path of model.lua */
static const char *arch = "resnet18";          /* or "mlp" */
enum { N = 2, C = 3, H = 32, W = 32, K = 10 }; /* batch, channels, height, width, classes */

/* The host's image batch: element i is ((i + off) * 37 % 101) / 100 - 0.5,
 * the formula model.lua's test_image uses. */
static void fill_image(float *img, int64_t n, int64_t off) {
    for (int64_t i = 0; i < n * C * H * W; i++)
        img[i] = (float)((i + off) * 37 % 101) / 100.0f - 0.5f;
}

/* Largest |a - b| over two float32 tensors of the same shape, or INFINITY. */
static double max_diff(dl_tensor *a, dl_tensor *b) {
    if (!a || !b || dl_tensor_ndim(a) != dl_tensor_ndim(b)) return INFINITY;
    if (dl_tensor_dtype(a) != DL_DTYPE_F32 || dl_tensor_dtype(b) != DL_DTYPE_F32) return INFINITY;
    for (int d = 0; d < dl_tensor_ndim(a); d++)
        if (dl_tensor_shape(a)[d] != dl_tensor_shape(b)[d]) return INFINITY;
    dl_tensor *ca = dl_tensor_contiguous(a), *cb = dl_tensor_contiguous(b);
    const float *pa = dl_tensor_data(ca), *pb = dl_tensor_data(cb);
    double m = pa && pb ? 0 : INFINITY;
    for (int64_t i = 0; pa && pb && i < dl_tensor_numel(a); i++) {
        double d = fabs((double)pa[i] - (double)pb[i]);
        if (!(d <= m)) m = d; /* NaN too */
    }
    dl_tensor_release(ca);
    dl_tensor_release(cb);
    return m;
}

/* Opens a state and runs model.lua and build(seed, arch) in it. */
static dl_state *open_model(int seed) {
    dl_state *S = dl_state_open();
    if (!S) {
        fprintf(stderr, "dl_state_open: %s\n", dl_last_error());
        return NULL;
    }
    char code[128];
    snprintf(code, sizeof code, "build(%d, '%s')", seed, arch);
    if (dl_state_dofile(S, script) != DL_OK || dl_state_dostring(S, code) != DL_OK) {
        fprintf(stderr, "model: %s\n", dl_state_error(S));
        dl_state_close(S);
        return NULL;
    }
    return S;
}

/* --- output sink ------------------------------------------------------------ */

typedef struct {
    char text[4096];
    size_t len;
    int prints, warnings;
} captured;

static void capture(void *ctx, int kind, const char *text, size_t len) {
    captured *c = ctx;
    if (kind == DL_OUTPUT_PRINT)
        c->prints++;
    else
        c->warnings++;
    if (c->len + len < sizeof c->text) {
        memcpy(c->text + c->len, text, len);
        c->len += len;
        c->text[c->len] = '\0';
    }
}

static void count_release(void *data, void *ctx) {
    (void)data;
    (*(int *)ctx)++;
}

/* img (N, C, H, W) filled with the first test images and wrapped without a
 * copy; release(img, ctx) runs when the tensor goes. */
static dl_tensor *wrap_image(float *img, void (*release)(void *, void *), void *ctx) {
    fill_image(img, N, 0);
    int64_t shape[4] = {N, C, H, W};
    return dl_tensor_wrap(img, DL_DTYPE_F32, 4, shape, release, ctx);
}

/* --- 1. the example ----------------------------------------------------------- */

static void test_example(void) {
    dl_state *S = open_model(0);
    CHECK(S != NULL, "open_model");
    if (!S) return;

    /* the host's buffer, wrapped without a copy */
    static float img[N * C * H * W];
    int released = 0;
    dl_tensor *x = wrap_image(img, count_release, &released);
    CHECK(x && dl_tensor_data(x) == (void *)img, "wrap: %s", dl_last_error());

    dl_tensor *logits = NULL;
    int st = dl_state_call(S, "classify", 1, &x, 1, &logits);
    CHECK(st == DL_OK && logits, "classify: %s", dl_state_error(S));
    CHECK(logits && dl_tensor_ndim(logits) == 2 && dl_tensor_shape(logits)[0] == N &&
              dl_tensor_shape(logits)[1] == K && dl_tensor_dtype(logits) == DL_DTYPE_F32,
          "logits shape");
    CHECK(logits && dl_tensor_data(logits) != NULL, "logits are contiguous: %s", dl_last_error());

    /* the same computation from Lua alone */
    CHECK(dl_state_dostring(S, "ref = reference(2, 0)") == DL_OK, "%s", dl_state_error(S));
    dl_tensor *ref = dl_state_get_tensor(S, "ref");
    CHECK(ref != NULL, "get ref: %s", dl_state_error(S));
    double d = max_diff(logits, ref);
    CHECK(d <= 1e-5, "host logits vs Lua logits: max diff %g", d);
    const float *pl = logits ? dl_tensor_data(logits) : NULL;
    int finite = pl != NULL;
    for (int i = 0; pl && i < N * K; i++) finite &= isfinite(pl[i]) != 0;
    CHECK(finite, "logits are finite");
    /* the two images differ, and so do their logits */
    CHECK(pl && memcmp(pl, pl + K, K * sizeof(float)) != 0, "per-image logits differ");

    /* also through "obj:method" and a dotted path: net:forward(x) and M.f(x).
     * Grad mode is the state's: switched off by one call, still off in the next. */
    CHECK(dl_state_dostring(S, "dl.set_grad_enabled(false)") == DL_OK, "%s", dl_state_error(S));
    dl_tensor *again = NULL;
    CHECK(dl_state_call(S, "net:forward", 1, &x, 1, &again) == DL_OK, "%s", dl_state_error(S));
    CHECK(dl_state_dostring(S, "assert(not dl.is_grad_enabled()); dl.set_grad_enabled(true)") ==
              DL_OK,
          "%s", dl_state_error(S));
    d = max_diff(again, logits);
    CHECK(d <= 1e-5, "net:forward: max diff %g", d);
    dl_tensor_release(again);
    CHECK(dl_state_dostring(S, "M = {f = classify}") == DL_OK, "%s", dl_state_error(S));
    again = NULL;
    CHECK(dl_state_call(S, "M.f", 1, &x, 1, &again) == DL_OK, "%s", dl_state_error(S));
    d = max_diff(again, logits);
    CHECK(d <= 1e-5, "M.f: max diff %g", d);
    dl_tensor_release(again);

    /* no copy: Lua sees the host's writes, the host sees Lua's */
    img[0] = 42.0f;
    CHECK(dl_state_set_tensor(S, "x", x) == DL_OK, "%s", dl_state_error(S));
    CHECK(dl_state_dostring(S, "assert(x[1][1][1][1]:item() == 42, 'host write not seen')\n"
                               "x[1][1][1][2] = -7") == DL_OK,
          "%s", dl_state_error(S));
    CHECK(img[1] == -7.0f, "Lua write lands in the host buffer (%g)", (double)img[1]);

    /* numbers, strings and booleans through the raw Lua state */
    lua_State *L = dl_state_lua(S);
    CHECK(dl_state_dostring(
              S, "n_params = 0\n"
                 "for _, p in ipairs(net:parameters()) do n_params = n_params + p:numel() end\n"
                 "kind = tostring(net):match('^%w+')") == DL_OK,
          "%s", dl_state_error(S));
    int top = lua_gettop(L);
    lua_getglobal(L, "n_params");
    lua_Integer nparams = lua_tointeger(L, -1);
    lua_getglobal(L, "kind");
    const char *kind = lua_tostring(L, -1);
    int64_t expect =
        strcmp(arch, "resnet18") == 0 ? 11181642 : 3 * 32 * 32 * 64 + 64 + 64 * 10 + 10;
    CHECK(nparams == expect, "parameter count %lld (expected %lld)", (long long)nparams,
          (long long)expect);
    CHECK(kind && strcmp(kind, strcmp(arch, "resnet18") == 0 ? "ResNet" : "Sequential") == 0,
          "module name %s", kind ? kind : "(nil)");
    lua_settop(L, top);

    /* print() and warnings go to the host's sink */
    captured out = {{0}, 0, 0, 0};
    dl_state_set_output(S, capture, &out);
    CHECK(dl_state_dostring(S, "print('hello', 42, dl.tensor({1.5, 2}):sum():item())\n"
                               "warn('ignored while off')\n"
                               "warn('@on'); warn('careful ', 'now')") == DL_OK,
          "%s", dl_state_error(S));
    CHECK(strcmp(out.text, "hello\t42\t3.5\ncareful now\n") == 0 && out.prints == 1 &&
              out.warnings == 1,
          "captured output [%s] (%d prints, %d warnings)", out.text, out.prints, out.warnings);
    dl_state_set_output(S, NULL, NULL);

    /* the release callback runs once, when the last reference (Lua's) goes */
    dl_tensor_release(x);
    CHECK(released == 0, "released while Lua still holds x");
    dl_tensor_release(logits);
    dl_tensor_release(ref);
    dl_state_close(S);
    CHECK(released == 1, "release callback ran %d times after close", released);
}

/* --- tensors without a state, dtypes -------------------------------------------- */

static void test_tensors(void) {
    static const char *const names[] = {"float32", "float64", "float16", "bfloat16",
                                        "int64",   "int32",   "uint8",   "bool"};
    static const size_t sizes[] = {4, 8, 2, 2, 8, 4, 1, 1};
    dl_state *S = dl_state_open();
    CHECK(S != NULL, "open: %s", dl_last_error());
    if (!S) return;
    lua_State *L = dl_state_lua(S);
    /* every dtype of dlua.h names the same dtype inside the library */
    for (int d = 0; d < DL_DTYPE_COUNT; d++) {
        unsigned char zeros[2 * 8] = {0};
        int64_t shape[1] = {2};
        dl_tensor *t = dl_tensor_from_data(zeros, (dl_dtype)d, 1, shape);
        CHECK(t && dl_tensor_dtype(t) == (dl_dtype)d && dl_dtype_size((dl_dtype)d) == sizes[d] &&
                  strcmp(dl_dtype_name((dl_dtype)d), names[d]) == 0,
              "dtype %d", d);
        CHECK(dl_state_set_tensor(S, "t", t) == DL_OK, "%s", dl_state_error(S));
        CHECK(dl_state_dostring(S, "name = tostring(t.dtype)") == DL_OK, "%s", dl_state_error(S));
        lua_getglobal(L, "name");
        const char *got = lua_tostring(L, -1);
        char want[32];
        snprintf(want, sizeof want, "dl.%s", names[d]);
        CHECK(got && strcmp(got, want) == 0, "dtype %d is %s in Lua, expected %s", d,
              got ? got : "(nil)", want);
        lua_pop(L, 1);
        dl_tensor_release(t);
    }

    /* from_data copies */
    double vals[6] = {1, 2, 3, 4, 5, 6};
    int64_t shape23[2] = {2, 3};
    dl_tensor *a = dl_tensor_from_data(vals, DL_DTYPE_F64, 2, shape23);
    vals[0] = 100;
    const double *pa = a ? dl_tensor_data(a) : NULL;
    CHECK(pa && pa != vals && pa[0] == 1 && pa[5] == 6, "from_data copies");
    CHECK(a && dl_tensor_numel(a) == 6, "numel");
    /* a 0-dim tensor and an empty one */
    float one = 2.5f;
    dl_tensor *s0 = dl_tensor_from_data(&one, DL_DTYPE_F32, 0, NULL);
    CHECK(s0 && dl_tensor_ndim(s0) == 0 && dl_tensor_numel(s0) == 1 &&
              *(float *)dl_tensor_data(s0) == 2.5f,
          "0-dim from_data");
    int64_t shape0[2] = {0, 4};
    dl_tensor *e = dl_tensor_from_data(NULL, DL_DTYPE_F32, 2, shape0);
    CHECK(e && dl_tensor_numel(e) == 0, "empty from_data: %s", dl_last_error());
    dl_tensor_release(s0);
    dl_tensor_release(e);

    /* a transposed result is not contiguous: dl_tensor_data says NULL */
    dl_tensor *tr = NULL;
    CHECK(dl_state_set_tensor(S, "a", a) == DL_OK, "%s", dl_state_error(S));
    CHECK(dl_state_dostring(S, "function transpose(x) return x:t() end") == DL_OK, "%s",
          dl_state_error(S));
    CHECK(dl_state_call(S, "transpose", 1, &a, 1, &tr) == DL_OK, "%s", dl_state_error(S));
    CHECK(tr && dl_tensor_data(tr) == NULL && strstr(dl_last_error(), "not contiguous"),
          "data of a transposed tensor: %s", dl_last_error());
    dl_tensor *trc = tr ? dl_tensor_contiguous(tr) : NULL;
    const double *pt = trc ? dl_tensor_data(trc) : NULL;
    CHECK(pt && dl_tensor_shape(trc)[0] == 3 && pt[0] == 1 && pt[1] == 4 && pt[5] == 6,
          "contiguous copy of the transpose");
    dl_tensor_release(trc);
    dl_tensor_release(tr);

    /* numbers as results come back as 0-dim tensors */
    dl_tensor *r[2] = {NULL, NULL};
    CHECK(dl_state_dostring(S, "function two() return 7, 0.25 end") == DL_OK, "%s",
          dl_state_error(S));
    CHECK(dl_state_call(S, "two", 0, NULL, 2, r) == DL_OK, "%s", dl_state_error(S));
    CHECK(r[0] && dl_tensor_dtype(r[0]) == DL_DTYPE_I64 && dl_tensor_ndim(r[0]) == 0 &&
              *(int64_t *)dl_tensor_data(r[0]) == 7,
          "integer result");
    CHECK(r[1] && dl_tensor_dtype(r[1]) == DL_DTYPE_F64 && *(double *)dl_tensor_data(r[1]) == 0.25,
          "float result");
    dl_tensor_release(r[0]);
    dl_tensor_release(r[1]);

    /* a wrapped buffer with no release callback is left alone */
    int32_t ibuf[4] = {1, 2, 3, 4};
    int64_t shape4[1] = {4};
    dl_tensor *w = dl_tensor_wrap(ibuf, DL_DTYPE_I32, 1, shape4, NULL, NULL);
    CHECK(w != NULL, "wrap without release: %s", dl_last_error());
    CHECK(dl_state_set_tensor(S, "w", w) == DL_OK, "%s", dl_state_error(S));
    CHECK(dl_state_dostring(S, "w:mul_(10); w = nil; collectgarbage()") == DL_OK, "%s",
          dl_state_error(S));
    dl_tensor_release(w); /* last reference: must not free ibuf */
    CHECK(ibuf[0] == 10 && ibuf[3] == 40, "in-place op on a wrapped int32 buffer");

    dl_tensor_release(a);
    dl_state_close(S);
}

/* --- 3. errors ---------------------------------------------------------------------- */

static void test_errors(void) {
    dl_state *S = open_model(0);
    CHECK(S != NULL, "open_model");
    if (!S) return;
    static float img[N * C * H * W];
    dl_tensor *x = wrap_image(img, NULL, NULL);
    dl_tensor *good = NULL, *r = NULL;
    CHECK(dl_state_call(S, "classify", 1, &x, 1, &good) == DL_OK, "%s", dl_state_error(S));

    /* a script error: status, message, traceback */
    int st = dl_state_dostring(S, "local function inner() error('boom') end\ninner()");
    CHECK(st == DL_ERR_RUN && strstr(dl_state_error(S), "boom") &&
              strstr(dl_state_error(S), "stack traceback") && strstr(dl_state_error(S), "inner"),
          "script error: %d %s", st, dl_state_error(S));
    CHECK(strstr(dl_last_error(), "boom") != NULL, "dl_last_error has it too");
    st = dl_state_dostring(S, "error({})");
    CHECK(st == DL_ERR_RUN && strstr(dl_state_error(S), "error object is a table value"),
          "non-string error object: %s", dl_state_error(S));
    st = dl_state_dostring(S, "os.exit(3)");
    CHECK(st == DL_ERR_RUN && strstr(dl_state_error(S), "cannot exit the host"), "os.exit: %d %s",
          st, dl_state_error(S));
    st = dl_state_dostring(S, "x = = 1");
    CHECK(st == DL_ERR_SYNTAX && strstr(dl_state_error(S), "unexpected symbol"),
          "syntax error: %d %s", st, dl_state_error(S));
    st = dl_state_dofile(S, "/nonexistent/dir/model.lua");
    CHECK(st == DL_ERR_FILE && strstr(dl_state_error(S), "cannot open"), "missing file: %d %s", st,
          dl_state_error(S));
    CHECK(dl_state_dostring(S, "ok_after = true") == DL_OK && dl_state_error(S)[0] == '\0',
          "a success clears the message");

    /* a missing function, and things that are not functions */
    r = x; /* must be reset to NULL */
    st = dl_state_call(S, "no_such_function", 1, &x, 1, &r);
    CHECK(st == DL_ERR_RUN && r == NULL && strstr(dl_state_error(S), "'no_such_function'") &&
              strstr(dl_state_error(S), "not a function"),
          "missing function: %d %s", st, dl_state_error(S));
    st = dl_state_call(S, "ok_after", 0, NULL, 0, NULL);
    CHECK(st == DL_ERR_RUN && strstr(dl_state_error(S), "a boolean value"), "a boolean: %s",
          dl_state_error(S));
    st = dl_state_call(S, "nothing.here.f", 0, NULL, 0, NULL);
    CHECK(st == DL_ERR_RUN && strstr(dl_state_error(S), "'nothing' is nil"), "bad path: %s",
          dl_state_error(S));
    st = dl_state_call(S, "net:no_method", 1, &x, 1, &r);
    CHECK(st == DL_ERR_RUN && strstr(dl_state_error(S), "not a function"), "missing method: %s",
          dl_state_error(S));
    st = dl_state_call(S, "bad..name", 0, NULL, 0, NULL);
    CHECK(st == DL_ERR_RUN && strstr(dl_state_error(S), "invalid function name"), "%s",
          dl_state_error(S));

    /* a bad tensor shape from the host: 4 channels, and a 2-d tensor */
    static float img4[N * 4 * H * W];
    int64_t shape4[4] = {N, 4, H, W};
    dl_tensor *x4 = dl_tensor_wrap(img4, DL_DTYPE_F32, 4, shape4, NULL, NULL);
    st = dl_state_call(S, "classify", 1, &x4, 1, &r);
    CHECK(st == DL_ERR_RUN && r == NULL && strstr(dl_state_error(S), "classify") &&
              strstr(dl_state_error(S), "stack traceback"),
          "bad shape: %d %s", st, dl_state_error(S));
    fprintf(stderr, "(expected) bad shape -> %.200s\n", dl_state_error(S));
    int64_t flat[2] = {N, C * H * W};
    dl_tensor *x2 = dl_tensor_wrap(img, DL_DTYPE_F32, 2, flat, NULL, NULL);
    st = dl_state_call(S, "classify", 1, &x2, 1, &r);
    if (strcmp(arch, "resnet18") == 0)
        CHECK(st == DL_ERR_RUN && r == NULL, "2-d input to a ResNet: %d", st);
    dl_tensor_release(r);
    r = NULL;
    /* an int64 tensor where floats are expected */
    int64_t ishape[4] = {1, C, H, W};
    static int64_t ibuf[C * H * W];
    dl_tensor *xi = dl_tensor_wrap(ibuf, DL_DTYPE_I64, 4, ishape, NULL, NULL);
    st = dl_state_call(S, "classify", 1, &xi, 1, &r);
    CHECK(st == DL_ERR_RUN && r == NULL, "int64 input: %d %s", st, dl_state_error(S));

    /* bad results */
    CHECK(dl_state_dostring(S, "function str() return 'a string' end\n"
                               "function one(x) return x end") == DL_OK,
          "%s", dl_state_error(S));
    st = dl_state_call(S, "str", 0, NULL, 1, &r);
    CHECK(st == DL_ERR_RUN && strstr(dl_state_error(S), "result 1 of 'str' is string"), "%s",
          dl_state_error(S));
    dl_tensor *two[2] = {x, x};
    st = dl_state_call(S, "one", 1, &x, 2, two);
    CHECK(st == DL_ERR_RUN && two[0] == NULL && two[1] == NULL &&
              strstr(dl_state_error(S), "result 2 of 'one' is nil"),
          "missing result: %s", dl_state_error(S));
    st = dl_state_dostring(S, "y = 5");
    CHECK(dl_state_get_tensor(S, "y") == NULL && strstr(dl_state_error(S), "number, not a tensor"),
          "get_tensor of a number: %s", dl_state_error(S));
    CHECK(dl_state_get_tensor(S, "nope") == NULL && strstr(dl_state_error(S), "'nope' is nil"),
          "get_tensor of nil: %s", dl_state_error(S));

    /* bad arguments from the host */
    CHECK(dl_state_call(S, NULL, 0, NULL, 0, NULL) == DL_ERR_ARG, "NULL name");
    CHECK(dl_state_call(S, "one", 1, NULL, 0, NULL) == DL_ERR_ARG, "NULL args");
    CHECK(dl_state_call(NULL, "one", 0, NULL, 0, NULL) == DL_ERR_ARG &&
              strstr(dl_last_error(), "state is NULL"),
          "NULL state");
    CHECK(dl_state_dostring(S, NULL) == DL_ERR_ARG, "NULL code");
    CHECK(dl_state_set_tensor(S, NULL, x) == DL_ERR_ARG, "NULL global");
    int64_t neg[2] = {2, -1}, big[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    CHECK(!dl_tensor_from_data(img, DL_DTYPE_F32, 2, neg) && strstr(dl_last_error(), "negative"),
          "negative size: %s", dl_last_error());
    CHECK(!dl_tensor_from_data(img, DL_DTYPE_F32, 9, big) && strstr(dl_last_error(), "dimensions"),
          "9 dims: %s", dl_last_error());
    CHECK(!dl_tensor_from_data(img, (dl_dtype)99, 1, flat) && strstr(dl_last_error(), "dtype"),
          "bad dtype: %s", dl_last_error());
    CHECK(!dl_tensor_from_data(NULL, DL_DTYPE_F32, 2, flat) && strstr(dl_last_error(), "NULL"),
          "NULL data: %s", dl_last_error());
    CHECK(!dl_tensor_wrap((char *)img + 1, DL_DTYPE_F32, 1, flat, NULL, NULL) &&
              strstr(dl_last_error(), "aligned"),
          "misaligned: %s", dl_last_error());
    CHECK(dl_tensor_data(NULL) == NULL, "data of NULL");

    /* the host carries on: the state still works and gives the same answer */
    st = dl_state_call(S, "classify", 1, &x, 1, &r);
    double d = max_diff(r, good);
    CHECK(st == DL_OK && d == 0, "classify after the errors: %d %g %s", st, d, dl_state_error(S));
    dl_tensor_release(r);
    dl_tensor_release(good);
    dl_tensor_release(x);
    dl_tensor_release(x2);
    dl_tensor_release(x4);
    dl_tensor_release(xi);
    dl_state_close(S);
    dl_state_close(NULL);
}

/* --- 2. two states in two threads ------------------------------------------------ */

enum { ROUNDS = 2 };

typedef struct {
    int seed;
    dl_tensor *logits[ROUNDS];
    char error[512];
} job;

/* One model per state: seed -> weights, seed -> input offset.  Several
 * rounds, with a reseed in between, so a shared generator would show. */
static void *run_job(void *arg) {
    job *j = arg;
    dl_state *S = open_model(j->seed);
    if (!S) {
        snprintf(j->error, sizeof j->error, "open_model failed");
        return NULL;
    }
    static _Thread_local float img[N * C * H * W];
    fill_image(img, N, j->seed * 1000);
    int64_t shape[4] = {N, C, H, W};
    dl_tensor *x = dl_tensor_wrap(img, DL_DTYPE_F32, 4, shape, NULL, NULL);
    for (int r = 0; r < ROUNDS; r++) {
        /* random work between the rounds: this state's stream only */
        if (dl_state_dostring(S, "local _ = dl.rand(1000)") != DL_OK ||
            dl_state_call(S, "classify", 1, &x, 1, &j->logits[r]) != DL_OK) {
            snprintf(j->error, sizeof j->error, "%s", dl_state_error(S));
            break;
        }
    }
    dl_tensor_release(x);
    dl_state_close(S);
    return NULL;
}

static void test_threads(void) {
    job serial[2] = {{.seed = 1}, {.seed = 2}}, parallel[2] = {{.seed = 1}, {.seed = 2}};
    for (int i = 0; i < 2; i++) run_job(&serial[i]);
    pthread_t th[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, run_job, &parallel[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    /* different seeds gave different models and inputs */
    double apart = max_diff(serial[0].logits[0], serial[1].logits[0]);
    CHECK(apart > 1e-3 && apart < INFINITY, "seeds 1 and 2 give different logits (%g)", apart);
    for (int i = 0; i < 2; i++) {
        CHECK(!serial[i].error[0] && !parallel[i].error[0], "job %d: %s %s", i, serial[i].error,
              parallel[i].error);
        for (int r = 0; r < ROUNDS; r++) {
            double d = max_diff(serial[i].logits[r], parallel[i].logits[r]);
            CHECK(d <= 1e-5, "thread %d round %d: threaded vs serial max diff %g", i, r, d);
            dl_tensor_release(serial[i].logits[r]);
            dl_tensor_release(parallel[i].logits[r]);
        }
    }
}

/* --- 5. host-written weights ----------------------------------------------------
 * An inference convolution keeps its weights prepacked; a host that writes a
 * weight tensor's bytes itself says so with dl_tensor_mark_changed, and the
 * next forward uses the new values (here: the weights doubled double y). */

static void test_mark_changed(void) {
    dl_state *S = dl_state_open();
    CHECK(S != NULL, "dl_state_open: %s", dl_last_error());
    if (!S) return;
    enum { CO = 16, CI = 16, KK = 3 };
    static float wbuf[CO * CI * KK * KK];
    for (int i = 0; i < CO * CI * KK * KK; i++) wbuf[i] = (float)(i % 7) / 7.0f - 0.4f;
    int64_t wshape[4] = {CO, CI, KK, KK};
    dl_tensor *w = dl_tensor_wrap(wbuf, DL_DTYPE_F32, 4, wshape, NULL, NULL);
    CHECK(w && dl_state_set_tensor(S, "w", w) == DL_OK, "%s", dl_state_error(S));
    CHECK(dl_state_dostring(S,
                            "x = dl.randn(1, 16, 16, 16)\n"
                            "function conv() return dl.no_grad(function()\n"
                            "  return dl.nn.functional.conv2d(x, w, nil, {padding = 1}) end) end\n"
                            "y1 = conv()") == DL_OK,
          "%s", dl_state_error(S));
    float *p = dl_tensor_data(w);
    for (int i = 0; p && i < CO * CI * KK * KK; i++) p[i] *= 2;
    dl_tensor_mark_changed(w);
    CHECK(dl_state_dostring(
              S, "y2 = conv()\n"
                 "local d = (y2 - y1 * 2):abs():max():item()\n"
                 "assert(d < 1e-4 * (1 + y1:abs():max():item()), 'stale weights: ' .. d)") == DL_OK,
          "%s", dl_state_error(S));
    dl_tensor_release(w);
    dl_state_close(S);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s model.lua [resnet18|mlp]\n", argv[0]);
        return 2;
    }
    script = argv[1];
    if (argc > 2) arch = argv[2];
    printf("dlua %s, model %s\n", dl_version(), arch);
    test_tensors();
    test_example();
    test_errors();
    test_threads();
    test_mark_changed();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
