/* dtype.c - dtype table, parsing, promotion and half/bfloat16 conversion. */
#include "dtype.h"
#include "error.h"

#include <math.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size;
    dl_kind kind;
} dtype_info[DL_DTYPE_COUNT] = {
    [DL_DTYPE_F32] = {"float32", 4, DL_KIND_FLOAT},
    [DL_DTYPE_F64] = {"float64", 8, DL_KIND_FLOAT},
    [DL_DTYPE_F16] = {"float16", 2, DL_KIND_FLOAT},
    [DL_DTYPE_BF16] = {"bfloat16", 2, DL_KIND_FLOAT},
    [DL_DTYPE_I64] = {"int64", 8, DL_KIND_INT},
    [DL_DTYPE_I32] = {"int32", 4, DL_KIND_INT},
    [DL_DTYPE_U8] = {"uint8", 1, DL_KIND_INT},
    [DL_DTYPE_BOOL] = {"bool", 1, DL_KIND_BOOL},
};

size_t dl_dtype_size(dl_dtype t) {
    return dtype_info[t].size;
}
const char *dl_dtype_name(dl_dtype t) {
    return (unsigned)t < DL_DTYPE_COUNT ? dtype_info[t].name : "?";
}
bool dl_dtype_is_floating(dl_dtype t) {
    return dtype_info[t].kind == DL_KIND_FLOAT;
}
dl_kind dl_dtype_kind(dl_dtype t) {
    return dtype_info[t].kind;
}

int dl_dtype_parse(const char *name, dl_dtype *out) {
    static const struct {
        const char *alias;
        dl_dtype t;
    } aliases[] = {
        {"float32", DL_DTYPE_F32},   {"float", DL_DTYPE_F32},   {"float64", DL_DTYPE_F64},
        {"double", DL_DTYPE_F64},    {"float16", DL_DTYPE_F16}, {"half", DL_DTYPE_F16},
        {"bfloat16", DL_DTYPE_BF16}, {"int64", DL_DTYPE_I64},   {"long", DL_DTYPE_I64},
        {"int32", DL_DTYPE_I32},     {"int", DL_DTYPE_I32},     {"uint8", DL_DTYPE_U8},
        {"byte", DL_DTYPE_U8},       {"bool", DL_DTYPE_BOOL},
    };
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcmp(name, aliases[i].alias) == 0) {
            *out = aliases[i].t;
            return 0;
        }
    return dl_error("unknown dtype '%s' (expected float32, float64, float16, bfloat16, int64, "
                    "int32, uint8 or bool)",
                    name);
}

dl_dtype dl_promote_types(dl_dtype a, dl_dtype b) {
    if (a == b) return a;
    dl_kind ka = dtype_info[a].kind, kb = dtype_info[b].kind;
    if (ka != kb) return ka > kb ? a : b;
    if (ka == DL_KIND_FLOAT) {
        if (a == DL_DTYPE_F64 || b == DL_DTYPE_F64) return DL_DTYPE_F64;
        return DL_DTYPE_F32; /* f32 with anything, or f16 with bf16 */
    }
    /* integers: u8 < i32 < i64 (all of ours are wider than u8 and signed) */
    if (a == DL_DTYPE_I64 || b == DL_DTYPE_I64) return DL_DTYPE_I64;
    return DL_DTYPE_I32;
}

dl_dtype dl_promote_with_scalar(dl_dtype t, bool scalar_is_float, bool scalar_is_bool) {
    dl_kind k = dtype_info[t].kind;
    if (scalar_is_float && k != DL_KIND_FLOAT) return DL_DTYPE_F32;
    if (!scalar_is_float && !scalar_is_bool && k == DL_KIND_BOOL) return DL_DTYPE_I64;
    return t;
}

/* The float whose IEEE bits are `bits`, and back (memcpy: no aliasing UB). */
static float float_of_bits(uint32_t bits) {
    float f;
    memcpy(&f, &bits, 4);
    return f;
}
static uint32_t bits_of_float(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    return x;
}

/* IEEE half <-> float, round to nearest even. */
float dl_half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while ((man & 0x400) == 0);
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    return float_of_bits(bits);
}

uint16_t dl_float_to_half(float f) {
    uint32_t x = bits_of_float(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0));
    if (absx >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to >= 65520: inf */
    if (absx < 0x38800000u) {                                  /* below half's normal range */
        /* value * 2^24 rounded to nearest even gives the subnormal mantissa */
        float scaled = float_of_bits(absx) * 16777216.0f; /* exact: power of two */
        uint32_t m = (uint32_t)nearbyintf(scaled);
        return (uint16_t)(sign | m);
    }
    uint32_t mant = absx & 0x7fffff;
    uint32_t exp = (absx >> 23) - 127 + 15;
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

float dl_bf16_to_float(uint16_t h) {
    return float_of_bits((uint32_t)h << 16);
}

uint16_t dl_float_to_bf16(float f) {
    uint32_t x = bits_of_float(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet nan */
    uint32_t lsb = (x >> 16) & 1;
    x += 0x7fffu + lsb;
    return (uint16_t)(x >> 16);
}

double dl_load_f64(const void *p, dl_dtype t) {
    switch (t) {
    case DL_DTYPE_F32: return *(const float *)p;
    case DL_DTYPE_F64: return *(const double *)p;
    case DL_DTYPE_F16: return dl_half_to_float(*(const uint16_t *)p);
    case DL_DTYPE_BF16: return dl_bf16_to_float(*(const uint16_t *)p);
    case DL_DTYPE_I64: return (double)*(const int64_t *)p;
    case DL_DTYPE_I32: return *(const int32_t *)p;
    case DL_DTYPE_U8: return *(const uint8_t *)p;
    case DL_DTYPE_BOOL: return *(const uint8_t *)p ? 1.0 : 0.0;
    default: return 0;
    }
}

int64_t dl_load_i64(const void *p, dl_dtype t) {
    switch (t) {
    case DL_DTYPE_I64: return *(const int64_t *)p;
    case DL_DTYPE_I32: return *(const int32_t *)p;
    case DL_DTYPE_U8: return *(const uint8_t *)p;
    case DL_DTYPE_BOOL: return *(const uint8_t *)p ? 1 : 0;
    default: {
        double d = dl_load_f64(p, t);
        if (d != d) return INT64_MIN;
        if (d >= 9.2233720368547758e18) return INT64_MAX;
        if (d <= -9.2233720368547758e18) return INT64_MIN;
        return (int64_t)d; /* truncation toward zero, as a C cast and PyTorch do */
    }
    }
}

void dl_store_f64(void *p, dl_dtype t, double v) {
    switch (t) {
    case DL_DTYPE_F32: *(float *)p = (float)v; break;
    case DL_DTYPE_F64: *(double *)p = v; break;
    case DL_DTYPE_F16: *(uint16_t *)p = dl_float_to_half((float)v); break;
    case DL_DTYPE_BF16: *(uint16_t *)p = dl_float_to_bf16((float)v); break;
    case DL_DTYPE_BOOL: *(uint8_t *)p = v != 0; break;
    default: {
        int64_t i;
        if (v != v)
            i = INT64_MIN;
        else if (v >= 9.2233720368547758e18)
            i = INT64_MAX;
        else if (v <= -9.2233720368547758e18)
            i = INT64_MIN;
        else
            i = (int64_t)v;
        dl_store_i64(p, t, i);
    }
    }
}

void dl_store_i64(void *p, dl_dtype t, int64_t v) {
    switch (t) {
    case DL_DTYPE_I64: *(int64_t *)p = v; break;
    case DL_DTYPE_I32: *(int32_t *)p = (int32_t)(uint32_t)v; break;
    case DL_DTYPE_U8: *(uint8_t *)p = (uint8_t)v; break;
    case DL_DTYPE_BOOL: *(uint8_t *)p = v != 0; break;
    default: dl_store_f64(p, t, (double)v);
    }
}
