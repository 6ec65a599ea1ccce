-- test_softmax.lua - softmax and log_softmax: the kernels (dl._nn) on known
-- values (stable for large inputs, -inf masks, NaN, 0-dim, empty, half
-- types, non-contiguous input; half storage equal to the float32 path rounded),
-- finite-difference gradient checks of their
-- backwards in float64, autograd through dl._F, and bad input.  PyTorch
-- comparisons live in test_softmax_torch.lua.
local T = require "testlib"
local nn = dl._nn

local f64 = {dtype = dl.float64}
local function rnd(...) return dl.randn({...}, f64) end

-- --------------------------------------------------------------------------------------------
-- known values

T.case("softmax / log_softmax known values", function()
  local x = dl.tensor({{1, 2, 3}, {0, 0, 0}}, f64)
  local e = {math.exp(1), math.exp(2), math.exp(3)}
  local s = e[1] + e[2] + e[3]
  T.tensor_eq(nn.softmax_forward(x, 2), {{e[1] / s, e[2] / s, e[3] / s}, {1 / 3, 1 / 3, 1 / 3}}, 1e-12)
  T.tensor_eq(nn.log_softmax_forward(x, -1),
    {{1 - math.log(s), 2 - math.log(s), 3 - math.log(s)}, {-math.log(3), -math.log(3), -math.log(3)}}, 1e-12)
  -- along dim 1: columns
  T.tensor_eq(nn.softmax_forward(dl.tensor({{0.0, 5}, {0, 5}}), 1), {{0.5, 0.5}, {0.5, 0.5}})
  -- stable for large inputs
  T.tensor_eq(nn.softmax_forward(dl.tensor({1000.0, 1000.0}), 1), {0.5, 0.5})
  T.tensor_eq(nn.log_softmax_forward(dl.tensor({-1000.0, 0.0}), 1), {-1000, 0})
  -- 0-dim and empty
  T.eq(nn.softmax_forward(dl.tensor(3.5), 1):item(), 1.0)
  T.eq(nn.log_softmax_forward(dl.tensor(3.5), -1):item(), 0.0)
  T.shape_eq(nn.softmax_forward(dl.zeros(0, 3), 2), {0, 3})
  -- dtypes follow the input
  T.eq(nn.softmax_forward(dl.tensor({1.0, 2.0}):half(), 1).dtype, dl.float16)
  T.tensor_eq(nn.softmax_forward(dl.tensor({0.0, 0.0}):bfloat16(), 1):float(), {0.5, 0.5})
  -- non-contiguous input: transposed equals the contiguous copy
  local a = dl.randn(4, 5)
  T.tensor_eq(nn.softmax_forward(a:t(), 1), nn.softmax_forward(a:t():contiguous(), 1), 1e-6)
end)

T.case("softmax: masked logits, NaN and half types", function()
  local isnan = function(v) return v ~= v end
  local xh = dl.tensor({{1.0, 2.0, 3.0}, {0.5, 0.5, -1.0}})
  T.tensor_eq(nn.log_softmax_forward(xh:half(), 2):float(), nn.log_softmax_forward(xh, 2), 2e-3)
  -- masked (-inf) logits get exactly zero probability
  local p = nn.softmax_forward(dl.tensor({0.0, -math.huge, 0.0}), 1)
  T.tensor_eq(p, {0.5, 0, 0.5})
  local all_masked = nn.softmax_forward(dl.tensor({-math.huge, -math.huge}), 1):tolist()
  T.truthy(isnan(all_masked[1]), "softmax of all -inf is NaN as in PyTorch")
  T.truthy(isnan(nn.softmax_forward(dl.tensor({0.0, 0 / 0, 1.0}), 1):tolist()[1]), "NaN spreads over the row")
end)

-- float16 / bfloat16 storage: the CPU kernels widen in registers and must give the float32
-- path's result rounded once, to the bit, forward and backward, for rows (inner == 1, also one
-- longer than the kernels' stack buffer) and blocks of columns (inner > 1, a partial block too)

T.case("softmax half storage equals the float32 path rounded", function()
  local shapes = {{{6, 300}, {2, -1}}, {{2, 5000}, {2, 1}}, {{3, 37, 70}, {1, 2, 3}}, {{5}, {1}}}
  for _, dt in ipairs({dl.float16, dl.bfloat16}) do
    for _, sd in ipairs(shapes) do
      local x = (dl.randn(sd[1]) * 4):to(dt)
      local flat = x:view(-1)
      flat[1] = -math.huge -- a masked logit, a large one, a NaN (its row or column turns NaN)
      flat[2] = 60
      if flat:numel() > 40 then flat[40] = 0 / 0 end
      local gy = dl.randn(sd[1]):to(dt)
      for _, dim in ipairs(sd[2]) do
        for _, fn in ipairs({"softmax", "log_softmax"}) do
          local what = string.format("%s %s %s dim %d", fn, tostring(dt), table.concat(sd[1], "x"), dim)
          local y = nn[fn .. "_forward"](x, dim)
          T.same_bits(y, nn[fn .. "_forward"](x:float(), dim):to(dt), what .. " forward")
          T.same_bits(nn[fn .. "_backward"](gy, y, dim),
            nn[fn .. "_backward"](gy:float(), y:float(), dim):to(dt), what .. " backward")
        end
      end
    end
  end
  -- a transposed (non-contiguous) half input, and mixed grad/output dtypes (the float32 path)
  local x = dl.randn(70, 9):bfloat16():t()
  T.same_bits(nn.softmax_forward(x, 2), nn.softmax_forward(x:float(), 2):bfloat16(), "transposed")
  local y = nn.softmax_forward(x, 1)
  local g = dl.randn(9, 70)
  T.same_bits(nn.softmax_backward(g, y, 1), nn.softmax_backward(g, y:float(), 1):bfloat16(), "float grad")
  -- results do not depend on the thread count (rows and column blocks in parallel)
  local xr, xc = dl.randn(64, 600):half(), dl.randn(8, 50, 100):half()
  T.same_across_threads(function()
    return {nn.log_softmax_forward(xr, 2), nn.softmax_forward(xc, 2),
      nn.softmax_backward(xr, nn.softmax_forward(xr, 2), 2)}
  end, {1, 2}, "half softmax")
end)

-- --------------------------------------------------------------------------------------------
-- finite-difference checks of the backward kernels (float64, T.kernel_gradcheck)

T.case("gradcheck softmax / log_softmax", function()
  for _, dim in ipairs({1, 2, 3, -1}) do
    local x = rnd(2, 3, 4)
    local g = rnd(2, 3, 4)
    local y = nn.softmax_forward(x, dim)
    T.kernel_gradcheck("softmax dim " .. dim, function() return nn.softmax_forward(x, dim) end,
      {x}, {nn.softmax_backward(g, y, dim)}, g)
    local ly = nn.log_softmax_forward(x, dim)
    T.kernel_gradcheck("log_softmax dim " .. dim, function() return nn.log_softmax_forward(x, dim) end,
      {x}, {nn.log_softmax_backward(g, ly, dim)}, g)
  end
  -- a transposed input
  local x = rnd(4, 3):t()
  local g = rnd(3, 4)
  T.kernel_gradcheck("softmax transposed", function() return nn.softmax_forward(x, 2) end,
    {x}, {nn.softmax_backward(g, nn.softmax_forward(x, 2), 2)}, g)
end)

-- --------------------------------------------------------------------------------------------
-- autograd through dl._F (what dl.nn.functional exposes): T.gradcheck

T.case("softmax and log_softmax", function()
  local x = dl.randn(3, 5):double():requires_grad_()
  T.gradcheck(function(a) return dl._F.softmax(a, 2) end, {x})
  T.gradcheck(function(a) return dl._F.log_softmax(a, 1) end, {x})
  T.eq(dl._F.softmax(x, -1).grad_fn, "SoftmaxBackward")
end)

-- --------------------------------------------------------------------------------------------
-- bad input

T.case("softmax bad input", function()
  local x, t = dl.randn(3, 4), dl.tensor({1, 2, 4})
  T.raises(function() nn.softmax_forward(x, 3) end, "out of range")
  T.raises(function() nn.softmax_forward(x, 0) end, "1-based")
  T.raises(function() nn.softmax_forward(dl.tensor({1, 2}), 1) end, "floating-point")
  T.raises(function() nn.softmax_backward(dl.ones(3, 4), dl.ones(4, 3), 1) end, "does not match")
  T.raises(function() nn.softmax_forward(x, 1, 2) end, "unexpected argument")
  -- the process is still healthy
  T.tensor_eq(nn.softmax_forward(dl.zeros(2), 1), {0.5, 0.5})
end)

T.done()
