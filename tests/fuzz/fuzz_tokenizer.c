/* fuzz_tokenizer.c - the tokenizer JSON reader (src/data/tokenizer_json.c:
 * tokenizer.json and dlua.CharTokenizer files) on arbitrary bytes.
 *
 * A file that loads must behave: a BPE tokenizer round-trips any bytes (the
 * input itself and a fixed string with specials, NUL and invalid UTF-8), and
 * writing it out and reading that back gives the same JSON text.  A failed
 * check traps (a finding); a load error is a normal outcome. */
#include "core/error.h"
#include "data/tokenizer.h"
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>

static void check_round_trip(dl_tokenizer *t, const char *s, size_t n) {
    dl_tok_ids ids = {0};
    int rc = dl_tokenizer_encode(t, s, n, 1, &ids);
    if (rc == 0) {
        int64_t *wide = malloc(sizeof *wide * (ids.n ? ids.n : 1));
        if (wide) {
            for (size_t k = 0; k < ids.n; k++) wide[k] = ids.ids[k];
            size_t len;
            char *back = dl_tokenizer_decode(t, wide, ids.n, 0, &len);
            if (back && dl_tokenizer_kind(t) == DL_TOK_BPE && (len != n || memcmp(back, s, n) != 0))
                __builtin_trap();
            free(back);
            free(wide);
        }
    } else if (dl_tokenizer_kind(t) == DL_TOK_BPE) {
        /* BPE encodes anything; only running out of memory may fail */
        if (!strstr(dl_last_error(), "out of memory")) __builtin_trap();
    }
    dl_tok_ids_free(&ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dl_tokenizer *t = dl_tokenizer_from_json((const char *)data, size);
    if (!t) return 0;
    static const char fixed[] = "Hello, world!  it's <|endoftext|>\0\xff\xc3(  \n\n x";
    check_round_trip(t, fixed, sizeof fixed - 1);
    check_round_trip(t, (const char *)data, size < 512 ? size : 512);
    size_t n;
    char *json = dl_tokenizer_to_json(t, &n);
    if (json) {
        dl_tokenizer *again = dl_tokenizer_from_json(json, n);
        if (!again) __builtin_trap(); /* what dlua writes, dlua reads */
        size_t n2;
        char *json2 = dl_tokenizer_to_json(again, &n2);
        if (json2 && (n2 != n || memcmp(json, json2, n) != 0)) __builtin_trap();
        free(json2);
        dl_tokenizer_free(again);
        free(json);
    }
    dl_tokenizer_free(t);
    return 0;
}
