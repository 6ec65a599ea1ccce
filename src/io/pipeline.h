/* pipeline.h - the per-sample image pipeline: an immutable, refcounted list of
 * transform steps (built from a Lua Compose of C transforms) and the executor
 * that runs it on one image - a tensor, or encoded JPEG/PNG bytes decoded on
 * demand - writing the result into a caller's tensor (a batch slot).
 *
 * Invariants:
 *  - A dl_pipeline never changes after dl_pipeline_new; any number of threads
 *    may run it at once.  Execution calls no Lua and no OpenMP.
 *  - Geometry (crops, resizes, flips) is kept pending and carried out in one
 *    resampling pass when something needs pixels; ToTensor and Normalize stay
 *    pending as a per-channel uint8 -> float table applied by that same pass.
 *    So Resize + CenterCrop + ToTensor + Normalize (or RandomResizedCrop +
 *    flip + ToTensor + Normalize) read the decoded image once and write the
 *    output once.
 *  - An encoded JPEG is decoded only where the first pixel pass reads (the
 *    rows and DCT column blocks of the crop), and at 1/2, 1/4 or 1/8 scale in
 *    the DCT domain when that pass shrinks the image 2x or more (random
 *    parameters are always drawn against the full-size image, so they do not
 *    depend on this).
 *  - Random parameters follow torchvision's sampling rules, drawn from a
 *    dl_sample_rng. */
#ifndef DL_IO_PIPELINE_H
#define DL_IO_PIPELINE_H

#include "transform.h"

typedef enum {
    DL_TF_RESIZE = 0,
    DL_TF_CENTER_CROP,
    DL_TF_RANDOM_CROP,
    DL_TF_RANDOM_RESIZED_CROP,
    DL_TF_RANDOM_HFLIP,
    DL_TF_RANDOM_VFLIP,
    DL_TF_COLOR_JITTER,
    DL_TF_GRAYSCALE,
    DL_TF_TO_TENSOR,
    DL_TF_NORMALIZE,
    DL_TF_PAD,
    DL_TF_CROP,         /* fixed box: crop = top, left, height, width */
    DL_TF_RESIZED_CROP, /* fixed box, then resize to size */
    DL_TF_KIND_COUNT
} dl_tf_kind;

#define DL_TF_MAX_CHANNELS 4

typedef struct {
    dl_tf_kind kind;
    int64_t size[2]; /* (h, w); Resize with nsize 1: the shorter edge */
    int nsize;
    int64_t max_size; /* Resize: 0 = none */
    dl_interp interp;
    int64_t crop[4];    /* CROP / RESIZED_CROP: top, left, height, width */
    int64_t padding[4]; /* left, top, right, bottom */
    int has_padding, pad_if_needed;
    dl_pad_mode pad_mode;
    double fill[DL_TF_MAX_CHANNELS];
    double scale[2], ratio[2]; /* RandomResizedCrop */
    double p;                  /* flips */
    double jitter[4][2];       /* brightness, contrast, saturation, hue ranges */
    int has_jitter[4];
    int gray_out; /* Grayscale: 1 or 3 */
    float mean[DL_TF_MAX_CHANNELS], std[DL_TF_MAX_CHANNELS];
    int nnorm; /* 1 (broadcast) or the channel count */
} dl_tf_step;

typedef struct dl_pipeline {
    int refcount; /* atomic */
    int n;
    dl_tf_step steps[];
} dl_pipeline;

/* Checks the steps (sizes, ranges) and copies them; NULL with an error
 * naming the transform. */
dl_pipeline *dl_pipeline_new(int n, const dl_tf_step *steps);
dl_pipeline *dl_pipeline_retain(dl_pipeline *p);
void dl_pipeline_release(dl_pipeline *p);
/* A short name for a step kind ("Resize", ...). */
const char *dl_tf_name(dl_tf_kind k);
/* All of them, in dl_tf_kind order, NULL-terminated (for luaL_checkoption). */
const char *const *dl_tf_names(void);

/* Where the result goes: called once with the output's (C, H, W) and dtype;
 * returns a (C, H, W) tensor to write (a new reference, e.g. a view of a
 * batch slot), or NULL with an error (a shape that does not fit the batch). */
typedef dl_tensor *(*dl_pipeline_dst_fn)(void *ctx, const int64_t *shape, dl_dtype dtype);

/* Runs p (NULL: no steps) on img ((C, H, W) uint8 or float32, any strides;
 * not modified).
 * With dst_fn NULL the result is a new contiguous tensor in *out; otherwise
 * the result is written into what dst_fn returns and *out is that tensor. */
int dl_pipeline_run_tensor(const dl_pipeline *p, dl_tensor *img, dl_sample_rng *rng,
                           dl_pipeline_dst_fn dst_fn, void *ctx, dl_tensor **out);

/* Runs p on an encoded image (JPEG/PNG bytes; name is used in messages),
 * decoded to `channels` (3 RGB or 1 L). */
int dl_pipeline_run_encoded(const dl_pipeline *p, const uint8_t *buf, size_t n, const char *name,
                            int channels, dl_sample_rng *rng, dl_pipeline_dst_fn dst_fn, void *ctx,
                            dl_tensor **out);

/* torchvision's RandomResizedCrop.get_params for an h x w image: top, left,
 * height, width of the crop. */
void dl_tf_rrc_params(int64_t h, int64_t w, const double scale[2], const double ratio[2],
                      dl_sample_rng *rng, int64_t out[4]);
/* torchvision's Resize output size for an h x w image. */
void dl_tf_resize_size(const dl_tf_step *s, int64_t h, int64_t w, int64_t *oh, int64_t *ow);

#endif
