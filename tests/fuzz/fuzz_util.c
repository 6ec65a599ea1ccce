/* fuzz_util.c - scratch files and folders of the fuzz targets (see fuzz.h).
 * Paths carry the process id so parallel fuzz jobs never share them. */
#define _GNU_SOURCE
#include "fuzz.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char scratch_file[4096], scratch_dir[4096];

static const char *tmp_root(void) {
    const char *t = getenv("TMPDIR");
    return t && *t ? t : "/tmp";
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)flag;
    if (ftw->level > 0) remove(path);
    return 0;
}

void fuzz_clear_dir(const char *dir) {
    nftw(dir, rm_entry, 32, FTW_DEPTH | FTW_PHYS);
}

static int registered;

static void cleanup(void) {
    if (scratch_file[0]) unlink(scratch_file);
    if (scratch_dir[0]) {
        fuzz_clear_dir(scratch_dir);
        rmdir(scratch_dir);
    }
}

const char *fuzz_scratch_file(const char *suffix) {
    if (!scratch_file[0]) {
        snprintf(scratch_file, sizeof scratch_file, "%s/dl_fuzz_%d%s", tmp_root(), (int)getpid(),
                 suffix);
        if (!registered++) atexit(cleanup);
    }
    return scratch_file;
}

int fuzz_write_file(const char *path, const uint8_t *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = size ? fwrite(data, 1, size, f) : 0;
    return (fclose(f) == 0 && w == size) ? 0 : -1;
}

const char *fuzz_scratch_dir(void) {
    if (!scratch_dir[0]) {
        snprintf(scratch_dir, sizeof scratch_dir, "%s/dl_fuzz_dir_%d", tmp_root(), (int)getpid());
        mkdir(scratch_dir, 0700);
        if (!registered++) atexit(cleanup);
    }
    return scratch_dir;
}
