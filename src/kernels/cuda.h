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

/* Switches the user sets from Lua (dl.backends): read by the kernels that
 * honour them.  Defaults keep float32 results within float32 rounding of the
 * CPU's: TF32 off, no benchmarking of convolution algorithms. */
typedef struct dl_backend_flags {
    bool allow_tf32;      /* float32 matmul and convolutions may use TF32 tensor cores */
    bool cudnn_benchmark; /* time cuDNN's algorithms per shape and keep the fastest */
} dl_backend_flags;
extern dl_backend_flags dl_flags;

#endif
