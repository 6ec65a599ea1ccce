/* random.c - the random op family (see random.h): checks arguments, reserves
 * counter blocks from the generator and runs the kernel.  On the CPU the
 * kernel writes straight into a contiguous tensor, or into a contiguous
 * scratch tensor that is then copied into a strided view.  On CUDA the
 * kernel (cuda/random.cu) draws the same Philox words from the same (seed,
 * base) on the device, into the tensor or a contiguous device scratch tensor
 * that is copied into a strided view, so a CUDA fill equals the CPU fill of
 * the same generator state; both devices share one generator, and a fill
 * advances it by the same number of blocks on either.  randperm is
 * sequential (Fisher-Yates): it is built on the CPU and copied to the device.
 * Per-element bernoulli probabilities are checked on the CPU (as doubles) and
 * copied to the device for the kernel. */
#include "random.h"
#include "cpu/random.h"
#include "kernels/cuda.h"
#include "kernels/random.h"
#include "ops/op_util.h"

#include <math.h>
#include <stdlib.h>

static int check_floating(const char *op, dl_dtype dt) {
    if (!dl_dtype_is_floating(dt))
        return dl_error("%s: expected a floating-point dtype, got %s", op, dl_dtype_name(dt));
    return 0;
}

static int check_shape(const char *op, int ndim, const int64_t *shape) {
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0)
            return dl_error("%s: negative size %lld in dimension %d", op, (long long)shape[i],
                            i + 1);
    return 0;
}

/* Largest magnitude of an integer every value up to which the dtype holds. */
static int int_range_fits(dl_dtype dt, int64_t lo, int64_t hi) {
    switch (dt) {
    case DL_DTYPE_I64: return 1;
    case DL_DTYPE_I32: return lo >= INT32_MIN && hi <= INT32_MAX;
    case DL_DTYPE_U8: return lo >= 0 && hi <= 255;
    case DL_DTYPE_BOOL: return lo >= 0 && hi <= 1;
    default: {
        int digits = dt == DL_DTYPE_F64   ? 53
                     : dt == DL_DTYPE_F32 ? 24
                     : dt == DL_DTYPE_F16 ? 11
                                          : 8;
        int64_t m = (int64_t)1 << digits;
        return lo >= -m && hi <= m;
    }
    }
}

/* Largest finite value of a floating dtype. */
static double float_max(dl_dtype dt) {
    switch (dt) {
    case DL_DTYPE_F64: return 1.7976931348623157e308;
    case DL_DTYPE_F16: return 65504.0;
    case DL_DTYPE_BF16: return 3.3895313892515355e38;
    default: return 3.4028234663852886e38;
    }
}

/* The CUDA fill: t on a GPU, p->kind not PERM; probs, when not NULL, is the
 * CPU float64 tensor of per-element probabilities (t's shape). */
static int cuda_fill(dl_tensor *t, const dl_random_params *p, dl_tensor *probs, uint64_t seed,
                     uint64_t base) {
    dl_device dev = dl_tensor_device(t);
    dl_random_params dp = *p;
    dl_tensor *dprobs = NULL, *tmp = NULL;
    if (probs) {
        dprobs = dl_tensor_to_device(probs, dev);
        if (!dprobs) return -1;
        dp.probs = dl_tensor_data_ptr(dprobs);
    }
    int rc;
    if (dl_tensor_is_contiguous(t)) {
        rc = dl_cuda_random->random_fill(t, &dp, seed, base);
    } else {
        tmp = dl_tensor_empty(t->ndim, t->shape, t->dtype, dev);
        rc = tmp ? dl_cuda_random->random_fill(tmp, &dp, seed, base) : -1;
        if (rc == 0) rc = dl_tensor_copy_(t, tmp);
    }
    dl_tensor_release(tmp);
    dl_tensor_release(dprobs);
    return rc;
}

/* Fills t from g (NULL: the default generator).  probs: as for cuda_fill
 * (p->probs already points at its data). */
static int random_fill(const char *op, dl_tensor *t, const dl_random_params *p, dl_tensor *probs,
                       dl_generator *g) {
    int64_t n = dl_tensor_numel(t);
    if (n == 0) return 0;
    int on_cuda = dl_tensor_device(t).type == DL_DEVICE_CUDA && p->kind != DL_RANDOM_PERM;
    if (on_cuda && (!dl_cuda_random || !dl_cuda_random->random_fill)) return dl_cuda_missing(op);
    if (!g) g = dl_default_generator();
    uint64_t seed = g->seed;
    uint64_t base = dl_generator_reserve(g, dl_cpu_random_blocks(p, t->dtype, n));
    int rc;
    if (on_cuda) {
        rc = cuda_fill(t, p, probs, seed, base);
    } else if (dl_tensor_device(t).type == DL_DEVICE_CPU && dl_tensor_is_contiguous(t)) {
        rc = dl_cpu_random_fill(dl_tensor_data_ptr(t), t->dtype, n, p, seed, base);
    } else {
        dl_tensor *tmp = dl_tensor_empty(t->ndim, t->shape, t->dtype, DL_CPU);
        if (!tmp) return -1;
        rc = dl_cpu_random_fill(dl_tensor_data_ptr(tmp), t->dtype, n, p, seed, base);
        if (rc == 0) rc = dl_tensor_copy_(t, tmp);
        dl_tensor_release(tmp);
    }
    if (rc == 0) dl_tensor_bump_version(t);
    return rc;
}

/* --- in place ------------------------------------------------------------ */

static int uniform_op(const char *op, dl_tensor *t, double low, double high, dl_generator *g) {
    if (check_floating(op, t->dtype)) return -1;
    if (!isfinite(low) || !isfinite(high))
        return dl_error("%s: bounds must be finite, got [%g, %g)", op, low, high);
    if (low > high)
        return dl_error("%s: expects low <= high, but got low=%g > high=%g", op, low, high);
    if (high - low > float_max(t->dtype))
        return dl_error("%s: high - low = %g overflows %s", op, high - low,
                        dl_dtype_name(t->dtype));
    dl_random_params p = {.kind = DL_RANDOM_UNIFORM, .a = low, .b = high};
    return random_fill(op, t, &p, NULL, g);
}

static int normal_op(const char *op, dl_tensor *t, double mean, double std, dl_generator *g) {
    if (check_floating(op, t->dtype)) return -1;
    if (!isfinite(mean) || !isfinite(std))
        return dl_error("%s: mean and std must be finite, got mean=%g std=%g", op, mean, std);
    if (std < 0) return dl_error("%s: expects std >= 0, but got std=%g", op, std);
    dl_random_params p = {.kind = DL_RANDOM_NORMAL, .a = mean, .b = std};
    return random_fill(op, t, &p, NULL, g);
}

static int random_op(const char *op, dl_tensor *t, int64_t low, int64_t high, dl_generator *g) {
    if (low >= high)
        return dl_error("%s: expects low < high, but got low=%lld >= high=%lld", op, (long long)low,
                        (long long)high);
    if (!int_range_fits(t->dtype, low, high - 1))
        return dl_error("%s: the range [%lld, %lld) does not fit dtype %s", op, (long long)low,
                        (long long)high, dl_dtype_name(t->dtype));
    dl_random_params p = {
        .kind = DL_RANDOM_INT, .low = low, .range = (uint64_t)high - (uint64_t)low};
    return random_fill(op, t, &p, NULL, g);
}

int dl_uniform_(dl_tensor *t, double low, double high, dl_generator *g) {
    return uniform_op("uniform_", t, low, high, g);
}

int dl_normal_(dl_tensor *t, double mean, double std, dl_generator *g) {
    return normal_op("normal_", t, mean, std, g);
}

int dl_random_(dl_tensor *t, int64_t low, int64_t high, dl_generator *g) {
    return random_op("random_", t, low, high, g);
}

int dl_bernoulli_(dl_tensor *t, double p, dl_generator *g) {
    if (!(p >= 0 && p <= 1))
        return dl_error("bernoulli_: probability must be in [0, 1], got %g", p);
    dl_random_params rp = {.kind = DL_RANDOM_BERNOULLI, .a = p};
    return random_fill("bernoulli_", t, &rp, NULL, g);
}

static int bernoulli_tensor(const char *op, dl_tensor *t, dl_tensor *p, dl_generator *g) {
    if (check_floating(op, p->dtype)) return -1;
    dl_tensor *e = dl_tensor_expand(p, t->ndim, t->shape);
    if (!e) {
        char b1[128], b2[128];
        return dl_error("%s: probabilities of shape %s cannot be broadcast to %s", op,
                        dl_shape_str(p->ndim, p->shape, b1, sizeof b1),
                        dl_shape_str(t->ndim, t->shape, b2, sizeof b2));
    }
    dl_tensor *pd = dl_tensor_empty(t->ndim, t->shape, DL_DTYPE_F64, DL_CPU);
    int rc = pd ? dl_tensor_copy_(pd, e) : -1;
    dl_tensor_release(e);
    if (rc) {
        dl_tensor_release(pd);
        return -1;
    }
    const double *probs = dl_tensor_data_ptr(pd);
    int64_t n = dl_tensor_numel(pd);
    for (int64_t i = 0; i < n; i++)
        if (!(probs[i] >= 0 && probs[i] <= 1)) {
            double bad = probs[i]; /* read before pd (which holds probs) is released */
            dl_tensor_release(pd);
            return dl_error("%s: probabilities must be in [0, 1], found %g", op, bad);
        }
    dl_random_params rp = {.kind = DL_RANDOM_BERNOULLI, .probs = probs};
    rc = random_fill(op, t, &rp, pd, g);
    dl_tensor_release(pd);
    return rc;
}

int dl_bernoulli_tensor_(dl_tensor *t, dl_tensor *p, dl_generator *g) {
    return bernoulli_tensor("bernoulli_", t, p, g);
}

/* --- creation -------------------------------------------------------------- */

static dl_tensor *new_filled(const char *op, int ndim, const int64_t *shape, dl_dtype dtype,
                             dl_device dev, const dl_random_params *p, dl_generator *g) {
    if (check_shape(op, ndim, shape)) return NULL;
    dl_tensor *t = dl_tensor_empty(ndim, shape, dtype, dev);
    if (t && random_fill(op, t, p, NULL, g)) {
        dl_tensor_release(t);
        return NULL;
    }
    return t;
}

dl_tensor *dl_rand(int ndim, const int64_t *shape, dl_dtype dtype, dl_device dev, dl_generator *g) {
    if (check_floating("rand", dtype)) return NULL;
    dl_random_params p = {.kind = DL_RANDOM_UNIFORM, .a = 0, .b = 1};
    return new_filled("rand", ndim, shape, dtype, dev, &p, g);
}

dl_tensor *dl_randn(int ndim, const int64_t *shape, dl_dtype dtype, dl_device dev,
                    dl_generator *g) {
    if (check_floating("randn", dtype)) return NULL;
    dl_random_params p = {.kind = DL_RANDOM_NORMAL, .a = 0, .b = 1};
    return new_filled("randn", ndim, shape, dtype, dev, &p, g);
}

dl_tensor *dl_randint(int64_t low, int64_t high, int ndim, const int64_t *shape, dl_dtype dtype,
                      dl_device dev, dl_generator *g) {
    if (low >= high) {
        dl_error("randint: expects low < high, but got low=%lld >= high=%lld", (long long)low,
                 (long long)high);
        return NULL;
    }
    if (!int_range_fits(dtype, low, high - 1)) {
        dl_error("randint: the range [%lld, %lld) does not fit dtype %s", (long long)low,
                 (long long)high, dl_dtype_name(dtype));
        return NULL;
    }
    dl_random_params p = {
        .kind = DL_RANDOM_INT, .low = low, .range = (uint64_t)high - (uint64_t)low};
    return new_filled("randint", ndim, shape, dtype, dev, &p, g);
}

dl_tensor *dl_randperm(int64_t n, int64_t first, dl_dtype dtype, dl_device dev, dl_generator *g) {
    if (n < 0) {
        dl_error("randperm: n must be non-negative, got %lld", (long long)n);
        return NULL;
    }
    if (dtype == DL_DTYPE_BOOL) {
        dl_error("randperm: dtype bool cannot hold a permutation");
        return NULL;
    }
    if (n > 0 && (first > INT64_MAX - n || !int_range_fits(dtype, first, first + n - 1))) {
        dl_error("randperm: values %lld..%lld do not fit dtype %s", (long long)first,
                 (long long)(first + n - 1), dl_dtype_name(dtype));
        return NULL;
    }
    dl_random_params p = {.kind = DL_RANDOM_PERM, .low = first};
    return new_filled("randperm", 1, &n, dtype, dev, &p, g);
}

dl_tensor *dl_bernoulli(dl_tensor *p, dl_generator *g) {
    if (check_floating("bernoulli", p->dtype)) return NULL;
    dl_tensor *t = dl_tensor_empty(p->ndim, p->shape, p->dtype, dl_tensor_device(p));
    if (t && bernoulli_tensor("bernoulli", t, p, g)) {
        dl_tensor_release(t);
        return NULL;
    }
    return t;
}
