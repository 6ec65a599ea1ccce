/* kernels/cuda.h - the CUDA backend as the layers above it see it: the
 * runtime table (devices, memory, events, pinned host memory), the switches
 * the user sets from Lua, and the contract every family's CUDA table
 * (kernels/<family>.h) follows.
 *
 * The backend (cuda/<family>.cu, extern "C" entry points only) fills in the
 * tables at start-up: dl_backends_init() (src/ops/device.c) calls
 * dl_cuda_init() in a CUDA build, and that sets the pointers only when a GPU
 * is present.  So in a build without CUDA, or on a machine without a GPU,
 * every table is NULL, no CUDA storage can be allocated, and no CUDA tensor
 * can exist: an op that finds a tensor on CUDA may rely on the tables being
 * set, but must still check the one entry it calls (a family may lack a
 * kernel) and refuse with dl_cuda_missing() (ops/device.h).
 *
 * The dispatch pattern, once per op family (no #ifdef in op bodies):
 *
 *     if (dl_tensor_device(out).type == DL_DEVICE_CUDA) {
 *         if (!dl_cuda_elementwise || !dl_cuda_elementwise->binary)
 *             return dl_cuda_missing("add");
 *         rc = dl_cuda_elementwise->binary(op, out, a, b, alpha);
 *     } else {
 *         rc = dl_cpu_binary(op, out, a, b, alpha);
 *     }
 *
 * Kernel entry points mirror their CPU twins (src/cpu/<family>.h): the same
 * arguments and the same parameter structs (kernels/<family>.h), device
 * pointers where the CPU kernel takes data pointers, and an int status (0, or
 * -1 with dl_last_error() naming the CUDA call, file and line).  Work is
 * queued on the device's compute stream and is asynchronous: results are read
 * back through dl_tensor_copy_ (which synchronises). */
#ifndef DL_KERNELS_CUDA_H
#define DL_KERNELS_CUDA_H

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
     * stream; the compute stream waits for it (an event), the host does not.
     * With done set, *done is a new event recorded when the copy completes
     * (the caller frees it with event_free). */
    int (*copy_async)(dl_tensor *dst, dl_tensor *src, void **done);
    /* Events for timing: record on the compute stream of the current device. */
    void *(*event_new)(void);
    void (*event_free)(void *ev);
    int (*event_record)(void *ev);
    int (*event_synchronize)(void *ev);
    int (*event_query)(void *ev); /* 1 when its work is done, 0 when not yet, -1 error */
    int (*event_elapsed_ms)(void *start, void *end, double *ms);
    int (*dtype_supported)(dl_dtype dt); /* 1 when kernels handle dt on CUDA */

    /* Host synchronisation.  Every call that makes the host wait for the GPU
     * (synchronize, event_synchronize, reading device memory, a copy from
     * pageable host memory) goes through one place in cuda/runtime.cu, which
     * counts it here, refuses it while a CUDA graph is being captured, and
     * after the wait reports a check recorded on the device (below). */
    int64_t (*sync_count)(void);
    /* Why the i-th most recent synchronisation happened (0: the last), for
     * the last 16; NULL past them. */
    const char *(*sync_reason)(int i);

    /* Checks found on the device: a kernel that finds bad input cannot raise,
     * so the first bad finding is recorded on the device and reported as the
     * error of the next synchronisation on that device (loss:item(), :cpu(),
     * dl.cuda.synchronize()); with dl_flags.cuda_sync_checks it is waited for
     * and reported at once.  check_first_bad records `kind` when *first_bad
     * (a device int64) is below n, with values[*first_bad] as the value found.
     * op must be a string literal (it is kept until the report). */
    int (*check_first_bad)(const char *op, int kind, const int64_t *first_bad,
                           const int64_t *values, int64_t n, int64_t limit, int64_t aux);

    /* CUDA graphs (cuda/graph.cu): capture on a side stream of the current
     * device into a private memory pool (blocks allocated while capturing
     * serve only that graph until it is freed), replay on the compute stream.
     * graph_new returns NULL with an error. */
    void *(*graph_new)(void);
    void (*graph_free)(void *g); /* ends a capture in progress; releases the pool */
    int (*graph_capture_begin)(void *g);
    int (*graph_capture_end)(void *g); /* -1 when the capture was invalidated */
    int (*graph_replay)(void *g);
    int (*capturing)(void); /* 1 while the current device captures a graph */
} dl_cuda_runtime;

/* What a check found on the device (check_first_bad's kind). */
enum {
    DL_CHECK_CLASS_TARGET = 1, /* value: the target; limit: classes; aux: ignore_index */
    DL_CHECK_POOL_INDEX = 2,   /* value: the index; limit: input plane size */
    DL_CHECK_CLASS_LABEL = 3,  /* DL_CHECK_CLASS_TARGET on labels minus one (reported 1-based) */
};

/* Set by dl_cuda_init when a GPU is present; NULL otherwise. */
extern const dl_cuda_runtime *dl_cuda_rt;

/* Switches the user sets from Lua (dl.backends): read by the kernels that
 * honour them.  Defaults keep float32 results within float32 rounding of the
 * CPU's: TF32 off, no benchmarking of convolution algorithms.  cudnn_graph
 * starts from $DLUA_CUDNN_GRAPH (1 turns it on; off when unset, until a GPU run
 * has measured it), cuda_sync_checks from
 * $DLUA_CUDA_SYNC_CHECKS (off when unset). */
typedef struct dl_backend_flags {
    bool allow_tf32;       /* float32 matmul and convolutions may use TF32 tensor cores */
    bool cudnn_benchmark;  /* time cuDNN's algorithms per shape and keep the fastest */
    bool cudnn_graph;      /* convolutions through cuDNN's graph API (else the legacy API) */
    bool cuda_sync_checks; /* wait for device-side checks at once (debugging) */
} dl_backend_flags;
extern dl_backend_flags dl_flags;

#endif
