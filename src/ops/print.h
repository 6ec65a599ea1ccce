/* print.h - tensors as text, in PyTorch's style: aligned columns, PyTorch's
 * float formatting (fixed 4 decimals, `1.` for integer-valued floats,
 * scientific when the dynamic range needs it), summarisation of large tensors
 * with `...`, wrapping at the line width; then dlua's suffixes: the shape
 * always, then as PyTorch orders them: the device when not the CPU
 * (device='cuda:0'), the dtype when not float32/int64/bool, requires_grad
 * when set.  Pure C: no Lua here.
 * The options are process-wide, like PyTorch's PRINT_OPTS. */
#ifndef DL_OPS_PRINT_H
#define DL_OPS_PRINT_H

#include "core/tensor.h"

typedef struct {
    int precision;    /* digits after the point (4) */
    double threshold; /* summarise tensors with more elements than this (1000; may be inf) */
    int edgeitems;    /* items kept at each end of a summarised dimension (3) */
    int linewidth;    /* characters per line before wrapping (80) */
    int sci_mode;     /* -1: chosen from the values, 0: never, 1: always */
} dl_print_options;

/* The current options. */
void dl_print_options_get(dl_print_options *o);
/* Replaces the options; -1 with an error (nothing changed) when one is out of
 * range: precision 0..30, threshold >= 0, edgeitems 1..1000, linewidth >= 1. */
int dl_print_options_set(const dl_print_options *o);
/* PyTorch's profiles: "default", "short" (precision 2, edgeitems 2) and
 * "full" (no summarisation).  Writes them into *o; -1 for an unknown name. */
int dl_print_options_profile(const char *name, dl_print_options *o);

/* The full text of t ("tensor([...], shape={2, 3}, ...)"), malloc'ed: the
 * caller frees it.  NULL with an error on failure (out of memory, a device
 * copy that fails). */
char *dl_tensor_format(dl_tensor *t);

#endif
