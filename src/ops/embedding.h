/* ops/embedding.h - the embedding family: lookups of rows of a weight
 * (num, dim) by id, bags of them (sum, mean or max per bag), their weight
 * gradients, max_norm's in-place renormalisation, and the node-recording
 * entry points.  Dispatches to cpu/embedding.c or cuda/embedding.cu.
 *
 * Ids and offsets are int64 tensors of 0-based values here (the Lua bindings
 * convert from 1-based; error messages show an id i as i + 1, the way the
 * user wrote it); padding_idx is 0-based, or -1 for none.  An id outside
 * [0, num) is an error naming the argument and the id; on CUDA the ids'
 * range is checked on the device and read back (one host synchronisation per
 * call), and offsets are checked on a host copy.
 * Dtypes: the output has the weight's dtype (a lookup copies rows of any
 * dtype); bags and gradients compute in float64 for float64 and in float32
 * otherwise (on the CPU a half weight is converted for bags; on CUDA the
 * kernels read it as it is).  Gradients take the weight's dtype.
 * Conventions: ops/op_util.h. */
#ifndef DL_OPS_EMBEDDING_H
#define DL_OPS_EMBEDDING_H

#include "core/tensor.h"
#include "kernels/embedding.h"

#include <stdbool.h>

typedef struct dl_embedding_params {
    int64_t padding_idx; /* 0-based row that is never looked up for gradients; -1: none */
    double max_norm;     /* > 0: rows looked up are renormalised first; 0: off */
    double norm_type;    /* the p of max_norm's p-norm (> 0, or inf) */
    bool scale_grad_by_freq;
    /* bags */
    dl_bag_mode mode;
    bool include_last_offset; /* offsets has bags + 1 entries, the last = the number of ids */
} dl_embedding_params;

/* padding_idx -1, max_norm 0 (off), norm_type 2, mode mean */
dl_embedding_params dl_embedding_default_params(void);

/* --- lookups ------------------------------------------------------------------------ */

/* weight (num, dim) of any dtype, ids of any shape -> (ids.shape, dim). */
dl_tensor *dl_embedding_forward(dl_tensor *weight, dl_tensor *ids);

/* The weight gradient (num, dim) of a lookup: gy is (ids.shape, dim); rows
 * of padding_idx get none; by_freq divides each row by its id's count. */
dl_tensor *dl_embedding_backward(dl_tensor *gy, dl_tensor *ids, int64_t num, int64_t padding_idx,
                                 bool by_freq);

/* max_norm in place: every distinct row looked up by ids whose norm_type-norm
 * is above max_norm is scaled by max_norm / (norm + 1e-7).  Not recorded by
 * autograd (PyTorch's embedding_renorm_); bumps weight's version. */
int dl_embedding_renorm_(dl_tensor *weight, dl_tensor *ids, double max_norm, double norm_type);

/* F.embedding: renormalises when p->max_norm > 0, looks up, records a node
 * when weight requires grad. */
dl_tensor *dl_embedding(dl_tensor *weight, dl_tensor *ids, const dl_embedding_params *p);

/* --- bags ------------------------------------------------------------------------------
 * ids 2-D (bags, len) with offsets NULL: bags of len entries; or ids 1-D with
 * offsets (bags) the start of each bag (offsets[0] == 0, non-decreasing, at
 * most the number of ids; include_last_offset: bags + 1 entries, the last
 * equal to the number of ids).  psw (per_sample_weights, like ids, the
 * weight's dtype) scales each entry; mode sum only. */

/* out (bags, dim) and what the backward needs: bag_of (n) and bag_size
 * (bags), argmax (bags, dim; max mode, else NULL), all int64, and bounds
 * (bags + 1) the bags' limits in the flattened ids. */
typedef struct dl_embedding_bag_result {
    dl_tensor *out, *ids, *bounds, *bag_of, *bag_size, *argmax;
} dl_embedding_bag_result;

int dl_embedding_bag_forward(dl_tensor *weight, dl_tensor *ids, dl_tensor *offsets, dl_tensor *psw,
                             const dl_embedding_params *p, dl_embedding_bag_result *r);
/* Releases what r holds and sets it to NULLs. */
void dl_embedding_bag_result_release(dl_embedding_bag_result *r);

/* Gradients of a bag forward given gy (bags, dim) and the forward's r:
 * gweight (num, dim; gy's dtype) when need[0], gpsw (psw's shape and dtype)
 * when need[1] and psw is given (sum mode; reads weight, which may be NULL
 * otherwise). */
int dl_embedding_bag_backward(dl_tensor *gy, dl_tensor *weight, int64_t num,
                              const dl_embedding_bag_result *r, dl_tensor *psw,
                              const dl_embedding_params *p, const bool need[2], dl_tensor **gweight,
                              dl_tensor **gpsw);

/* F.embedding_bag: renormalises when p->max_norm > 0, records a node when
 * weight or psw requires grad; returns the output. */
dl_tensor *dl_embedding_bag(dl_tensor *weight, dl_tensor *ids, dl_tensor *offsets, dl_tensor *psw,
                            const dl_embedding_params *p);

#endif
