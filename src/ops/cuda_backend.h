/* cuda_backend.h - the CUDA backend as the op layer sees it.
 *
 * The backend (cuda/<file>.cu, extern "C" entry points only) fills in function
 * tables at start-up: dl_backends_init() (src/ops/device.c) calls
 * dl_cuda_init() in a CUDA build, and that sets the pointers below only when
 * a GPU is present.  So in a build without CUDA, or on a machine without a
 * GPU, every table is NULL, no CUDA storage can be allocated, and no CUDA
 * tensor can exist: an op that finds a tensor on CUDA may rely on the tables
 * being set, but must still check the one entry it calls (a family may lack
 * a kernel) and refuse with dl_cuda_missing().
 *
 * The dispatch pattern, once per op family (no #ifdef in op bodies):
 *
 *     if (dl_tensor_device(out).type == DL_DEVICE_CUDA) {
 *         if (!dl_cuda_ew || !dl_cuda_ew->binary) return dl_cuda_missing("add");
 *         rc = dl_cuda_ew->binary(op, out, a, b, alpha);
 *     } else {
 *         rc = dl_cpu_binary(op, out, a, b, alpha);
 *     }
 *
 * Kernel entry points mirror their CPU twins (src/cpu/<family>.h): same arguments,
 * device pointers where the CPU kernel takes data pointers, and an int
 * status (0, or -1 with dl_last_error() naming the CUDA call, file and line).
 * Work is queued on the device's compute stream and is asynchronous: results
 * are read back through dl_tensor_copy_ (which synchronises).
 *
 * Each family's table type lives in its own header (cuda_<family>.h) and its
 * instance in cuda/<family>.cu. */
#ifndef DL_OPS_CUDA_BACKEND_H
#define DL_OPS_CUDA_BACKEND_H

#include "core/tensor.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Runtime services: devices, memory, events, pinned host memory. */
typedef struct dl_cuda_runtime {
    int (*device_count)(void);
    int (*set_device)(int device); /* 0-based; -1 with an error if out of range */
    int (*current_device)(void);
    int (*synchronize)(int device); /* waits for all work queued on device */
    /* Caching allocator statistics for one device, in bytes. */
    int64_t (*memory_allocated)(int device);
    int64_t (*memory_reserved)(int device);
    int64_t (*max_memory_allocated)(int device);
    void (*reset_peak_memory_stats)(int device);
    int (*empty_cache)(void); /* returns cached, unused blocks to the driver */
    /* Page-locked host memory (for pinned CPU tensors); NULL with an error. */
    void *(*host_alloc)(size_t nbytes);
    void (*host_free)(void *p);
    /* Copy src into dst where one side is a pinned CPU tensor and the other is
     * on CUDA, both contiguous, same dtype and shape, on the device's copy
     * stream; the compute stream waits for it (an event), the host does not. */
    int (*copy_async)(dl_tensor *dst, dl_tensor *src);
    /* Events for timing: record on the compute stream of the current device. */
    void *(*event_new)(void);
    void (*event_free)(void *ev);
    int (*event_record)(void *ev);
    int (*event_synchronize)(void *ev);
    int (*event_elapsed_ms)(void *start, void *end, double *ms);
    int (*dtype_supported)(dl_dtype dt); /* 1 when kernels handle dt on CUDA */
} dl_cuda_runtime;

/* Set by dl_cuda_init when a GPU is present; NULL otherwise. */
extern const dl_cuda_runtime *dl_cuda_rt;

/* Family tables (types in cuda_<family>.h). */
extern const struct dl_cuda_elementwise_kernels *dl_cuda_ew; /* cuda_elementwise.h */
extern const struct dl_cuda_reduce_kernels *dl_cuda_red;     /* cuda_reduce.h */
extern const struct dl_cuda_index_kernels *dl_cuda_idx;      /* cuda_index.h */
extern const struct dl_cuda_linalg_kernels *dl_cuda_la;      /* cuda_linalg.h */
extern const struct dl_cuda_nn_kernels *dl_cuda_nn;          /* cuda_nn.h */
extern const struct dl_cuda_random_kernels *dl_cuda_rnd;     /* cuda_random.h */

/* Switches the user sets from Lua (dl.backends): read by the kernels that
 * honour them.  Defaults keep float32 results within float32 rounding of the
 * CPU's: TF32 off, no benchmarking of convolution algorithms. */
typedef struct dl_backend_flags {
    bool allow_tf32;      /* float32 matmul and convolutions may use TF32 tensor cores */
    bool cudnn_benchmark; /* time cuDNN's algorithms per shape and keep the fastest */
} dl_backend_flags;
extern dl_backend_flags dl_flags;

/* Sets "<op>: no CUDA kernel for this operation in this build" and returns -1. */
int dl_cuda_missing(const char *op);

/* The device n tensors share, for op's error messages: all CPU -> CPU; any on
 * CUDA -> that device, provided every other one is on the same device or is
 * a 0-dim CPU tensor (a scalar, which CUDA kernels take by value or the op
 * moves).  NULL entries are skipped.  -1 with an error naming op and both
 * devices otherwise. */
int dl_common_device(const char *op, int n, dl_tensor *const *ts, dl_device *out);

/* A 0-dim CPU tensor moved to dev (retained t when already there). */
dl_tensor *dl_scalar_to(dl_tensor *t, dl_device dev);

#endif
