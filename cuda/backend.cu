// backend.cu - hands the kernel families' tables to the op layer (called by
// dl_cuda_init once a GPU has been found).  Each table dl_cuda_<family>_table
// is defined beside its kernels in cuda/<family>.cu; its type is in
// src/kernels/<family>.h.
extern "C" {
#include "kernels/cuda.h"
#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/batchnorm.h"
#include "kernels/clipgrad.h"
#include "kernels/conv.h"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/index.h"
#include "kernels/linalg.h"
#include "kernels/layernorm.h"
#include "kernels/loss.h"
#include "kernels/optim.h"
#include "kernels/pad.h"
#include "kernels/pool.h"
#include "kernels/random.h"
#include "kernels/reduce.h"
#include "kernels/softmax.h"
}

extern const dl_cuda_elementwise_kernels dl_cuda_elementwise_table;
extern const dl_cuda_activation_kernels dl_cuda_activation_table;
extern const dl_cuda_attention_kernels dl_cuda_attention_table;
extern const dl_cuda_dropout_kernels dl_cuda_dropout_table;
extern const dl_cuda_reduce_kernels dl_cuda_reduce_table;
extern const dl_cuda_softmax_kernels dl_cuda_softmax_table;
extern const dl_cuda_loss_kernels dl_cuda_loss_table;
extern const dl_cuda_index_kernels dl_cuda_index_table;
extern const dl_cuda_pad_kernels dl_cuda_pad_table;
extern const dl_cuda_linalg_kernels dl_cuda_linalg_table;
extern const dl_cuda_conv_kernels dl_cuda_conv_table;
extern const dl_cuda_batchnorm_kernels dl_cuda_batchnorm_table;
extern const dl_cuda_layernorm_kernels dl_cuda_layernorm_table;
extern const dl_cuda_embedding_kernels dl_cuda_embedding_table;
extern const dl_cuda_clipgrad_kernels dl_cuda_clipgrad_table;
extern const dl_cuda_pool_kernels dl_cuda_pool_table;
extern const dl_cuda_random_kernels dl_cuda_random_table;
extern const dl_cuda_optim_kernels dl_cuda_optim_table;

void dl_cuda_register_kernels(void) {
    dl_cuda_elementwise = &dl_cuda_elementwise_table;
    dl_cuda_activation = &dl_cuda_activation_table;
    dl_cuda_attention = &dl_cuda_attention_table;
    dl_cuda_dropout = &dl_cuda_dropout_table;
    dl_cuda_reduce = &dl_cuda_reduce_table;
    dl_cuda_softmax = &dl_cuda_softmax_table;
    dl_cuda_loss = &dl_cuda_loss_table;
    dl_cuda_index = &dl_cuda_index_table;
    dl_cuda_pad = &dl_cuda_pad_table;
    dl_cuda_linalg = &dl_cuda_linalg_table;
    dl_cuda_conv = &dl_cuda_conv_table;
    dl_cuda_batchnorm = &dl_cuda_batchnorm_table;
    dl_cuda_layernorm = &dl_cuda_layernorm_table;
    dl_cuda_embedding = &dl_cuda_embedding_table;
    dl_cuda_clipgrad = &dl_cuda_clipgrad_table;
    dl_cuda_pool = &dl_cuda_pool_table;
    dl_cuda_random = &dl_cuda_random_table;
    dl_cuda_optim = &dl_cuda_optim_table;
}
