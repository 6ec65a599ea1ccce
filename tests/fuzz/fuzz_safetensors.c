/* fuzz_safetensors.c - the safetensors reader (src/io/safetensors.c) on
 * arbitrary files: load, touch every tensor's first and last element through
 * a contiguous copy, free.  The file is a per-process scratch file. */
#include "core/tensor.h"
#include "fuzz.h"
#include "io/safetensors.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_scratch_file(".safetensors");
    if (fuzz_write_file(path, data, size)) return 0;
    dl_safetensors *st = dl_safetensors_load(path);
    if (!st) return 0;
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < st->ntensors; i++) {
        dl_tensor *c = dl_tensor_contiguous(st->tensors[i].tensor);
        if (!c) continue;
        size_t bytes = (size_t)dl_tensor_numel(c) * dl_dtype_size(c->dtype);
        const uint8_t *p = dl_tensor_data_ptr(c);
        if (bytes) sink ^= p[0] ^ p[bytes - 1];
        dl_tensor_release(c);
    }
    for (size_t i = 0; i < st->nmeta; i++)
        if (st->meta[i].value_len) sink ^= (uint8_t)st->meta[i].value[st->meta[i].value_len - 1];
    (void)sink;
    dl_safetensors_free(st);
    return 0;
}
