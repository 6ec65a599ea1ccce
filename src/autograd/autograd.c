/* autograd.c - graph nodes, saved tensors and the backward engine (see
 * autograd.h for the ownership rules). */
#include "autograd.h"

#include <stdlib.h>
#include <string.h>

/* --- grad mode ---------------------------------------------------------------- */

static _Thread_local bool grad_disabled;

bool dl_grad_enabled(void) {
    return !grad_disabled;
}

bool dl_set_grad_enabled(bool on) {
    bool prev = !grad_disabled;
    grad_disabled = !on;
    return prev;
}

bool dl_autograd_needed(int n, dl_tensor *const *inputs) {
    if (grad_disabled) return false;
    for (int i = 0; i < n; i++)
        if (inputs[i] && inputs[i]->requires_grad) return true;
    return false;
}

/* --- nodes -------------------------------------------------------------------- */

static uint64_t next_seq;

static void release_tensor_graph(dl_tensor *t) {
    if (t->grad_fn) dl_node_release(t->grad_fn);
    t->grad_fn = NULL;
}

static void fill_meta(dl_tensor_meta *m, const dl_tensor *t) {
    m->ndim = t->ndim;
    memcpy(m->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    m->dtype = t->dtype;
    m->device = t->storage->device;
}

/* Whether t's history predates an in-place write recorded on another tensor
 * viewing its storage (a view of it, or the tensor it views). */
static bool stale_history(const dl_tensor *t) {
    return t->grad_fn && t->storage && t->grad_fn_version < t->storage->history_mark;
}

static int stale_error(const char *what, const dl_tensor *t) {
    return dl_error("autograd (%s): an input (from %s) was written in place through another view "
                    "of its storage after it was computed, so its gradient would be wrong; compute "
                    "it again after the write, or make the write on a clone",
                    what, t->grad_fn->name);
}

dl_node *dl_node_new(const char *name, dl_backward_fn fn, int n_inputs, dl_tensor *const *inputs,
                     int n_outputs, size_t ctx_size) {
    dl_tensor_release_autograd = release_tensor_graph;
    for (int i = 0; i < n_inputs; i++)
        if (inputs[i] && inputs[i]->requires_grad && stale_history(inputs[i])) {
            stale_error(name, inputs[i]);
            return NULL;
        }
    dl_node *n = dl_zalloc(sizeof *n, "%s: out of memory recording the graph", name);
    if (!n) return NULL;
    n->refcount = 1;
    n->name = name;
    n->backward = fn;
    n->seq = __atomic_fetch_add(&next_seq, 1, __ATOMIC_RELAXED);
    n->n_inputs = n_inputs;
    n->n_outputs = n_outputs;
    n->inputs = calloc((size_t)(n_inputs > 0 ? n_inputs : 1), sizeof *n->inputs);
    n->input_meta = calloc((size_t)(n_inputs > 0 ? n_inputs : 1), sizeof *n->input_meta);
    n->outputs = calloc((size_t)(n_outputs > 0 ? n_outputs : 1), sizeof *n->outputs);
    n->ctx = ctx_size ? calloc(1, ctx_size) : NULL;
    if (!n->inputs || !n->input_meta || !n->outputs || (ctx_size && !n->ctx)) {
        dl_node_release(n);
        dl_error("%s: out of memory recording the graph", name);
        return NULL;
    }
    for (int i = 0; i < n_inputs; i++) {
        dl_tensor *t = inputs[i];
        if (!t) continue;
        fill_meta(&n->input_meta[i], t);
        if (!t->requires_grad) continue;
        if (t->grad_fn) {
            dl_node_retain(t->grad_fn);
            n->inputs[i].node = t->grad_fn;
            n->inputs[i].output_nr = t->output_nr;
        } else {
            n->inputs[i].leaf = dl_tensor_retain(t);
        }
    }
    return n;
}

/* Always a distinct tensor object: a node may save its own output before
 * dl_node_set_output gives that output its grad_fn, and holding the same
 * object would then make a cycle (output -> node -> saved output). */
dl_tensor *dl_tensor_detached(dl_tensor *t) {
    return dl_tensor_new_view(t->storage, t->offset, t->ndim, t->shape, t->strides, t->dtype);
}

int dl_node_save(dl_node *n, dl_tensor *t) {
    if (n->n_saved == DL_NODE_MAX_SAVED) {
        dl_error("%s: too many saved tensors (internal)", n->name);
        return -1;
    }
    int slot = n->n_saved++;
    if (t) {
        n->saved[slot].t = dl_tensor_detached(t);
        if (!n->saved[slot].t) return -1;
        n->saved[slot].version = t->storage->version;
    }
    return slot;
}

dl_tensor *dl_node_saved(dl_node *n, int i) {
    if (n->released) {
        dl_error("%s: trying to backward through the graph a second time (its saved tensors "
                 "were freed); pass {retain_graph=true} to the first backward",
                 n->name);
        return NULL;
    }
    dl_saved_tensor *s = &n->saved[i];
    if (s->t && s->t->storage->version != s->version) {
        char b[128];
        dl_error("%s: a tensor of shape %s needed for gradient computation has been modified "
                 "by an in-place operation (version %llu, expected %llu)",
                 n->name, dl_shape_str(s->t->ndim, s->t->shape, b, sizeof b),
                 (unsigned long long)s->t->storage->version, (unsigned long long)s->version);
        return NULL;
    }
    if (!s->t) dl_error("%s: saved tensor %d missing (internal)", n->name, i);
    return s->t;
}

void dl_node_set_output(dl_node *n, int output_nr, dl_tensor *out) {
    fill_meta(&n->outputs[output_nr], out);
    dl_node_retain(n);
    if (out->storage) {
        /* replacing a history: an in-place write, after which the other
         * tensors on this storage (views) hold stale histories */
        if (out->grad_fn) out->storage->history_mark = out->storage->version;
        out->grad_fn_version = out->storage->version;
    }
    if (out->grad_fn) dl_node_release(out->grad_fn);
    out->grad_fn = n;
    out->output_nr = output_nr;
    out->requires_grad = true;
}

dl_tensor *dl_node_finish(dl_node *n, dl_tensor *out) {
    dl_node_set_output(n, 0, out);
    dl_node_release(n);
    return out;
}

bool dl_node_needs_grad(const dl_node *n, int i) {
    return n->inputs[i].node != NULL || n->inputs[i].leaf != NULL;
}

void dl_node_retain(dl_node *n) {
    n->refcount++;
}

static void free_saved(dl_node *n) {
    for (int i = 0; i < n->n_saved; i++) {
        dl_tensor_release(n->saved[i].t);
        n->saved[i].t = NULL;
    }
}

/* Iterative, so that releasing a long chain (a loop of 100,000 ops) cannot
 * overflow the C stack. */
void dl_node_release(dl_node *n) {
    if (!n || --n->refcount > 0) return;
    size_t cap = 16, len = 0;
    dl_node **stack = malloc(cap * sizeof *stack);
    dl_node *cur = n;
    for (;;) {
        for (int i = 0; i < cur->n_inputs; i++) {
            dl_tensor_release(cur->inputs[i].leaf);
            dl_node *next = cur->inputs[i].node;
            if (next && --next->refcount == 0) {
                if (len == cap) {
                    dl_node **grown = stack ? realloc(stack, 2 * cap * sizeof *stack) : NULL;
                    if (grown) {
                        stack = grown;
                        cap *= 2;
                    }
                }
                if (stack && len < cap) stack[len++] = next;
                /* else: leaked under memory exhaustion rather than crashing */
            }
        }
        free_saved(cur);
        if (cur->ctx_free && cur->ctx) cur->ctx_free(cur->ctx);
        free(cur->ctx);
        free(cur->inputs);
        free(cur->input_meta);
        free(cur->outputs);
        free(cur->buf);
        free(cur);
        if (!stack || len == 0) break;
        cur = stack[--len];
    }
    free(stack);
}

/* --- engine ------------------------------------------------------------------- */

static dl_grad_add_fn grad_add;

void dl_autograd_set_add(dl_grad_add_fn add) {
    grad_add = add;
}

/* dst = dst + g (dst may be NULL: takes a reference to g). */
static int accumulate(dl_tensor **dst, dl_tensor *g) {
    if (!*dst) {
        *dst = dl_tensor_retain(g);
        return 0;
    }
    if (!grad_add) return dl_error("autograd: no gradient addition registered (internal)");
    dl_tensor *sum = grad_add(*dst, g);
    if (!sum) return -1;
    dl_tensor_release(*dst);
    *dst = sum;
    return 0;
}

/* Whether a and b (same shape) step through memory alike: equal strides on
 * every dimension longer than 1. */
static bool same_strides(const dl_tensor *a, const dl_tensor *b) {
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != 1 && a->strides[i] != b->strides[i]) return false;
    return true;
}

/* A leaf's .grad owns its memory: never alias a tensor that another gradient
 * or the user may still hold.  As in PyTorch, it is laid out as the leaf is
 * when the leaf is dense (a channels-last weight gets a channels-last
 * gradient, which fused optimizer steps read as one flat array), else
 * contiguous. */
static int accumulate_leaf(dl_tensor *leaf, dl_tensor *g) {
    if (leaf->grad) return accumulate(&leaf->grad, g);
    dl_tensor *like = dl_tensor_empty_like_layout(leaf, g->dtype, dl_tensor_device(g));
    if (!like) return -1;
    dl_tensor *c = NULL;
    if (g->refcount == 1 && same_strides(g, like))
        c = dl_tensor_retain(g);
    else if (dl_tensor_copy_(like, g) == 0)
        c = dl_tensor_retain(like);
    dl_tensor_release(like);
    if (!c) return -1;
    leaf->grad = c;
    return 0;
}

typedef struct {
    dl_node **v;
    size_t len, cap;
} node_vec;

static int vec_push(node_vec *v, dl_node *n) {
    if (v->len == v->cap) {
        size_t cap = v->cap ? 2 * v->cap : 64;
        dl_node **g = realloc(v->v, cap * sizeof *g);
        if (!g) return dl_error("autograd: out of memory");
        v->v = g;
        v->cap = cap;
    }
    v->v[v->len++] = n;
    return 0;
}

/* max-heap on seq: the most recently created ready node runs first */
static int heap_push(node_vec *h, dl_node *n) {
    if (vec_push(h, n)) return -1;
    size_t i = h->len - 1;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h->v[p]->seq >= h->v[i]->seq) break;
        dl_node *t = h->v[p];
        h->v[p] = h->v[i];
        h->v[i] = t;
        i = p;
    }
    return 0;
}

static dl_node *heap_pop(node_vec *h) {
    dl_node *top = h->v[0];
    h->v[0] = h->v[--h->len];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->len && h->v[l]->seq > h->v[m]->seq) m = l;
        if (r < h->len && h->v[r]->seq > h->v[m]->seq) m = r;
        if (m == i) break;
        dl_node *t = h->v[m];
        h->v[m] = h->v[i];
        h->v[i] = t;
        i = m;
    }
    return top;
}

typedef struct {
    int n_inputs;
    dl_tensor *const *inputs; /* capture mode: gradients wanted for these */
    dl_tensor **out;
} capture;

/* Routes gradient g (borrowed) for an edge; leaves accumulate or are captured. */
static int route_leaf(dl_tensor *leaf, dl_tensor *g, capture *cap) {
    if (!cap) return accumulate_leaf(leaf, g);
    for (int j = 0; j < cap->n_inputs; j++)
        if (cap->inputs[j] == leaf && accumulate(&cap->out[j], g)) return -1;
    return 0;
}

static bool meta_matches(const dl_tensor_meta *m, const dl_tensor *g) {
    if (m->ndim != g->ndim) return false;
    for (int i = 0; i < g->ndim; i++)
        if (m->shape[i] != g->shape[i]) return false;
    return true;
}

static dl_tensor *ones_for(dl_tensor *root) {
    return dl_tensor_full(root->ndim, root->shape, 1, root->dtype, root->storage->device);
}

/* the gradient-ready hooks (autograd.h); only dl_backward calls them */
static dl_autograd_hooks hooks;
static bool hooks_set;

void dl_autograd_set_hooks(const dl_autograd_hooks *h) {
    hooks_set = h != NULL;
    if (h) hooks = *h;
}

static int run_engine(int n, dl_tensor *const *roots, dl_tensor *const *grads, bool retain,
                      capture *cap) {
    const dl_autograd_hooks *hk = hooks_set && !cap ? &hooks : NULL;
    if (hk) hk->begin(hk->ud);
    node_vec all = {0}, ready = {0}, stack = {0};
    dl_tensor **root_grads = calloc((size_t)n, sizeof *root_grads);
    int rc = 0;
    bool prev_mode = dl_set_grad_enabled(false);
    if (!root_grads) {
        rc = dl_error("backward: out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        dl_tensor *r = roots[i];
        if (!r->requires_grad) {
            rc = dl_error("backward: tensor %d does not require grad and has no grad_fn", i + 1);
            goto done;
        }
        if (stale_history(r)) {
            rc = stale_error("backward", r);
            goto done;
        }
        if (grads && grads[i]) {
            if (!dl_shape_equal(grads[i], r)) {
                char b1[128], b2[128];
                rc = dl_error("backward: gradient of shape %s given for a tensor of shape %s",
                              dl_shape_str(grads[i]->ndim, grads[i]->shape, b1, sizeof b1),
                              dl_shape_str(r->ndim, r->shape, b2, sizeof b2));
                goto done;
            }
            root_grads[i] = dl_tensor_to_dtype(grads[i], r->dtype);
        } else {
            if (dl_tensor_numel(r) != 1) {
                rc = dl_error("backward: a gradient can be created implicitly only for a "
                              "one-element output (this one has %lld elements); pass one",
                              (long long)dl_tensor_numel(r));
                goto done;
            }
            root_grads[i] = ones_for(r);
        }
        if (!root_grads[i]) {
            rc = -1;
            goto done;
        }
    }
    /* discover the graph and count dependencies */
    for (int i = 0; i < n; i++) {
        dl_node *g = roots[i]->grad_fn;
        if (g && !g->buf) {
            g->buf = calloc((size_t)g->n_outputs, sizeof *g->buf);
            if (!g->buf || vec_push(&all, g) || vec_push(&stack, g)) {
                rc = dl_error("backward: out of memory");
                goto done;
            }
        }
    }
    while (stack.len) {
        dl_node *cur = stack.v[--stack.len];
        for (int i = 0; i < cur->n_inputs; i++) {
            dl_node *next = cur->inputs[i].node;
            if (hk && cur->inputs[i].leaf) hk->leaf_edge(hk->ud, cur->inputs[i].leaf);
            if (!next) continue;
            next->deps++;
            if (!next->buf) {
                next->buf = calloc((size_t)next->n_outputs, sizeof *next->buf);
                if (!next->buf || vec_push(&all, next) || vec_push(&stack, next)) {
                    rc = dl_error("backward: out of memory");
                    goto done;
                }
            }
        }
    }
    /* seed */
    for (int i = 0; i < n; i++) {
        dl_tensor *r = roots[i];
        if (r->grad_fn) {
            if (accumulate(&r->grad_fn->buf[r->output_nr], root_grads[i])) {
                rc = -1;
                goto done;
            }
        } else if (route_leaf(r, root_grads[i], cap)) {
            rc = -1;
            goto done;
        }
    }
    for (size_t i = 0; i < all.len; i++)
        if (all.v[i]->deps == 0 && heap_push(&ready, all.v[i])) {
            rc = -1;
            goto done;
        }
    while (ready.len) {
        dl_node *node = heap_pop(&ready);
        if (cap)
            for (int j = 0; j < cap->n_inputs; j++) {
                dl_tensor *in = cap->inputs[j];
                if (in->grad_fn == node && node->buf[in->output_nr] &&
                    accumulate(&cap->out[j], node->buf[in->output_nr])) {
                    rc = -1;
                    goto done;
                }
            }
        dl_tensor *gin_small[8] = {0};
        dl_tensor **gin =
            node->n_inputs <= 8 ? gin_small : calloc((size_t)node->n_inputs, sizeof *gin);
        if (!gin) {
            rc = dl_error("backward: out of memory");
            goto done;
        }
        bool any = false;
        for (int o = 0; o < node->n_outputs; o++) any |= node->buf[o] != NULL;
        if (any && node->backward(node, node->buf, gin)) rc = -1;
        for (int i = 0; i < node->n_inputs && rc == 0; i++) {
            dl_edge *e = &node->inputs[i];
            dl_tensor *g = gin[i];
            if (g && !meta_matches(&node->input_meta[i], g)) {
                char b1[128], b2[128];
                rc = dl_error("%s: gradient of shape %s computed for input %d of shape %s "
                              "(internal)",
                              node->name, dl_shape_str(g->ndim, g->shape, b1, sizeof b1), i + 1,
                              dl_shape_str(node->input_meta[i].ndim, node->input_meta[i].shape, b2,
                                           sizeof b2));
                break;
            }
            if (e->leaf) {
                if (g && route_leaf(e->leaf, g, cap)) rc = -1;
                if (hk && rc == 0 && hk->leaf_grad(hk->ud, e->leaf)) rc = -1;
            } else if (e->node) {
                if (g && accumulate(&e->node->buf[e->output_nr], g)) rc = -1;
                if (--e->node->deps == 0 && heap_push(&ready, e->node)) rc = -1;
            }
        }
        for (int i = 0; i < node->n_inputs; i++) dl_tensor_release(gin[i]);
        if (gin != gin_small) free(gin);
        for (int o = 0; o < node->n_outputs; o++) {
            dl_tensor_release(node->buf[o]);
            node->buf[o] = NULL;
        }
        if (!retain && node->n_saved > 0) { /* a second pass errors when it reads them */
            free_saved(node);
            node->released = true;
        }
        if (hk && rc == 0 && hk->node_done(hk->ud)) rc = -1;
        if (rc) goto done;
    }
done:
    for (size_t i = 0; i < all.len; i++) {
        dl_node *g = all.v[i];
        for (int o = 0; o < g->n_outputs && g->buf; o++) dl_tensor_release(g->buf[o]);
        free(g->buf);
        g->buf = NULL;
        g->deps = 0;
    }
    for (int i = 0; root_grads && i < n; i++) dl_tensor_release(root_grads[i]);
    free(root_grads);
    free(all.v);
    free(ready.v);
    free(stack.v);
    if (hk) rc = hk->end(hk->ud, rc);
    dl_set_grad_enabled(prev_mode);
    return rc;
}

int dl_backward(int n, dl_tensor *const *roots, dl_tensor *const *grads, bool retain_graph) {
    return run_engine(n, roots, grads, retain_graph, NULL);
}

int dl_autograd_grad(int n, dl_tensor *const *roots, dl_tensor *const *grads, int n_inputs,
                     dl_tensor *const *inputs, dl_tensor **out, bool retain_graph,
                     bool allow_unused) {
    for (int j = 0; j < n_inputs; j++) {
        out[j] = NULL;
        if (!inputs[j]->requires_grad)
            return dl_error("autograd.grad: input %d does not require grad", j + 1);
    }
    capture cap = {n_inputs, inputs, out};
    if (run_engine(n, roots, grads, retain_graph, &cap)) {
        for (int j = 0; j < n_inputs; j++) {
            dl_tensor_release(out[j]);
            out[j] = NULL;
        }
        return -1;
    }
    for (int j = 0; j < n_inputs; j++) {
        if (out[j]) continue;
        if (!allow_unused) {
            for (int k = 0; k < n_inputs; k++) {
                dl_tensor_release(out[k]);
                out[k] = NULL;
            }
            return dl_error("autograd.grad: input %d was not used in the graph (pass "
                            "{allow_unused=true} to get nil for it)",
                            j + 1);
        }
    }
    return 0;
}
