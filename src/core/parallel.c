/* parallel.c - one thread count for OpenMP loops and oneDNN (which shares the
 * OpenMP runtime). */
#include "parallel.h"

#ifdef _OPENMP
#include <omp.h>
#endif

static int num_threads;

void dl_set_num_threads(int n) {
    if (n < 1) n = 1;
    num_threads = n;
#ifdef _OPENMP
    omp_set_num_threads(n);
#endif
}

int dl_get_num_threads(void) {
    if (num_threads <= 0) {
#ifdef _OPENMP
        num_threads = omp_get_max_threads();
#else
        num_threads = 1;
#endif
    }
    return num_threads;
}
