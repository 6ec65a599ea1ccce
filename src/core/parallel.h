/* parallel.h - the CPU thread count shared by OpenMP loops and oneDNN. */
#ifndef DL_PARALLEL_H
#define DL_PARALLEL_H

#include <stdint.h>

void dl_set_num_threads(int n);
int dl_get_num_threads(void);
/* Elements below which loops stay single-threaded. */
#define DL_PARALLEL_GRAIN 32768

#endif
