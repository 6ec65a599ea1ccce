/* fuzz.h - shared helpers of the fuzz targets in tests/fuzz/.
 *
 * Each target defines LLVMFuzzerTestOneInput (libFuzzer's entry point).  With
 * DL_FUZZ=ON a target links libFuzzer; in every build it also links
 * replay_main.c, which feeds it files (the regression inputs and the seed
 * corpus) so ctest replays them without clang.  Invariants: a target never
 * keeps state between inputs except caches it rebuilds (a Lua state, a scratch
 * folder), frees everything it allocated, and treats an error status from the
 * library as a normal outcome: only crashes, leaks, undefined behaviour and
 * hangs are findings. */
#ifndef DL_FUZZ_H
#define DL_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A per-process scratch path (under $TMPDIR or /tmp) ending in `suffix`; the
 * file is removed at exit. */
const char *fuzz_scratch_file(const char *suffix);
/* Writes data to path (truncating); 0 or -1. */
int fuzz_write_file(const char *path, const uint8_t *data, size_t size);
/* A per-process scratch folder, created once and removed at exit. */
const char *fuzz_scratch_dir(void);
/* Removes everything under dir (not dir itself), symlinks not followed. */
void fuzz_clear_dir(const char *dir);

#endif
