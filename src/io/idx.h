/* idx.h - the IDX format of MNIST-style datasets: magic 0x00 0x00 <type>
 * <ndim>, ndim big-endian uint32 sizes, then the elements big-endian.
 * Files may be gzip-compressed (zlib reads both kinds transparently).
 * Element types map to dtypes: ubyte -> uint8, byte/short/int -> int32,
 * float -> float32, double -> float64.  Truncated or malformed files are
 * errors naming the file. */
#ifndef DL_IO_IDX_H
#define DL_IO_IDX_H

#include "core/tensor.h"

/* A new contiguous tensor with the file's shape and data. */
dl_tensor *dl_idx_read(const char *path);
/* Writes t (uint8, int32, float32 or float64, at most 8 dims) as an IDX file;
 * gzip-compressed when gz is non-zero. */
int dl_idx_write(const char *path, dl_tensor *t, int gz);

#endif
