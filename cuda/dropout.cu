// dropout.cu - CUDA kernel of the dropout family (see src/kernels/dropout.h):
// mask_scale, out = x * (mask ? scale : 0), as a map of map.cuh's machinery.  The
// per-element expression mirrors src/cpu/dropout.c: float32 and the half types
// compute in float (half storage rounded once on store), float64 in double; a
// dropped NaN or inf gives NaN, as on the CPU.
// Invariants: those of map.cuh.
#include "map.cuh"

extern "C" {
#include "kernels/dropout.h"
}

namespace {

using namespace dl_map;

// --- kernels -----------------------------------------------------------------------------

// out = x * (mask ? scale : 0).
template <typename C> struct MaskScaleFn {
    Out o;
    In<C> x;
    In<bool> mask;
    C scale;
    __device__ void operator()(int64_t i) const {
        store<C>(at(o, i), o.dt, get(x, i) * (get(mask, i) ? scale : C(0)));
    }
};

// --- launchers ---------------------------------------------------------------------------

template <typename C>
int mask_scale_run(dl_tensor *out, dl_tensor *x, dl_tensor *mask, double scale) {
    const char *name = "mask_scale";
    dl_tensor *in[2] = {x, mask};
    dl_cuda_layout ls[3];
    if (begin(name, out, 2, in, ls)) return -1;
    MaskScaleFn<C> f{};
    if (make_out(name, out, ls[0], readable<C>(out->dtype), &f.o) ||
        make_in<C>(name, x, ls[1], &f.x) || make_in<bool>(name, mask, ls[2], &f.mask))
        return -1;
    f.scale = (C)scale;
    return launch(f, dl_tensor_numel(out));
}

// --- entry points (the table) ------------------------------------------------------------

int mask_scale(dl_tensor *out, dl_tensor *x, dl_tensor *mask, double scale) {
    return by_float_kind("mask_scale", out->dtype,
                         [&](auto c) { return mask_scale_run<decltype(c)>(out, x, mask, scale); });
}

} // namespace

DL_CUDA_TABLE(dropout) = {
    .family = "dropout",
    .mask_scale = mask_scale,
};
