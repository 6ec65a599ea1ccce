/* parallel.h - the CPU thread count shared by OpenMP loops and oneDNN, and
 * the multiversioning macro of the hot loops. */
#ifndef DL_PARALLEL_H
#define DL_PARALLEL_H

#include <stdint.h>

void dl_set_num_threads(int n);
int dl_get_num_threads(void);
/* Elements below which loops stay single-threaded. */
#define DL_PARALLEL_GRAIN 32768

/* `#pragma omp parallel for` over dl_get_num_threads() threads, serial
 * unless cond holds, for loops inside macros (where #pragma cannot stand):
 * DL_PARALLEL_FOR(n >= DL_PARALLEL_GRAIN) for (int64_t i = 0; ...). */
#define DL_PRAGMA(text) _Pragma(#text)
#define DL_PARALLEL_FOR(cond) DL_PRAGMA(omp parallel for num_threads(dl_get_num_threads()) if (cond))

/* A hot CPU loop compiled once per listed target and picked at load time
 * (GCC function multiversioning: the build itself targets plain x86-64), e.g.
 * DL_CPU_CLONES below.  Elsewhere (clang, other architectures) the function
 * is compiled once.  Name AVX2 as "arch=x86-64-v3" (AVX2, FMA, F16C), which
 * the loader picks by CPU features: "arch=haswell" is picked by CPU model, so
 * never on AMD or on Intel cores newer than Haswell. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define DL_TARGET_CLONES(...) __attribute__((target_clones(__VA_ARGS__)))
#else
#define DL_TARGET_CLONES(...)
#endif
/* the usual set: AVX-512, AVX2, plain x86-64 */
#define DL_CPU_CLONES DL_TARGET_CLONES("avx512f", "arch=x86-64-v3", "default")

#endif
