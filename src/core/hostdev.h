/* hostdev.h - DL_HD marks a static inline function that both backends
 * compile: plain C on the host, __host__ __device__ under nvcc.  Such
 * functions use only C that is also valid C++ and device code (no libc
 * calls, no globals). */
#ifndef DL_CORE_HOSTDEV_H
#define DL_CORE_HOSTDEV_H

#ifdef __CUDACC__
#define DL_HD __host__ __device__
#else
#define DL_HD
#endif

#endif
