/* onnx.h - ONNX model and tensor files: decoding with bounds, conversion
 * between ONNX TensorProtos and dl tensors, encoding.
 *
 * The messages are protobuf-c's, generated at build time from the onnx.proto
 * of Debian's python3-onnx (CMakeLists.txt; the schema is not in the tree).
 * Built without protobuf-c or without the schema (DL_WITH_ONNX undefined),
 * every entry point fails with one line saying what is missing, and the
 * message types are only declared.
 *
 * Invariants:
 *  - Decoding never trusts a size: the input is at most DL_ONNX_MAX_BYTES,
 *    it is walked once against the schema before protobuf-c unpacks it
 *    (message nesting at most DL_ONNX_MAX_DEPTH, every length inside its
 *    parent, no groups), and protobuf-c allocates from a budget that is a
 *    fixed multiple of the input's size.  A failure is a dl_error naming the
 *    file and what is wrong (with a byte offset where there is one).
 *  - A tensor's element count is the product of its dims, checked for
 *    overflow and against the data actually present (raw_data bytes or the
 *    typed field's count) before anything is allocated; tensors whose data is
 *    in an external file are refused.
 *  - Functions return 0 / a pointer on success and -1 / NULL with
 *    dl_last_error() set otherwise; nothing exits. */
#ifndef DL_IO_ONNX_H
#define DL_IO_ONNX_H

#include "core/tensor.h"

#include <stddef.h>
#include <stdint.h>

#ifdef DL_WITH_ONNX
#include "onnx.pb-c.h"
#else
typedef struct Onnx__ModelProto Onnx__ModelProto;
typedef struct Onnx__TensorProto Onnx__TensorProto;
#endif

#define DL_ONNX_MAX_BYTES ((size_t)2 << 30) /* protobuf's own limit: 2 GiB */
#define DL_ONNX_MAX_DEPTH 64                /* nested messages (subgraphs in attributes) */

/* NULL when ONNX support was compiled in, else one line saying what the
 * build lacked. */
const char *dl_onnx_missing(void);

/* Reads a whole file (at most DL_ONNX_MAX_BYTES) into a malloc'ed buffer. */
int dl_onnx_read_file(const char *path, uint8_t **buf, size_t *len);

/* Decodes a ModelProto / TensorProto; `name` (a path) goes into messages.
 * Free with dl_onnx_model_free / dl_onnx_tensor_free. */
Onnx__ModelProto *dl_onnx_model_decode(const uint8_t *buf, size_t len, const char *name);
void dl_onnx_model_free(Onnx__ModelProto *m);
Onnx__TensorProto *dl_onnx_tensor_decode(const uint8_t *buf, size_t len, const char *name);
void dl_onnx_tensor_free(Onnx__TensorProto *t);

/* ONNX's name of a TensorProto.DataType ("FLOAT", "INT8", ...; "?" when
 * unknown) and the dl dtype for it: 0 and *dtype set, or -1 when dlua has no
 * such dtype (no error is set). */
const char *dl_onnx_type_name(int elem_type);
int dl_onnx_dtype(int elem_type, dl_dtype *dtype);
/* The ONNX DataType of a dl dtype. */
int dl_onnx_elem_type(dl_dtype dtype);

/* The tensor's data as a new CPU dl tensor.  Returns 0 with *out set; 1 when
 * the tensor is well formed but dlua cannot hold it (a dtype it lacks, more
 * than DL_MAX_DIMS dims), with the reason in dl_last_error(); -1 when it is
 * malformed (sizes that disagree, external data). */
int dl_onnx_tensor_to_dl(const Onnx__TensorProto *t, dl_tensor **out);

/* Fills tp (initialised by the caller) with t's dims, type and data as
 * raw_data.  The data is copied into a malloc'ed buffer left in
 * tp->raw_data.data: free it after packing. */
int dl_onnx_tensor_from_dl(dl_tensor *t, Onnx__TensorProto *tp);

/* Serialises m into a malloc'ed buffer. */
uint8_t *dl_onnx_model_encode(const Onnx__ModelProto *m, size_t *len);

#endif
