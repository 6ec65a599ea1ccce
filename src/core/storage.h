/* storage.h - refcounted flat buffers on a device.  A storage owns its bytes;
 * tensors are views on it.  Device memory other than the CPU's is allocated
 * through an allocator the backend registers, so the core never includes
 * CUDA headers.  Byte counters let the Lua bindings drive the collector. */
#ifndef DL_STORAGE_H
#define DL_STORAGE_H

#include <stddef.h>
#include <stdint.h>

typedef enum { DL_DEVICE_CPU = 0, DL_DEVICE_CUDA = 1 } dl_device_type;

typedef struct {
    dl_device_type type;
    int index;
} dl_device;

#define DL_CPU ((dl_device){DL_DEVICE_CPU, 0})

typedef struct {
    void *(*alloc)(size_t nbytes, int device_index); /* NULL on failure */
    void (*free)(void *ptr, int device_index);
} dl_allocator;

/* Data a kernel derives from a storage's bytes and keeps with the storage
 * (the CPU convolution's weights prepacked into oneDNN's layout): a node the
 * owner embeds as the first member of its own struct.  It records the
 * storage's version it was made from; a lookup after the version moved drops
 * it (until then a stale entry stays, e.g. through a training run between
 * two evaluations).  The storage's list holds one reference, each user one
 * more; free_fn runs when the last goes (the storage died, or the entry was
 * dropped as stale). */
typedef struct dl_derived {
    struct dl_derived *next;
    const void *owner; /* the owner's tag: the address of one of its statics */
    uint64_t version;  /* the storage's version when the data was derived */
    int refs;          /* under the derived-data lock */
    void (*free_fn)(struct dl_derived *d);
} dl_derived;

typedef struct dl_storage {
    void *data;
    size_t nbytes;
    dl_device device;
    int refcount;          /* atomic */
    uint64_t version;      /* bumped by in-place writes; shared by all views */
    uint64_t history_mark; /* version after the last in-place write autograd recorded */
    void (*deleter)(void *data, void *ctx); /* external memory (mmap, host buffers) */
    void *deleter_ctx;
    dl_derived *derived; /* data derived from these bytes (see dl_derived) */
} dl_storage;

/* Called when an allocation fails, before the one retry: the Lua bindings run a
 * full garbage collection here.  `ud` is passed back. */
typedef void (*dl_low_memory_fn)(void *ud);
void dl_set_low_memory_handler(dl_low_memory_fn fn, void *ud);

void dl_register_allocator(dl_device_type type, const dl_allocator *a);
/* Set by a device backend: describes its allocator's state ("N bytes
 * allocated, M reserved") for out-of-memory messages. */
extern const char *(*dl_device_memory_describe)(int device, char *buf, size_t n);
/* Why a CUDA storage cannot be allocated ("no GPU found on this machine",
 * "CUDA is not in this build"), set when the backends start. */
extern const char *dl_device_unavailable_reason;

/* New storage of nbytes (uninitialised) on dev; NULL with an error message. */
dl_storage *dl_storage_new(size_t nbytes, dl_device dev);
/* Wraps memory the caller owns; deleter (may be NULL) runs on the last release. */
dl_storage *dl_storage_wrap(void *data, size_t nbytes, dl_device dev,
                            void (*deleter)(void *, void *), void *ctx);
void dl_storage_retain(dl_storage *s);
void dl_storage_release(dl_storage *s);

/* The first entry of owner on s for which match(d, ctx) holds and that was
 * derived from s's current version, held for the caller (return it with
 * dl_derived_put); NULL when none.  Entries of owner derived from an older
 * version are dropped on the way.  Thread-safe. */
dl_derived *dl_storage_derived_find(dl_storage *s, const void *owner,
                                    int (*match)(const dl_derived *d, const void *ctx),
                                    const void *ctx);
/* s's version now (read before deriving data from its bytes). */
uint64_t dl_storage_version(const dl_storage *s);
/* Adds d (owner, free_fn and version -- dl_storage_version read before the
 * data was derived -- set) to s's list, which takes one reference; the
 * caller keeps the other (dl_derived_put when done). */
void dl_storage_derived_add(dl_storage *s, dl_derived *d);
void dl_derived_put(dl_derived *d);

/* Bytes of storage currently alive, and allocated since the process began. */
int64_t dl_mem_live_bytes(void);
int64_t dl_mem_total_allocated(void);

/* Host buffers, 64-byte aligned, uninitialised (cpu_cache.c).  Blocks of at
 * least DL_CPU_CACHE_MIN bytes are kept after dl_cpu_free and handed out again
 * to a request of about the same size, sparing the page faults and zeroing a
 * fresh mapping costs.  dl_cpu_free takes the size that was asked for.  The
 * cache is off in AddressSanitizer builds and when DLUA_CPU_CACHE=0. */
#define DL_CPU_CACHE_MIN ((size_t)64 << 10)
void *dl_cpu_alloc(size_t nbytes); /* NULL when out of memory, no message */
void dl_cpu_free(void *p, size_t nbytes);
int64_t dl_cpu_cache_empty(void);     /* frees every cached block; bytes freed */
int64_t dl_cpu_cached_bytes(void);    /* bytes held in the cache now */
int dl_cpu_cache_set_enabled(int on); /* returns the previous setting */
/* Host bytes handed out by dl_cpu_alloc and not yet freed (tensor storage
 * and kernels' scratch buffers, at their rounded sizes, whether the cache
 * is on or not), and the most at once since the process began or the last
 * dl_cpu_reset_peak (which sets it to the bytes in use now). */
int64_t dl_cpu_bytes_in_use(void);
int64_t dl_cpu_peak_bytes(void);
void dl_cpu_reset_peak(void);

const char *dl_device_name(dl_device d, char *buf, size_t n); /* "cpu", "cuda:0" */
int dl_device_parse(const char *s, dl_device *out);           /* "cpu", "cuda", "cuda:1" */
int dl_device_equal(dl_device a, dl_device b);

#endif
