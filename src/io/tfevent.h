/* tfevent.h - TensorBoard event files: CRC-32C, TFRecord framing, an
 * append-only event writer (scalars, PNG images, histograms, text) and a
 * reader that yields every complete record of a file.
 *
 * Format: each record is  uint64 length (little-endian) | uint32 masked
 * CRC-32C of those 8 bytes | length bytes of data | uint32 masked CRC-32C of
 * the data.  The data is a serialized Event message (src/io/tfevent.proto,
 * TensorBoard's field numbers).  A file starts with the Event whose
 * file_version is "brain.Event:2".
 *
 * Invariants:
 *  - A file is only ever appended to, one whole record per write call, and
 *    flushed at open, when max_queue records are pending, when flush_secs have
 *    passed since the last flush (checked at each add), on flush and on close.
 *    A crash loses at most the unflushed records; earlier ones stay intact and
 *    a torn last record is skipped by readers.
 *  - After a failed write or flush (disk full) the writer appends nothing
 *    more, so the file never holds records after a torn one.
 *  - Functions return 0 (or a pointer) on success and -1 (NULL) with a
 *    dl_error message naming the function and the file on failure.
 *  - Built without protobuf-c (DL_WITH_PROTOBUF_C undefined), the CRC and
 *    framing functions still work; opening, writing and reading events fail
 *    with a message saying so. */
#ifndef DL_IO_TFEVENT_H
#define DL_IO_TFEVENT_H

#include <stddef.h>
#include <stdint.h>

/* CRC-32C (Castagnoli), continuing from crc (0 to start). */
uint32_t dl_crc32c(uint32_t crc, const void *buf, size_t n);
/* TFRecord's masked form: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
uint32_t dl_crc32c_mask(uint32_t crc);

/* 1 when TensorBoard support (protobuf-c) was compiled in. */
int dl_tfevent_available(void);

typedef struct dl_tfevent_writer dl_tfevent_writer;

/* Creates dir (and its parents) and a new file in it named
 * events.out.tfevents.<unix time>.<hostname>.<pid>.<n><suffix>, and writes the
 * file_version event.  flush_secs <= 0 flushes after every record;
 * max_queue <= 1 likewise. */
dl_tfevent_writer *dl_tfevent_open(const char *dir, const char *suffix, double flush_secs,
                                   int max_queue);
const char *dl_tfevent_path(const dl_tfevent_writer *w);
/* Flushes pending records to the file (fflush). */
int dl_tfevent_flush(dl_tfevent_writer *w);
/* Flushes, closes and frees w (NULL is a no-op).  Returns -1 when the final
 * flush failed; w is freed either way. */
int dl_tfevent_close(dl_tfevent_writer *w);

/* Events.  wall_time is seconds since the epoch (< 0: now). */
int dl_tfevent_add_scalar(dl_tfevent_writer *w, const char *tag, float value, int64_t step,
                          double wall_time);
/* png: an encoded image of height x width pixels with channels 1, 3 or 4. */
int dl_tfevent_add_image(dl_tfevent_writer *w, const char *tag, int height, int width, int channels,
                         const uint8_t *png, size_t png_len, int64_t step, double wall_time);
/* x is n finite values (n >= 1): min, max, num, sum, sum of squares and the
 * counts of TensorBoard's default buckets (right edges +-1e-12 * 1.1^k up to
 * 1e20, 0 and +-DBL_MAX; bucket i holds limit[i-1] <= x < limit[i]), from
 * the empty bucket before the first non-empty one to the last non-empty
 * one, each run of empty buckets written as its last bucket. */
int dl_tfevent_add_histogram(dl_tfevent_writer *w, const char *tag, const double *x, size_t n,
                             int64_t step, double wall_time);
/* A string tensor value of the "text" plugin (tag is used as given). */
int dl_tfevent_add_text(dl_tfevent_writer *w, const char *tag, const char *text, size_t len,
                        int64_t step, double wall_time);

/* The hparams plugin: the experiment (each hparam's name and type, and its
 * discrete domain when n_domain > 0; the metric tags), the session start
 * (the values) and the session end (success), as three events at step. */
typedef enum { DL_TFHP_NUMBER = 0, DL_TFHP_STRING, DL_TFHP_BOOL } dl_tfhp_type;
typedef struct {
    dl_tfhp_type type;
    double number;
    const char *string;
    int boolean;
} dl_tfhp_value;
typedef struct {
    const char *name;
    dl_tfhp_value value;
    const dl_tfhp_value *domain; /* n_domain values of value's type */
    size_t n_domain;
} dl_tfhparam;
int dl_tfevent_add_hparams(dl_tfevent_writer *w, const dl_tfhparam *hp, size_t n,
                           const char *const *metrics, size_t n_metrics, int64_t step,
                           double wall_time);

/* --- reading --------------------------------------------------------------- */

typedef enum {
    DL_TFV_NONE = 0, /* an event without a summary value (file_version) */
    DL_TFV_SCALAR,
    DL_TFV_IMAGE,
    DL_TFV_HISTOGRAM,
    DL_TFV_TEXT,
    DL_TFV_OTHER /* a value of a kind this reader does not decode */
} dl_tfvalue_kind;

/* One summary value (or a bare event) as read back; pointers are valid only
 * during the callback. */
typedef struct {
    double wall_time;
    int64_t step;
    const char *file_version; /* NULL unless this is the file_version event */
    const char *tag;          /* NULL for DL_TFV_NONE */
    dl_tfvalue_kind kind;
    float scalar;
    int height, width, channels;
    const uint8_t *png;
    size_t png_len;
    double min, max, num, sum, sum_squares;
    const double *bucket_limit, *bucket;
    size_t n_buckets;
    const char *text;
    size_t text_len;
} dl_tfevent_value;

typedef int (*dl_tfevent_cb)(void *ud, const dl_tfevent_value *v);

/* The next complete record of buf[*off..n): sets *data, *len, advances *off
 * and returns 1; returns 0 at the end or at a torn (incomplete) last record,
 * and -1 with an error when a CRC does not match.  name is for messages. */
int dl_tfrecord_next(const uint8_t *buf, size_t n, size_t *off, const uint8_t **data, size_t *len,
                     const char *name);
/* Calls cb for every value of every complete record of the file at path (a
 * bare event once).  *truncated (may be NULL) is set to 1 when the file ends
 * in a torn record.  Returns the number of records, or -1 on an unreadable
 * file, a CRC mismatch, an undecodable event or a non-zero cb result. */
int dl_tfevent_read(const char *path, dl_tfevent_cb cb, void *ud, int *truncated);

#endif
