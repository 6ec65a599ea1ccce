/* autograd.h - the reverse-mode graph and its engine.
 *
 * An op that computes with inputs requiring gradients records a node: the
 * backward function, edges to where each input's gradient goes (the grad_fn
 * of a non-leaf input at its output_nr, or the leaf tensor itself), saved
 * tensors (detached views, with the storage version at save time) and the
 * op's parameters (ctx).  Each output tensor holds one reference on its node
 * (t->grad_fn, t->output_nr); nodes hold references on the nodes and leaves
 * their edges point to, so a graph lives exactly as long as some output does.
 * Saved tensors never hold grad_fn, so outputs saved by their own node make no
 * cycle.
 *
 * The engine runs nodes in dependency order (latest created first among the
 * ready ones), summing gradients per node output, with grad mode off.  Leaf
 * gradients accumulate into t->grad.  Without retain_graph, each node's saved
 * tensors are freed once it has run; a second backward through it is an
 * error.  In-place writes to a saved tensor bump its storage version, and the
 * backward that needs it reports the modification instead of computing a
 * wrong gradient.  An in-place op records its node on the tensor it writes;
 * other tensors viewing the same storage keep their older history, which no
 * longer describes their values, so using one of them in a recorded op (or as
 * a backward root) is an error (storage->history_mark against the tensor's
 * grad_fn_version) instead of a wrong gradient.  Single-threaded: call from
 * the thread that owns the graph. */
#ifndef DL_AUTOGRAD_H
#define DL_AUTOGRAD_H

#include "core/tensor.h"

#include <stdbool.h>

typedef struct dl_node dl_node;

/* grad_out has n_outputs entries (NULL: that output got no gradient, i.e.
 * zeros); the function writes new references into grad_in[i] for inputs whose
 * edge needs one (dl_node_needs_grad), may leave others NULL, and returns 0,
 * or -1 with dl_last_error() set. */
typedef int (*dl_backward_fn)(dl_node *node, dl_tensor *const *grad_out, dl_tensor **grad_in);

typedef struct {
    dl_node *node;   /* gradient flows to this node's output output_nr, or */
    dl_tensor *leaf; /* accumulates into this leaf; both NULL: not needed */
    int output_nr;
} dl_edge;

typedef struct {
    int ndim;
    int64_t shape[DL_MAX_DIMS];
    dl_dtype dtype;
    dl_device device;
} dl_tensor_meta;

typedef struct {
    dl_tensor *t; /* detached view */
    uint64_t version;
} dl_saved_tensor;

#define DL_NODE_MAX_SAVED 8

struct dl_node {
    int refcount;
    const char *name; /* "AddBackward", "ConvolutionBackward", ... */
    dl_backward_fn backward;
    uint64_t seq;
    int n_inputs;
    dl_edge *inputs;
    dl_tensor_meta *input_meta; /* shape/dtype of each input, for checks */
    int n_outputs;
    dl_tensor_meta *outputs;
    int n_saved;
    dl_saved_tensor saved[DL_NODE_MAX_SAVED];
    bool released; /* saved tensors freed by a backward without retain_graph */
    /* op parameters: a plain block freed with free(), after ctx_free (which
     * releases anything it owns, e.g. tensors or a Lua reference) */
    void *ctx;
    void (*ctx_free)(void *ctx);
    /* engine scratch */
    int deps;
    dl_tensor **buf;
};

/* --- grad mode (thread-local) ---------------------------------------------- */
bool dl_grad_enabled(void);
/* Returns the previous mode. */
bool dl_set_grad_enabled(bool on);

/* True when grad mode is on and some input requires grad: record a node. */
bool dl_autograd_needed(int n, dl_tensor *const *inputs);
static inline bool dl_needs_grad1(dl_tensor *a) {
    return dl_autograd_needed(1, &a);
}
static inline bool dl_needs_grad2(dl_tensor *a, dl_tensor *b) {
    dl_tensor *v[2] = {a, b};
    return dl_autograd_needed(2, v);
}

/* --- building graphs -------------------------------------------------------- */
/* A node with edges to inputs (entries may be NULL: no gradient) and room for
 * n_outputs outputs.  ctx_size bytes of zeroed parameter space at n->ctx. */
dl_node *dl_node_new(const char *name, dl_backward_fn fn, int n_inputs, dl_tensor *const *inputs,
                     int n_outputs, size_t ctx_size);
/* Saves a detached view of t (NULL allowed); returns its slot or -1. */
int dl_node_save(dl_node *n, dl_tensor *t);
/* The saved tensor in slot i (borrowed), or NULL with an error when the graph
 * was freed or the tensor was modified in place since it was saved. */
dl_tensor *dl_node_saved(dl_node *n, int i);
/* Makes out the node's output output_nr: out->grad_fn = n (retained),
 * out->requires_grad = true. */
void dl_node_set_output(dl_node *n, int output_nr, dl_tensor *out);
/* Whether input i's gradient goes anywhere. */
bool dl_node_needs_grad(const dl_node *n, int i);
void dl_node_retain(dl_node *n);
void dl_node_release(dl_node *n);
/* Convenience for single-output ops: n's output 0 is out; drops the creator's
 * reference on n (out now holds it).  Returns out. */
dl_tensor *dl_node_finish(dl_node *n, dl_tensor *out);

/* A new tensor object viewing t's storage, without autograd history (what
 * saved tensors use). */
dl_tensor *dl_tensor_detached(dl_tensor *t);

/* --- running backward ------------------------------------------------------- */
/* Adds gradients (a + b, same shape); the ops layer registers it. */
typedef dl_tensor *(*dl_grad_add_fn)(dl_tensor *a, dl_tensor *b);
void dl_autograd_set_add(dl_grad_add_fn add);

/* Backpropagates from roots (grads[i] NULL: ones, allowed for one-element
 * roots) and accumulates into the leaves' .grad. */
int dl_backward(int n, dl_tensor *const *roots, dl_tensor *const *grads, bool retain_graph);
/* Gradients of roots with respect to inputs, returned as new references in
 * out (NULL for an unused input when allow_unused); leaves' .grad untouched. */
int dl_autograd_grad(int n, dl_tensor *const *roots, dl_tensor *const *grads, int n_inputs,
                     dl_tensor *const *inputs, dl_tensor **out, bool retain_graph,
                     bool allow_unused);

/* --- gradient-ready hooks (src/dist's DistributedDataParallel reducer) ------ */
/* Called by dl_backward (not dl_autograd_grad): begin before the graph is
 * walked; leaf_edge once per edge into a leaf found in the graph (so a hook
 * knows how many contributions a leaf will get); leaf_grad after each such
 * edge's gradient was accumulated into leaf->grad (or found not needed), so
 * the last call for a leaf means its .grad is final; end after the last node
 * ran, with the engine's status (0 or -1), returning the status to report;
 * node_done after every node (a communication library progresses there).
 * Hooks run with grad mode off.  One set per process; NULL removes it. */
typedef struct {
    void (*begin)(void *ud);
    void (*leaf_edge)(void *ud, dl_tensor *leaf);
    int (*leaf_grad)(void *ud, dl_tensor *leaf);
    int (*node_done)(void *ud);
    int (*end)(void *ud, int status);
    void *ud;
} dl_autograd_hooks;
void dl_autograd_set_hooks(const dl_autograd_hooks *h);

#endif
