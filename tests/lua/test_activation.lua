-- test_activation.lua - relu: the kernels (dl._nn.relu_forward /
-- relu_backward) on known values, empty and half inputs, a finite-difference
-- check of the backward in float64, in-place relu through dl._F's autograd,
-- and bad input; gelu (both forms) and silu through dl._F and the modules
-- nn.GELU / nn.SiLU: known values, float64 gradchecks, in-place silu and bad
-- options.  PyTorch comparisons live in test_activation_torch.lua.
local T = require "testlib"
local nn = dl._nn

local f64 = {dtype = dl.float64}
local rnd = T.randn64

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
-- gelu and silu

local F = dl._F

T.case("gelu and silu known values", function()
  local x = dl.tensor({0, 1, -1, 2}, f64)
  -- x * Phi(x): Phi(1) = 0.841344746068543, Phi(2) = 0.977249868051821
  T.tensor_eq(F.gelu(x), {0, 0.841344746068543, -0.158655253931457, 1.954499736103642}, 1e-12)
  T.close(F.gelu(x, {approximate = "none"}), F.gelu(x), 0, 0)
  local function gt(v) return 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ^ 3))) end
  T.tensor_eq(F.gelu(x, {approximate = "tanh"}), {gt(0), gt(1), gt(-1), gt(2)}, 1e-12)
  local function si(v) return v / (1 + math.exp(-v)) end
  T.tensor_eq(F.silu(x), {si(0), si(1), si(-1), si(2)}, 1e-12)
  -- float32, empty, half, integers give float32
  T.tensor_eq(F.silu(dl.tensor({1.0})), {si(1)}, 1e-6)
  T.shape_eq(F.gelu(dl.zeros(0)), {0})
  T.eq(F.gelu(dl.ones(3):half()).dtype, dl.float16)
  T.eq(F.silu(dl.tensor({1, 2}, {dtype = dl.int64})).dtype, dl.float32)
end)

T.case("gradcheck gelu, gelu tanh, silu (float64)", function()
  local x = (rnd(4, 7) * 3):requires_grad_()
  T.gradcheck(function(t) return F.gelu(t) end, {x}, "gelu")
  T.gradcheck(function(t) return F.gelu(t, {approximate = "tanh"}) end, {x}, "gelu tanh")
  T.gradcheck(function(t) return F.silu(t) end, {x}, "silu")
  -- a non-contiguous input
  local xt = (rnd(5, 3) * 2):requires_grad_()
  T.gradcheck(function(t) return F.gelu(t:t()) end, {xt}, "gelu strided")
end)

T.case("silu inplace on a non-leaf", function()
  local x = dl.tensor({-1, 0, 2}, f64):requires_grad_()
  local y = x * 1
  T.eq(F.silu(y, {inplace = true}), y)
  y:sum():backward()
  local function d(v) local s = 1 / (1 + math.exp(-v)) return s * (1 + v * (1 - s)) end
  T.tensor_eq(x.grad, {d(-1), d(0), d(2)}, 1e-12)
end)

T.case("nn.GELU and nn.SiLU modules", function()
  local x = rnd(2, 5)
  T.close(dl.nn.GELU()(x), F.gelu(x), 0, 0)
  T.close(dl.nn.GELU({approximate = "tanh"})(x), F.gelu(x, {approximate = "tanh"}), 0, 0)
  T.close(dl.nn.SiLU()(x), F.silu(x), 0, 0)
  T.eq(tostring(dl.nn.GELU({approximate = "tanh"})), "GELU(approximate='tanh')")
  T.eq(tostring(dl.nn.GELU()), "GELU(approximate='none')")
  T.eq(tostring(dl.nn.SiLU()), "SiLU()")
  local m = dl.nn.SiLU(true)
  local y = x:clone()
  m(y)
  T.close(y, F.silu(x), 0, 0)
  -- through a module, the gradient flows
  local xg = rnd(3):requires_grad_()
  dl.nn.GELU()(xg):sum():backward()
  T.shape_eq(xg.grad, {3})
end)

T.case("gelu and silu bad options", function()
  local x = dl.ones(3)
  T.raises(function() F.gelu(x, {approximate = "erf"}) end, "approximate must be 'none' or 'tanh', got 'erf'")
  T.raises(function() F.gelu(x, {approximate = true}) end, "approximate")
  T.raises(function() F.gelu(x, {approx = "tanh"}) end, "approx")
  T.raises(function() dl.nn.GELU({approximate = "fast"}) end, "approximate must be 'none' or 'tanh'")
  T.raises(function() F.silu(x, {inplace = true, foo = 1}) end, "foo")
  T.raises(function() F.gelu("x") end, "tensor")
  T.raises(function() dl.nn.SiLU()(nil) end, "SiLU")
  -- the process is still healthy
  T.tensor_eq(F.silu(dl.tensor({0.0})), {0})
end)

-- --------------------------------------------------------------------------------------------
-- bad input

T.case("relu bad input", function()
  T.raises(function() nn.relu_backward(dl.ones(2), dl.ones(3)) end, "does not match")
  -- the process is still healthy
  T.tensor_eq(nn.relu_forward(dl.tensor({-1.0, 2.0})), {0, 2})
end)

T.done()
