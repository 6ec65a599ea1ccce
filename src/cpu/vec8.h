/* cpu/vec8.h - the 8-float generic vectors that the CPU kernels' clones keep
 * in registers (a 256-bit vector is a register on AVX2 and AVX-512; wider
 * generic vectors went through the stack in the AVX2 clones), and their
 * flush into double lanes. */
#ifndef DL_CPU_VEC8_H
#define DL_CPU_VEC8_H

#include <stdint.h>
#include <string.h>

typedef float v8f __attribute__((vector_size(32)));
typedef double v4d __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

/* the 8 floats of f as two 4-double vectors */
static inline __attribute__((always_inline)) void dl_cpu_widen8(const v8f *f, v4d *lo, v4d *hi) {
    *lo = __builtin_convertvector(__builtin_shufflevector(*f, *f, 0, 1, 2, 3), v4d);
    *hi = __builtin_convertvector(__builtin_shufflevector(*f, *f, 4, 5, 6, 7), v4d);
}

/* the 8 doubles at d folded with the 8 floats of *f in double: added, or
 * multiplied (mul) */
static inline __attribute__((always_inline)) void dl_cpu_flush8(double *d, const v8f *f, int mul) {
    v4d lo, hi, t0, t1;
    dl_cpu_widen8(f, &lo, &hi);
    memcpy(&t0, d, sizeof t0);
    memcpy(&t1, d + 4, sizeof t1);
    if (mul) {
        t0 *= lo;
        t1 *= hi;
    } else {
        t0 += lo;
        t1 += hi;
    }
    memcpy(d, &t0, sizeof t0);
    memcpy(d + 4, &t1, sizeof t1);
}

#endif
