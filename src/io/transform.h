/* transform.h - image transform kernels: Pillow-exact resampling (with crop,
 * window and flips fused), padding, Pillow's colour enhancers and HSV hue
 * shift on uint8 images, torchvision's tensor versions on float images,
 * grayscale, and the per-sample random stream.
 *
 * Invariants:
 *  - Images are (C, H, W) tensors of uint8 (a Pillow image's pixels) or
 *    float32 (after ToTensor), any strides.  Kernels are single-threaded and
 *    call no OpenMP, so loader workers (pthreads) run them directly.
 *  - uint8 kernels reproduce Pillow (fixed-point 22-bit resampling with a
 *    uint8 round between the horizontal and the vertical pass; ImageEnhance's
 *    float blends truncated to uint8; Convert.c's HSV).  float kernels follow
 *    torchvision's functional_tensor in float32.
 *  - Errors return -1 (or NULL) with a dl_error message naming the transform. */
#ifndef DL_IO_TRANSFORM_H
#define DL_IO_TRANSFORM_H

#include "core/rng.h"
#include "core/tensor.h"

#include <stdint.h>

/* --- per-sample randomness -------------------------------------------------- */

/* A stream of uniform doubles from Philox.  Loader samples key it by (seed,
 * epoch, sample index), so a sample's draws do not depend on which worker
 * runs it or when; single calls from Lua draw blocks from a generator.  A
 * tape lets a batch replay the first image's draws for the others. */
typedef struct {
    uint64_t key, counter;
    dl_generator *gen; /* non-NULL: each new block is reserved from it */
    uint32_t words[4];
    int avail;
    double *tape; /* recorded draws (malloc'd) */
    int ntape, cap, pos, replay;
} dl_sample_rng;

void dl_sample_rng_init(dl_sample_rng *r, uint64_t seed, uint64_t epoch, uint64_t index);
void dl_sample_rng_from_generator(dl_sample_rng *r, dl_generator *g);
/* Uniform in [0, 1) with 53 bits. */
double dl_sample_rng_uniform(dl_sample_rng *r);
/* Starts recording (record=1) or replaying from the start (record=0). */
void dl_sample_rng_tape(dl_sample_rng *r, int record);
void dl_sample_rng_free(dl_sample_rng *r);

/* --- resampling -------------------------------------------------------------- */

typedef enum { DL_INTERP_NEAREST = 0, DL_INTERP_BILINEAR, DL_INTERP_BICUBIC } dl_interp;

/* One fused crop + resize + window + flip.  The source box (x0, y0, x1, y1),
 * in src pixel units (fractions allowed), is resized to a virtual rw x rh
 * image; dst receives the window starting at (ox, oy) with dst's size, then
 * mirrored when hflip/vflip.  Where the box is the whole source and rw, rh its
 * size, no resampling happens along that axis (a plain copy). */
typedef struct {
    double box[4];
    int64_t rw, rh;
    int64_t ox, oy;
    int hflip, vflip;
    dl_interp interp;
} dl_resample_geom;

/* dst is (C, oh, ow) uint8 or float32; src is (C, H, W) uint8 or float32
 * (float src needs float dst).  lut is C x 256 floats mapping the uint8
 * result to the float stored (ToTensor + Normalize), required for uint8 src
 * with float dst and ignored otherwise. */
int dl_tf_resample_into(dl_tensor *dst, const dl_tensor *src, const dl_resample_geom *g,
                        const float *lut);

/* --- padding ------------------------------------------------------------------ */

typedef enum { DL_PAD_CONSTANT = 0, DL_PAD_EDGE, DL_PAD_REFLECT, DL_PAD_SYMMETRIC } dl_pad_mode;

/* A new contiguous (C, H + top + bottom, W + left + right) image.  fill has
 * C values (constant mode); for uint8 they are truncated as Pillow does. */
dl_tensor *dl_tf_pad(const dl_tensor *img, int64_t left, int64_t top, int64_t right, int64_t bottom,
                     dl_pad_mode mode, const double *fill);

/* --- colour (in place on a contiguous (C, H, W) image) ----------------------- */

/* Pillow ImageEnhance / torchvision adjust_* on uint8 (Pillow) or float
 * (torchvision tensor) RGB images.  1-channel images: brightness and
 * contrast apply, saturation and hue leave them unchanged. */
int dl_tf_adjust_brightness_(dl_tensor *img, double f);
int dl_tf_adjust_contrast_(dl_tensor *img, double f);
int dl_tf_adjust_saturation_(dl_tensor *img, double f);
int dl_tf_adjust_hue_(dl_tensor *img, double h); /* h in [-0.5, 0.5] */

/* Grayscale: a new contiguous (n_out, H, W) image, n_out 1 or 3.  uint8 uses
 * Pillow's integer luma; float uses 0.2989 R + 0.587 G + 0.114 B. */
dl_tensor *dl_tf_grayscale(const dl_tensor *img, int n_out);

/* --- conversion ---------------------------------------------------------------- */

/* ToTensor's uint8 -> float map, then Normalize steps folded in: lut is
 * C x 256; dl_tf_lut_init fills lut[c][v] = v / 255 (float), and each
 * dl_tf_lut_normalize applies (x - mean[c]) / std[c] in float. */
void dl_tf_lut_init(float *lut, int c);
void dl_tf_lut_normalize(float *lut, int c, const float *mean, const float *std);

/* In place on a contiguous float (C, H, W) image: (x - mean[c]) / std[c]. */
int dl_tf_normalize_(dl_tensor *img, const float *mean, const float *std);

#endif
