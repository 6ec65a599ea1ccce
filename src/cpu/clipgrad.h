/* cpu/clipgrad.h - CPU kernels of the clipgrad family: the total norm of a
 * list of buffers, scaling them by it, clamping them; the list, norm types
 * and coefficient are those of kernels/clipgrad.h.  Work is split into fixed
 * chunks run in parallel, so results do not depend on the thread count.
 * The int functions return 0, or -1 with dl_last_error() set. */
#ifndef DL_CPU_CLIPGRAD_H
#define DL_CPU_CLIPGRAD_H

#include "kernels/clipgrad.h"

/* *total = the p-norm of all n buffers' elements together (in double). */
int dl_cpu_clipgrad_norm(int n, const dl_mt_tensor *ts, double p, double *total);

/* every element *= coef (in the element's precision: float for all but F64) */
int dl_cpu_clipgrad_scale(int n, const dl_mt_tensor *ts, double coef);

/* every element clamped to [-v, v] (NaN stays NaN) */
int dl_cpu_clipgrad_clamp(int n, const dl_mt_tensor *ts, double v);

#endif
