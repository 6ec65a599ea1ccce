/* vecmath.h (cpu) - vectorised transcendental functions for the elementwise
 * family's unary row loops (exp, log, tanh, sigmoid, erf, sin, ...; gelu and
 * silu composed around erf, tanh or exp): SLEEF's u10 kernels (within 1 ulp)
 * on AVX-512 or AVX2, picked once from the CPU.
 * `DLUA_CPU_VECMATH=0` in the environment turns them off (libm's scalar
 * loops run instead), `=avx2` keeps to AVX2 on an AVX-512 CPU: for A/B
 * measurements and for testing both paths on one machine. */
#ifndef DL_CPU_VECMATH_H
#define DL_CPU_VECMATH_H

#include "kernels/elementwise.h"

#include <stdbool.h>
#include <stdint.h>

/* One row of a dl_loop_fn: out = op(x) for n elements, data[0] the output
 * and data[1] the input, strides in bytes (any, incl. non-unit).  float32
 * (f32) or float64 (f64) in and out.  Returns false, touching nothing, when
 * op has no vector kernel or the CPU lacks AVX2; the caller's loop runs
 * then. */
bool dl_cpu_vec_unary_f32(dl_unary_op op, char **data, const int64_t *strides, int64_t n);
bool dl_cpu_vec_unary_f64(dl_unary_op op, char **data, const int64_t *strides, int64_t n);

/* gx = gy * op'(s) for n contiguous floats, PyTorch's backward formulas:
 * GELU (both forms) and SiLU from their input s, sigmoid and tanh from
 * their result s.  Returns false, touching nothing, for other ops or
 * without the vector kernels (the caller's loop runs then). */
bool dl_cpu_vec_act_backward_f32(dl_unary_op op, float *gx, const float *gy, const float *s,
                                 int64_t n);

/* One row of a binary dl_loop_fn: out = pow(x, y), data[0] out, data[1] x,
 * data[2] y (strides in bytes, any, 0 for a broadcast operand), float32
 * (f64 false) or float64; SLEEF's u10 pow, C99 Annex F's special cases (as
 * powf/pow and PyTorch).  Returns false, touching nothing, without the
 * vector kernels. */
bool dl_cpu_vec_pow(bool f64, char **data, const int64_t *strides, int64_t n);

/* Whether the vector kernels run on this CPU (and are not turned off). */
bool dl_cpu_vec_available(void);

#endif
