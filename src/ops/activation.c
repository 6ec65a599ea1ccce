/* ops/activation.c - the activation family (see activation.h): the
 * backwards of the activations whose forwards are elementwise unary ops
 * (relu), on the CPU (cpu/activation.c) or CUDA.  Tensors need a floating
 * dtype on one device (a 0-dim CPU tensor may stand beside CUDA ones). */
#include "ops/activation.h"
#include "cpu/activation.h"
#include "kernels/activation.h"
#include "ops/op_util.h"

/* --- relu_backward
 * --------------------------------------------------------------------------------- */

dl_tensor *dl_relu_backward(dl_tensor *gy, dl_tensor *y) {
    const char *op = "relu_backward";
    dl_tensor *ts[2] = {gy, y};
    dl_device dev;
    if (dl_op_need_floating(op, "grad", gy) || dl_op_need_floating(op, "output", y) ||
        dl_op_check_same_shape(op, "grad", gy, "output", y) || dl_common_device(op, 2, ts, &dev))
        return NULL;
    dl_tensor *g = dl_tensor_to_dtype(gy, y->dtype);
    /* a channels-last y gives a channels-last gradient (no layout change
     * between the convolutions of a channels-last network) */
    bool keep = y->ndim == 4 && dl_op_is_channels_last(y);
    dl_tensor *gx = !g     ? NULL
                    : keep ? dl_tensor_empty_like_layout(y, y->dtype, dev)
                           : dl_tensor_empty(y->ndim, y->shape, y->dtype, dev);
    int rc = 0;
    if (gx && dev.type != DL_DEVICE_CUDA)
        dl_cpu_threshold_backward(gx, g, y, 0.0);
    else if (gx)
        rc = dl_cuda_activation && dl_cuda_activation->threshold_backward
                 ? dl_cuda_activation->threshold_backward(gx, g, y, 0.0)
                 : dl_cuda_missing(op);
    dl_tensor_release(g);
    return dl_op_result(gx, rc);
}

/* --- GELU / SiLU / sigmoid / tanh backward ------------------------------------------------------
 */

dl_tensor *dl_act_backward(dl_unary_op op, dl_tensor *gy, dl_tensor *s) {
    const char *name = "activation_backward";
    if (op != DL_UNARY_GELU && op != DL_UNARY_GELU_TANH && op != DL_UNARY_SILU &&
        op != DL_UNARY_SIGMOID && op != DL_UNARY_TANH) {
        dl_error("%s: op must be gelu, silu, sigmoid or tanh", name);
        return NULL;
    }
    if (dl_op_need_floating(name, "grad", gy) || dl_op_need_floating(name, "saved", s) ||
        dl_op_check_same_shape(name, "grad", gy, "saved", s))
        return NULL;
    if (dl_tensor_device(gy).type != DL_DEVICE_CPU || dl_tensor_device(s).type != DL_DEVICE_CPU) {
        dl_error("%s: CPU tensors only", name);
        return NULL;
    }
    dl_tensor *g = dl_tensor_to_dtype(gy, s->dtype);
    dl_tensor *gx = g ? dl_tensor_empty(s->ndim, s->shape, s->dtype, dl_tensor_device(s)) : NULL;
    if (gx) dl_cpu_act_backward(op, gx, g, s);
    dl_tensor_release(g);
    return gx;
}
