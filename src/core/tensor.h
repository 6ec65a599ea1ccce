/* tensor.h - the tensor: a strided view (shape, strides, offset in elements)
 * on a refcounted storage.  Up to DL_MAX_DIMS dimensions; a 0-dim tensor is a
 * scalar.  Every function returning dl_tensor* returns a new reference (NULL
 * with dl_last_error() set on failure); release it with dl_tensor_release.
 * Dimensions here are 0-based; negative ones count from the end. */
#ifndef DL_TENSOR_H
#define DL_TENSOR_H

#include "dtype.h"
#include "error.h"
#include "storage.h"

#include <stdbool.h>
#include <stdint.h>

#define DL_MAX_DIMS 8

struct dl_node; /* autograd graph node (src/autograd) */

typedef struct dl_tensor {
    dl_storage *storage;
    int64_t offset; /* in elements */
    int64_t shape[DL_MAX_DIMS];
    int64_t strides[DL_MAX_DIMS]; /* in elements */
    int ndim;
    dl_dtype dtype;
    int refcount; /* atomic */
    /* autograd state (filled in by src/autograd) */
    bool requires_grad;
    int output_nr; /* which output of grad_fn this tensor is */
    struct dl_tensor *grad;
    struct dl_node *grad_fn;
    uint64_t grad_fn_version; /* the storage's version when grad_fn was set */
} dl_tensor;

/* --- lifetime ---------------------------------------------------------- */
dl_tensor *dl_tensor_empty(int ndim, const int64_t *shape, dl_dtype dtype, dl_device dev);
dl_tensor *dl_tensor_zeros(int ndim, const int64_t *shape, dl_dtype dtype, dl_device dev);
dl_tensor *dl_tensor_full(int ndim, const int64_t *shape, double value, dl_dtype dtype,
                          dl_device dev);
dl_tensor *dl_tensor_scalar(double value, dl_dtype dtype); /* 0-dim, CPU */
/* An uninitialised tensor of like's shape, of dtype on dev, whose strides
 * follow like's layout when like is dense and non-overlapping (every element
 * of a block of storage used once, in any dimension order: a channels-last
 * NCHW tensor, a transposed matrix); contiguous strides otherwise.  PyTorch's
 * empty_like with memory_format=preserve_format. */
dl_tensor *dl_tensor_empty_like_layout(const dl_tensor *like, dl_dtype dtype, dl_device dev);
/* The strides (like->ndim of them) that dl_tensor_empty_like_layout gives:
 * like's layout over a block of its numel elements. */
void dl_tensor_layout_strides(const dl_tensor *like, int64_t *strides);
/* A tensor over an existing storage (retained). */
dl_tensor *dl_tensor_new_view(dl_storage *s, int64_t offset, int ndim, const int64_t *shape,
                              const int64_t *strides, dl_dtype dtype);
dl_tensor *dl_tensor_retain(dl_tensor *t);
void dl_tensor_release(dl_tensor *t);

/* --- inspection -------------------------------------------------------- */
int64_t dl_tensor_numel(const dl_tensor *t);
bool dl_tensor_is_contiguous(const dl_tensor *t);
dl_device dl_tensor_device(const dl_tensor *t);
/* Pointer to the first element (storage data + offset), whatever the layout
 * or device.  (dlua.h's public dl_tensor_data is the checked form for hosts:
 * NULL unless CPU and contiguous.  It is deliberately not declared here, so a
 * library file calling it by mistake fails to compile: the build makes
 * implicit declarations errors.) */
void *dl_tensor_data_ptr(const dl_tensor *t);
size_t dl_tensor_itemsize(const dl_tensor *t);
/* Normalises dim (negative from the end) against ndim; -1 and an error naming
 * op when out of range. */
int dl_wrap_dim(const char *op, int dim, int ndim);
/* "[2, 3]" into buf. */
const char *dl_shape_str(int ndim, const int64_t *shape, char *buf, size_t n);
bool dl_shape_equal(const dl_tensor *a, const dl_tensor *b);
/* Contiguous strides for a shape. */
void dl_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides);

/* PyTorch's result_type for two tensor operands, honouring the rule that a
 * 0-dim tensor only takes part when it raises the category. */
dl_dtype dl_result_type(const dl_tensor *a, const dl_tensor *b);

/* --- views (share storage) --------------------------------------------- */
/* view: shape may contain one -1; fails if the strides cannot express it. */
dl_tensor *dl_tensor_view(dl_tensor *t, int ndim, const int64_t *shape);
/* reshape: a view when possible, else a contiguous copy. */
dl_tensor *dl_tensor_reshape(dl_tensor *t, int ndim, const int64_t *shape);
dl_tensor *dl_tensor_transpose(dl_tensor *t, int d0, int d1);
dl_tensor *dl_tensor_permute(dl_tensor *t, const int *dims); /* t->ndim entries */
dl_tensor *dl_tensor_squeeze(dl_tensor *t, int dim);         /* dim < -ndim..: see below */
dl_tensor *dl_tensor_squeeze_all(dl_tensor *t);
dl_tensor *dl_tensor_unsqueeze(dl_tensor *t, int dim); /* dim in [-ndim-1, ndim] */
dl_tensor *dl_tensor_flatten(dl_tensor *t, int start, int end);
dl_tensor *dl_tensor_narrow(dl_tensor *t, int dim, int64_t start, int64_t length);
dl_tensor *dl_tensor_select(dl_tensor *t, int dim, int64_t index); /* index may be negative */
dl_tensor *dl_tensor_expand(dl_tensor *t, int ndim, const int64_t *shape); /* -1 keeps */
dl_tensor *dl_tensor_as_strided(dl_tensor *t, int ndim, const int64_t *shape,
                                const int64_t *strides, int64_t offset);

/* --- copies ------------------------------------------------------------ */
/* t itself (retained) if already contiguous, else a contiguous copy. */
dl_tensor *dl_tensor_contiguous(dl_tensor *t);
dl_tensor *dl_tensor_clone(dl_tensor *t);
/* Copies src into dst, broadcasting src to dst's shape and converting dtype. */
int dl_tensor_copy_(dl_tensor *dst, dl_tensor *src);
/* t itself (retained) if already of dtype, else a converted contiguous copy. */
dl_tensor *dl_tensor_to_dtype(dl_tensor *t, dl_dtype dtype);
dl_tensor *dl_tensor_to_device(dl_tensor *t, dl_device dev);
/* Fills every element of t with value (converted to t's dtype). */
int dl_tensor_fill_(dl_tensor *t, double value);

/* --- single elements (CPU) --------------------------------------------- */
/* The value of a one-element tensor. */
int dl_tensor_item(const dl_tensor *t, double *out);
int dl_tensor_item_i64(const dl_tensor *t, int64_t *out);

/* Bumps the storage's version counter (in-place writes). */
void dl_tensor_bump_version(dl_tensor *t);

/* Hooks the layers above fill in, so the core depends on neither:
 * dl_tensor_release_autograd is set by src/autograd (drops a dying tensor's
 * graph references); dl_copy_across_devices by the backend that owns a
 * non-CPU device (cuda/runtime.cu), and used by dl_tensor_copy_ when dst and
 * src live on different devices.  NULL until set. */
extern void (*dl_tensor_release_autograd)(dl_tensor *t);
extern int (*dl_copy_across_devices)(dl_tensor *dst, dl_tensor *src);

#endif
