/* random.h - the random op family: in-place fills (uniform_, normal_,
 * random_, bernoulli_) and creation (rand, randn, randint, randperm,
 * bernoulli).  Values come from a counter-based Philox generator (g, or the
 * default generator when g is NULL): a fill of n elements reserves its
 * counter blocks up front (see src/cpu/random.h for the block/lane map), so
 * results depend only on the seed and the order of calls - not on the thread
 * count.  Element i is the i-th element of the tensor in row-major order,
 * whatever its strides.  CUDA tensors are filled on the device with the CPU's
 * values: one generator serves both devices, so dl.manual_seed(0) then a CUDA
 * rand equals the CPU rand moved to the GPU, bit for bit for uniform,
 * integers and bernoulli, and within an ulp or two for normal (the CPU's
 * glibc logf/sinf/cosf are not reproducible on the GPU); randperm is built
 * on the CPU and copied.  Functions follow tensor.h: new references,
 * NULL/-1 with an error. */
#ifndef DL_OPS_RANDOM_H
#define DL_OPS_RANDOM_H

#include "core/rng.h"
#include "core/tensor.h"

/* Floating t: uniform in [low, high) (low <= high; low == high fills low). */
int dl_uniform_(dl_tensor *t, double low, double high, dl_generator *g);
/* Floating t: normal with mean and std (std >= 0). */
int dl_normal_(dl_tensor *t, double mean, double std, dl_generator *g);
/* Any dtype: integers uniform in [low, high); the range must fit the dtype. */
int dl_random_(dl_tensor *t, int64_t low, int64_t high, dl_generator *g);
/* Any dtype: 1 with probability p (in [0, 1]), else 0. */
int dl_bernoulli_(dl_tensor *t, double p, dl_generator *g);
/* The same with per-element probabilities p, broadcast to t's shape. */
int dl_bernoulli_tensor_(dl_tensor *t, dl_tensor *p, dl_generator *g);

/* New tensors of a shape; rand/randn need a floating dtype. */
dl_tensor *dl_rand(int ndim, const int64_t *shape, dl_dtype dtype, dl_device dev, dl_generator *g);
dl_tensor *dl_randn(int ndim, const int64_t *shape, dl_dtype dtype, dl_device dev, dl_generator *g);
dl_tensor *dl_randint(int64_t low, int64_t high, int ndim, const int64_t *shape, dl_dtype dtype,
                      dl_device dev, dl_generator *g);
/* A random permutation of first, first+1, ..., first+n-1 (the Lua binding
 * passes first = 1, PyTorch's randperm is first = 0). */
dl_tensor *dl_randperm(int64_t n, int64_t first, dl_dtype dtype, dl_device dev, dl_generator *g);
/* 0/1 samples with the probabilities in p (floating), same shape and dtype. */
dl_tensor *dl_bernoulli(dl_tensor *p, dl_generator *g);

#endif
