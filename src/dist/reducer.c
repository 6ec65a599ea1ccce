/* reducer.c - DistributedDataParallel's bucketed, overlapped gradient
 * all-reduce (see reducer.h).
 *
 * Invariants: a bucket's all-reduce starts only when every parameter in it
 * is ready and every lower-numbered bucket has started, so all ranks issue
 * the same collectives in the same order; an armed reducer disarms at the end
 * of the backward it synchronised, successful or not; all live reducers are
 * on one list reached from the single set of autograd hooks. */
#include "reducer.h"

#include "autograd/autograd.h"
#include "dist.h"
#include "ops/elementwise.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    dl_tensor *buf; /* flat: numel elements of one dtype on one device */
    int n, *idx;    /* parameter indices, in buffer order */
    int pending;    /* parameters not yet ready in this backward */
    dl_dist_work *work;
} bucket;

typedef struct {
    dl_tensor *t;
    char *name;
    int bucket;
    int64_t offset; /* in the bucket, elements */
    int edges;      /* gradient contributions still to come in this backward */
    bool seen, ready;
} param;

struct dl_reducer {
    int n;
    param *p;
    dl_tensor **sorted; /* parameter tensors by address, for lookup */
    int *sorted_idx;
    int nb;
    bucket *b;
    int next_launch;
    int64_t cap, first_cap;
    bool find_unused, armed, active, rebuilt;
    bool as_view; /* gradient_as_bucket_view: each .grad left as its bucket view */
    bool solo;    /* world size 1: gradients are final as they are, nothing is copied */
    int *arrival; /* order in which gradients became ready (first iteration) */
    int n_arrived;
    dl_reducer_stats stats;
    dl_reducer *next_r;
};

static dl_reducer *live; /* every reducer, for the hooks */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int find_param(const dl_reducer *r, const dl_tensor *t) {
    int lo = 0, hi = r->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (r->sorted[mid] == t) return r->sorted_idx[mid];
        if ((uintptr_t)r->sorted[mid] < (uintptr_t)t)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

/* --- buckets ------------------------------------------------------------------ */

static void free_buckets(dl_reducer *r) {
    for (int i = 0; i < r->nb; i++) {
        dl_dist_work_free(r->b[i].work);
        dl_tensor_release(r->b[i].buf);
        free(r->b[i].idx);
    }
    free(r->b);
    r->b = NULL;
    r->nb = 0;
}

/* Fills buckets with parameters in `order` (n indices). */
static int build_buckets(dl_reducer *r, const int *order) {
    free_buckets(r);
    r->b = calloc((size_t)r->n, sizeof *r->b);
    if (!r->b) return dl_error("DistributedDataParallel: out of memory");
    int64_t bytes = 0;
    for (int k = 0; k < r->n; k++) {
        param *p = &r->p[order[k]];
        int64_t sz = dl_tensor_numel(p->t) * (int64_t)dl_tensor_itemsize(p->t);
        bucket *cur = r->nb ? &r->b[r->nb - 1] : NULL;
        int64_t cap = r->nb == 1 ? r->first_cap : r->cap;
        bool fits = cur && bytes + sz <= cap && cur->n > 0;
        if (cur) {
            param *q = &r->p[cur->idx[0]];
            dl_device a = dl_tensor_device(q->t), b = dl_tensor_device(p->t);
            fits = fits && q->t->dtype == p->t->dtype && a.type == b.type && a.index == b.index;
        }
        if (!cur || !fits) {
            cur = &r->b[r->nb++];
            cur->idx = malloc((size_t)r->n * sizeof *cur->idx);
            if (!cur->idx) return dl_error("DistributedDataParallel: out of memory");
            bytes = 0;
        }
        p->bucket = (int)(cur - r->b);
        p->offset = bytes / (int64_t)dl_tensor_itemsize(p->t);
        cur->idx[cur->n++] = order[k];
        bytes += sz;
    }
    for (int i = 0; i < r->nb; i++) {
        param *q = &r->p[r->b[i].idx[0]];
        int64_t numel = 0;
        for (int j = 0; j < r->b[i].n; j++) numel += dl_tensor_numel(r->p[r->b[i].idx[j]].t);
        r->b[i].buf = dl_tensor_zeros(1, &numel, q->t->dtype, dl_tensor_device(q->t));
        if (!r->b[i].buf) return -1;
    }
    return 0;
}

/* The view of bucket memory that holds parameter i's gradient, laid out as
 * the parameter is (a channels-last weight's gradient copies in as one flat
 * block, and a .grad left as this view has the layout autograd gives). */
static dl_tensor *grad_view(dl_reducer *r, int i) {
    param *p = &r->p[i];
    int64_t strides[DL_MAX_DIMS];
    dl_tensor_layout_strides(p->t, strides);
    return dl_tensor_as_strided(r->b[p->bucket].buf, p->t->ndim, p->t->shape, strides, p->offset);
}

/* v = g / world size: the average is taken on the way in (PyTorch's order),
 * so the all-reduce is a plain sum and no pass over the buckets follows. */
static int copy_scaled(dl_tensor *v, dl_tensor *g) {
    dl_tensor *n = dl_tensor_scalar((double)dl_dist_world_size(), v->dtype);
    int rc = n ? dl_binary_out(DL_BINARY_DIV, v, g, n, 1) : -1;
    dl_tensor_release(n);
    return rc;
}

/* --- one synchronised backward -------------------------------------------- */

static int progress(dl_reducer *r) {
    for (int i = 0; i < r->next_launch; i++)
        if (r->b[i].work && dl_dist_work_test(r->b[i].work) < 0) return -1;
    return 0;
}

static int launch_ready(dl_reducer *r) {
    while (r->next_launch < r->nb && r->b[r->next_launch].pending == 0) {
        bucket *b = &r->b[r->next_launch];
        if (!r->solo && !(b->work = dl_dist_all_reduce_start(b->buf, DL_REDUCE_SUM))) return -1;
        r->next_launch++;
    }
    return progress(r);
}

/* Parameter i's gradient is final: into its bucket. */
static int mark_ready(dl_reducer *r, int i) {
    param *p = &r->p[i];
    double t0 = now_s();
    p->ready = true;
    if (!r->rebuilt) r->arrival[r->n_arrived++] = i;
    int rc = 0;
    if (!r->solo) {
        dl_tensor *v = grad_view(r, i);
        rc = !v ? -1 : p->t->grad ? copy_scaled(v, p->t->grad) : dl_tensor_fill_(v, 0);
        dl_tensor_release(v);
    }
    r->stats.copy_s += now_s() - t0;
    if (rc) return -1;
    r->b[p->bucket].pending--;
    return launch_ready(r);
}

static void on_begin(void *ud) {
    (void)ud;
    for (dl_reducer *r = live; r; r = r->next_r) {
        if (!r->armed) continue;
        r->active = false;
        for (int i = 0; i < r->n; i++) r->p[i].edges = 0, r->p[i].seen = r->p[i].ready = false;
        for (int b = 0; b < r->nb; b++) r->b[b].pending = r->b[b].n;
        r->next_launch = 0;
        r->n_arrived = 0;
    }
}

static void on_leaf_edge(void *ud, dl_tensor *leaf) {
    (void)ud;
    for (dl_reducer *r = live; r; r = r->next_r) {
        if (!r->armed) continue;
        int i = find_param(r, leaf);
        if (i < 0) continue;
        r->active = true;
        r->p[i].edges++;
        r->p[i].seen = true;
    }
}

static int on_leaf_grad(void *ud, dl_tensor *leaf) {
    (void)ud;
    for (dl_reducer *r = live; r; r = r->next_r) {
        if (!r->active) continue;
        int i = find_param(r, leaf);
        if (i >= 0 && --r->p[i].edges == 0 && mark_ready(r, i)) return -1;
    }
    return 0;
}

/* after every backward node: the transport advances in-flight buckets */
static int on_node_done(void *ud) {
    (void)ud;
    for (dl_reducer *r = live; r; r = r->next_r)
        if (r->active && progress(r)) return -1;
    return 0;
}

/* Names (up to 4) of parameters that got no gradient. */
static int unused_error(dl_reducer *r) {
    char names[512] = "";
    int count = 0;
    size_t len = 0;
    for (int i = 0; i < r->n; i++) {
        if (r->p[i].ready) continue;
        if (count++ < 4 && len < sizeof names - 1)
            len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", count > 1 ? ", " : "",
                                    r->p[i].name);
    }
    if (count > 4 && len < sizeof names - 1)
        snprintf(names + len, sizeof names - len, ", ... (%d in all)", count);
    return dl_error("DistributedDataParallel: rank %d: parameters received no gradient in "
                    "this backward: %s (pass {find_unused_parameters = true} when a forward "
                    "does not use every parameter)",
                    dl_dist_rank(), names);
}

/* Rank 0's arrival order, broadcast; then buckets in that order. */
static int rebuild(dl_reducer *r) {
    int64_t n = r->n;
    dl_tensor *ord = dl_tensor_empty(1, &n, DL_DTYPE_I64, DL_CPU);
    if (!ord) return -1;
    int64_t *o = dl_tensor_data_ptr(ord);
    for (int i = 0; i < r->n; i++) o[i] = r->arrival[i];
    int rc = dl_dist_broadcast(ord, 0);
    for (int i = 0; rc == 0 && i < r->n; i++) r->arrival[i] = (int)o[i];
    dl_tensor_release(ord);
    if (rc == 0) rc = build_buckets(r, r->arrival);
    r->rebuilt = true;
    return rc;
}

static int finish(dl_reducer *r) {
    bool unused = false;
    for (int i = 0; i < r->n; i++) unused |= !r->p[i].ready;
    if (unused && !r->find_unused) {
        for (int b = 0; b < r->next_launch; b++) { /* keep the ranks in step */
            if (r->b[b].work) dl_dist_work_wait(r->b[b].work);
            r->b[b].work = NULL;
        }
        return unused_error(r);
    }
    for (int i = 0; i < r->n; i++)
        if (!r->p[i].ready && mark_ready(r, i)) return -1;
    double t0 = now_s();
    for (int b = 0; b < r->nb; b++) {
        int rc = r->b[b].work ? dl_dist_work_wait(r->b[b].work) : 0;
        r->b[b].work = NULL;
        if (rc) return -1;
    }
    r->stats.wait_s += now_s() - t0;
    t0 = now_s();
    for (int i = 0; i < r->n; i++) {
        param *p = &r->p[i];
        if (r->solo && p->t->grad) continue;
        dl_tensor *v = grad_view(r, i); /* solo: zeros, for a parameter that got no gradient */
        if (!v) return -1;
        int rc = 0;
        if (r->as_view) { /* the view itself: its reference moves to .grad */
            dl_tensor_release(p->t->grad);
            p->t->grad = v;
            continue;
        }
        if (p->t->grad) {
            rc = dl_tensor_copy_(p->t->grad, v);
        } else {
            p->t->grad = dl_tensor_clone(v);
            rc = p->t->grad ? 0 : -1;
        }
        dl_tensor_release(v);
        if (rc) return -1;
    }
    r->stats.copy_s += now_s() - t0;
    r->stats.iterations++;
    if (!r->rebuilt) return rebuild(r);
    return 0;
}

static int on_end(void *ud, int status) {
    (void)ud;
    for (dl_reducer *r = live; r; r = r->next_r) {
        if (!r->active) continue;
        r->armed = r->active = false;
        if (status == 0) {
            status = finish(r);
        } else {
            for (int b = 0; b < r->nb; b++) {
                dl_dist_work_free(r->b[b].work);
                r->b[b].work = NULL;
            }
        }
    }
    return status;
}

static const dl_autograd_hooks reducer_hooks = {on_begin,     on_leaf_edge, on_leaf_grad,
                                                on_node_done, on_end,       NULL};

/* --- lifetime --------------------------------------------------------------- */

static int by_address(const void *a, const void *b) {
    uintptr_t x = (uintptr_t) * (dl_tensor *const *)a, y = (uintptr_t) * (dl_tensor *const *)b;
    return x < y ? -1 : x > y;
}

dl_reducer *dl_reducer_new(int n, dl_tensor *const *params, const char *const *names,
                           int64_t cap_bytes, int64_t first_cap_bytes, bool find_unused,
                           bool as_view) {
    if (!dl_dist_is_initialized()) {
        dl_error("DistributedDataParallel: the process group is not initialized (call "
                 "dist.init_process_group first)");
        return NULL;
    }
    if (n <= 0) {
        dl_error("DistributedDataParallel: the module has no parameters that require grad");
        return NULL;
    }
    dl_reducer *r = calloc(1, sizeof *r);
    if (!r) goto oom;
    r->n = n;
    r->cap = cap_bytes > 0 ? cap_bytes : 1;
    r->first_cap = first_cap_bytes < r->cap ? first_cap_bytes : r->cap;
    r->find_unused = find_unused;
    r->as_view = as_view;
    r->solo = dl_dist_world_size() == 1;
    r->p = calloc((size_t)n, sizeof *r->p);
    r->sorted = calloc((size_t)n, sizeof *r->sorted);
    r->sorted_idx = calloc((size_t)n, sizeof *r->sorted_idx);
    r->arrival = calloc((size_t)n, sizeof *r->arrival);
    if (!r->p || !r->sorted || !r->sorted_idx || !r->arrival) goto oom;
    for (int i = 0; i < n; i++) {
        r->p[i].t = dl_tensor_retain(params[i]);
        r->p[i].name = strdup(names[i]);
        if (!r->p[i].name) goto oom;
        r->sorted[i] = params[i];
    }
    qsort(r->sorted, (size_t)n, sizeof *r->sorted, by_address);
    for (int i = 0; i < n; i++) {
        if (i > 0 && r->sorted[i] == r->sorted[i - 1]) {
            dl_reducer_free(r);
            dl_error("DistributedDataParallel: a parameter is listed twice");
            return NULL;
        }
        for (int j = 0; j < n; j++)
            if (params[j] == r->sorted[i]) r->sorted_idx[i] = j;
    }
    for (int i = 0; i < n; i++) r->arrival[i] = n - 1 - i; /* reverse parameter order */
    if (build_buckets(r, r->arrival)) {
        dl_reducer_free(r);
        return NULL;
    }
    r->next_r = live;
    live = r;
    dl_autograd_set_hooks(&reducer_hooks);
    return r;
oom:
    dl_reducer_free(r);
    dl_error("DistributedDataParallel: out of memory");
    return NULL;
}

void dl_reducer_free(dl_reducer *r) {
    if (!r) return;
    for (dl_reducer **q = &live; *q; q = &(*q)->next_r)
        if (*q == r) {
            *q = r->next_r;
            break;
        }
    if (!live) dl_autograd_set_hooks(NULL);
    free_buckets(r);
    for (int i = 0; r->p && i < r->n; i++) {
        dl_tensor_release(r->p[i].t);
        free(r->p[i].name);
    }
    free(r->p);
    free(r->sorted);
    free(r->sorted_idx);
    free(r->arrival);
    free(r);
}

void dl_reducer_prepare(dl_reducer *r) {
    r->armed = true;
}

void dl_reducer_get_stats(const dl_reducer *r, dl_reducer_stats *s) {
    *s = r->stats;
    s->n_buckets = r->nb;
    s->rebuilt = r->rebuilt;
}

int dl_reducer_bucket(const dl_reducer *r, int b, int *idx, int max) {
    if (b < 0 || b >= r->nb) return 0;
    int k = r->b[b].n < max ? r->b[b].n : max;
    if (k > 0) memcpy(idx, r->b[b].idx, (size_t)k * sizeof *idx);
    return r->b[b].n;
}
