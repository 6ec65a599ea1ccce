/* api.c - the state-free half of the public API (dlua.h): host buffers in and
 * out of tensors and the accessors a host reads a tensor through.  The
 * library's own code uses tensor.h directly; these functions check everything
 * a host can get wrong and answer with NULL and dl_last_error(), never a
 * crash.  (dl_state_* lives in src/lua/l_state.c.) */
#include "tensor.h"
#include "parallel.h"
#include "dlua.h"

#include <string.h>

/* The host's dtype enum in dlua.h mirrors dtype.h's; a change to one must
 * change the other (tests/embed checks every name from the host side). */
_Static_assert(DL_DTYPE_F32 == 0 && DL_DTYPE_F64 == 1 && DL_DTYPE_F16 == 2 && DL_DTYPE_BF16 == 3 &&
                   DL_DTYPE_I64 == 4 && DL_DTYPE_I32 == 5 && DL_DTYPE_U8 == 6 &&
                   DL_DTYPE_BOOL == 7 && DL_DTYPE_COUNT == 8,
               "dlua.h's dl_dtype must match core/dtype.h");

/* Checks a host-given dtype and shape; *nbytes gets the byte size. */
static int check_layout(const char *op, dl_dtype dtype, int ndim, const int64_t *shape,
                        size_t *nbytes) {
    if ((int)dtype < 0 || dtype >= DL_DTYPE_COUNT)
        return dl_error("%s: invalid dtype %d", op, (int)dtype);
    if (ndim < 0 || ndim > DL_MAX_DIMS)
        return dl_error("%s: %d dimensions given; 0 to %d are supported", op, ndim, DL_MAX_DIMS);
    if (ndim > 0 && !shape) return dl_error("%s: shape is NULL for %d dimensions", op, ndim);
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return dl_error("%s: negative size %lld in dimension %d", op, (long long)shape[i],
                            i + 1);
        if (shape[i] && numel > INT64_MAX / 16 / shape[i])
            return dl_error("%s: shape too large", op);
        numel *= shape[i];
    }
    *nbytes = (size_t)numel * dl_dtype_size(dtype);
    return 0;
}

dl_tensor *dl_tensor_from_data(const void *data, dl_dtype dtype, int ndim, const int64_t *shape) {
    size_t nbytes;
    if (check_layout("dl_tensor_from_data", dtype, ndim, shape, &nbytes)) return NULL;
    if (!data && nbytes) {
        dl_error("dl_tensor_from_data: data is NULL for %zu bytes", nbytes);
        return NULL;
    }
    dl_tensor *t = dl_tensor_empty(ndim, shape, dtype, DL_CPU);
    if (t && nbytes) memcpy(dl_tensor_data_ptr(t), data, nbytes);
    return t;
}

static void keep_buffer(void *data, void *ctx) {
    (void)data;
    (void)ctx;
}

dl_tensor *dl_tensor_wrap(void *data, dl_dtype dtype, int ndim, const int64_t *shape,
                          void (*release)(void *data, void *ctx), void *ctx) {
    size_t nbytes;
    if (check_layout("dl_tensor_wrap", dtype, ndim, shape, &nbytes)) return NULL;
    if (!data && nbytes) {
        dl_error("dl_tensor_wrap: data is NULL for %zu bytes", nbytes);
        return NULL;
    }
    if ((uintptr_t)data % dl_dtype_size(dtype) != 0) {
        dl_error("dl_tensor_wrap: data %p is not aligned to the %zu-byte elements of %s", data,
                 dl_dtype_size(dtype), dl_dtype_name(dtype));
        return NULL;
    }
    /* a storage without a deleter would free() the buffer: keep_buffer instead */
    dl_storage *s = dl_storage_wrap(data, nbytes, DL_CPU, release ? release : keep_buffer, ctx);
    if (!s) return NULL;
    int64_t strides[DL_MAX_DIMS];
    dl_contiguous_strides(ndim, shape, strides);
    dl_tensor *t = dl_tensor_new_view(s, 0, ndim, shape, strides, dtype);
    if (!t) s->deleter = keep_buffer; /* failure: the buffer stays the host's */
    dl_storage_release(s);            /* the view holds the storage now */
    return t;
}

int dl_tensor_ndim(const dl_tensor *t) {
    return t ? t->ndim : 0;
}

const int64_t *dl_tensor_shape(const dl_tensor *t) {
    return t ? t->shape : NULL;
}

dl_dtype dl_tensor_dtype(const dl_tensor *t) {
    return t ? t->dtype : DL_DTYPE_F32;
}

void *dl_tensor_data(dl_tensor *t) {
    if (!t) {
        dl_error("dl_tensor_data: tensor is NULL");
        return NULL;
    }
    if (t->storage->device.type != DL_DEVICE_CPU) {
        char dev[32];
        dl_error("dl_tensor_data: the tensor is on %s; move it to the CPU first (x:cpu())",
                 dl_device_name(t->storage->device, dev, sizeof dev));
        return NULL;
    }
    if (!dl_tensor_is_contiguous(t)) {
        dl_error("dl_tensor_data: the tensor is not contiguous; use dl_tensor_contiguous (or "
                 "x:contiguous() in Lua) first");
        return NULL;
    }
    return dl_tensor_data_ptr(t);
}

void dl_tensor_mark_changed(dl_tensor *t) {
    if (t) dl_tensor_bump_version(t);
}

const char *dl_version(void) {
    return DL_VERSION;
}
