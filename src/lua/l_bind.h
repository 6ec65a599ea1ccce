/* l_bind.h - what every binding file shares: the tensor userdata, argument
 * checkers and the registration of methods and module functions.
 *
 * Rules for binding code:
 *  - Lua dims/indices are 1-based; convert with dlL_checkdim / dlL_checkindex
 *    before calling C (which is 0-based, negatives counting from the end).
 *  - Check every argument before creating any tensor.  A C call that returns
 *    NULL/-1 is turned into a Lua error with dlL_fail() after releasing what
 *    the function holds.  Push a new tensor with dlL_pushtensor, which takes
 *    ownership of the reference (and raises the error itself on NULL).
 *  - Options come as a trailing table; dlL_checkoptions rejects unknown keys. */
#ifndef DL_L_BIND_H
#define DL_L_BIND_H

#include <lauxlib.h>
#include <lua.h>

#include "core/tensor.h"

#include <stdbool.h>

#define DL_TENSOR_MT "dl.Tensor"
#define DL_MODULE_KEY "dl.module"

/* The tensor at idx, or NULL when it is not one.  A closed tensor (after
 * __close) raises an error. */
dl_tensor *dlL_totensor(lua_State *L, int idx);
dl_tensor *dlL_checktensor(lua_State *L, int idx);
/* Pushes t as a userdata, taking ownership of the reference.  t == NULL raises
 * dl_last_error() as a Lua error.  Returns 1. */
int dlL_pushtensor(lua_State *L, dl_tensor *t);
/* Raises dl_last_error() as a Lua error (never returns). */
int dlL_fail(lua_State *L);
/* The end of an in-place binding: rc != 0 raises dl_last_error(); else the
 * tensor changed in place (argument 1) is returned.  Returns 1. */
int dlL_pushself(lua_State *L, int rc);
/* The end of a binding that returns nothing: rc != 0 raises dl_last_error().
 * Returns 0. */
int dlL_done(lua_State *L, int rc);

/* A tensor, or a number/boolean turned into a 0-dim tensor of the type
 * PyTorch would give the scalar against `like` (NULL: default types).
 * Returns a NEW reference: release it (or push it) yourself. */
dl_tensor *dlL_checktensorish(lua_State *L, int idx, const dl_tensor *like);
/* true when idx holds a number or boolean (a "scalar" operand) */
int dlL_isscalar(lua_State *L, int idx);

/* Dimension argument: Lua 1-based (negatives from the end) -> C 0-based
 * (negatives kept; the C op normalises and reports). 0 is an error. */
int dlL_checkdim(lua_State *L, int idx);
int dlL_dimvalue(lua_State *L, lua_Integer d, int argidx); /* same for a value */
/* Element index along a dim: 1-based (negatives from the end) -> 0-based
 * (negatives kept). */
int64_t dlL_checkindex(lua_State *L, int idx);

/* A dtype given as dl.float32 or "float32"; dlL_optdtype returns def when nil. */
dl_dtype dlL_checkdtype(lua_State *L, int idx);
dl_dtype dlL_optdtype(lua_State *L, int idx, dl_dtype def);
dl_device dlL_checkdevice(lua_State *L, int idx);
/* Pushes the dtype object (dl.float32 ...). */
void dlL_pushdtype(lua_State *L, dl_dtype t);

/* Reads a shape given either as integers from idx on (stopping at the first
 * non-number) or as one table/tensor.shape at idx.  Returns ndim, writes shape,
 * and sets *next to the first argument after the shape. */
int dlL_checkshape(lua_State *L, int idx, int64_t *shape, int *next);

/* A new tensor's options {dtype=, device=, requires_grad=} (the creation and
 * random families).  dlL_checkcreateopts reads them from the table at idx
 * (none/nil: the defaults given; an unknown key is an error). */
typedef struct {
    dl_dtype dtype;
    dl_device device;
    int requires_grad;
} dlL_createopts;
dlL_createopts dlL_checkcreateopts(lua_State *L, int idx, const char *op, dl_dtype def_dtype,
                                   dl_device def_device);

/* Raises an error if the table at idx has a key not in the NULL-terminated
 * list `allowed`.  Does nothing when idx is none/nil. */
void dlL_checkoptions(lua_State *L, int idx, const char *op, const char *const *allowed);
/* Option getters: idx is the options table (or none/nil). */
lua_Number dlL_optnumber(lua_State *L, int idx, const char *key, lua_Number def);
lua_Integer dlL_optinteger(lua_State *L, int idx, const char *key, lua_Integer def);
int dlL_optboolean(lua_State *L, int idx, const char *key, int def);
/* Pushes the field's value (or nil) and returns its type. */
int dlL_optfield(lua_State *L, int idx, const char *key);

/* Argument readers of the nn families' bindings.  An optional tensor argument
 * (nil -> NULL); a size given as a number n ({n, n}) or a pair {h, w}, as
 * option key of the table at opts (absent -> def) or at argument idx;
 * opts.need = {bool, bool, bool} (default all true: which gradients a
 * backward computes).  dlL_pushtensor3 pushes three results, nil for NULL,
 * taking ownership; dlL_nomore errors when anything follows argument last. */
dl_tensor *dlL_opttensor(lua_State *L, int idx);
void dlL_optpair(lua_State *L, int opts, const char *op, const char *key, const int64_t def[2],
                 int64_t out[2]);
void dlL_checkpair(lua_State *L, int idx, const char *op, const char *what, int64_t out[2]);
void dlL_optneed(lua_State *L, int opts, const char *op, bool need[3]);
int dlL_pushtensor3(lua_State *L, dl_tensor *a, dl_tensor *b, dl_tensor *c);
/* Pushes t (taking ownership, as dlL_pushtensor) or nil when t is NULL.  Returns 1. */
int dlL_pushopttensor(lua_State *L, dl_tensor *t);
void dlL_nomore(lua_State *L, int last, const char *op);
/* The tensors of the array at idx (what names it in errors), in a userdata
 * array pushed on the stack (freed with it; the tensors stay referenced by
 * the array); *n their count. */
dl_tensor **dlL_checktensors(lua_State *L, int idx, const char *op, const char *what, int *n);

/* Adds functions to the dl module table and methods to the Tensor methods
 * table.  Either list may be NULL. */
void dlL_register(lua_State *L, const luaL_Reg *functions, const luaL_Reg *methods);

/* Bindings that serve several Lua names told apart by a small integer (a
 * kind, or flags): as luaL_Reg, plus that integer.  dlL_register_kinds adds
 * each entry as a closure of func to the dl module (functions) and to the
 * Tensor methods (methods), either may be NULL; inside, dlL_kind(L) is the
 * entry's integer and dlL_opname(L) its Lua name (for messages). */
typedef struct {
    const char *name;
    lua_CFunction func;
    int kind;
} dlL_KindReg;
void dlL_register_kinds(lua_State *L, const dlL_KindReg *functions, const dlL_KindReg *methods);
int dlL_kind(lua_State *L);
const char *dlL_opname(lua_State *L);

/* Registers the userdata class `name` (its metatable in the registry, as
 * luaL_checkudata finds it): the metamethods of meta (__gc, __close, __len,
 * __tostring ...) and, unless methods is NULL, __index = a table of methods.
 * Leaves the stack as it was. */
void dlL_newclass(lua_State *L, const char *name, const luaL_Reg *meta, const luaL_Reg *methods);

/* The object in the userdata box (a pointer-sized userdata of class mt) at
 * idx; an emptied box (closed or freed) raises the error `closed`. */
void *dlL_checkbox(lua_State *L, int idx, const char *mt, const char *closed);

/* Adds functions to the subtable dl.<name> (created when absent). */
void dlL_register_in(lua_State *L, const char *name, const luaL_Reg *functions);
/* An nn family's functions: its kernel pairs into dl._nn, its recording entry
 * points (what dl.nn.functional exposes) into dl._F; either may be NULL. */
void dlL_register_nn(lua_State *L, const luaL_Reg *nn, const luaL_Reg *F);

/* Pushes the line Lua's print writes for the values at 1..top: each through
 * tostring, tab-separated, ending in a newline (l_state.c's print and the
 * REPL's result printer share it). */
void dlL_pushprintline(lua_State *L);

/* lua_pcall's message handler: the error message (or the error object's
 * __tostring, or its type) with a traceback (l_state.c; dlua.c uses it too). */
int dlL_msghandler(lua_State *L);

/* From a signal handler: writes msg (len bytes) to stderr, restores sig's
 * default action and raises it again, so the process ends as a second
 * Ctrl-C asks (async-signal-safe; dlua.c and l_train.c share it). */
void dlL_die_of_signal(int sig, const char *msg, size_t len);

/* Marks L's state as owned by the calling thread: a failed allocation on
 * this thread collects it (l_dl.c).  dl_state_* calls this on entry. */
void dlL_adopt_state(lua_State *L);

/* Family openers, called by luaopen_dl in this order. */
void dlL_open_tensor(lua_State *L);      /* l_tensor.c: userdata, views, conversion */
void dlL_open_create(lua_State *L);      /* l_create.c: creation, dl.tensor, tolist */
void dlL_open_elementwise(lua_State *L); /* l_elementwise.c */
void dlL_open_reduce(lua_State *L);      /* l_reduce.c */
void dlL_open_linalg(lua_State *L);      /* l_linalg.c */
void dlL_open_index(lua_State *L);       /* l_index.c: joining and indexing */
void dlL_open_random(lua_State *L);      /* l_random.c */
void dlL_open_print(lua_State *L);       /* l_print.c: __tostring */
void dlL_open_autograd(lua_State *L);    /* l_autograd.c: backward, no_grad, ... */
void dlL_open_io(lua_State *L);          /* l_io.c: dl.save / dl.load (safetensors) */
void dlL_open_softmax(lua_State *L);     /* l_softmax.c: dl._nn, dl._F softmax */
void dlL_open_attention(lua_State *L);   /* l_attention.c: dl._nn, dl._F attention */
void dlL_open_loss(lua_State *L);        /* l_loss.c: dl._nn, dl._F losses */
void dlL_open_activation(lua_State *L);  /* l_activation.c: dl._nn, dl._F relu */
void dlL_open_dropout(lua_State *L);     /* l_dropout.c: dl._nn, dl._F dropout */
void dlL_open_pad(lua_State *L);         /* l_pad.c: dl._nn, dl._F pad */
void dlL_open_image(lua_State *L);       /* l_image.c: dl.image, dl._transforms (pipelines) */
void dlL_open_data(lua_State *L);        /* l_data.c: dl._data (ImageFolder index, loader, IDX) */
void dlL_open_train(lua_State *L); /* l_train.c: RNG state, dl._train (SIGINT, tty, JSON, plot) */

/* The C transform pipeline at idx (a dl._transforms.pipeline userdata), or
 * NULL when idx holds something else. */
struct dl_pipeline *dlL_topipeline(lua_State *L, int idx);
void dlL_open_conv(lua_State *L);      /* l_conv.c: dl._nn, dl._F conv2d */
void dlL_open_batchnorm(lua_State *L); /* l_batchnorm.c: dl._nn, dl._F batch_norm */
void dlL_open_layernorm(lua_State *L); /* l_layernorm.c: dl._nn, dl._F layer_norm, rms_norm */
void dlL_open_embedding(lua_State *L); /* l_embedding.c: dl._nn, dl._F embedding(_bag) */
void dlL_open_clipgrad(lua_State *L);  /* l_clipgrad.c: dl._nn gradient clipping */
void dlL_open_pool(lua_State *L);      /* l_pool.c: dl._nn, dl._F pooling */
void dlL_open_optim(lua_State *L);     /* l_optim.c: dl._optim fused optimizer steps */
void dlL_open_rnn(lua_State *L);       /* l_rnn.c: dl._F.rnn_layer (LSTM, GRU) */

void dlL_open_tensorboard(lua_State *L); /* l_tensorboard.c: dl._tensorboard event files */
void dlL_open_dist(lua_State *L);        /* l_dist.c: dl._dist (process group, DDP reducer) */
void dlL_open_onnx(lua_State *L);        /* l_onnx.c: dl._onnx (ONNX files) */
void dlL_open_text(lua_State *L);        /* l_text.c: dl._text (tokenizers) */

#endif
