/* device.h - which backends this build has and this machine can run. */
#ifndef DL_OPS_DEVICE_H
#define DL_OPS_DEVICE_H

/* Starts the backends once per process (thread-safe): in a CUDA build with a
 * GPU this registers the CUDA allocator, copies and kernel tables.  Called by
 * luaopen_dl and dl_state_new before any tensor exists. */
void dl_backends_init(void);

/* Number of usable CUDA devices: 0 in a build without CUDA or without a GPU. */
int dl_cuda_available_devices(void);
/* The device's name into buf, or NULL. */
const char *dl_cuda_name(int index, char *buf, int n);
/* 1 when the CUDA backend was compiled in. */
int dl_cuda_compiled(void);
/* One line naming the backends compiled in and the libraries behind them,
 * for `dlua -v`: "cpu (oneDNN 3.0.0, OpenMP 4.5); cuda: not in this build", or
 * "...; cuda (CUDA runtime 12.2, driver 12.4, cuBLAS 12.2.5, cuDNN 8.9.7)". */
const char *dl_backends_info(char *buf, int n);

#endif
