// conv_plan.cuh - the cuDNN graph (backend) API path of the conv family
// (cuda/conv_plan.cu), for cuda/conv.cu: one direction of a convolution run
// through a cached execution plan, or declined so that the legacy API runs it.
#pragma once

extern "C" {
#include "kernels/conv.h"
}

// Runs direction kind (DL_CONV_PLAN_*) of the convolution s on dense operands
// in one layout (nhwc: channels-last tensors and OHWI filters), x, w, y in the
// forward's roles (dx, dw, dy in theirs; the direction's output is written in
// full).  0 when a plan ran, 1 when there is no usable plan for these facts
// (the caller runs the legacy API instead; also after a plan failed, with a
// one-time warning), -1 with an error when cuDNN cannot be used at all.
int dl_cuda_conv_plan_run(int kind, dl_dtype dt, const dl_conv2d_shape *s, bool nhwc, void *x,
                          void *w, void *y);

void dl_cuda_conv_plan_stats(dl_conv_plan_stats *out);
