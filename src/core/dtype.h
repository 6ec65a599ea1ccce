/* dtype.h - element types, their sizes and names, PyTorch's promotion rules,
 * and float16/bfloat16 conversion.  Pure C; no Lua, no CUDA. */
#ifndef DL_DTYPE_H
#define DL_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    DL_DTYPE_F32 = 0,
    DL_DTYPE_F64,
    DL_DTYPE_F16,
    DL_DTYPE_BF16,
    DL_DTYPE_I64,
    DL_DTYPE_I32,
    DL_DTYPE_U8,
    DL_DTYPE_BOOL,
    DL_DTYPE_COUNT
} dl_dtype;

/* Promotion categories, lowest first: bool < integer < floating. */
typedef enum { DL_KIND_BOOL = 0, DL_KIND_INT = 1, DL_KIND_FLOAT = 2 } dl_kind;

size_t dl_dtype_size(dl_dtype t);
const char *dl_dtype_name(dl_dtype t); /* "float32", "int64", ... */
/* Parses "float32", "float", "double", "half", "long", "int", "uint8", "bool", ...
 * Returns 0 and sets *out, or -1 (with dl_last_error set) for an unknown name. */
int dl_dtype_parse(const char *name, dl_dtype *out);
bool dl_dtype_is_floating(dl_dtype t);
dl_kind dl_dtype_kind(dl_dtype t);

/* PyTorch's result_type for two tensors of the same "category priority"
 * (both dimensioned, or both zero-dim). */
dl_dtype dl_promote_types(dl_dtype a, dl_dtype b);

/* Result type of a tensor op with a Lua/C scalar: the scalar only raises the
 * category (bool -> int -> float); within a category the tensor's type wins.
 * A float scalar with an integer tensor gives the default float (float32). */
dl_dtype dl_promote_with_scalar(dl_dtype t, bool scalar_is_float, bool scalar_is_bool);

float dl_half_to_float(uint16_t h);
uint16_t dl_float_to_half(float f);
float dl_bf16_to_float(uint16_t h);
uint16_t dl_float_to_bf16(float f);

/* Read or write one element at p, converting through double or int64. */
double dl_load_f64(const void *p, dl_dtype t);
int64_t dl_load_i64(const void *p, dl_dtype t);
void dl_store_f64(void *p, dl_dtype t, double v);
void dl_store_i64(void *p, dl_dtype t, int64_t v);

#endif
