-- test_pad.lua - pad in every mode (constant, reflect, replicate, circular):
-- the kernels (dl._nn.pad_forward / pad_backward) on known values (negative
-- pads, integer tensors, any rank), empty and half inputs, finite-difference
-- checks of the backward in float64, autograd through dl._F, and bad input.
-- PyTorch comparisons live in test_pad_torch.lua.
local T = require "testlib"
local nn = dl._nn

local f64 = {dtype = dl.float64}
local rnd, grad_like = T.randn64, T.grad_like

-- --------------------------------------------------------------------------------------------
-- known values

T.case("pad known values", function()
  -- pad, all modes (PyTorch's results)
  local a = dl.arange(6.0):view(1, 2, 3)
  T.tensor_eq(nn.pad_forward(a, {2, -1}, "reflect"), {{{2, 1, 0, 1}, {5, 4, 3, 4}}})
  T.tensor_eq(nn.pad_forward(a, {-1, 2}, "replicate"), {{{1, 2, 2, 2}, {4, 5, 5, 5}}})
  T.tensor_eq(nn.pad_forward(a, {1, 1}, "circular"), {{{2, 0, 1, 2, 0}, {5, 3, 4, 5, 3}}})
  T.tensor_eq(nn.pad_forward(a, {1, 0, 0, 1}, {value = 7}), {{{7, 0, 1, 2}, {7, 3, 4, 5}, {7, 7, 7, 7}}})
  T.tensor_eq(nn.pad_forward(a, {-1, -1}), {{{1}, {4}}})
  T.tensor_eq(nn.pad_forward(a, {1, 1, 1, 1}, "reflect"),
    {{{4, 3, 4, 5, 4}, {1, 0, 1, 2, 1}, {4, 3, 4, 5, 4}, {1, 0, 1, 2, 1}}})
  -- integer tensors pad too; constant pads of any rank
  T.tensor_eq(nn.pad_forward(dl.tensor({1, 2}), {1, 1}, "replicate"), {1, 1, 2, 2})
  T.shape_eq(nn.pad_forward(dl.zeros(2, 3), {1, 1, 1, 1}), {4, 5})
  T.shape_eq(nn.pad_forward(dl.zeros(2, 3, 4, 5), {1, 1, 0, 0, 2, 2, 1, 0}), {3, 7, 4, 7})
  T.shape_eq(nn.pad_forward(dl.zeros(2, 3), {-2, -1}), {2, 0})
  -- backward of replicate piles the border onto the edge
  T.tensor_eq(nn.pad_backward(dl.ones(1, 5), {1, 3}, {1, 1}, "replicate"), {{2, 1, 2}})
  T.tensor_eq(nn.pad_backward(dl.ones(1, 5), {1, 3}, {1, 1}, {mode = "reflect"}), {{1, 3, 1}})
  T.tensor_eq(nn.pad_backward(dl.arange(5.0):view(1, 5), {1, 3}, {1, 1}), {{1, 2, 3}})
  T.tensor_eq(nn.pad_backward(dl.arange(1.0, 2.0):view(1, 1), {1, 3}, {-1, -1}), {{0, 1, 0}})
  T.shape_eq(nn.pad_forward(dl.zeros(0, 3), {1, 1}, "replicate"), {0, 5})
  T.shape_eq(nn.pad_backward(dl.zeros(2, 0), {2, 0}, {0, 0}, "reflect"), {2, 0})
  T.tensor_eq(nn.pad_backward(dl.ones(1, 5):half(), {1, 3}, {1, 1}, "replicate"):float(), {{2, 1, 2}})
end)

-- --------------------------------------------------------------------------------------------
-- finite-difference checks of the backward kernels (float64, T.kernel_gradcheck)

T.case("gradcheck pad", function()
  local cases = {
    {shape = {2, 5}, pads = {2, 3}, mode = "reflect"},
    {shape = {2, 5}, pads = {-1, 3}, mode = "reflect"},
    {shape = {1, 2, 4, 3}, pads = {2, 1, 3, 2}, mode = "reflect"},
    {shape = {1, 2, 4, 3}, pads = {2, -1, 4, 2}, mode = "replicate"},
    {shape = {1, 3, 3, 2, 3}, pads = {1, 2, 1, 0, 2, 2}, mode = "replicate"},
    {shape = {2, 3, 4}, pads = {2, 3}, mode = "circular"},
    {shape = {2, 3, 2, 4}, pads = {4, 1, 1, 2}, mode = "circular"},
    {shape = {2, 3, 4}, pads = {1, -2, -1, 2, 1, 1}, mode = "constant"},
  }
  for i, c in ipairs(cases) do
    local x = dl.randn(c.shape, f64)
    local out = nn.pad_forward(x, c.pads, c.mode, 0.5)
    local g = grad_like(out)
    T.kernel_gradcheck("pad case " .. i .. " " .. c.mode, function() return nn.pad_forward(x, c.pads, c.mode, 0.5) end,
      {x}, {nn.pad_backward(g, c.shape, c.pads, c.mode)}, g)
  end
end)

-- --------------------------------------------------------------------------------------------
-- autograd through dl._F (what dl.nn.functional exposes): T.gradcheck

T.case("dl._F.pad records autograd in every mode", function()
  for _, mode in ipairs({"constant", "reflect", "replicate", "circular"}) do
    local z = dl.randn(1, 2, 4, 4):double():requires_grad_()
    T.gradcheck(function(a) return dl._F.pad(a, {1, 2, 2, 1}, {mode = mode}) end, {z}, mode)
  end
end)

-- --------------------------------------------------------------------------------------------
-- bad input

T.case("pad bad input", function()
  local x, t = dl.randn(3, 4), dl.tensor({1, 2, 4})
  T.raises(function() nn.pad_forward(x, {1, 2, 3}) end, "even length")
  T.raises(function() nn.pad_forward(x, {1, 1, 1, 1, 1, 1}) end, "has only 2")
  T.raises(function() nn.pad_forward(x, {4, 0}, "reflect") end, "reflect padding (4, 0) must be less than the size 4")
  T.raises(function() nn.pad_forward(dl.randn(1, 3, 3), {0, 3}, "reflect") end, "reflect padding")
  T.raises(function() nn.pad_forward(x, {-3, -2}) end, "negative size")
  T.raises(function() nn.pad_forward(x, {1, 1}, "mirror") end, "unknown padding mode 'mirror'")
  T.raises(function() nn.pad_forward(x, {1, 5}, "circular") end, "circular padding")
  T.raises(function() nn.pad_forward(dl.randn(2, 2, 2, 2, 2), {1, 1, 1, 1, 1, 1, 1, 1}, "replicate") end, "last 1 to 3 dims")
  T.raises(function() nn.pad_forward(x, {1.5, 1}) end, "must be an integer")
  T.raises(function() nn.pad_forward(x, "1,1") end, "pads must be a table")
  T.raises(function() nn.pad_backward(dl.ones(3, 5), {3, 4}, {1, 1}) end, "expected grad of the padded shape [3, 6]")
  -- the process is still healthy
  T.tensor_eq(nn.pad_forward(dl.tensor({1.0}), {1, 1}), {0, 1, 0})
end)

T.done()
