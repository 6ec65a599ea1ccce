/* fuzz_image.c - the JPEG and PNG decoders (src/io/codec*.c) on arbitrary
 * bytes: probe, full decode (RGB and L, every DCT scale) and region decode.
 * Built twice, as fuzz_jpeg and fuzz_png: the format only selects the seed
 * corpus, since the decoders dispatch on the bytes' signature.  The pixel
 * limit is lowered so bombs are refused instead of exhausting memory. */
#include "fuzz.h"
#include "io/codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dl_image_set_max_pixels(1 << 22);
    dl_image_info info;
    if (dl_image_probe(data, size, "<fuzz>", &info) != 0) return 0;
    uint8_t sel = size ? data[size - 1] : 0;
    int channels = (sel & 1) ? 1 : 3, denom = 1 << ((sel >> 1) & 3);
    dl_image img = {0};
    int applied = 0;
    if (dl_image_decode(data, size, "<fuzz>", channels, denom, &img, &applied) == 0)
        dl_image_free(&img);
    int w = info.w / denom, h = info.h / denom;
    int ox = 0, oy = 0;
    dl_image reg = {0};
    if (dl_image_decode_region(data, size, "<fuzz>", channels, denom, w / 4, h / 3, w / 2 + 1,
                               h - h / 5, &reg, &ox, &oy) == 0)
        dl_image_free(&reg);
    return 0;
}
