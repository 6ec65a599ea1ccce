-- test_rnn_grad.lua - float64 gradient checks (central finite differences
-- through autograd) of the rnn family: dl._F.rnn_layer for LSTM and GRU,
-- both directions, padded and packed rows, with and without biases and
-- initial states; and whole modules (two bidirectional layers over an
-- unsorted packed batch, cells), every input, state and weight checked.
local T = require "testlib"
local dl = require "dl"
local nn = dl.nn
local R = nn.utils.rnn

local f64 = {dtype = dl.float64}
local function leaf(...) return dl.randn({...}, f64):requires_grad_() end

-- A scalar of every result, weighted so that no gradient is a plain sum.
local function weigh(...)
  local s
  for i, t in ipairs({...}) do
    local w = dl.linspace(-1, 1 + i, t:numel(), f64):reshape(t.shape)
    local v = dl.mul(t, w):sum()
    s = s and s + v or v
  end
  return s
end

dl.manual_seed(7)
for _, mode in ipairs {"lstm", "gru"} do
  local G = mode == "lstm" and 4 or 3
  for _, cfg in ipairs {
    {reverse = false, packed = false, bias = true, state = true},
    {reverse = true, packed = false, bias = true, state = false},
    {reverse = false, packed = true, bias = true, state = true},
    {reverse = true, packed = true, bias = false, state = true},
  } do
    local what = string.format("%s rnn_layer (%s, %s, %s, %s)", mode, cfg.reverse and "reverse" or "forward",
      cfg.packed and "packed" or "padded", cfg.bias and "bias" or "no bias",
      cfg.state and "initial state" or "zero state")
    T.case(what, function()
      local H, I = 3, 2
      local bs = cfg.packed and dl.tensor({3, 3, 2, 1}, {dtype = dl.int64}) or nil
      local B = cfg.packed and 3 or 2
      local x = cfg.packed and leaf(9, I) or leaf(3, B, I)
      local h0 = cfg.state and leaf(B, H) or nil
      local c0 = (cfg.state and mode == "lstm") and leaf(B, H) or nil
      local wih, whh = leaf(G * H, I), leaf(G * H, H)
      local bih = cfg.bias and leaf(G * H) or nil
      local bhh = cfg.bias and leaf(G * H) or nil
      local inputs = {x, wih, whh}
      for _, t in ipairs {h0, c0, bih, bhh} do inputs[#inputs + 1] = t end
      T.gradcheck(function()
        return weigh(dl._F.rnn_layer(mode, x, bs, h0, c0, wih, whh, bih, bhh, cfg.reverse))
      end, inputs, what)
    end)
  end
end

for _, name in ipairs {"LSTM", "GRU"} do
  T.case(name .. " module: 2 bidirectional layers over an unsorted packed batch", function()
    local m = nn[name](2, 3, {num_layers = 2, bidirectional = true}):double()
    local x = leaf(4, 3, 2)
    local h0 = leaf(4, 3, 3)
    local c0 = leaf(4, 3, 3)
    local inputs = {x, h0}
    if name == "LSTM" then inputs[#inputs + 1] = c0 end
    for _, p in ipairs(m:parameters()) do inputs[#inputs + 1] = p end
    T.gradcheck(function()
      local packed = R.pack_padded_sequence(x, {2, 4, 3}, {enforce_sorted = false})
      local out, st = m(packed, name == "LSTM" and {h0, c0} or h0)
      local padded = R.pad_packed_sequence(out)
      if name == "LSTM" then return weigh(padded, st[1], st[2]) end
      return weigh(padded, st)
    end, inputs, name)
  end)
end

for _, name in ipairs {"LSTMCell", "GRUCell"} do
  T.case(name .. " gradients", function()
    local m = nn[name](2, 3):double()
    local x, h, c = leaf(2, 2), leaf(2, 3), leaf(2, 3)
    local inputs = {x, h}
    if name == "LSTMCell" then inputs[#inputs + 1] = c end
    for _, p in ipairs(m:parameters()) do inputs[#inputs + 1] = p end
    T.gradcheck(function()
      if name == "LSTMCell" then return weigh(m(x, {h, c})) end
      return weigh(m(x, h))
    end, inputs, name)
  end)
end

T.done()
