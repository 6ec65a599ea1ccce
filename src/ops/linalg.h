/* linalg.h - the linear-algebra op family: matmul (PyTorch semantics for 1-D,
 * 2-D and broadcast batched operands), mm, bmm, addmm, dot, mv, outer.
 * Each op validates its operands, infers the result's shape and dtype,
 * allocates a new contiguous result and dispatches to the CPU GEMM kernels
 * (src/cpu/gemm.h).  Operands may be any strided views; they are never
 * modified.  Operands must share one dtype (PyTorch's rule; outer alone
 * promotes, as PyTorch's does).  Every function returns a new reference, or
 * NULL with dl_last_error() set.  With grad mode on and a floating operand
 * requiring grad, the result records its backward (linalg.c).  Dimensions are 0-based here;
 * messages report shapes, which have no base. */
#ifndef DL_OPS_LINALG_H
#define DL_OPS_LINALG_H

#include "core/tensor.h"

/* 1-D.1-D -> 0-dim dot; 2-D.1-D -> mv; 1-D.2-D -> (K).(K,N) -> (N);
 * otherwise batched with the batch dims broadcast ((2,1,3,4)@(5,4,2) ->
 * (2,5,3,2)), a 1-D operand getting a dimension added and removed. */
dl_tensor *dl_matmul(dl_tensor *a, dl_tensor *b);
/* (n,m) @ (m,p) -> (n,p) */
dl_tensor *dl_mm(dl_tensor *a, dl_tensor *b);
/* (B,n,m) @ (B,m,p) -> (B,n,p); no broadcasting */
dl_tensor *dl_bmm(dl_tensor *a, dl_tensor *b);
/* beta * input + alpha * (m1 @ m2); input broadcasts to (n,p).  beta == 0
 * ignores input's values (NaN in input does not propagate).  For integer
 * dtypes alpha and beta must be integers. */
dl_tensor *dl_addmm(dl_tensor *input, dl_tensor *m1, dl_tensor *m2, double beta, double alpha);
/* (n) . (n) -> 0-dim */
dl_tensor *dl_dot(dl_tensor *a, dl_tensor *b);
/* (n,m) @ (m) -> (n) */
dl_tensor *dl_mv(dl_tensor *a, dl_tensor *v);
/* (n) x (m) -> (n,m), dtype promoted like a * b */
dl_tensor *dl_outer(dl_tensor *a, dl_tensor *b);

#endif
