/* device.c - backend availability: the one place that asks the CUDA backend
 * whether it exists, so no other op body needs #ifdef. */
#include "device.h"
#include "cpu/info.h"

#include <stdio.h>

#ifdef DL_WITH_CUDA
int dl_cuda_device_count(void);
const char *dl_cuda_device_name(int index, char *buf, int n);
const char *dl_cuda_versions(char *buf, int n);
#endif

int dl_cuda_available_devices(void) {
#ifdef DL_WITH_CUDA
    static int cached = -1;
    if (cached < 0) cached = dl_cuda_device_count();
    return cached;
#else
    return 0;
#endif
}

const char *dl_cuda_name(int index, char *buf, int n) {
#ifdef DL_WITH_CUDA
    return dl_cuda_device_count() > index ? dl_cuda_device_name(index, buf, n) : 0;
#else
    (void)index;
    (void)buf;
    (void)n;
    return 0;
#endif
}

int dl_cuda_compiled(void) {
#ifdef DL_WITH_CUDA
    return 1;
#else
    return 0;
#endif
}

const char *dl_backends_info(char *buf, int n) {
    char cpu[128], cuda[256];
    dl_cpu_info(cpu, sizeof cpu);
#ifdef DL_WITH_CUDA
    dl_cuda_versions(cuda, sizeof cuda);
    snprintf(buf, (size_t)n, "cpu (%s); cuda (%s)", cpu, cuda);
#else
    (void)cuda;
    snprintf(buf, (size_t)n, "cpu (%s); cuda: not in this build", cpu);
#endif
    return buf;
}
