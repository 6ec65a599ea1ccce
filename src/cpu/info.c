/* info.c - what the CPU backend is built on, for `dlua -v`: the oneDNN
 * library actually loaded (dnnl_version(), so a newer shared library than the
 * headers shows as such) and the OpenMP version the kernels were compiled for. */
#include "info.h"

#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>

const char *dl_cpu_info(char *buf, int n) {
    const dnnl_version_t *v = dnnl_version();
#ifdef _OPENMP
    static const struct {
        int date;
        const char *version;
    } omp[] = {{200505, "2.5"}, {200805, "3.0"}, {201107, "3.1"}, {201307, "4.0"},
               {201511, "4.5"}, {201811, "5.0"}, {202011, "5.1"}, {202111, "5.2"}};
    char ompv[32];
    snprintf(ompv, sizeof ompv, "%d", _OPENMP);
    for (size_t i = 0; i < sizeof omp / sizeof omp[0]; i++)
        if (omp[i].date == _OPENMP) snprintf(ompv, sizeof ompv, "%s", omp[i].version);
    snprintf(buf, (size_t)n, "oneDNN %d.%d.%d, OpenMP %s", v->major, v->minor, v->patch, ompv);
#else
    snprintf(buf, (size_t)n, "oneDNN %d.%d.%d, no OpenMP", v->major, v->minor, v->patch);
#endif
    return buf;
}
