/* folder.h - the file index behind ImageFolder: class folders and the image
 * files under them, in torchvision's order.
 *
 * Invariants:
 *  - Classes are the sub-folders of root, sorted by name (byte order, which is
 *    code-point order for UTF-8, as Python's sorted()); labels are 0-based
 *    here (the Lua side shows them 1-based).
 *  - Inside a class, folders are walked recursively following symlinks, all
 *    folders visited in sorted path order and the files of each folder sorted
 *    by name, as sorted(os.walk(...)) does; a file is kept when its name ends
 *    (case-insensitively) with one of the extensions.
 *  - A symlink back to a folder above it (a loop) is an error naming it.
 *  - A missing root, a root without class folders and a class folder without
 *    images are errors with a message naming them.
 *  - The index is immutable once built and refcounted, so loader threads share it. */
#ifndef DL_DATA_FOLDER_H
#define DL_DATA_FOLDER_H

#include <stdint.h>

typedef struct dl_file_index {
    int refcount; /* atomic */
    int64_t n;
    char **paths;
    int64_t *labels; /* 0-based class of each path */
    int nclasses;
    char **classes;
} dl_file_index;

/* Scans root.  exts: n_ext extensions with their dot (".jpg"), lower case. */
dl_file_index *dl_folder_scan(const char *root, int n_ext, const char *const *exts);
/* An index over explicit paths and 0-based labels (copied). */
dl_file_index *dl_file_index_new(int64_t n, const char *const *paths, const int64_t *labels);
dl_file_index *dl_file_index_retain(dl_file_index *ix);
/* The entries of dir (not "." and ".."), sorted by name (byte order):
 * folders (symlinks followed) into *dirs, everything else into *files.
 * Free each list with dl_folder_list_free; `what` starts error messages. */
int dl_folder_list(const char *dir, const char *what, char ***dirs, int64_t *ndirs, char ***files,
                   int64_t *nfiles);
void dl_folder_list_free(char **names, int64_t n);
void dl_file_index_release(dl_file_index *ix);

#endif
