/* folder.c - scanning an ImageFolder tree (see folder.h). */
#include "folder.h"
#include "core/error.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    char **v;
    int64_t n, cap;
} strvec;

static int sv_push(strvec *s, char *str) {
    if (!str) return -1;
    if (s->n == s->cap) {
        int64_t cap = s->cap ? s->cap * 2 : 64;
        char **nv = realloc(s->v, sizeof(char *) * (size_t)cap);
        if (!nv) {
            free(str);
            return -1;
        }
        s->v = nv;
        s->cap = cap;
    }
    s->v[s->n++] = str;
    return 0;
}

static void sv_free(strvec *s) {
    for (int64_t i = 0; i < s->n; i++) free(s->v[i]);
    free(s->v);
    memset(s, 0, sizeof *s);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *join(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    char *p = malloc(la + lb + 2);
    if (!p) return NULL;
    memcpy(p, a, la);
    size_t k = la;
    if (la && a[la - 1] != '/') p[k++] = '/';
    memcpy(p + k, b, lb + 1);
    return p;
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int has_ext(const char *name, int n_ext, const char *const *exts) {
    size_t ln = strlen(name);
    for (int i = 0; i < n_ext; i++) {
        size_t le = strlen(exts[i]);
        if (le > ln) continue;
        int ok = 1;
        for (size_t k = 0; k < le && ok; k++)
            ok = tolower((unsigned char)name[ln - le + k]) == tolower((unsigned char)exts[i][k]);
        if (ok) return 1;
    }
    return 0;
}

/* Lists dir's entries: sub-folders (following symlinks) into dirs, other
 * entries into files (names only).  Either may be NULL. */
static int list_dir(const char *dir, strvec *dirs, strvec *files, const char *what) {
    DIR *d = opendir(dir);
    if (!d) return dl_error("%s: cannot open '%s': %s", what, dir, strerror(errno));
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d)) != NULL && !rc) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char *full = join(dir, e->d_name);
        if (!full) {
            rc = dl_error("%s: out of memory", what);
            break;
        }
        int isd = is_dir(full);
        free(full);
        strvec *into = isd ? dirs : files;
        if (into && sv_push(into, strdup(e->d_name))) rc = dl_error("%s: out of memory", what);
    }
    closedir(d);
    return rc;
}

int dl_folder_list(const char *dir, const char *what, char ***dirs, int64_t *ndirs, char ***files,
                   int64_t *nfiles) {
    strvec d = {0}, f = {0};
    if (list_dir(dir, &d, &f, what)) {
        sv_free(&d);
        sv_free(&f);
        return -1;
    }
    if (d.n > 1) qsort(d.v, (size_t)d.n, sizeof(char *), cmp_str);
    if (f.n > 1) qsort(f.v, (size_t)f.n, sizeof(char *), cmp_str);
    *dirs = d.v, *ndirs = d.n;
    *files = f.v, *nfiles = f.n;
    return 0;
}

void dl_folder_list_free(char **names, int64_t n) {
    for (int64_t i = 0; i < n; i++) free(names[i]);
    free(names);
}

/* The folders on the path from a class folder down to the one being walked,
 * by identity, so a symlink back to one of them is seen at once: without it
 * two such links in one folder make the walk exponential (2^depth folders). */
typedef struct {
    dev_t dev[65];
    ino_t ino[65];
} ancestors;

/* All folders under top (top included), as full paths, depth-limited; a
 * folder that is its own ancestor (a symlink loop) is an error naming it. */
static int walk_dirs(const char *top, strvec *out, int depth, ancestors *up) {
    if (depth > 64)
        return dl_error("ImageFolder: folders nested too deeply under '%s' (a symlink loop?)", top);
    struct stat st;
    if (stat(top, &st) != 0)
        return dl_error("ImageFolder: cannot open '%s': %s", top, strerror(errno));
    for (int i = 0; i < depth; i++)
        if (up->dev[i] == st.st_dev && up->ino[i] == st.st_ino)
            return dl_error("ImageFolder: symlink loop: '%s' leads back to a folder above it", top);
    up->dev[depth] = st.st_dev;
    up->ino[depth] = st.st_ino;
    if (sv_push(out, strdup(top))) return dl_error("ImageFolder: out of memory");
    strvec sub = {0};
    if (list_dir(top, &sub, NULL, "ImageFolder")) {
        sv_free(&sub);
        return -1;
    }
    for (int64_t i = 0; i < sub.n; i++) {
        char *p = join(top, sub.v[i]);
        int rc = p ? walk_dirs(p, out, depth + 1, up) : dl_error("ImageFolder: out of memory");
        free(p);
        if (rc) {
            sv_free(&sub);
            return -1;
        }
    }
    sv_free(&sub);
    return 0;
}

static dl_file_index *index_alloc(void) {
    dl_file_index *ix = calloc(1, sizeof *ix);
    if (ix) ix->refcount = 1;
    return ix;
}

static void index_free(dl_file_index *ix) {
    for (int64_t i = 0; i < ix->n; i++) free(ix->paths[i]);
    free(ix->paths);
    free(ix->labels);
    for (int i = 0; i < ix->nclasses; i++) free(ix->classes[i]);
    free(ix->classes);
    free(ix);
}

dl_file_index *dl_folder_scan(const char *root, int n_ext, const char *const *exts) {
    struct stat st;
    if (stat(root, &st) != 0) {
        dl_error("ImageFolder: root '%s' does not exist (%s)", root, strerror(errno));
        return NULL;
    }
    if (!S_ISDIR(st.st_mode)) {
        dl_error("ImageFolder: root '%s' is not a folder", root);
        return NULL;
    }
    strvec classes = {0}, files = {0};
    int64_t *labels = NULL, nlab = 0, cap = 0;
    dl_file_index *ix = NULL;
    strvec empty = {0};
    if (list_dir(root, &classes, NULL, "ImageFolder")) goto fail;
    if (classes.n == 0) {
        dl_error("ImageFolder: couldn't find any class folder in '%s'", root);
        goto fail;
    }
    if (classes.n > 0x7FFFFFFF) {
        dl_error("ImageFolder: too many classes");
        goto fail;
    }
    qsort(classes.v, (size_t)classes.n, sizeof(char *), cmp_str);
    for (int64_t c = 0; c < classes.n; c++) {
        char *cdir = join(root, classes.v[c]);
        strvec dirs = {0};
        ancestors up;
        int rc = cdir ? walk_dirs(cdir, &dirs, 0, &up) : dl_error("ImageFolder: out of memory");
        free(cdir);
        if (rc) {
            sv_free(&dirs);
            goto fail;
        }
        qsort(dirs.v, (size_t)dirs.n, sizeof(char *), cmp_str);
        int64_t before = files.n;
        for (int64_t d = 0; d < dirs.n && !rc; d++) {
            strvec names = {0};
            rc = list_dir(dirs.v[d], NULL, &names, "ImageFolder");
            if (!rc && names.n > 1) qsort(names.v, (size_t)names.n, sizeof(char *), cmp_str);
            for (int64_t k = 0; k < names.n && !rc; k++) {
                if (!has_ext(names.v[k], n_ext, exts)) continue;
                if (sv_push(&files, join(dirs.v[d], names.v[k]))) {
                    rc = dl_error("ImageFolder: out of memory");
                    break;
                }
                if (nlab == cap) {
                    cap = cap ? cap * 2 : 256;
                    int64_t *nl = realloc(labels, sizeof(int64_t) * (size_t)cap);
                    if (!nl) {
                        rc = dl_error("ImageFolder: out of memory");
                        break;
                    }
                    labels = nl;
                }
                labels[nlab++] = c;
            }
            sv_free(&names);
        }
        sv_free(&dirs);
        if (rc) goto fail;
        if (files.n == before && sv_push(&empty, strdup(classes.v[c]))) {
            dl_error("ImageFolder: out of memory");
            goto fail;
        }
    }
    if (empty.n) {
        char list[1024] = "", exl[256] = "";
        size_t k = 0;
        for (int64_t i = 0; i < empty.n && k < sizeof list - 8; i++)
            k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", i ? ", " : "", empty.v[i]);
        k = 0;
        for (int i = 0; i < n_ext && k < sizeof exl - 8; i++)
            k += (size_t)snprintf(exl + k, sizeof exl - k, "%s%s", i ? ", " : "", exts[i]);
        dl_error("ImageFolder: found no valid file for the class%s %s in '%s' (supported "
                 "extensions are: %s)",
                 empty.n > 1 ? "es" : "", list, root, exl);
        goto fail;
    }
    ix = index_alloc();
    if (!ix) {
        dl_error("ImageFolder: out of memory");
        goto fail;
    }
    ix->n = files.n;
    ix->paths = files.v;
    ix->labels = labels;
    ix->nclasses = (int)classes.n;
    ix->classes = classes.v;
    sv_free(&empty);
    return ix;
fail:
    sv_free(&classes);
    sv_free(&files);
    sv_free(&empty);
    free(labels);
    return NULL;
}

dl_file_index *dl_file_index_new(int64_t n, const char *const *paths, const int64_t *labels) {
    dl_file_index *ix = index_alloc();
    if (!ix) goto oom;
    ix->paths = calloc((size_t)(n > 0 ? n : 1), sizeof(char *));
    ix->labels = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
    if (!ix->paths || !ix->labels) goto oom;
    for (int64_t i = 0; i < n; i++) {
        ix->paths[i] = strdup(paths[i]);
        if (!ix->paths[i]) goto oom;
        ix->n = i + 1;
        ix->labels[i] = labels ? labels[i] : 0;
    }
    ix->n = n;
    return ix;
oom:
    if (ix) index_free(ix);
    dl_error("dataset: out of memory");
    return NULL;
}

dl_file_index *dl_file_index_retain(dl_file_index *ix) {
    if (ix) __atomic_add_fetch(&ix->refcount, 1, __ATOMIC_RELAXED);
    return ix;
}

void dl_file_index_release(dl_file_index *ix) {
    if (ix && __atomic_sub_fetch(&ix->refcount, 1, __ATOMIC_ACQ_REL) == 0) index_free(ix);
}
