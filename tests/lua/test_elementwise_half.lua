-- test_elementwise_half.lua - float16 and bfloat16 storage through the CPU's
-- float32 elementwise kernels (converted in blocks by cpu/half.h, rounded once
-- on store): the same values, bit for bit, as converting the tensors to
-- float32 first (core/dtype.c's conversions), over every float16 and
-- bfloat16 bit pattern, products that round (ties to even, subnormals,
-- overflow to inf, NaN), strided and broadcast operands, in-place ops,
-- mixed half/float32 operands, comparisons and clamp; and the vector math
-- (exp, tanh, gelu's forward and backward) on half storage.
local T = require "testlib"

local nan, inf = 0 / 0, math.huge

-- every bit pattern of a 16-bit float with e exponent bits and m mantissa
-- bits, as Lua numbers (NaNs included)
local function all_values(ebits, mbits)
  local v, bias, top = {}, 2 ^ (ebits - 1) - 1, 2 ^ ebits - 1
  for sign = 0, 1 do
    for e = 0, top do
      for m = 0, 2 ^ mbits - 1 do
        local x
        if e == top then
          x = m == 0 and inf or nan
        elseif e == 0 then
          x = m * 2 ^ (1 - bias - mbits)
        else
          x = (1 + m / 2 ^ mbits) * 2 ^ (e - bias)
        end
        v[#v + 1] = sign == 1 and -x or x
      end
    end
  end
  return v
end

local HALVES = {
  {name = "float16", dtype = dl.float16, ebits = 5, mbits = 10},
  {name = "bfloat16", dtype = dl.bfloat16, ebits = 8, mbits = 7},
}

for _, H in ipairs(HALVES) do
  local all = dl.tensor(all_values(H.ebits, H.mbits), {dtype = dl.float32}):to(H.dtype)

  T.case(H.name .. ": every bit pattern through an exact op", function()
    T.eq(all:numel(), 65536)
    T.same_bits(all:neg():neg(), all, "neg twice")
    T.same_bits(all:abs(), all:float():abs():to(H.dtype), "abs")
  end)

  T.case(H.name .. ": rounding float32 results to half, as the core conversion", function()
    -- products of every pattern with constants that are not powers of two
    -- round in every way: ties (x * 0.5 of odd subnormals), subnormal
    -- results, overflow to inf, NaN kept
    for _, c in ipairs({0.5, 0.1, 1 / 3, 3.7, 1e-3, 300, -7.25, 65519 / 65504}) do
      T.same_bits(all * c, (all:float() * c):to(H.dtype), "times " .. c)
    end
    local f = dl.randn(50000):mul(200)
    local g = dl.randn(50000):mul(1e-3)
    local a, b = f:to(H.dtype), g:to(H.dtype)
    T.same_bits(a + b, (a:float() + b:float()):to(H.dtype), "add")
    T.same_bits(a / b, (a:float() / b:float()):to(H.dtype), "div")
    T.same_bits(a:pow(b:abs()), a:float():pow(b:abs():float()):to(H.dtype), "pow")
  end)

  T.case(H.name .. ": strided, broadcast, in-place and mixed operands", function()
    local m = dl.randn(37, 53):to(H.dtype)
    local r = dl.randn(53):to(H.dtype)
    local mt = m:t()
    T.same_bits(mt * 3.3, (mt:float() * 3.3):to(H.dtype), "transposed")
    T.same_bits(m + r, (m:float() + r:float()):to(H.dtype), "broadcast row")
    local mf = dl.randn(37, 53)
    local mixed = m * mf -- float32 result
    T.eq(tostring(mixed.dtype), tostring(dl.float32))
    T.same_bits(mixed, m:float() * mf, "half times float32")
    local c = m:clone()
    c:mul_(0.3)
    T.same_bits(c, (m:float() * 0.3):to(H.dtype), "mul_ in place")
    local e = m:clone()
    e:exp_()
    T.same_bits(e, m:float():exp():to(H.dtype), "exp_ in place")
    T.same_bits(m:gt(r), m:float():gt(r:float()), "comparison")
    T.same_bits(m:clamp(-0.5, 0.7), m:float():clamp(-0.5, 0.7):to(H.dtype), "clamp")
    T.same_bits(dl.isclose(m, m + 0.01), dl.isclose(m:float(), (m + 0.01):float()), "isclose")
  end)

  T.case(H.name .. ": vector math on half storage", function()
    local x = dl.randn(4099):mul(3):to(H.dtype)
    for _, op in ipairs({"exp", "tanh", "erf", "sigmoid", "log1p", "sin"}) do
      local xx = op == "log1p" and x:abs() or x
      T.same_bits(xx[op](xx), xx:float()[op](xx:float()):to(H.dtype), op)
    end
    local F = dl.nn.functional
    T.same_bits(F.gelu(x), F.gelu(x:float()):to(H.dtype), "gelu")
    local xg = x:clone():requires_grad_()
    local gy = dl.randn(4099):to(H.dtype)
    local gx = dl.autograd.grad(F.gelu(xg), {xg}, {grad_outputs = gy})[1]
    T.eq(tostring(gx.dtype), tostring(H.dtype))
    local xf = x:float():requires_grad_()
    local gf = dl.autograd.grad(F.gelu(xf), {xf}, {grad_outputs = gy:float()})[1]
    T.same_bits(gx, gf:to(H.dtype), "gelu backward")
  end)
end

T.done()
