/* storage.c - refcounted buffers (see storage.h). */
#include "storage.h"
#include "error.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static dl_low_memory_fn low_memory_fn;
static void *low_memory_ud;
static const dl_allocator *allocators[2];
static int64_t live_bytes, total_bytes;

/* Set by a device backend: its allocator's state for out-of-memory messages. */
const char *(*dl_device_memory_describe)(int device, char *buf, size_t n);
const char *dl_device_unavailable_reason;

void dl_set_low_memory_handler(dl_low_memory_fn fn, void *ud) {
    low_memory_fn = fn;
    low_memory_ud = ud;
}

void dl_register_allocator(dl_device_type type, const dl_allocator *a) {
    allocators[type] = a;
}

static void *raw_alloc(size_t nbytes, dl_device dev) {
    if (dev.type == DL_DEVICE_CPU) return dl_cpu_alloc(nbytes);
    const dl_allocator *a = allocators[dev.type];
    return a ? a->alloc(nbytes, dev.index) : NULL;
}

static void raw_free(void *p, size_t nbytes, dl_device dev) {
    if (dev.type == DL_DEVICE_CPU)
        dl_cpu_free(p, nbytes);
    else if (allocators[dev.type])
        allocators[dev.type]->free(p, dev.index);
}

dl_storage *dl_storage_new(size_t nbytes, dl_device dev) {
    if (dev.type != DL_DEVICE_CPU && !allocators[dev.type]) {
        char name[32];
        dl_error("%s: %s", dl_device_name(dev, name, sizeof name),
                 dl_device_unavailable_reason ? dl_device_unavailable_reason
                                              : "device not available");
        return NULL;
    }
    dl_storage *s = dl_zalloc(sizeof *s, "out of memory");
    if (!s) return NULL;
    void *p = raw_alloc(nbytes, dev);
    if (!p && dev.type == DL_DEVICE_CPU && dl_cpu_cache_empty() > 0) p = raw_alloc(nbytes, dev);
    if (!p && low_memory_fn) {
        low_memory_fn(low_memory_ud); /* the collected tensors' blocks land in the cache */
        if (dev.type == DL_DEVICE_CPU) dl_cpu_cache_empty();
        p = raw_alloc(nbytes, dev);
    }
    if (!p) {
        free(s);
        char what[160] = "";
        if (dev.type != DL_DEVICE_CPU && dl_device_memory_describe)
            dl_device_memory_describe(dev.index, what, sizeof what);
        char name[32];
        dl_error("out of memory allocating %zu bytes on %s%s%s%s", nbytes,
                 dl_device_name(dev, name, sizeof name), what[0] ? " (" : "", what,
                 what[0] ? ")" : "");
        return NULL;
    }
    s->data = p;
    s->nbytes = nbytes;
    s->device = dev;
    s->refcount = 1;
    __atomic_add_fetch(&live_bytes, (int64_t)nbytes, __ATOMIC_RELAXED);
    __atomic_add_fetch(&total_bytes, (int64_t)nbytes, __ATOMIC_RELAXED);
    return s;
}

dl_storage *dl_storage_wrap(void *data, size_t nbytes, dl_device dev,
                            void (*deleter)(void *, void *), void *ctx) {
    dl_storage *s = dl_zalloc(sizeof *s, "out of memory");
    if (!s) return NULL;
    s->data = data;
    s->nbytes = nbytes;
    s->device = dev;
    s->refcount = 1;
    s->deleter = deleter;
    s->deleter_ctx = ctx;
    return s;
}

void dl_storage_retain(dl_storage *s) {
    __atomic_add_fetch(&s->refcount, 1, __ATOMIC_RELAXED);
}

/* --- derived data ---------------------------------------------------------------
 * One lock for every storage's list: lookups are one per kernel call and
 * lists are short (a few entries per weight). */

static pthread_mutex_t derived_mu = PTHREAD_MUTEX_INITIALIZER;

/* Drops one reference; the caller holds derived_mu.  Returns d when that
 * was the last (the caller frees it after unlocking), else NULL. */
static dl_derived *derived_unref(dl_derived *d) {
    return --d->refs == 0 ? d : NULL;
}

uint64_t dl_storage_version(const dl_storage *s) {
    return __atomic_load_n(&s->version, __ATOMIC_ACQUIRE);
}

dl_derived *dl_storage_derived_find(dl_storage *s, const void *owner,
                                    int (*match)(const dl_derived *d, const void *ctx),
                                    const void *ctx) {
    dl_derived *found = NULL, *dead = NULL;
    uint64_t version = dl_storage_version(s);
    pthread_mutex_lock(&derived_mu);
    for (dl_derived **pp = &s->derived; *pp;) {
        dl_derived *d = *pp;
        if (d->owner == owner && d->version != version) {
            *pp = d->next; /* stale: off the list */
            if (derived_unref(d)) {
                d->next = dead;
                dead = d;
            }
            continue;
        }
        if (!found && d->owner == owner && match(d, ctx)) {
            found = d;
            d->refs++;
        }
        pp = &d->next;
    }
    pthread_mutex_unlock(&derived_mu);
    while (dead) {
        dl_derived *next = dead->next;
        dead->free_fn(dead);
        dead = next;
    }
    return found;
}

void dl_storage_derived_add(dl_storage *s, dl_derived *d) {
    d->refs = 2; /* the list's and the caller's */
    pthread_mutex_lock(&derived_mu);
    d->next = s->derived;
    s->derived = d;
    pthread_mutex_unlock(&derived_mu);
}

void dl_derived_put(dl_derived *d) {
    if (!d) return;
    pthread_mutex_lock(&derived_mu);
    dl_derived *dead = derived_unref(d);
    pthread_mutex_unlock(&derived_mu);
    if (dead) dead->free_fn(dead);
}

/* Drops the list's references of a dying storage (no other thread can
 * reach its list now, but a user may still hold an entry). */
static void derived_release_all(dl_storage *s) {
    dl_derived *d = s->derived;
    s->derived = NULL;
    while (d) {
        dl_derived *next = d->next;
        dl_derived_put(d);
        d = next;
    }
}

void dl_storage_release(dl_storage *s) {
    if (!s || __atomic_sub_fetch(&s->refcount, 1, __ATOMIC_ACQ_REL) != 0) return;
    if (s->derived) derived_release_all(s);
    if (s->deleter) {
        s->deleter(s->data, s->deleter_ctx);
    } else if (s->data || s->nbytes) {
        raw_free(s->data, s->nbytes, s->device);
        __atomic_sub_fetch(&live_bytes, (int64_t)s->nbytes, __ATOMIC_RELAXED);
    }
    free(s);
}

int64_t dl_mem_live_bytes(void) {
    return __atomic_load_n(&live_bytes, __ATOMIC_RELAXED);
}
int64_t dl_mem_total_allocated(void) {
    return __atomic_load_n(&total_bytes, __ATOMIC_RELAXED);
}

const char *dl_device_name(dl_device d, char *buf, size_t n) {
    if (d.type == DL_DEVICE_CPU)
        snprintf(buf, n, "cpu");
    else
        snprintf(buf, n, "cuda:%d", d.index);
    return buf;
}

int dl_device_parse(const char *s, dl_device *out) {
    if (strcmp(s, "cpu") == 0) {
        *out = DL_CPU;
        return 0;
    }
    if (strncmp(s, "cuda", 4) == 0) {
        int idx = 0;
        if (s[4] == ':') {
            char *end;
            long v = strtol(s + 5, &end, 10);
            if (*end || end == s + 5 || v < 0 || v > 1024)
                return dl_error("invalid device '%s' (expected 'cpu', 'cuda' or 'cuda:N')", s);
            idx = (int)v;
        } else if (s[4]) {
            return dl_error("invalid device '%s' (expected 'cpu', 'cuda' or 'cuda:N')", s);
        }
        *out = (dl_device){DL_DEVICE_CUDA, idx};
        return 0;
    }
    return dl_error("invalid device '%s' (expected 'cpu', 'cuda' or 'cuda:N')", s);
}

int dl_device_equal(dl_device a, dl_device b) {
    return a.type == b.type && a.index == b.index;
}
