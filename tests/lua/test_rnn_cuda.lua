-- test_rnn_cuda.lua - nn.LSTM and nn.GRU on CUDA against the CPU: outputs,
-- final states and the gradients of the input, the initial states and every
-- parameter, for two bidirectional layers over padded and packed (unsorted)
-- batches, float32 and float64, and the cells; a model on one device given
-- input on the other is refused.  Skipped (exit 77) without a GPU.
local T = require "testlib"
T.require_cuda()
local nn = dl.nn
local R = nn.utils.rnn

-- Everything a run produces and its gradients, for T.same_on_devices.
local function run(name, dev, dtype, packed)
  dl.manual_seed(11)
  local m = nn[name](5, 6, {num_layers = 2, bidirectional = true}):to(dtype):to(dev)
  local x = T.randn(7, 4, 5, {seed = 12, dtype = dtype, device = dev}):requires_grad_()
  local h0 = T.randn(4, 4, 6, {seed = 13, dtype = dtype, device = dev}):requires_grad_()
  local c0 = T.randn(4, 4, 6, {seed = 14, dtype = dtype, device = dev}):requires_grad_()
  local inp = packed and R.pack_padded_sequence(x, {3, 7, 1, 5}, {enforce_sorted = false}) or x
  local out, st = m(inp, name == "LSTM" and {h0, c0} or h0)
  if packed then out = R.pad_packed_sequence(out) end
  local states = name == "LSTM" and st or {st}
  local loss = (out * out):sum()
  for _, s in ipairs(states) do loss = loss + (s * 3):sum() end
  loss:backward()
  local r = {out, states, x.grad, h0.grad}
  if name == "LSTM" then r[#r + 1] = c0.grad end
  for _, p in ipairs(m:parameters()) do r[#r + 1] = p.grad end
  return r
end

for _, name in ipairs {"LSTM", "GRU"} do
  for _, packed in ipairs {false, true} do
    local what = string.format("%s %s forward and backward", name, packed and "packed" or "padded")
    T.cuda_case(what .. " float32", function(dev) return run(name, dev, dl.float32, packed) end, 1e-4, 1e-5)
    T.cuda_case(what .. " float64", function(dev) return run(name, dev, dl.float64, packed) end, 1e-10, 1e-12)
  end
end

T.cuda_case("LSTMCell and GRUCell", function(dev)
  dl.manual_seed(15)
  local lc, gc = nn.LSTMCell(3, 4):to(dev), nn.GRUCell(3, 4):to(dev)
  local x = T.randn(2, 3, {seed = 16, device = dev}):requires_grad_()
  local h, c = lc(x)
  local g = gc(x, h)
  ;(h + c + g):sum():backward()
  return {h, c, g, x.grad, lc.weight_hh.grad, gc.bias_hh.grad}
end, 1e-5, 1e-6)

T.case("a model on the CPU given CUDA input is refused", function()
  local m = nn.GRU(3, 4)
  T.raises(function() m(dl.randn(2, 1, 3):to("cuda")) end, "gru:")
  T.shape_eq(m(dl.randn(2, 1, 3)), {2, 1, 4}, "the CPU model still runs")
end)

T.done()
