/* fuzz_idx.c - the IDX reader (src/io/idx.c) on arbitrary files, plain and
 * gzip-compressed (zlib reads both), then a write of what was read. */
#include "core/tensor.h"
#include "fuzz.h"
#include "io/idx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_scratch_file(".idx");
    if (fuzz_write_file(path, data, size)) return 0;
    dl_tensor *t = dl_idx_read(path);
    if (!t) return 0;
    if (dl_tensor_numel(t) <= 4096) dl_idx_write(path, t, size & 1);
    dl_tensor_release(t);
    return 0;
}
