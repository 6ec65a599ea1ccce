-- test_rnn_torch.lua - nn.LSTM, nn.GRU, their cells and nn.utils.rnn against
-- PyTorch 1.13 with copied weights: outputs, final states, and the
-- gradients of the input, the initial states and every parameter (float32),
-- for 1 and 2 layers, one and two directions, batch_first both ways, with
-- and without initial states, unbatched input, and packed batches sorted
-- and unsorted.  Python builds each model with its own seed and emits the
-- weights (state_dict names), inputs, gradients of the outputs and torch's
-- results; Lua loads the weights by name, runs dl and compares.
local T = require "testlib"
local dl = require "dl"
local nn = dl.nn
local R = nn.utils.rnn

-- float32 rounding: one op's tolerances hold through these short recurrences
local rtol, atol = T.torch_tol("float32")

local data = T.torch([[
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
cfgs = [
    # mode, input, hidden, layers, bidirectional, batch_first, initial state, layout
    ("LSTM", 3, 4, 1, False, False, False, "padded"),
    ("LSTM", 3, 4, 2, True, True, True, "padded"),
    ("LSTM", 5, 3, 2, False, False, True, "padded"),
    ("LSTM", 3, 4, 2, True, False, True, "unbatched"),
    ("LSTM", 3, 4, 1, True, False, False, "sorted"),
    ("LSTM", 3, 4, 2, True, True, True, "unsorted"),
    ("LSTM", 2, 3, 2, False, False, False, "unsorted"),
    ("GRU", 3, 4, 1, False, False, False, "padded"),
    ("GRU", 3, 4, 2, True, True, True, "padded"),
    ("GRU", 5, 3, 2, False, False, True, "padded"),
    ("GRU", 3, 4, 1, True, False, True, "unbatched"),
    ("GRU", 3, 4, 2, True, False, True, "sorted"),
    ("GRU", 3, 4, 2, True, True, False, "unsorted"),
    # big enough for the step GEMMs on packed weights (16 x 64 x 256, 16 x 96 x 288)
    ("LSTM", 32, 64, 1, True, False, True, "unsorted", 16, 16),
    ("GRU", 32, 96, 1, False, True, True, "padded", 8, 16),
]
cases = []
for k, cfg in enumerate(cfgs):
    mode, I, H, L, bd, bf, init, lay = cfg[:8]
    Tn, B = cfg[8:] if len(cfg) > 8 else (5, 3)
    torch.manual_seed(100 + k)
    # distinct lengths, so that torch's sort and dlua's agree on the order
    lengths = {"sorted": sorted(torch.randperm(Tn)[:B].add(1).tolist(), reverse=True),
               "unsorted": torch.randperm(Tn)[:B].add(1).tolist()}
    lengths["sorted"][0] = Tn
    m = getattr(nn, mode)(I, H, num_layers=L, bidirectional=bd, batch_first=bf)
    D = 2 if bd else 1
    if lay == "unbatched":
        x = torch.randn(Tn, I)
        sshape = (L * D, H)
    else:
        x = torch.randn(B, Tn, I) if bf else torch.randn(Tn, B, I)
        sshape = (L * D, B, H)
    x = leaf(x)
    states = [leaf(torch.randn(sshape)) for _ in range(2 if mode == "LSTM" else 1)] if init else []
    inp = x
    if lay in lengths:
        inp = pack_padded_sequence(x, lengths[lay], batch_first=bf, enforce_sorted=lay == "sorted")
    hx = None
    if init:
        hx = tuple(states) if mode == "LSTM" else states[0]
    out, st = m(inp, hx)
    out_data = None
    if lay in lengths:
        out_data = out.data
        out, _ = pad_packed_sequence(out, batch_first=bf)
    hs = list(st) if mode == "LSTM" else [st]
    gy = torch.randn(out.shape)
    gs = [torch.randn(h.shape) for h in hs]
    loss = (out * gy).sum() + sum((h * g).sum() for h, g in zip(hs, gs))
    names = [n for n, _ in m.named_parameters()]
    params = [p for _, p in m.named_parameters()]
    grads = torch.autograd.grad(loss, [x] + states + params)
    cases.append(dict(mode=mode, I=I, H=H, L=L, bd=bd, bf=bf, init=init, lay=lay,
                      lengths=lengths.get(lay), names=names,
                      sd={n: p for n, p in zip(names, params)},
                      x=x, states=states, gy=gy, gs=gs, out=out, out_data=out_data, hs=hs,
                      gx=grads[0], gstates=list(grads[1:1 + len(states)]),
                      gparams={n: g for n, g in zip(names, grads[1 + len(states):])}))
emit(cases)
]])

local function load(m, c)
  local sd = {}
  for _, name in ipairs(c.names) do sd[name] = T.from_torch(c.sd[name]) end
  m:load_state_dict(sd)
end

-- The leaves of a case: the input and the initial states torch had, and
-- the state argument made of them (a table for the LSTMs, nil without).
local function leaves(c, lstm)
  local x = T.from_torch(c.x):requires_grad_()
  local states = {}
  for k, s in ipairs(c.states) do states[k] = T.from_torch(s):requires_grad_() end
  local hx
  if c.init then hx = lstm and states or states[1] end
  return x, states, hx
end

-- Backward from loss, then every gradient against torch's.
local function check_grads(loss, m, c, x, states, what)
  loss:backward()
  T.match_torch(x.grad, c.gx, rtol, atol, what .. ": input gradient")
  for k, s in ipairs(states) do
    T.match_torch(s.grad, c.gstates[k], rtol, atol, what .. ": initial state gradient " .. k)
  end
  local params = {}
  for name, p in m:named_parameters() do params[name] = p end
  for _, name in ipairs(c.names) do
    T.match_torch(params[name].grad, c.gparams[name], rtol, atol, what .. ": gradient of " .. name)
  end
end

for i, c in ipairs(data) do
  local what = string.format("%s #%d (layers %d, %s, %s, %s, %s)", c.mode, i, c.L,
    c.bd and "bidirectional" or "one direction", c.bf and "batch_first" or "time-major",
    c.init and "initial state" or "zero state", c.lay)
  T.case(what, function()
    local m = nn[c.mode](c.I, c.H, {num_layers = c.L, bidirectional = c.bd, batch_first = c.bf})
    load(m, c)
    local x, states, hx = leaves(c, c.mode == "LSTM")
    local inp = x
    if c.lengths then
      inp = R.pack_padded_sequence(x, c.lengths, {batch_first = c.bf, enforce_sorted = c.lay == "sorted"})
    end
    local out, st = m(inp, hx)
    if c.lengths then
      T.truthy(R.is_packed(out), "a PackedSequence in gives one out")
      T.match_torch(out.data, c.out_data, rtol, atol, what .. ": packed data")
      out = R.pad_packed_sequence(out, {batch_first = c.bf})
    end
    local hs = c.mode == "LSTM" and st or {st}
    T.match_torch(out, c.out, rtol, atol, what .. ": output")
    local loss = dl.mul(out, T.from_torch(c.gy)):sum()
    for k, h in ipairs(hs) do
      T.match_torch(h, c.hs[k], rtol, atol, what .. ": final state " .. k)
      loss = loss + dl.mul(h, T.from_torch(c.gs[k])):sum()
    end
    check_grads(loss, m, c, x, states, what)
  end)
end

-- --- cells ----------------------------------------------------------------------

local cells = T.torch([[
import torch.nn as nn
cases = []
for k, (mode, bias, batched, init) in enumerate([("LSTMCell", True, True, True), ("LSTMCell", False, False, True),
                                                 ("LSTMCell", True, True, False), ("GRUCell", True, True, True),
                                                 ("GRUCell", True, False, False), ("GRUCell", False, True, True)]):
    torch.manual_seed(200 + k)
    m = getattr(nn, mode)(3, 4, bias=bias)
    x = leaf(torch.randn(2, 3) if batched else torch.randn(3))
    sshape = (2, 4) if batched else (4,)
    states = [leaf(torch.randn(sshape)) for _ in range(2 if mode == "LSTMCell" else 1)] if init else []
    hx = None
    if init:
        hx = tuple(states) if mode == "LSTMCell" else states[0]
    r = m(x, hx)
    outs = list(r) if mode == "LSTMCell" else [r]
    gs = [torch.randn(o.shape) for o in outs]
    loss = sum((o * g).sum() for o, g in zip(outs, gs))
    names = [n for n, _ in m.named_parameters()]
    params = [p for _, p in m.named_parameters()]
    grads = torch.autograd.grad(loss, [x] + states + params)
    cases.append(dict(mode=mode, bias=bias, init=init, names=names, sd={n: p for n, p in zip(names, params)},
                      x=x, states=states, outs=outs, gs=gs, gx=grads[0], gstates=list(grads[1:1 + len(states)]),
                      gparams={n: g for n, g in zip(names, grads[1 + len(states):])}))
emit(cases)
]])

for i, c in ipairs(cells) do
  local what = string.format("%s #%d", c.mode, i)
  T.case(what, function()
    local m = nn[c.mode](3, 4, {bias = c.bias})
    load(m, c)
    local x, states, hx = leaves(c, c.mode == "LSTMCell")
    local outs = {m(x, hx)}
    T.eq(#outs, #c.outs, "number of results")
    local loss
    for k, o in ipairs(outs) do
      T.match_torch(o, c.outs[k], rtol, atol, what .. ": result " .. k)
      local l = dl.mul(o, T.from_torch(c.gs[k])):sum()
      loss = loss and loss + l or l
    end
    check_grads(loss, m, c, x, states, what)
  end)
end

-- --- packing utilities -------------------------------------------------------------

local utils = T.torch([[
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pack_sequence, pad_sequence
seqs = [torch.randn(2, 3), torch.randn(4, 3), torch.randn(1, 3), torch.randn(3, 3)]
r = dict(seqs=seqs)
r["pad"] = pad_sequence(seqs)
r["pad_bf"] = pad_sequence(seqs, batch_first=True, padding_value=-1.5)
p = pack_sequence(seqs, enforce_sorted=False)
r["packed"] = dict(data=p.data, batch_sizes=p.batch_sizes, sorted=p.sorted_indices, unsorted=p.unsorted_indices)
out, lens = pad_packed_sequence(p, batch_first=True, padding_value=7.0, total_length=6)
r["unpacked"] = out
r["lens"] = lens
x = torch.randn(2, 5, 3)
p2 = pack_padded_sequence(x, torch.tensor([5, 2]), batch_first=True)
r["x"] = x
r["packed2"] = dict(data=p2.data, batch_sizes=p2.batch_sizes)
emit(r)
]])

T.case("pad_sequence, pack_sequence, pad_packed_sequence vs torch", function()
  local seqs = {}
  for i, s in ipairs(utils.seqs) do seqs[i] = T.from_torch(s) end
  T.match_torch(R.pad_sequence(seqs), utils.pad, 0, 0, "pad_sequence")
  T.match_torch(R.pad_sequence(seqs, {batch_first = true, padding_value = -1.5}), utils.pad_bf, 0, 0,
    "pad_sequence batch_first")
  local p = R.pack_sequence(seqs, {enforce_sorted = false})
  T.match_torch(p.data, utils.packed.data, 0, 0, "packed data")
  T.match_torch(p.batch_sizes, utils.packed.batch_sizes, 0, 0, "batch_sizes")
  T.match_torch(p.sorted_indices - 1, utils.packed.sorted, 0, 0, "sorted_indices (1-based)")
  T.match_torch(p.unsorted_indices - 1, utils.packed.unsorted, 0, 0, "unsorted_indices (1-based)")
  local out, lens = R.pad_packed_sequence(p, {batch_first = true, padding_value = 7.0, total_length = 6})
  T.match_torch(out, utils.unpacked, 0, 0, "pad_packed_sequence")
  T.match_torch(lens, utils.lens, 0, 0, "lengths")
  local p2 = R.pack_padded_sequence(T.from_torch(utils.x), dl.tensor({5, 2}), {batch_first = true})
  T.match_torch(p2.data, utils.packed2.data, 0, 0, "pack_padded_sequence with a lengths tensor")
  T.match_torch(p2.batch_sizes, utils.packed2.batch_sizes, 0, 0, "its batch_sizes")
  T.eq(p2.sorted_indices, nil, "sorted_indices of a sorted batch")
end)

T.done()
