/* device.c - backend availability: the one place that asks the CUDA backend
 * whether it exists, so no other op body needs #ifdef. */
#include "device.h"
#include "cpu/info.h"
#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/batchnorm.h"
#include "kernels/clipgrad.h"
#include "kernels/conv.h"
#include "kernels/cuda.h"
#include "ops/op_util.h"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/index.h"
#include "kernels/layernorm.h"
#include "kernels/linalg.h"
#include "kernels/loss.h"
#include "kernels/optim.h"
#include "kernels/pad.h"
#include "kernels/pool.h"
#include "kernels/random.h"
#include "kernels/reduce.h"
#include "kernels/rnn.h"
#include "kernels/softmax.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DL_WITH_CUDA
int dl_cuda_device_count(void);
const char *dl_cuda_device_name(int index, char *buf, int n);
const char *dl_cuda_versions(char *buf, int n);
void dl_cuda_init(void);
#endif

/* The backend's tables: set by dl_cuda_init when a GPU is present. */
const dl_cuda_runtime *dl_cuda_rt;
const dl_cuda_elementwise_kernels *dl_cuda_elementwise;
const dl_cuda_activation_kernels *dl_cuda_activation;
const dl_cuda_attention_kernels *dl_cuda_attention;
const dl_cuda_dropout_kernels *dl_cuda_dropout;
const dl_cuda_reduce_kernels *dl_cuda_reduce;
const dl_cuda_softmax_kernels *dl_cuda_softmax;
const dl_cuda_loss_kernels *dl_cuda_loss;
const dl_cuda_index_kernels *dl_cuda_index;
const dl_cuda_pad_kernels *dl_cuda_pad;
const dl_cuda_linalg_kernels *dl_cuda_linalg;
const dl_cuda_conv_kernels *dl_cuda_conv;
const dl_cuda_batchnorm_kernels *dl_cuda_batchnorm;
const dl_cuda_layernorm_kernels *dl_cuda_layernorm;
const dl_cuda_embedding_kernels *dl_cuda_embedding;
const dl_cuda_clipgrad_kernels *dl_cuda_clipgrad;
const dl_cuda_pool_kernels *dl_cuda_pool;
const dl_cuda_random_kernels *dl_cuda_random;
const dl_cuda_optim_kernels *dl_cuda_optim;
const dl_cuda_rnn_kernels *dl_cuda_rnn;
dl_backend_flags dl_flags = {false, false, false, false};

/* A switch from the environment: 0 or 1, else the default. */
static bool env_switch(const char *name, bool def) {
    const char *v = getenv(name);
    if (!v || !*v) return def;
    return strcmp(v, "0") != 0;
}

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void init_backends(void) {
    dl_flags.cudnn_graph = env_switch("DLUA_CUDNN_GRAPH", false);
    dl_flags.cuda_sync_checks = env_switch("DLUA_CUDA_SYNC_CHECKS", false);
#ifdef DL_WITH_CUDA
    dl_cuda_init();
    if (!dl_cuda_rt) dl_device_unavailable_reason = "no GPU found on this machine (CUDA build)";
#else
    dl_device_unavailable_reason = "CUDA is not in this build (built without the CUDA toolkit)";
#endif
}

void dl_backends_init(void) {
    pthread_once(&init_once, init_backends);
}

int dl_cuda_missing(const char *op) {
    return dl_error("%s: no CUDA kernel for this operation in this build", op);
}

int dl_common_device(const char *op, int n, dl_tensor *const *ts, dl_device *out) {
    dl_device dev = DL_CPU;
    int which = -1;
    for (int i = 0; i < n; i++) {
        if (!ts[i] || ts[i]->storage->device.type != DL_DEVICE_CUDA) continue;
        if (which >= 0 && !dl_device_equal(dev, ts[i]->storage->device)) {
            char a[32], b[32];
            return dl_error("%s: expected all tensors on one device, got %s and %s", op,
                            dl_device_name(dev, a, sizeof a),
                            dl_device_name(ts[i]->storage->device, b, sizeof b));
        }
        dev = ts[i]->storage->device;
        which = i;
    }
    if (which >= 0) {
        for (int i = 0; i < n; i++) {
            if (!ts[i] || ts[i]->storage->device.type == DL_DEVICE_CUDA || ts[i]->ndim == 0)
                continue;
            char a[32];
            return dl_error("%s: expected all tensors on one device, got %s and cpu (argument "
                            "%d); move it with :to(\"%s\")",
                            op, dl_device_name(dev, a, sizeof a), i + 1, a);
        }
    }
    *out = dev;
    return 0;
}

dl_tensor *dl_scalar_to(dl_tensor *t, dl_device dev) {
    return dl_tensor_to_device(t, dev);
}

int dl_cuda_available_devices(void) {
#ifdef DL_WITH_CUDA
    dl_backends_init();
    return dl_cuda_rt ? dl_cuda_rt->device_count() : 0;
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
