/* loader.c - worker threads, the in-flight batch window and batch assembly
 * (see loader.h).
 *
 * Tasks are samples numbered in epoch order; task t belongs to batch
 * t / batch_size, slot t % batch_size.  Tasks are handed out in order, and
 * only for batches inside the window [consumed, consumed + window), so the
 * main thread always finds its next batch being worked on.  Every field of
 * the loader is guarded by `mu`; a sample is processed without the lock and
 * its result recorded only if the epoch generation (`gen`) is unchanged. */
#include "loader.h"
#include "io/codec.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t b;    /* batch number held, -1 when free */
    int64_t size; /* samples in the batch */
    int64_t done;
    dl_tensor *data;
    dl_tensor **items;
    dl_tensor *labels, *indices;
    char *err;
    uint8_t *bad;
    char **warn;
    int nwarn;
} slot;

struct dl_loader {
    dl_loader_config cfg;
    int64_t *map;
    int64_t nbatches, ntasks_full;
    int64_t *order;
    uint64_t epoch, gen;
    int running;
    int64_t next_task, ntasks, consumed;
    int window;
    slot *slots;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    pthread_t *threads;
    int nthreads, quit, busy;
};

/* --- slots -------------------------------------------------------------------- */

static void slot_clear(slot *s) {
    /* a slot holds the parts of a batch: they are released alike */
    dl_loader_batch parts = {.data = s->data,
                             .items = s->items,
                             .nitems = s->size,
                             .labels = s->labels,
                             .indices = s->indices,
                             .nwarn = s->nwarn,
                             .warnings = s->warn};
    dl_loader_batch_clear(&parts);
    free(s->err);
    free(s->bad);
    memset(s, 0, sizeof *s);
    s->b = -1;
}

/* Prepares the slot of batch b (under the lock). */
static int slot_init(dl_loader *l, int64_t b) {
    slot *s = &l->slots[b % l->window];
    slot_clear(s);
    int64_t bs = l->cfg.batch_size;
    s->b = b;
    s->size = l->ntasks - b * bs < bs ? l->ntasks - b * bs : bs;
    s->labels = dl_tensor_zeros(1, &s->size, DL_DTYPE_I64, DL_CPU);
    s->indices = dl_tensor_zeros(1, &s->size, DL_DTYPE_I64, DL_CPU);
    s->bad = calloc((size_t)s->size, 1);
    if (l->cfg.per_sample) s->items = calloc((size_t)s->size, sizeof(dl_tensor *));
    if (!s->labels || !s->indices || !s->bad || (l->cfg.per_sample && !s->items)) {
        s->err = strdup("DataLoader: out of memory");
        return -1;
    }
    return 0;
}

/* --- one sample ----------------------------------------------------------------- */

typedef struct {
    dl_loader *l;
    slot *s;
    int64_t k;
    uint64_t gen;
    const char *path;
} sample_ctx;

/* Destination of a sample: its slot of the batch tensor, which the first
 * finished sample allocates. */
static dl_tensor *sample_dst(void *vctx, const int64_t *shape, dl_dtype dtype) {
    sample_ctx *c = vctx;
    dl_loader *l = c->l;
    dl_tensor *r = NULL;
    pthread_mutex_lock(&l->mu);
    slot *s = c->s;
    if (c->gen != l->gen) {
        dl_error("DataLoader: epoch cancelled");
    } else if (!s->data) {
        int64_t full[4] = {s->size, shape[0], shape[1], shape[2]};
        s->data = dl_tensor_empty(4, full, dtype, DL_CPU);
        if (s->data) r = dl_tensor_select(s->data, 0, c->k);
    } else if (s->data->dtype != dtype || s->data->shape[1] != shape[0] ||
               s->data->shape[2] != shape[1] || s->data->shape[3] != shape[2]) {
        char a[64], b[64];
        dl_error("DataLoader: '%s' gives a %s image of shape %s but its batch holds %s images of "
                 "shape %s (the transform must make every image the same size)",
                 c->path, dl_dtype_name(dtype), dl_shape_str(3, shape, a, sizeof a),
                 dl_dtype_name(s->data->dtype), dl_shape_str(3, s->data->shape + 1, b, sizeof b));
    } else {
        r = dl_tensor_select(s->data, 0, c->k);
    }
    pthread_mutex_unlock(&l->mu);
    return r;
}

/* Error text for a failed sample: the library's message, with the file named
 * when the message does not already name it. */
static char *sample_error(const char *path) {
    const char *m = dl_last_error();
    size_t n = strlen(m) + strlen(path) + 32;
    char *s = malloc(n);
    if (!s) return NULL;
    if (strstr(m, path))
        snprintf(s, n, "%s", m);
    else
        snprintf(s, n, "DataLoader: '%s': %s", path, m);
    return s;
}

/* Processes task t (without the lock held). */
static void process(dl_loader *l, int64_t t, slot *s, uint64_t gen) {
    int64_t bs = l->cfg.batch_size, k = t % bs;
    int64_t pos = l->order[t];
    int64_t idx = l->map ? l->map[pos] : pos;
    const char *path = l->cfg.index->paths[idx];
    dl_clear_error();
    uint8_t *buf = NULL;
    size_t n = 0;
    dl_tensor *out = NULL;
    int rc = dl_file_read(path, &buf, &n);
    if (!rc) {
        dl_sample_rng rng;
        dl_sample_rng_init(&rng, l->cfg.seed, l->epoch, (uint64_t)pos);
        sample_ctx c = {l, s, k, gen, path};
        dl_clear_error();
        rc = dl_pipeline_run_encoded(l->cfg.pipe, buf, n, path, l->cfg.channels, &rng,
                                     l->cfg.per_sample ? NULL : sample_dst, &c, &out);
        dl_sample_rng_free(&rng);
    }
    free(buf);
    char *msg = rc ? sample_error(path) : NULL;
    pthread_mutex_lock(&l->mu);
    if (gen == l->gen && s->b == t / bs) {
        if (rc) {
            if (l->cfg.skip_bad && s->bad) {
                s->bad[k] = 1;
                char **w = realloc(s->warn, sizeof(char *) * (size_t)(s->nwarn + 1));
                if (w) {
                    s->warn = w;
                    s->warn[s->nwarn++] = msg;
                    msg = NULL;
                }
            } else if (!s->err) {
                s->err = msg ? msg : strdup("DataLoader: out of memory");
                msg = NULL;
            }
        } else if (l->cfg.per_sample && s->items) {
            s->items[k] = out;
            out = NULL;
        }
        if (s->labels) ((int64_t *)s->labels->storage->data)[k] = l->cfg.index->labels[idx];
        if (s->indices) ((int64_t *)s->indices->storage->data)[k] = pos;
        s->done++;
        if (s->done == s->size) pthread_cond_broadcast(&l->done);
    }
    pthread_mutex_unlock(&l->mu);
    free(msg);
    dl_tensor_release(out);
}

/* Hands out the next task if allowed (lock held): its number, or -1. */
static int64_t take_task(dl_loader *l, slot **s) {
    if (!l->running || l->next_task >= l->ntasks) return -1;
    int64_t t = l->next_task, b = t / l->cfg.batch_size;
    if (b >= l->consumed + l->window) return -1;
    if (t % l->cfg.batch_size == 0) slot_init(l, b);
    *s = &l->slots[b % l->window];
    l->next_task++;
    return t;
}

/* Runs task t of slot s outside the lock (held on entry and on return),
 * counted in l->busy meanwhile; workers and the synchronous loader share it. */
static void run_task(dl_loader *l, int64_t t, slot *s) {
    uint64_t gen = l->gen;
    l->busy++;
    pthread_mutex_unlock(&l->mu);
    process(l, t, s, gen);
    pthread_mutex_lock(&l->mu);
    l->busy--;
}

static void *worker(void *arg) {
    dl_loader *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        slot *s = NULL;
        int64_t t = -1;
        while (!l->quit && (t = take_task(l, &s)) < 0) pthread_cond_wait(&l->work, &l->mu);
        if (l->quit) break;
        run_task(l, t, s);
        if (l->busy == 0) pthread_cond_broadcast(&l->done);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* --- the loader ---------------------------------------------------------------------- */

void dl_loader_permutation(int64_t n, uint64_t seed, uint64_t epoch, int64_t *out) {
    for (int64_t i = 0; i < n; i++) out[i] = i;
    dl_sample_rng r;
    dl_sample_rng_init(&r, seed ^ 0x5DEECE66Dull, epoch, 0);
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(dl_sample_rng_uniform(&r) * (double)(i + 1));
        if (j > i) j = i;
        int64_t t = out[i];
        out[i] = out[j];
        out[j] = t;
    }
}

dl_loader *dl_loader_new(const dl_loader_config *cfg) {
    if (cfg->batch_size < 1) {
        dl_error("DataLoader: batch_size must be positive, got %lld", (long long)cfg->batch_size);
        return NULL;
    }
    if (cfg->num_workers < 0 || cfg->num_workers > 256) {
        dl_error("DataLoader: num_workers must be in 0..256, got %d", cfg->num_workers);
        return NULL;
    }
    if (cfg->prefetch < 1) {
        dl_error("DataLoader: prefetch must be positive, got %d", cfg->prefetch);
        return NULL;
    }
    if (cfg->channels != 1 && cfg->channels != 3) {
        dl_error("DataLoader: channels must be 1 or 3");
        return NULL;
    }
    if (cfg->map)
        for (int64_t i = 0; i < cfg->n; i++)
            if (cfg->map[i] < 0 || cfg->map[i] >= cfg->index->n) {
                dl_error("DataLoader: subset index %lld out of range (dataset of %lld)",
                         (long long)cfg->map[i] + 1, (long long)cfg->index->n);
                return NULL;
            }
    dl_loader *l = calloc(1, sizeof *l);
    if (!l) goto oom;
    l->cfg = *cfg;
    l->cfg.map = NULL;
    int64_t n = cfg->n;
    if (cfg->map) {
        l->map = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
        if (!l->map) goto oom;
        memcpy(l->map, cfg->map, sizeof(int64_t) * (size_t)n);
    }
    l->order = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
    if (!l->order) goto oom;
    int64_t bs = cfg->batch_size;
    l->nbatches = cfg->drop_last ? n / bs : (n + bs - 1) / bs;
    l->ntasks_full = cfg->drop_last ? l->nbatches * bs : n;
    int w = cfg->num_workers > 0 ? cfg->prefetch * cfg->num_workers : 1;
    l->window = w < 1 ? 1 : w;
    l->slots = calloc((size_t)l->window, sizeof(slot));
    if (!l->slots) goto oom;
    for (int i = 0; i < l->window; i++) l->slots[i].b = -1;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->work, NULL);
    pthread_cond_init(&l->done, NULL);
    dl_file_index_retain(cfg->index);
    dl_pipeline_retain(cfg->pipe);
    return l;
oom:
    if (l) {
        free(l->map);
        free(l->order);
        free(l->slots);
        free(l);
    }
    dl_error("DataLoader: out of memory");
    return NULL;
}

int64_t dl_loader_num_batches(const dl_loader *l) {
    return l->nbatches;
}

/* Cancels the epoch (lock held) and waits for busy workers. */
static void stop_locked(dl_loader *l) {
    l->gen++;
    l->running = 0;
    while (l->busy > 0) pthread_cond_wait(&l->done, &l->mu);
    for (int i = 0; i < l->window; i++) slot_clear(&l->slots[i]);
}

/* Ends the worker threads (lock not held, no epoch running): a loader between
 * epochs holds no threads, so a program that drops loaders mid-epoch (a
 * `break` closes the iteration) never piles up idle workers waiting for Lua's
 * collector to run __gc.  The next dl_loader_start creates them again. */
static void join_workers(dl_loader *l) {
    pthread_mutex_lock(&l->mu);
    int n = l->nthreads;
    pthread_t *threads = l->threads;
    l->quit = 1;
    pthread_cond_broadcast(&l->work);
    pthread_mutex_unlock(&l->mu);
    for (int i = 0; i < n; i++) pthread_join(threads[i], NULL);
    pthread_mutex_lock(&l->mu);
    free(threads);
    l->threads = NULL;
    l->nthreads = 0;
    l->quit = 0;
    pthread_mutex_unlock(&l->mu);
}

void dl_loader_stop(dl_loader *l) {
    pthread_mutex_lock(&l->mu);
    stop_locked(l);
    pthread_mutex_unlock(&l->mu);
    join_workers(l);
}

static int start_threads(dl_loader *l) {
    if (l->nthreads || l->cfg.num_workers == 0) return 0;
    l->threads = calloc((size_t)l->cfg.num_workers, sizeof(pthread_t));
    if (!l->threads) return dl_error("DataLoader: out of memory");
    for (int i = 0; i < l->cfg.num_workers; i++) {
        if (pthread_create(&l->threads[i], NULL, worker, l) != 0) {
            if (l->nthreads == 0) {
                free(l->threads);
                l->threads = NULL;
                return dl_error("DataLoader: cannot start worker threads");
            }
            break; /* run with the workers we have */
        }
        l->nthreads++;
    }
    return 0;
}

int dl_loader_start(dl_loader *l, uint64_t epoch) {
    pthread_mutex_lock(&l->mu);
    stop_locked(l);
    int64_t n = l->cfg.n;
    if (l->cfg.shuffle)
        dl_loader_permutation(n, l->cfg.seed, epoch, l->order);
    else
        for (int64_t i = 0; i < n; i++) l->order[i] = i;
    l->epoch = epoch;
    l->next_task = 0;
    l->ntasks = l->ntasks_full;
    l->consumed = 0;
    l->running = 1;
    int rc = start_threads(l);
    if (rc) l->running = 0;
    pthread_cond_broadcast(&l->work);
    pthread_mutex_unlock(&l->mu);
    return rc;
}

void dl_loader_batch_clear(dl_loader_batch *b) {
    dl_tensor_release(b->data);
    if (b->items) {
        for (int64_t i = 0; i < b->nitems; i++) dl_tensor_release(b->items[i]);
        free(b->items);
    }
    dl_tensor_release(b->labels);
    dl_tensor_release(b->indices);
    for (int i = 0; i < b->nwarn; i++) free(b->warnings[i]);
    free(b->warnings);
    memset(b, 0, sizeof *b);
}

/* Keeps the rows of t whose bad flag is 0 (a new tensor). */
static dl_tensor *keep_rows(dl_tensor *t, const uint8_t *bad, int64_t n, int64_t good) {
    if (!t) return NULL;
    int64_t shape[DL_MAX_DIMS];
    memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    shape[0] = good;
    dl_tensor *r = dl_tensor_empty(t->ndim, shape, t->dtype, DL_CPU);
    if (!r) return NULL;
    size_t row = dl_tensor_numel(t) / (n ? n : 1) * dl_dtype_size(t->dtype);
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        if (!bad[i])
            memcpy((char *)r->storage->data + (size_t)k++ * row,
                   (char *)t->storage->data + (size_t)i * row, row);
    return r;
}

int dl_loader_next(dl_loader *l, dl_loader_batch *out) {
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&l->mu);
    for (;;) {
        if (!l->running || l->consumed >= l->nbatches) {
            l->running = 0;
            pthread_mutex_unlock(&l->mu);
            join_workers(l);
            return 0;
        }
        int64_t b = l->consumed;
        slot *s = &l->slots[b % l->window];
        if (l->nthreads == 0) {
            /* synchronous: this thread runs the batch's samples */
            slot *ts;
            int64_t t;
            while ((t = take_task(l, &ts)) >= 0) {
                run_task(l, t, ts);
                if (ts->b == b && ts->done == ts->size) break;
            }
        }
        while (l->running && !(s->b == b && s->done == s->size)) {
            pthread_cond_broadcast(&l->work);
            pthread_cond_wait(&l->done, &l->mu);
        }
        if (!l->running) continue;
        /* take the batch */
        slot got = *s;
        memset(s, 0, sizeof *s);
        s->b = -1;
        l->consumed++;
        pthread_cond_broadcast(&l->work);
        if (got.err) {
            dl_error("%s", got.err);
            slot_clear(&got);
            stop_locked(l);
            pthread_mutex_unlock(&l->mu);
            join_workers(l);
            return -1;
        }
        pthread_mutex_unlock(&l->mu);
        int64_t good = 0;
        for (int64_t i = 0; i < got.size; i++) good += !got.bad[i];
        out->index = b;
        out->warnings = got.warn;
        out->nwarn = got.nwarn;
        got.warn = NULL;
        got.nwarn = 0;
        if (good == got.size) {
            out->data = got.data;
            out->labels = got.labels;
            out->indices = got.indices;
            out->items = got.items;
            out->nitems = got.items ? got.size : 0;
            got.data = got.labels = got.indices = NULL;
            got.items = NULL;
        } else {
            out->labels = keep_rows(got.labels, got.bad, got.size, good);
            out->indices = keep_rows(got.indices, got.bad, got.size, good);
            if (got.data && good) out->data = keep_rows(got.data, got.bad, got.size, good);
            if (got.items) {
                out->items = calloc((size_t)(good ? good : 1), sizeof(dl_tensor *));
                int64_t k = 0;
                for (int64_t i = 0; out->items && i < got.size; i++)
                    if (!got.bad[i]) out->items[k++] = dl_tensor_retain(got.items[i]);
                out->nitems = out->items ? good : 0;
            }
            if (!out->labels || !out->indices || (got.data && good && !out->data) ||
                (got.items && !out->items)) {
                slot_clear(&got);
                dl_loader_batch_clear(out);
                return dl_error("DataLoader: out of memory");
            }
        }
        slot_clear(&got);
        return 1;
    }
}

void dl_loader_free(dl_loader *l) {
    if (!l) return;
    pthread_mutex_lock(&l->mu);
    stop_locked(l);
    l->quit = 1;
    pthread_cond_broadcast(&l->work);
    pthread_mutex_unlock(&l->mu);
    for (int i = 0; i < l->nthreads; i++) pthread_join(l->threads[i], NULL);
    free(l->threads);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->work);
    pthread_cond_destroy(&l->done);
    dl_file_index_release(l->cfg.index);
    dl_pipeline_release(l->cfg.pipe);
    free(l->slots);
    free(l->map);
    free(l->order);
    free(l);
}
