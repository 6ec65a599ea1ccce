/* replay_main.c - runs a fuzz target over files, without libFuzzer: each
 * argument is a file (one input) or a folder (every regular file in it, in
 * name order).  Used by ctest to replay tests/fuzz/regressions/<target>/ and
 * the seed corpus in every build; exit status 0 when every input returned
 * (a crash is the failure) and the process's peak memory stayed under
 * REPLAY_MAX_RSS_MB (a parser that allocates what a length field claims
 * fails here too, as it does under libFuzzer's -rss_limit_mb). */
#include "fuzz.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

/* every input seen so far peaks below 20 MB (below 200 with sanitizers) */
#define REPLAY_MAX_RSS_MB 512

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    size_t r;
    while (buf && (r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "replay: out of memory reading %s\n", path);
        return -1;
    }
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 0;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_path(const char *path, int *count) {
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "replay: no such file or folder: %s\n", path);
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        ++*count;
        return run_file(path);
    }
    DIR *d = opendir(path);
    if (!d) return -1;
    char **names = NULL;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char **nn = realloc(names, (n + 1) * sizeof *names);
        if (!nn) break;
        names = nn;
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, cmp_name);
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        char full[4096];
        snprintf(full, sizeof full, "%s/%s", path, names[i]);
        if (!rc && stat(full, &st) == 0 && S_ISREG(st.st_mode)) {
            ++*count;
            rc = run_file(full);
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv) {
    int count = 0;
    for (int i = 1; i < argc; i++)
        if (run_path(argv[i], &count)) return 1;
    struct rusage ru;
    long peak_mb = getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss / 1024 : 0;
    if (peak_mb > REPLAY_MAX_RSS_MB) {
        fprintf(stderr, "replay: %d inputs ran, but the process peaked at %ld MB (bound %d MB)\n",
                count, peak_mb, REPLAY_MAX_RSS_MB);
        return 1;
    }
    printf("replay: %d inputs ran clean (peak %ld MB)\n", count, peak_mb);
    return 0;
}
