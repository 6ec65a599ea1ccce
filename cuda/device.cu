// device.cu - CUDA device queries: whether a GPU is present, its name, and the
// versions of the CUDA runtime, driver, cuBLAS and cuDNN (when linked, with
// DL_WITH_CUDNN) for `dlua -v`.  extern "C" entry points only.
#include "common.cuh"

#include <cuda_runtime.h>
#include <stdio.h>
#ifdef DL_WITH_CUDNN
#include <cudnn.h>
#endif

extern "C" int dl_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); // clear the sticky "no device" error
        return 0;
    }
    return n;
}

extern "C" const char *dl_cuda_device_name(int index, char *buf, int n) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, index) != cudaSuccess) {
        cudaGetLastError();
        return nullptr;
    }
    int i = 0;
    for (; i < n - 1 && p.name[i]; i++) buf[i] = p.name[i];
    buf[i] = '\0';
    return buf;
}

// "CUDA runtime 12.2, driver 12.4, cuBLAS 12.2.5, cuDNN 8.9.7" into buf.
// The driver part reads "no driver" on a machine without one; cuBLAS is
// opened (dlopen) to read its version, "cuBLAS not found" when it cannot be.
extern "C" const char *dl_cuda_versions(char *buf, int n) {
    int rt = 0, drv = 0, bmaj = 0, bmin = 0, bpat = 0;
    if (cudaRuntimeGetVersion(&rt) != cudaSuccess) rt = 0;
    if (cudaDriverGetVersion(&drv) != cudaSuccess) drv = 0;
    cudaGetLastError();
    char driver[32], cudnn[32], cublas[48];
    if (dl_cublas_load()) {
        DL_CUBLAS_FN(cublasGetProperty)(MAJOR_VERSION, &bmaj);
        DL_CUBLAS_FN(cublasGetProperty)(MINOR_VERSION, &bmin);
        DL_CUBLAS_FN(cublasGetProperty)(PATCH_LEVEL, &bpat);
        snprintf(cublas, sizeof cublas, "cuBLAS %d.%d.%d", bmaj, bmin, bpat);
    } else {
        snprintf(cublas, sizeof cublas, "cuBLAS not found");
    }
    if (drv > 0)
        snprintf(driver, sizeof driver, "driver %d.%d", drv / 1000, drv % 1000 / 10);
    else
        snprintf(driver, sizeof driver, "no driver");
#ifdef DL_WITH_CUDNN
    size_t v = cudnnGetVersion(); // e.g. 8907 (8.x) or 90100 (9.x)
    if (v >= 90000)
        snprintf(cudnn, sizeof cudnn, "cuDNN %zu.%zu.%zu", v / 10000, v % 10000 / 100, v % 100);
    else
        snprintf(cudnn, sizeof cudnn, "cuDNN %zu.%zu.%zu", v / 1000, v % 1000 / 100, v % 100);
#else
    snprintf(cudnn, sizeof cudnn, "cuDNN not linked");
#endif
    snprintf(buf, (size_t)n, "CUDA runtime %d.%d, %s, %s, %s", rt / 1000, rt % 1000 / 10, driver,
             cublas, cudnn);
    return buf;
}
