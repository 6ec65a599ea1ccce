// activation.cu - CUDA kernels of the activation family (see src/kernels/activation.h):
// threshold_backward, relu's gradient, as a map of map.cuh's machinery.  The
// per-element expression mirrors src/cpu/activation.c: float32 and the half types
// compute in float (half storage rounded once on store), float64 in double.
// Invariants: those of map.cuh.
#include "map.cuh"

extern "C" {
#include "kernels/activation.h"
}

namespace {

using namespace dl_map;

// --- kernels -----------------------------------------------------------------------------

// gx = y <= threshold ? 0 : gy (NaN in y passes gy through).
template <typename C> struct ThresholdBackwardFn {
    Out gx;
    In<C> gy, y;
    C threshold;
    __device__ void operator()(int64_t i) const {
        store<C>(at(gx, i), gx.dt, get(y, i) <= threshold ? C(0) : get(gy, i));
    }
};

// --- launchers ---------------------------------------------------------------------------

template <typename C>
int threshold_backward_run(dl_tensor *gx, dl_tensor *gy, dl_tensor *y, double threshold) {
    const char *name = "threshold_backward";
    dl_tensor *in[2] = {gy, y};
    dl_cuda_layout ls[3];
    if (begin(name, gx, 2, in, ls)) return -1;
    ThresholdBackwardFn<C> f{};
    if (make_out(name, gx, ls[0], readable<C>(gx->dtype), &f.gx) ||
        make_in<C>(name, gy, ls[1], &f.gy) || make_in<C>(name, y, ls[2], &f.y))
        return -1;
    f.threshold = (C)threshold;
    return launch(f, dl_tensor_numel(gx));
}

// --- entry points (the table) ------------------------------------------------------------

int threshold_backward(dl_tensor *gx, dl_tensor *gy, dl_tensor *y, double threshold) {
    return by_float_kind("threshold_backward", gx->dtype, [&](auto c) {
        return threshold_backward_run<decltype(c)>(gx, gy, y, threshold);
    });
}

} // namespace

DL_CUDA_TABLE(activation) = {
    .family = "activation",
    .threshold_backward = threshold_backward,
};
