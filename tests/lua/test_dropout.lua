-- test_dropout.lua - dropout: the kernels (dl._nn.dropout_forward /
-- dropout_backward) on known values (p = 0, p = 1, evaluation), empty and
-- half inputs, a finite-difference check of the backward in float64,
-- statistics and reproducibility, autograd through dl._F, and bad input.
local T = require "testlib"
local nn = dl._nn

local f64 = {dtype = dl.float64}
local rnd = T.randn64

-- --------------------------------------------------------------------------------------------
-- known values

T.case("dropout known values", function()
  -- dropout: p = 0 is the identity, p = 1 gives zeros, eval gives x itself
  local x = dl.randn(50)
  local o, m = nn.dropout_forward(x, 0)
  T.tensor_eq(o, x)
  T.eq(m:all():item(), true)
  o, m = nn.dropout_forward(x, 1)
  T.tensor_eq(o, dl.zeros(50))
  T.eq(m:any():item(), false)
  o, m = nn.dropout_forward(x, 0.5, false)
  T.tensor_eq(o, x)
  T.eq(m, nil)
  T.tensor_eq(nn.dropout_backward(x, nil, 0.5), x)
  local o, m = nn.dropout_forward(dl.zeros(0, 3), 0.5)
  T.shape_eq(o, {0, 3})
  T.shape_eq(m, {0, 3})
  T.eq(nn.dropout_forward(dl.ones(4):bfloat16(), 0.5).dtype, dl.bfloat16)
end)

-- --------------------------------------------------------------------------------------------
-- finite-difference checks of the backward kernels (float64, T.kernel_gradcheck)

T.case("gradcheck dropout", function()
  for _, p in ipairs({0.2, 0.5, 0.9}) do
    local xd = rnd(4, 6)
    local gd = rnd(4, 6)
    dl.manual_seed(11)
    local _, mask = nn.dropout_forward(xd, p)
    T.kernel_gradcheck("dropout p " .. p, function()
      dl.manual_seed(11)
      return (nn.dropout_forward(xd, p))
    end, {xd}, {nn.dropout_backward(gd, mask, p)}, gd)
  end
end)

-- --------------------------------------------------------------------------------------------
-- dropout statistics

T.case("dropout statistics and reproducibility", function()
  local n = 100000
  local x = dl.ones(n)
  for _, p in ipairs({0.1, 0.3, 0.5, 0.8}) do
    dl.manual_seed(1234)
    local out, mask = nn.dropout_forward(x, p)
    T.eq(mask.dtype, dl.bool)
    local kept = mask:sum():item()
    T.near(1 - kept / n, p, 0.01 / p, "dropped fraction for p=" .. p) -- ~7 sigma
    -- survivors are scaled by 1/(1-p), the rest are 0: the sum is kept/(1-p)
    T.near(out:sum():item(), kept / (1 - p), 1e-5)
    T.near(out:amax():item(), 1 / (1 - p), 1e-6)
    -- the same seed gives the same mask and output
    dl.manual_seed(1234)
    local out2, mask2 = nn.dropout_forward(x, p)
    T.eq(dl.equal(mask, mask2), true)
    T.eq(dl.equal(out, out2), true)
    -- the backward uses the same mask and scale
    local gx = nn.dropout_backward(dl.ones(n), mask, p)
    T.eq(dl.equal(gx, out), true)
  end
  -- another seed gives another mask; consecutive calls differ
  dl.manual_seed(1)
  local _, m1 = nn.dropout_forward(x, 0.5)
  local _, m2 = nn.dropout_forward(x, 0.5)
  T.eq(dl.equal(m1, m2), false)
  -- non-contiguous input and half types
  local xt = dl.randn(30, 40):t()
  dl.manual_seed(5)
  local ot, mt = nn.dropout_forward(xt, 0.25)
  T.tensor_eq(ot, xt * mt:float() / 0.75, 1e-6)
  local oh = nn.dropout_forward(dl.ones(100):half(), 0.5)
  T.eq(oh.dtype, dl.float16)
end)

-- --------------------------------------------------------------------------------------------
-- autograd through dl._F (what dl.nn.functional exposes): T.gradcheck

T.case("dl._F.dropout records the mask as its gradient", function()
  local x = dl.randn(4, 5):double():requires_grad_()
  dl.manual_seed(3)
  local y = dl._F.dropout(x, 0.5, true)
  y:backward(dl.ones(4, 5, {dtype = dl.float64}))
  -- gradient is the mask scaled by 2, and matches where y kept x
  local g, yy, xx = T.flatten(x.grad), T.flatten(y), T.flatten(x)
  for i = 1, #g do
    if g[i] ~= 0 then T.near(yy[i], 2 * xx[i]) else T.eq(yy[i], 0.0) end
  end
  T.eq(dl._F.dropout(x, 0.5, false).requires_grad, true)
end)

-- --------------------------------------------------------------------------------------------
-- bad input

T.case("dropout bad input", function()
  local x, t = dl.randn(3, 4), dl.tensor({1, 2, 4})
  T.raises(function() nn.dropout_forward(x, 1.5) end, "between 0 and 1")
  T.raises(function() nn.dropout_forward(x, -0.1) end, "between 0 and 1")
  T.raises(function() nn.dropout_forward(x, 0.5, "yes") end, "training must be a boolean")
  T.raises(function() nn.dropout_backward(x, dl.ones(3, 4), 0.5) end, "mask must be bool")
  T.raises(function() nn.dropout_backward(x, dl.ones(2, 4):bool(), 0.5) end, "does not match")
  -- the process is still healthy
  T.tensor_eq(nn.dropout_forward(dl.ones(3), 0), {1, 1, 1})
end)

T.done()
