-- test_rnn.lua - nn.LSTM, nn.GRU, the cells and nn.utils.rnn without the
-- oracle: known values of one-unit layers computed by hand, parameter names,
-- shapes and initialisation, printing, the layouts agreeing with each other
-- (batch_first, unbatched, packed), final states of packed sequences,
-- dropout between layers, and bad input: every error names the op and the
-- facts, and the process stays healthy.
local T = require "testlib"
local dl = require "dl"
local nn = dl.nn
local R = nn.utils.rnn

local function sigmoid(v) return 1 / (1 + math.exp(-v)) end

-- a layer with every weight zero and the given biases (b_ih, b_hh as tables)
local function fixed(name, b_ih, b_hh)
  local m = nn[name](1, 1)
  dl.no_grad(function()
    m.weight_ih_l0:zero_()
    m.weight_hh_l0:zero_()
    m.bias_ih_l0:copy_(dl.tensor(b_ih))
    m.bias_hh_l0:copy_(dl.tensor(b_hh))
  end)
  return m
end

T.case("LSTM known values: zero weights, biases only", function()
  local m = fixed("LSTM", {0.5, -0.25, 0.3, 1.0}, {0.25, 0.5, 0.2, -0.5})
  -- i, f, g, o from b_ih + b_hh: 0.75, 0.25, 0.5, 0.5
  local i, f, g, o = sigmoid(0.75), sigmoid(0.25), math.tanh(0.5), sigmoid(0.5)
  local c, want = 0.2, {}
  for t = 1, 3 do
    c = f * c + i * g
    want[t] = o * math.tanh(c)
  end
  local out, st = m(dl.zeros(3, 1, 1), {dl.zeros(1, 1, 1), dl.full({1, 1, 1}, 0.2)})
  T.tensor_eq(out:view(3), want, 1e-6, "h over time")
  T.tensor_eq(st[1]:view(1), {want[3]}, 1e-6, "h_n")
  T.tensor_eq(st[2]:view(1), {c}, 1e-6, "c_n")
end)

T.case("GRU known values: zero weights, biases only", function()
  local m = fixed("GRU", {0.5, -0.25, 0.3}, {0.25, 0.5, -0.4})
  local r, z = sigmoid(0.75), sigmoid(0.25)
  local n = math.tanh(0.3 + r * -0.4)
  local h, want = 1.5, {}
  for t = 1, 3 do
    h = (1 - z) * n + z * h
    want[t] = h
  end
  local out, hn = m(dl.zeros(3, 1, 1), dl.full({1, 1, 1}, 1.5))
  T.tensor_eq(out:view(3), want, 1e-6, "h over time")
  T.tensor_eq(hn:view(1), {want[3]}, 1e-6, "h_n")
end)

T.case("parameters: PyTorch's names, shapes, order and initial range", function()
  local m = nn.LSTM(3, 5, {num_layers = 2, bidirectional = true})
  local names, shapes = {}, {}
  for name, p in m:named_parameters() do
    names[#names + 1] = name
    shapes[#shapes + 1] = T.fmt(p.shape)
    T.truthy(p:abs():max():item() <= 1 / math.sqrt(5), name .. " within U(-1/sqrt(H), 1/sqrt(H))")
  end
  T.eq(table.concat(names, " "), "weight_ih_l0 weight_hh_l0 bias_ih_l0 bias_hh_l0 weight_ih_l0_reverse "
    .. "weight_hh_l0_reverse bias_ih_l0_reverse bias_hh_l0_reverse weight_ih_l1 weight_hh_l1 bias_ih_l1 "
    .. "bias_hh_l1 weight_ih_l1_reverse weight_hh_l1_reverse bias_ih_l1_reverse bias_hh_l1_reverse", "names")
  T.eq(shapes[1], "{20, 3}", "weight_ih_l0")
  T.eq(shapes[2], "{20, 5}", "weight_hh_l0")
  T.eq(shapes[9], "{20, 10}", "weight_ih_l1 takes both directions")
  local g = nn.GRU(3, 5, {bias = false})
  local n = 0
  for name, p in g:named_parameters() do
    n = n + 1
    T.eq(p.shape[1], 15, name .. " has 3 gates")
  end
  T.eq(n, 2, "no biases")
  local sd = nn.GRUCell(3, 4):state_dict()
  T.truthy(sd.weight_ih and sd.weight_hh and sd.bias_ih and sd.bias_hh, "cell state_dict keys")
end)

T.case("printing as PyTorch", function()
  T.eq(tostring(nn.LSTM(3, 4, {num_layers = 2, bias = false, batch_first = true, dropout = 0.5,
    bidirectional = true})), "LSTM(3, 4, num_layers=2, bias=False, batch_first=True, dropout=0.5, bidirectional=True)")
  T.eq(tostring(nn.GRU(3, 4)), "GRU(3, 4)")
  T.eq(tostring(nn.LSTMCell(3, 4)), "LSTMCell(3, 4)")
  T.eq(tostring(nn.GRUCell(3, 4, {bias = false})), "GRUCell(3, 4, bias=False)")
end)

T.case("layouts agree: batch_first, unbatched, packed of equal lengths, cells", function()
  dl.manual_seed(3)
  for _, name in ipairs {"LSTM", "GRU"} do
    local m = nn[name](3, 4, {num_layers = 2, bidirectional = true})
    local mf = nn[name](3, 4, {num_layers = 2, bidirectional = true, batch_first = true})
    mf:load_state_dict(m:state_dict())
    local x = dl.randn(5, 2, 3)
    local out, st = m(x)
    T.shape_eq(out, {5, 2, 8}, name .. " output")
    local h = name == "LSTM" and st[1] or st
    T.shape_eq(h, {4, 2, 4}, name .. " h_n")
    local outf = mf(x:transpose(1, 2))
    T.close(outf:transpose(1, 2), out, 1e-6, 1e-7, name .. " batch_first")
    local out1 = m(x:select(2, 1))
    T.shape_eq(out1, {5, 8}, name .. " unbatched output")
    T.close(out1, out:select(2, 1), 1e-6, 1e-7, name .. " unbatched")
    local p = m(R.pack_padded_sequence(x, {5, 5}))
    T.close(p.data, out:reshape(10, 8), 1e-6, 1e-7, name .. " packed of full lengths")
  end
  local cell, layer = nn.LSTMCell(3, 4), nn.LSTM(3, 4)
  layer:load_state_dict({weight_ih_l0 = cell.weight_ih, weight_hh_l0 = cell.weight_hh,
    bias_ih_l0 = cell.bias_ih, bias_hh_l0 = cell.bias_hh})
  local x = dl.randn(3, 2, 3)
  local h, c = dl.zeros(2, 4), dl.zeros(2, 4)
  for t = 1, 3 do h, c = cell(x[t], {h, c}) end
  local _, st = layer(x)
  T.close(h, st[1][1], 1e-6, 1e-7, "LSTMCell steps = LSTM")
  T.close(c, st[2][1], 1e-6, 1e-7, "LSTMCell cell state")
end)

T.case("packed: each sequence's final state is its last real step's", function()
  dl.manual_seed(4)
  for _, name in ipairs {"LSTM", "GRU"} do
    local m = nn[name](2, 3, {bidirectional = true})
    local x = dl.randn(4, 3, 2)
    local lens = {2, 4, 1}
    local out, st = m(R.pack_padded_sequence(x, lens, {enforce_sorted = false}))
    local h = name == "LSTM" and st[1] or st
    local padded, got = R.pad_packed_sequence(out)
    T.tensor_eq(got, lens, 0, name .. " lengths back in the given order")
    for b, l in ipairs(lens) do
      -- forward direction: the output at step l; reverse: the output at step 1
      T.close(h[1][b], padded[l][b]:narrow(1, 1, 3), 1e-6, 1e-7, name .. " forward h_n of " .. b)
      T.close(h[2][b], padded[1][b]:narrow(1, 4, 3), 1e-6, 1e-7, name .. " reverse h_n of " .. b)
      -- and each sequence alone gives the same
      local alone, st1 = m(x:narrow(1, 1, l):narrow(2, b, 1))
      T.close(alone:select(2, 1), padded:narrow(1, 1, l):select(2, b), 1e-6, 1e-7, name .. " alone")
      local h1 = name == "LSTM" and st1[1] or st1
      T.close(h1:select(2, 1), h:select(2, b), 1e-6, 1e-7, name .. " alone h_n")
    end
    T.eq(padded[4][1]:abs():sum():item(), 0, "padding is zeros")
  end
end)

T.case("dropout between layers in training mode only", function()
  dl.manual_seed(5)
  local m = nn.GRU(3, 4, {num_layers = 2, dropout = 0.5})
  local ref = nn.GRU(3, 4, {num_layers = 2})
  ref:load_state_dict(m:state_dict())
  local x = dl.randn(6, 2, 3)
  local a, b = m(x), m(x)
  T.truthy((a - b):abs():max():item() > 1e-3, "two training runs differ")
  m:eval()
  T.close(m(x), ref(x), 0, 0, "evaluation ignores dropout")
  local one = nn.LSTM(3, 4, {dropout = 0.5})
  T.close(one(x), one(x), 0, 0, "no dropout after the last layer")
end)

T.case("no graph without grad; gradients still flow to a state alone", function()
  local m = nn.LSTM(2, 3)
  local x = dl.randn(4, 1, 2)
  local out = dl.no_grad(function() return m(x) end)
  T.truthy(not out.requires_grad, "no_grad output")
  m:requires_grad_(false)
  local h0 = dl.randn(1, 1, 3):requires_grad_()
  local y = m(x, {h0, dl.zeros(1, 1, 3)})
  y:sum():backward()
  T.shape_eq(h0.grad, {1, 1, 3}, "h0 gradient")
  T.eq(m.weight_ih_l0.grad, nil, "frozen weights get none")
end)

T.case("a backward after the output was modified in place is refused", function()
  local m = nn.GRU(2, 3)
  local y = m(dl.randn(3, 1, 2))
  y:mul_(2)
  T.raises(function() y:sum():backward() end, "modified by an in-place operation")
end)

-- --- bad input -------------------------------------------------------------------

T.case("bad module arguments", function()
  T.raises(function() nn.LSTM(3, 0) end, "LSTM: hidden_size must be at least 1")
  T.raises(function() nn.GRU(3, 4, {num_layers = 0}) end, "GRU: num_layers must be at least 1")
  T.raises(function() nn.LSTM(3, 4, {dropout = 1.5}) end, "dropout should be a number in range [0, 1]")
  T.raises(function() nn.LSTM(3, 4, {proj_size = 2}) end, "LSTM: proj_size is not supported")
  T.raises(function() nn.GRU(3, 4, {proj_size = 2}) end, "only supported for LSTM")
  T.raises(function() nn.LSTM(3, 4, {layers = 2}) end, "LSTM: unknown option 'layers'")
  T.raises(function() nn.LSTMCell(3, 4, {num_layers = 2}) end, "LSTMCell: unknown option")
  T.raises(function() nn.RNNBase("RNN_TANH", 3, 4) end, "RNNBase: mode must be 'LSTM' or 'GRU', got RNN_TANH")
  T.eq(tostring(nn.RNNBase("LSTM", 3, 4)), "RNNBase(3, 4)", "RNNBase with PyTorch's mode name")
end)

T.case("bad input and states", function()
  local m = nn.LSTM(3, 4, {num_layers = 2})
  local x = dl.randn(5, 2, 3)
  T.raises(function() m(dl.randn(5, 2, 2)) end,
    "LSTM: input.size(-1) must be equal to input_size. Expected 3, got 2")
  T.raises(function() m(dl.randn(5, 2, 3, 1)) end, "LSTM: Expected input to be 2-D or 3-D but received 4-D")
  T.raises(function() m(x, {dl.zeros(2, 3, 4), dl.zeros(2, 2, 4)}) end,
    "LSTM: Expected hidden[0] size (2, 2, 4), got [2, 3, 4]")
  T.raises(function() m(x, {dl.zeros(2, 2, 4), dl.zeros(1, 2, 4)}) end,
    "LSTM: Expected hidden[1] size (2, 2, 4), got [1, 2, 4]")
  T.raises(function() m(x, dl.zeros(2, 2, 4)) end, "LSTM: the state must be a table {h_0, c_0}")
  T.raises(function() m(x:select(2, 1), {dl.zeros(2, 1, 4), dl.zeros(2, 1, 4)}) end,
    "LSTM: for unbatched 2-D input, hx and cx should also be 2-D but got (3-D, 3-D) tensors")
  T.raises(function() m(x, {dl.zeros(2, 4), dl.zeros(2, 4)}) end, "for batched 3-D input")
  T.raises(function() m(x:double()) end, "lstm: weight_ih is float32 but the input is float64")
  T.raises(function() m(dl.zeros(0, 2, 3)) end, "lstm: expected sequence length to be larger than 0")
  local g = nn.GRU(3, 4)
  T.raises(function() g(x, dl.zeros(2, 2, 4)) end, "GRU: Expected hidden size (1, 2, 4), got [2, 2, 4]")
  T.raises(function() g(x, {dl.zeros(1, 2, 4)}) end, "GRU: the state h_0 must be a tensor")
  T.raises(function() g("x") end, "GRU: input must be a tensor or a PackedSequence")
  local c = nn.GRUCell(3, 4)
  T.raises(function() c(dl.randn(2, 2)) end, "GRUCell: input has inconsistent input_size: got 2 expected 3")
  T.raises(function() c(dl.randn(2, 3), dl.zeros(3, 4)) end, "GRUCell: hx has shape [3, 4], expected (2, 4)")
  T.raises(function() nn.LSTMCell(3, 4)(dl.randn(3), {dl.zeros(1, 4), dl.zeros(4)}) end,
    "LSTMCell: for unbatched 1-D input, h should also be 1-D")
  -- the process is healthy: the same modules still run
  T.shape_eq(m(x), {5, 2, 4}, "LSTM after the errors")
  T.shape_eq(c(dl.randn(2, 3)), {2, 4}, "GRUCell after the errors")
end)

T.case("bad lengths and packing arguments", function()
  local x = dl.randn(4, 3, 2)
  T.raises(function() R.pack_padded_sequence(x, {2, 4, 1}) end,
    "pack_padded_sequence: `lengths` array must be sorted in decreasing order when `enforce_sorted` is true")
  T.raises(function() R.pack_padded_sequence(x, {5, 4, 1}) end,
    "pack_padded_sequence: lengths[1] is 5, longer than the padded sequence length 4")
  T.raises(function() R.pack_padded_sequence(x, {4, 2, 0}, {enforce_sorted = false}) end,
    "pack_padded_sequence: length of all samples has to be greater than 0, but lengths[3] is 0")
  T.raises(function() R.pack_padded_sequence(x, {4, 2}) end,
    "expected len(lengths) to be equal to batch_size, but got 2 (batch_size=3)")
  T.raises(function() R.pack_padded_sequence(x, {4, 2, 1}, {batch_first = true}) end,
    "expected len(lengths) to be equal to batch_size, but got 3 (batch_size=4)")
  T.raises(function() R.pack_padded_sequence(x, {4, 2, 1.5}) end, "lengths[3] must be an integer")
  local p = R.pack_padded_sequence(x, {4, 2, 1})
  T.raises(function() R.pad_packed_sequence(p, {total_length = 3}) end,
    "expected total_length to be at least the length of the longest sequence in input, but got "
    .. "total_length=3 and max sequence length being 4")
  T.raises(function() R.pad_packed_sequence(x) end, "pad_packed_sequence: a PackedSequence is required")
  T.raises(function() R.pad_sequence({dl.zeros(2, 3), dl.zeros(2, 4)}) end, "pad_sequence: sequences[2] has shape")
  T.raises(function() R.pad_sequence({}) end, "pad_sequence: sequences must be a non-empty table")
  T.truthy(tostring(p):find("PackedSequence(data=", 1, true), "PackedSequence prints")
end)

T.case("rnn_layer checks its operands", function()
  local F = dl._F
  local x, w, u = dl.randn(6, 2), dl.randn(12, 2), dl.randn(12, 3)
  local bs = function(t) return dl.tensor(t, {dtype = dl.int64}) end
  T.raises(function() F.rnn_layer("lstm", x, bs({2, 3, 1}), nil, nil, w, u) end,
    "lstm: batch_sizes must be positive and nonincreasing, got 3 at step 1 after 2")
  T.raises(function() F.rnn_layer("lstm", x, bs({3, 2}), nil, nil, w, u) end,
    "lstm: batch_sizes sum to 5 but the packed input has 6 rows")
  T.raises(function() F.rnn_layer("lstm", x, bs({3, 0, 3}), nil, nil, w, u) end, "must be positive")
  T.raises(function() F.rnn_layer("lstm", x, dl.tensor({3, 3}, {dtype = dl.float32}), nil, nil, w, u) end,
    "lstm: batch_sizes must be a non-empty 1-D int64 CPU tensor, got float32")
  T.raises(function() F.rnn_layer("gru", x, bs({3, 3}), nil, nil, w, u) end,
    "gru: weight_hh must have shape [3 * hidden_size, hidden_size], got [12, 3]")
  T.raises(function() F.rnn_layer("lstm", x, bs({3, 3}), nil, nil, dl.randn(12, 3), u) end,
    "lstm: weight_ih has shape [12, 3], expected [12, 2]")
  T.raises(function() F.rnn_layer("lstm", x, bs({3, 3}), dl.zeros(2, 3), nil, w, u) end,
    "lstm: h0 has shape [2, 3], expected [3, 3]")
  T.raises(function() F.rnn_layer("gru", x, bs({3, 3}), nil, dl.zeros(3, 4), dl.randn(12, 2), dl.randn(12, 4)) end,
    "gru: a GRU has no cell state c0")
  T.raises(function() F.rnn_layer("lstm", x, nil, nil, nil, w, u) end, "lstm: input must be 3-D")
  T.raises(function() F.rnn_layer("rnn", x, nil, nil, nil, w, u) end, "invalid option 'rnn'")
  local y, h, c = F.rnn_layer("lstm", x, bs({3, 3}), nil, nil, w, u)
  T.shape_eq(y, {6, 3}, "y after the errors")
  T.shape_eq(c, {3, 3}, "c_n")
  T.shape_eq(h, {3, 3}, "h_n")
end)

T.done()
