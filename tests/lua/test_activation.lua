-- test_activation.lua - relu: the kernels (dl._nn.relu_forward /
-- relu_backward) on known values, empty and half inputs, a finite-difference
-- check of the backward in float64, in-place relu through dl._F's autograd,
-- and bad input.  PyTorch comparisons live in test_activation_torch.lua.
local T = require "testlib"
local nn = dl._nn

local f64 = {dtype = dl.float64}
local function rnd(...) return dl.randn({...}, f64) end

-- --------------------------------------------------------------------------------------------
-- known values

T.case("relu forward and backward known values", function()
  local y = dl.tensor({0.0, 2.0, 0.0, 1.0})
  T.tensor_eq(nn.relu_backward(dl.tensor({5.0, 6.0, 7.0, 8.0}), y), {0, 6, 0, 8})
  T.tensor_eq(nn.relu_forward(dl.tensor({-1.0, 2.0})), {0, 2})
  T.shape_eq(nn.relu_backward(dl.zeros(0), dl.zeros(0)), {0})
  T.eq(nn.relu_backward(dl.ones(2):half(), dl.tensor({1.0, -1.0}):half()).dtype, dl.float16)
end)

-- --------------------------------------------------------------------------------------------
-- finite-difference checks of the backward kernels (float64, T.kernel_gradcheck)

T.case("gradcheck relu", function()
  local x = rnd(3, 5)
  x = x + x:sign() * 0.01 -- keep away from the kink
  local g = rnd(3, 5)
  T.kernel_gradcheck("relu", function() return nn.relu_forward(x) end,
    {x}, {nn.relu_backward(g, nn.relu_forward(x))}, g)
end)

-- --------------------------------------------------------------------------------------------
-- autograd through dl._F (what dl.nn.functional exposes): T.gradcheck

T.case("relu inplace on a non-leaf", function()
  local x = dl.tensor({-1, 2, -3, 4}):double():requires_grad_()
  local y = x * 1
  dl._F.relu(y, {inplace = true})
  y:sum():backward()
  T.tensor_eq(x.grad, {0, 1, 0, 1})
  T.raises(function() dl._F.relu(x, {inplace = true}) end, "leaf")
end)

-- --------------------------------------------------------------------------------------------
-- bad input

T.case("relu bad input", function()
  T.raises(function() nn.relu_backward(dl.ones(2), dl.ones(3)) end, "does not match")
  -- the process is still healthy
  T.tensor_eq(nn.relu_forward(dl.tensor({-1.0, 2.0})), {0, 2})
end)

T.done()
