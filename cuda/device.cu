// device.cu - CUDA device queries.  For now the backend answers whether a GPU
// is present; kernels arrive with the CUDA issue.  extern "C" entry points only.
#include <cuda_runtime.h>

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
