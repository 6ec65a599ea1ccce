/* fuzz_folder.c - the ImageFolder index (src/data/folder.c) of a tree whose
 * names come from the bytes.
 *
 * The input is split at NUL bytes into at most 48 entries, each a relative
 * path whose components are separated by '/' (empty, "." and ".." components
 * become "_"; components are cut at 200 bytes).  An entry ending in '/' is a
 * folder; one starting with '@' is a symlink (the rest is its path) pointing
 * at ".", ".." or a missing target chosen by its length; anything else is an
 * empty file.  The tree is rebuilt in a per-process scratch folder for every
 * input, then scanned with the extensions .png .jpg .jpeg (matched case-insensitively); the index
 * (or the error) is the outcome. */
#include "data/folder.h"
#include "fuzz.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Creates root/rel's parent folders and returns root/rel in out. */
static int make_path(const char *root, const char *rel, size_t len, char *out, size_t cap) {
    size_t k = (size_t)snprintf(out, cap, "%s", root);
    size_t i = 0;
    while (i < len && k + 210 < cap) {
        size_t j = i;
        while (j < len && rel[j] != '/') j++;
        size_t c = j - i;
        out[k++] = '/';
        if (c == 0 || (c == 1 && rel[i] == '.') || (c == 2 && rel[i] == '.' && rel[i + 1] == '.')) {
            out[k++] = '_';
        } else {
            if (c > 200) c = 200;
            memcpy(out + k, rel + i, c);
            k += c;
        }
        out[k] = 0;
        if (j < len) mkdir(out, 0700); /* a parent folder (may exist or fail) */
        i = j + 1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *root = fuzz_scratch_dir();
    fuzz_clear_dir(root);
    size_t i = 0;
    int entries = 0;
    while (i < size && entries < 48) {
        size_t j = i;
        while (j < size && data[j]) j++;
        const char *e = (const char *)data + i;
        size_t len = j - i;
        char path[4096];
        if (len > 1 && e[0] == '@') {
            make_path(root, e + 1, len - 1, path, sizeof path);
            static const char *const targets[] = {".", "..", "missing"};
            int rc = symlink(targets[len % 3], path); /* fails on an existing name */
            (void)rc;
        } else if (len > 0) {
            int dir = e[len - 1] == '/';
            make_path(root, e, dir ? len - 1 : len, path, sizeof path);
            if (dir) {
                mkdir(path, 0700);
            } else {
                FILE *f = fopen(path, "wb");
                if (f) fclose(f);
            }
        }
        entries++;
        i = j + 1;
    }
    static const char *const exts[] = {".png", ".jpg", ".jpeg"};
    dl_file_index *ix = dl_folder_scan(root, 3, exts);
    dl_file_index_release(ix);
    return 0;
}
