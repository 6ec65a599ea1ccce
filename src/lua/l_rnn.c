/* l_rnn.c - Lua binding of the rnn family (src/ops/rnn.h), in dl._F:
 *
 *   dl._F.rnn_layer(mode, x, batch_sizes, h0, c0, w_ih, w_hh, b_ih, b_hh,
 *                   reverse) -> y, h_n, c_n (c_n nil for "gru")
 *
 * One layer in one direction, recording autograd: mode "lstm" or "gru", x
 * (T, B, I) padded time-major with batch_sizes nil, or (N, I) packed rows
 * with batch_sizes the int64 counts per step; absent tensors are nil.  The
 * modules (lua/dl/nn/rnn.lua) build LSTM and GRU from it.  Every argument is
 * checked before any tensor is made. */
#include "l_bind.h"
#include "ops/rnn.h"

static int F_rnn_layer(lua_State *L) {
    static const char *const modes[] = {"lstm", "gru", NULL};
    dl_rnn_args a = {.mode = luaL_checkoption(L, 1, NULL, modes) == 0 ? DL_RNN_LSTM : DL_RNN_GRU};
    a.x = dlL_checktensor(L, 2);
    a.batch_sizes = dlL_opttensor(L, 3);
    a.h0 = dlL_opttensor(L, 4);
    a.c0 = dlL_opttensor(L, 5);
    a.w_ih = dlL_checktensor(L, 6);
    a.w_hh = dlL_checktensor(L, 7);
    a.b_ih = dlL_opttensor(L, 8);
    a.b_hh = dlL_opttensor(L, 9);
    a.reverse = lua_toboolean(L, 10);
    dlL_nomore(L, 10, "rnn_layer");
    dl_tensor *y, *hn, *cn;
    if (dl_rnn(&a, &y, &hn, &cn)) return dlL_fail(L);
    return dlL_pushtensor3(L, y, hn, cn);
}

void dlL_open_rnn(lua_State *L) {
    static const luaL_Reg F[] = {{"rnn_layer", F_rnn_layer}, {NULL, NULL}};
    dlL_register_nn(L, NULL, F);
}
