/* dlua.h - the public C API of libdlua, for programs that embed dlua.
 *
 * A host program (a game engine, a robot, a server, a tool) links libdlua,
 * opens Lua states with the `dl` module loaded, runs scripts that define and
 * run models, and passes its own buffers in and results out as tensors:
 *
 *     #include <dlua.h>
 *
 *     float img[2 * 3 * 32 * 32];                  // the host's buffer
 *     int64_t shape[4] = {2, 3, 32, 32};
 *     dl_state *S = dl_state_open();
 *     if (!S) { fprintf(stderr, "%s\n", dl_last_error()); return 1; }
 *     if (dl_state_dostring(S, "net = dl.models.resnet18{num_classes = 10}:eval()\n"
 *                              "function classify(x)\n"
 *                              "  return dl.no_grad(function() return net(x) end)\n"
 *                              "end") != 0)
 *         fprintf(stderr, "%s\n", dl_state_error(S));
 *     dl_tensor *x = dl_tensor_wrap(img, DL_DTYPE_F32, 4, shape, NULL, NULL); // no copy
 *     dl_tensor *logits;
 *     if (dl_state_call(S, "classify", 1, &x, 1, &logits) == 0) {
 *         const float *p = dl_tensor_data(logits);     // (2, 10), contiguous
 *         ...
 *         dl_tensor_release(logits);
 *     } else {
 *         fprintf(stderr, "%s\n", dl_state_error(S)); // message and traceback
 *     }
 *     dl_tensor_release(x);
 *     dl_state_close(S);
 *
 * Build: cc host.c $(pkg-config --cflags --libs dlua)
 *
 * Rules:
 *  - Errors are return values: 0 / a pointer on success; a non-zero status or
 *    NULL on failure, with the message in dl_state_error(S) (state calls, with
 *    a Lua traceback) and in dl_last_error() (thread-local, every call).
 *    Nothing here exits or aborts the host.
 *  - Ownership: every dl_tensor * a function returns is a new reference the
 *    caller releases with dl_tensor_release.  Functions that take a tensor
 *    borrow it; a state that keeps one (dl_state_set_tensor, an argument a
 *    script stores) takes its own reference.
 *  - Threads: the tensor functions need no state and may be called from any
 *    thread.  A state is used by one thread at a time; several states in one
 *    process are independent (each has its own Lua heap, garbage collector
 *    pacing and random generator: dl.manual_seed in one does not move
 *    another's stream).  Process-wide settings stay shared:
 *    dl.set_num_threads and dl.set_printoptions.
 *  - Indices and dims in scripts are 1-based, as everywhere in dlua.
 *
 * The tensor type is opaque here: read it through the accessors below. */
#ifndef DLUA_H
#define DLUA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* --- types ------------------------------------------------------------------ */

typedef struct dl_state dl_state;   /* a Lua state with the standard libraries and dl loaded */
typedef struct dl_tensor dl_tensor; /* a refcounted strided view on a storage */
struct lua_State;

/* Element types.  (Inside the library the same enum comes from core/dtype.h,
 * which defines DL_DTYPE_H; the values must stay identical.) */
#ifndef DL_DTYPE_H
typedef enum {
    DL_DTYPE_F32 = 0, /* float32, the default */
    DL_DTYPE_F64,     /* float64 */
    DL_DTYPE_F16,     /* float16 (IEEE half) */
    DL_DTYPE_BF16,    /* bfloat16 */
    DL_DTYPE_I64,     /* int64 */
    DL_DTYPE_I32,     /* int32 */
    DL_DTYPE_U8,      /* uint8 */
    DL_DTYPE_BOOL,    /* bool, one byte 0 or 1 */
    DL_DTYPE_COUNT
} dl_dtype;
#endif

/* Status codes of the dl_state_* functions (the run statuses are Lua's). */
enum {
    DL_OK = 0,
    DL_ERR_ARG = -1, /* the host passed a bad argument (NULL state, name, ...) */
    DL_ERR_RUN = 2,  /* a runtime error in Lua: a script error, a bad tensor, a missing function */
    DL_ERR_SYNTAX = 3, /* the code did not compile */
    DL_ERR_MEM = 4,    /* out of memory */
    DL_ERR_ERR = 5,    /* an error while handling an error */
    DL_ERR_FILE = 6    /* dl_state_dofile could not read the file */
};

/* What a state sends to the host's output sink. */
enum {
    DL_OUTPUT_PRINT = 0,  /* a line from Lua's print() (tab-separated values, then "\n") */
    DL_OUTPUT_WARNING = 1 /* a Lua warning (warn(); on after warn("@on")), then "\n" */
};
/* The sink: text is len bytes (not NUL-terminated inside the line, though a
 * NUL follows it), valid only during the call.  It must not longjmp. */
typedef void (*dl_output_fn)(void *ctx, int kind, const char *text, size_t len);

/* --- states ----------------------------------------------------------------- */

/* A new state: standard libraries, `dl` required into the global dl, and the
 * Lua half of the library (dl.nn, dl.models, ...) found next to libdlua
 * (override with the environment variable DLUA_LUA_PATH; a statically linked
 * host sets it to `pkg-config --variable=luadir dlua`).  print() and warn()
 * go to the output sink (dl_state_set_output); io.write still writes to
 * stdout; os.exit raises an error instead of ending the host.  NULL on
 * failure, see dl_last_error(). */
dl_state *dl_state_open(void);
/* Closes the state (NULL is ignored).  Tensors the host still holds stay valid;
 * the host buffers dlua kept for reuse are returned to the system. */
void dl_state_close(dl_state *S);

/* Runs a chunk of Lua code / a Lua file.  DL_OK or a DL_ERR_* status. */
int dl_state_dostring(dl_state *S, const char *code);
int dl_state_dofile(dl_state *S, const char *path);

/* Sets the global `global` to t (NULL: nil).  Lua takes its own reference. */
int dl_state_set_tensor(dl_state *S, const char *global, dl_tensor *t);
/* The tensor in global `global`: a new reference, or NULL (with the message)
 * when it is missing or not a tensor. */
dl_tensor *dl_state_get_tensor(dl_state *S, const char *global);

/* Calls the function `function` - a global name, a dotted path ("net.forward",
 * "utils.f"), or "obj:method" to pass obj as self - and anything callable
 * (a function, or a table such as an nn.Module with __call).  args[0..nargs)
 * are passed as tensors (a NULL entry is nil).  On success results[0..nresults)
 * receive new references: each result must be a tensor or a number (a number
 * comes back as a 0-dim tensor: int64 for an integer, float64 otherwise).
 * On failure every results[i] is NULL and nothing needs releasing. */
int dl_state_call(dl_state *S, const char *function, int nargs, dl_tensor *const *args,
                  int nresults, dl_tensor **results);

/* The message of the state's last failure (with a traceback when Lua code
 * was running); "" after a success.  Valid until the next call on S. */
const char *dl_state_error(dl_state *S);

/* The raw lua_State, for hosts that want the full Lua API (numbers, strings,
 * tables, their own C functions).  Keep the stack balanced, and call Lua
 * through lua_pcall.  (Use the dl_state_* functions to run code when the
 * state may move between threads: they record the thread that runs it.) */
struct lua_State *dl_state_lua(dl_state *S);

/* Routes print() and warnings of this state to fn (NULL restores the default:
 * print to stdout, warnings to stderr when on). */
void dl_state_set_output(dl_state *S, dl_output_fn fn, void *ctx);

/* --- tensors (no state needed) ---------------------------------------------- */

/* A new contiguous CPU tensor holding a copy of data (ndim values of shape,
 * row-major, elements of dtype).  data may be NULL only when a dim is 0.
 * ndim is 0 (a scalar) to 8. */
dl_tensor *dl_tensor_from_data(const void *data, dl_dtype dtype, int ndim, const int64_t *shape);
/* A contiguous CPU tensor over the host's memory, without copying: scripts
 * read it directly, and in-place writes (x:mul_(2), x[1] = 0) land in it.
 * When the last reference goes (the host's and any a state took),
 * release(data, ctx) runs (release may be NULL when the host owns the memory
 * for longer than every tensor viewing it).  data must be aligned to the
 * element size.  On failure NULL is returned and release is not called. */
dl_tensor *dl_tensor_wrap(void *data, dl_dtype dtype, int ndim, const int64_t *shape,
                          void (*release)(void *data, void *ctx), void *ctx);

int dl_tensor_ndim(const dl_tensor *t);
/* ndim sizes, valid while t is alive. */
const int64_t *dl_tensor_shape(const dl_tensor *t);
dl_dtype dl_tensor_dtype(const dl_tensor *t); /* DL_DTYPE_F32, ... */
int64_t dl_tensor_numel(const dl_tensor *t);
/* The first element when t is on the CPU and contiguous (row-major, no gaps);
 * else NULL with the message set - dl_tensor_contiguous gives such a tensor. */
void *dl_tensor_data(dl_tensor *t);
/* Tells dlua that the host wrote t's bytes itself (through dl_tensor_data's
 * pointer or a wrapped buffer) after t was last used: data derived from them
 * (a CPU convolution's prepacked copy of its weights) is made again.  Writes
 * through dlua's own functions need no call. */
void dl_tensor_mark_changed(dl_tensor *t);
/* t itself (a new reference) when contiguous, else a contiguous copy. */
dl_tensor *dl_tensor_contiguous(dl_tensor *t);
/* Another reference to t (returns t). */
dl_tensor *dl_tensor_retain(dl_tensor *t);
/* Drops one reference (NULL is ignored). */
void dl_tensor_release(dl_tensor *t);

size_t dl_dtype_size(dl_dtype t);      /* bytes per element */
const char *dl_dtype_name(dl_dtype t); /* "float32", "int64", ... */

/* --- misc ------------------------------------------------------------------- */

/* The last error message set on this thread ("" when none). */
const char *dl_last_error(void);
/* dlua's version, "X.Y.Z". */
const char *dl_version(void);
/* Threads for CPU kernels (OpenMP and oneDNN), process-wide. */
void dl_set_num_threads(int n);

#ifdef __cplusplus
}
#endif

#endif
