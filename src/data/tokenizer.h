/* tokenizer.h - the text tokenizers behind dl.text: byte-level BPE (GPT-2's
 * scheme, trained here or loaded from a Hugging Face tokenizer.json) and a
 * character tokenizer.
 *
 * Invariants:
 *  - Ids are 0-based here; the Lua face shows id + 1 (src/lua/l_text.c).
 *  - A vocabulary is a dense list of ids 0..n-1, each naming a byte string.
 *    Added tokens (the special tokens such as "<|endoftext|>", "<pad>") are
 *    found in the input before anything else (leftmost, then longest) and
 *    become their own id: they are never split, and training never merges
 *    into or across them.
 *  - BPE: every one of the 256 bytes has an id, so any byte string (invalid
 *    UTF-8, NUL bytes, the empty string) encodes, and decode(encode(s)) == s
 *    exactly.  Encoding applies the merges by rank: repeatedly the adjacent
 *    pair of lowest rank, leftmost first (GPT-2's and Hugging Face's rule).
 *  - Pre-tokenization (DL_PRETOK_GPT2) cuts the text into GPT-2's pieces
 *    ('s 't 're 've 'm 'll 'd, " ?letters", " ?digits", " ?other", white
 *    space runs) with Unicode letter/number/space classes; a byte that is not
 *    part of valid UTF-8 counts as one "other" character.  Merges never cross
 *    a piece boundary.  DL_PRETOK_NONE: no cuts (only added tokens cut).
 *  - BPE training is deterministic: the pair with the highest count is merged
 *    next; ties go to the smallest (left id, right id).  Ids: the special
 *    tokens first (in the order given), then the 256 bytes in byte order,
 *    then one id per merge in merge order (a merge whose bytes already have
 *    an id reuses it).  Training stops at vocab_size ids or when no pair
 *    occurs min_frequency times.
 *  - Characters: the special tokens first, then the characters (Unicode code
 *    points) of the training text in code-point order.  Unknown characters
 *    (and bytes that are not valid UTF-8) map to the unk token when there is
 *    one, else encoding fails naming the character and its byte offset.
 *  - A tokenizer is immutable after training/loading except for its encode
 *    cache: use one tokenizer from one thread at a time.
 *  - Errors: NULL / -1 with a message in dl_last_error(). */
#ifndef DL_DATA_TOKENIZER_H
#define DL_DATA_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef enum { DL_TOK_BPE, DL_TOK_CHAR } dl_tok_kind;
typedef enum { DL_PRETOK_NONE, DL_PRETOK_GPT2 } dl_pretok;

typedef struct dl_tokenizer dl_tokenizer;

/* A growable list of 0-based ids that encode appends to. */
typedef struct {
    int32_t *ids;
    size_t n, cap;
} dl_tok_ids;
void dl_tok_ids_free(dl_tok_ids *v);
int dl_tok_ids_push(dl_tok_ids *v, int32_t id); /* -1 when out of memory */

/* --- training ------------------------------------------------------------ */

typedef struct {
    dl_tok_kind kind;
    int64_t vocab_size;    /* BPE: the most ids (specials + 256 + merges) */
    int64_t min_frequency; /* BPE: a pair must occur this often to merge */
    dl_pretok pretok;      /* BPE */
    int n_special;         /* special tokens: non-empty, valid UTF-8, distinct */
    const char *const *special;
    const size_t *special_len;
    int unk; /* CHAR: index of the unk token among the specials, or -1 */
} dl_tok_train_opts;

typedef struct dl_tok_trainer dl_tok_trainer;

/* Checks the options; `what` names the caller in messages. */
dl_tok_trainer *dl_tok_trainer_new(const dl_tok_train_opts *o, const char *what);
/* Adds one text (a document, a file's contents). */
int dl_tok_trainer_feed(dl_tok_trainer *tr, const char *text, size_t n);
/* The trained tokenizer; the trainer stays to be freed. */
dl_tokenizer *dl_tok_trainer_finish(dl_tok_trainer *tr);
void dl_tok_trainer_free(dl_tok_trainer *tr);

/* --- files ---------------------------------------------------------------- */

/* BPE: a Hugging Face tokenizer.json (ByteLevel pre-tokenizer, BPE model;
 * ids in the file are 0-based like here).  CHAR: dlua's own
 * {"type": "dlua.CharTokenizer", ...}.  The JSON text is malloc'd. */
char *dl_tokenizer_to_json(const dl_tokenizer *t, size_t *len);
dl_tokenizer *dl_tokenizer_from_json(const char *buf, size_t n);
/* Written to a temporary name and renamed. */
int dl_tokenizer_save(const dl_tokenizer *t, const char *path);
dl_tokenizer *dl_tokenizer_load(const char *path);

void dl_tokenizer_free(dl_tokenizer *t);

/* --- use -------------------------------------------------------------------- */

/* Appends the ids of s[0..n) to out.  allow_special = 0 treats the text of
 * special tokens as ordinary text. */
int dl_tokenizer_encode(dl_tokenizer *t, const char *s, size_t n, int allow_special,
                        dl_tok_ids *out);
/* The bytes of ids[0..n) (0-based), malloc'd (NUL-terminated, length in
 * *len); skip_special leaves special tokens out.  An id out of range fails. */
char *dl_tokenizer_decode(const dl_tokenizer *t, const int64_t *ids, size_t n, int skip_special,
                          size_t *len);

dl_tok_kind dl_tokenizer_kind(const dl_tokenizer *t);
dl_pretok dl_tokenizer_pretok(const dl_tokenizer *t);
int32_t dl_tokenizer_size(const dl_tokenizer *t);
/* The bytes of an id (not NUL-terminated), or NULL out of range. */
const char *dl_tokenizer_token(const dl_tokenizer *t, int32_t id, size_t *len);
/* The id of a token's bytes (special tokens included), or -1. */
int32_t dl_tokenizer_token_id(const dl_tokenizer *t, const char *s, size_t n);
int dl_tokenizer_is_special(const dl_tokenizer *t, int32_t id);
int dl_tokenizer_num_special(const dl_tokenizer *t);
int32_t dl_tokenizer_special(const dl_tokenizer *t, int k); /* k-th added token's id */
int32_t dl_tokenizer_unk(const dl_tokenizer *t);            /* CHAR: the unk id or -1 */
int32_t dl_tokenizer_num_merges(const dl_tokenizer *t);
/* The k-th merge (rank k): left, right and result ids. */
void dl_tokenizer_merge(const dl_tokenizer *t, int32_t k, int32_t out[3]);

/* GPT-2 pre-tokenization: the end of the piece that starts at s[i] (i < n). */
size_t dl_pretok_next(const char *s, size_t n, size_t i);

#endif
