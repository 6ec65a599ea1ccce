-- test_layernorm_grad.lua - the gradients of layer norm and RMS norm
-- (dl.nn.functional.layer_norm / rms_norm) against central finite
-- differences in float64 (T.gradcheck): input, weight and bias together,
-- 1-D to 3-D inputs, normalized_shape over one and two dims, without weight
-- or bias, non-contiguous inputs, rows with a large mean, and chains of two
-- norms (a gradient flowing through the statistics twice).
local T = require "testlib"
local F = dl.nn.functional

local F64 = dl.float64

local function r(seed, ...)
  return T.randn({...}, {seed = seed, dtype = F64})
end

local CASES = {
  -- name, x, normalized_shape, weight?, bias? (an absent one is passed to
-- gradcheck as false, to fn as nil)
  {"2-D", r(1, 4, 6), {6}, true, true},
  {"1-D", r(2, 5), 5, true, true},
  {"3-D over two dims", r(3, 2, 3, 4), {3, 4}, true, true},
  {"no weight", r(4, 3, 5), 5, false, true},
  {"no bias", r(5, 3, 5), 5, true, false},
  {"no parameters", r(6, 3, 5), 5, false, false},
  {"transposed input", r(7, 5, 3):t(), 5, true, true},
  {"large mean", r(8, 3, 7) * 0.5 + 20, 7, true, true},
  {"rows longer than the lanes", r(9, 2, 37), 37, true, true},
}

for _, c in ipairs(CASES) do
  local name, x, ns, has_w, has_b = table.unpack(c)
  local size = type(ns) == "table" and ns or {ns}
  local w = has_w and (T.randn(size, {seed = 20, dtype = F64}) * 0.5 + 1):requires_grad_() or nil
  local b = has_b and T.randn(size, {seed = 21, dtype = F64}):requires_grad_() or nil
  x = x:detach():requires_grad_()
  T.case("layer_norm gradcheck: " .. name, function()
    T.gradcheck(function(xx, ww, bb) return F.layer_norm(xx, ns, ww or nil, bb or nil, 1e-5) end,
      {x, w or false, b or false}, "layer_norm " .. name)
  end)
  T.case("rms_norm gradcheck: " .. name, function()
    T.gradcheck(function(xx, ww) return F.rms_norm(xx, ns, ww or nil, 1e-5) end, {x, w or false},
      "rms_norm " .. name)
  end)
end

T.case("layer_norm then rms_norm gradcheck", function()
  local x = r(30, 3, 8):requires_grad_()
  local w = (r(31, 8) * 0.3 + 1):requires_grad_()
  T.gradcheck(function(xx, ww)
    return F.rms_norm(F.layer_norm(xx, 8, ww, nil) * xx, 8, ww)
  end, {x, w}, "chain")
end)

T.done()
