-- test_elementwise_grad.lua - backward formulas of the elementwise family:
-- known values, float64 finite-difference checks of every differentiable op
-- (broadcast, transposed and 0-dim operands, in-place forms), saved-tensor
-- version checks, in-place rules, grad_fn names and dtype flow.
local T = require "testlib"

local F64 = {dtype = dl.float64}

-- A float64 leaf, uniform in [lo, hi).
local function U(shape, lo, hi)
  return (dl.rand(shape, F64) * (hi - lo) + lo):requires_grad_()
end

-- A float64 leaf with |x| in [lo, hi) and random signs (away from 0).
local function away(shape, lo, hi)
  local m = dl.rand(shape, F64) * (hi - lo) + lo
  local s = dl.rand(shape, F64):gt(0.5):double() * 2 - 1
  return (m * s):detach():requires_grad_()
end

-- Float64 finite differences (T.gradcheck) of fn at inputs, each element
-- within atol + rtol * |numeric| (1e-7 and 1e-5 unless opts say); an input
-- an op does not differentiate (floor, sign) may get no gradient.
local function check_grad(what, fn, inputs, opts)
  opts = opts or {}
  T.gradcheck(fn, inputs, {eps = opts.eps, atol = opts.atol or 1e-7, rtol = opts.rtol or 1e-5,
    allow_unused = true}, what)
end

-- --- known values -----------------------------------------------------------------

T.case("known gradients", function()
  local x = dl.tensor({1.0, 2.0, 3.0}, F64):requires_grad_()
  local y = x * x + x:sin() * 2 - x:exp():mul(0.5)
  y:backward(dl.ones(3, F64))
  local want = {}
  for i, v in ipairs({1, 2, 3}) do want[i] = 2 * v + 2 * math.cos(v) - 0.5 * math.exp(v) end
  T.tensor_eq(x.grad, want, 1e-12)

  local a = dl.tensor({{1.0, 2.0}, {3.0, 4.0}}, F64):requires_grad_()
  local b = dl.tensor({10.0, 20.0}, F64):requires_grad_()
  ;(a / b):backward(dl.ones(2, 2, F64))
  T.tensor_eq(a.grad, {{0.1, 0.05}, {0.1, 0.05}}, 1e-12)
  T.tensor_eq(b.grad, {-(1 + 3) / 100, -(2 + 4) / 400}, 1e-12)

  local p = dl.tensor({2.0, 3.0}, F64):requires_grad_()
  local e = dl.tensor({3.0, 0.5}, F64):requires_grad_()
  ;(p ^ e):backward(dl.ones(2, F64))
  T.tensor_eq(p.grad, {3 * 4, 0.5 / math.sqrt(3)}, 1e-12)
  T.tensor_eq(e.grad, {8 * math.log(2), math.sqrt(3) * math.log(3)}, 1e-12)
end)

T.case("add and sub scale other's gradient by alpha; broadcasting sums", function()
  local a = dl.ones(2, 3, F64):requires_grad_()
  local b = dl.ones(3, F64):requires_grad_()
  local c = dl.ones(2, 1, F64):requires_grad_()
  dl.sub(a:add(b, {alpha = 2}), c, {alpha = 3}):backward(dl.ones(2, 3, F64))
  T.tensor_eq(a.grad, {{1, 1, 1}, {1, 1, 1}})
  T.tensor_eq(b.grad, {4, 4, 4})
  T.tensor_eq(c.grad, {{-9}, {-9}})
  local s = dl.tensor(2.0, F64):requires_grad_()
  ;(s * dl.ones(4, F64)):backward(dl.arange(4):double())
  T.tensor_eq(s.grad, 6)
end)

T.case("maximum and minimum split ties half and half", function()
  local a = dl.tensor({1.0, 2.0, 5.0}, F64):requires_grad_()
  local b = dl.tensor({1.0, 3.0, 4.0}, F64):requires_grad_()
  dl.maximum(a, b):backward(dl.ones(3, F64))
  T.tensor_eq(a.grad, {0.5, 0, 1})
  T.tensor_eq(b.grad, {0.5, 1, 0})
  a.grad, b.grad = nil, nil
  dl.minimum(a, b):backward(dl.full({3}, 2, F64))
  T.tensor_eq(a.grad, {1, 2, 0})
  T.tensor_eq(b.grad, {1, 0, 2})
end)

T.case("clamp passes the gradient at the boundaries; bounds where selected", function()
  local x = dl.tensor({-2.0, 0.0, 0.5, 1.0, 3.0}, F64):requires_grad_()
  x:clamp(0, 1):backward(dl.ones(5, F64))
  T.tensor_eq(x.grad, {0, 1, 1, 1, 0})
  x.grad = nil
  x:clamp_min(0.5):backward(dl.ones(5, F64))
  T.tensor_eq(x.grad, {0, 0, 1, 1, 1})
  x.grad = nil
  x:clamp_max(0.5):backward(dl.ones(5, F64))
  T.tensor_eq(x.grad, {1, 1, 1, 0, 0})

  local lo = dl.tensor({-1.0, 0.2, 0.2, -5.0, 2.0}, F64):requires_grad_()
  local hi = dl.tensor({1.0, 1.0, 1.0, 0.5, 1.0}, F64):requires_grad_()
  x.grad = nil
  dl.clamp(x, lo, hi):backward(dl.ones(5, F64))
  -- element 5 has lo > hi: the result is hi, so hi gets the gradient
  T.tensor_eq(x.grad, {0, 0, 1, 0, 0})
  T.tensor_eq(lo.grad, {1, 1, 0, 0, 0})
  T.tensor_eq(hi.grad, {0, 0, 0, 1, 1})
end)

T.case("pow: exponent gradient masked at base 0, base gradient 0 for exponent 0", function()
  local base = dl.tensor({0.0, 0.0, 2.0}, F64):requires_grad_()
  local ex = dl.tensor({2.0, 0.0, 0.0}, F64):requires_grad_()
  ;(base ^ ex):backward(dl.ones(3, F64))
  T.tensor_eq(ex.grad, {0, 0, math.log(2)})
  T.tensor_eq(base.grad, {0, 0, 0})
  local e2 = dl.tensor({0.0, 1.0, -1.0}, F64):requires_grad_()
  ;(2 ^ e2):backward(dl.ones(3, F64))
  T.tensor_eq(e2.grad, {math.log(2), 2 * math.log(2), 0.5 * math.log(2)}, 1e-12)
  local z = dl.tensor({1.0, 2.0}, F64):requires_grad_()
  ;(0 ^ z):backward(dl.ones(2, F64))
  T.tensor_eq(z.grad, {0, 0})
  local x = dl.tensor({-2.0, 3.0}, F64):requires_grad_()
  x:pow(3):backward(dl.ones(2, F64))
  T.tensor_eq(x.grad, {12, 27})
  x.grad = nil
  x:pow(0):backward(dl.ones(2, F64))
  T.tensor_eq(x.grad, {0, 0})
end)

T.case("zero gradients: sign, rounding, rounding division", function()
  local x = dl.tensor({-1.5, 0.3, 2.7}, F64):requires_grad_()
  for _, op in ipairs({"sign", "floor", "ceil", "round", "trunc"}) do
    x.grad = nil
    x[op](x):backward(dl.ones(3, F64))
    T.tensor_eq(x.grad, {0, 0, 0}, 0, op)
  end
  local y = dl.tensor({2.0, 2.0, 2.0}, F64):requires_grad_()
  x.grad = nil
  dl.div(x, y, {rounding_mode = "floor"}):backward(dl.ones(3, F64))
  T.tensor_eq(x.grad, {0, 0, 0})
  T.tensor_eq(y.grad, {0, 0, 0})
  x.grad = nil
  ;(x // 2):backward(dl.ones(3, F64))
  T.tensor_eq(x.grad, {0, 0, 0})
end)

T.case("remainder, fmod, frac, relu, abs", function()
  local a = dl.tensor({5.5, -5.5}, F64):requires_grad_()
  local b = dl.tensor({2.0, 2.0}, F64):requires_grad_()
  dl.remainder(a, b):backward(dl.ones(2, F64))
  T.tensor_eq(a.grad, {1, 1})
  T.tensor_eq(b.grad, {-2, 3})
  a.grad, b.grad = nil, nil
  dl.fmod(a, b):backward(dl.ones(2, F64))
  T.tensor_eq(b.grad, {-2, 2})
  local x = dl.tensor({-1.5, 0.0, 2.0}, F64):requires_grad_()
  x:relu():backward(dl.ones(3, F64))
  T.tensor_eq(x.grad, {0, 0, 1})
  x.grad = nil
  x:abs():backward(dl.ones(3, F64))
  T.tensor_eq(x.grad, {-1, 0, 1})
  x.grad = nil
  x:frac():backward(dl.full({3}, 3, F64))
  T.tensor_eq(x.grad, {3, 3, 3})
end)

T.case("where and masked_fill", function()
  local c = dl.tensor({true, false, true})
  local a = dl.tensor({1.0, 2.0, 3.0}, F64):requires_grad_()
  local b = dl.tensor(9.0, F64):requires_grad_()
  dl.where(c, a, b):backward(dl.tensor({1.0, 2.0, 3.0}, F64))
  T.tensor_eq(a.grad, {1, 0, 3})
  T.tensor_eq(b.grad, 2)
  a.grad = nil
  local v = dl.tensor(5.0, F64):requires_grad_()
  local m = dl.tensor({{true}, {false}})
  local y = a:masked_fill(m, v)
  T.shape_eq(y, {2, 3})
  y:backward(dl.tensor({{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}}, F64))
  T.tensor_eq(a.grad, {4, 5, 6})
  T.tensor_eq(v.grad, 6)
  -- a number value: only x gets a gradient
  a.grad = nil
  a:masked_fill(dl.tensor({false, true, false}), 0):backward(dl.ones(3, F64))
  T.tensor_eq(a.grad, {1, 0, 1})
end)

-- --- finite differences --------------------------------------------------------------

local UNARY = {
  {"neg", -2, 2}, {"abs", "away"}, {"relu", "away"}, {"square", -2, 2}, {"exp", -2, 2},
  {"exp2", -2, 2}, {"expm1", -2, 2}, {"log", 0.2, 3}, {"log2", 0.2, 3}, {"log10", 0.2, 3},
  {"log1p", -0.5, 3}, {"sqrt", 0.2, 3}, {"rsqrt", 0.2, 3}, {"reciprocal", "away"},
  {"sin", -3, 3}, {"cos", -3, 3}, {"tan", -1.2, 1.2}, {"asin", -0.9, 0.9},
  {"acos", -0.9, 0.9}, {"atan", -3, 3}, {"sinh", -2, 2}, {"cosh", -2, 2}, {"tanh", -2, 2},
  {"sigmoid", -3, 3}, {"erf", -2, 2}, {"erfc", -2, 2}, {"frac", -3, 3}, {"sign", "away"}, {"floor", -3, 3},
  {"ceil", -3, 3}, {"round", -3, 3}, {"trunc", -3, 3},
}

local function unary_input(spec, shape)
  if spec[2] == "away" then return away(shape, 0.3, 2) end
  return U(shape, spec[2], spec[3])
end

T.case("unary ops: finite differences (contiguous, transposed, 0-dim, in place)", function()
  for _, spec in ipairs(UNARY) do
    local op = spec[1]
    check_grad(op, function(a) return a[op](a) end, {unary_input(spec, {5})})
    check_grad(op .. " transposed", function(a) return a:t()[op](a:t()) end,
      {unary_input(spec, {3, 4})})
    check_grad(op .. " 0-dim", function(a) return a[op](a) end, {unary_input(spec, {})})
    check_grad(op .. "_", function(a)
      local v = (a * 1):t()
      v[op .. "_"](v)
      return v
    end, {unary_input(spec, {3, 4})})
    check_grad(op .. " module function", function(a) return dl[op](a) end, {unary_input(spec, {2})})
  end
  check_grad("unary minus", function(a) return -a end, {U({3}, -1, 1)})
end)

-- name, forward, b's generator (a's is U(-2, 2) unless given)
local BINARY = {
  {"add", function(a, b) return a + b end},
  {"add alpha", function(a, b) return a:add(b, {alpha = 2.5}) end},
  {"sub", function(a, b) return a - b end},
  {"sub alpha", function(a, b) return dl.sub(a, b, {alpha = -1.5}) end},
  {"mul", function(a, b) return a * b end},
  {"div", function(a, b) return a / b end, "away"},
  {"div floor", function(a, b) return a:div(b, {rounding_mode = "floor"}) end, "away"},
  {"div trunc", function(a, b) return a:div(b, {rounding_mode = "trunc"}) end, "away"},
  {"pow", function(a, b) return a ^ b end, nil, {0.5, 2}},
  {"maximum", function(a, b) return dl.maximum(a, b) end},
  {"minimum", function(a, b) return a:minimum(b) end},
  {"remainder", function(a, b) return a % b end, "away"},
  {"fmod", function(a, b) return a:fmod(b) end, "away"},
  {"atan2", function(a, b) return dl.atan2(a, b) end, "away"},
}

local PAIRS = {{{3, 4}, {3, 4}}, {{3, 1}, {1, 4}}, {{2, 3, 4}, {4}}, {{}, {3}}, {{2, 3}, {}}}

local function binary_inputs(spec, sa, sb)
  local range = spec[4] or {-2, 2}
  local a = U(sa, range[1], range[2])
  local b = spec[3] == "away" and away(sb, 0.5, 2) or U(sb, -2, 2)
  return a, b
end

T.case("binary ops: finite differences over broadcasts and views", function()
  for _, spec in ipairs(BINARY) do
    local name, f = spec[1], spec[2]
    for _, p in ipairs(PAIRS) do
      local a, b = binary_inputs(spec, p[1], p[2])
      check_grad(name .. " " .. T.fmt(p[1]) .. T.fmt(p[2]), f, {a, b})
    end
    -- transposed operands
    local a, b = binary_inputs(spec, {4, 3}, {4, 3})
    check_grad(name .. " transposed", function(x, y) return f(x:t(), y:t()) end, {a, b})
    -- expanded operand
    a, b = binary_inputs(spec, {3, 4}, {3, 1})
    check_grad(name .. " expanded", function(x, y) return f(x, y:expand(3, 4)) end, {a, b})
    -- only one side requires grad
    a, b = binary_inputs(spec, {3}, {3})
    check_grad(name .. " a only", function(x) return f(x, b:detach()) end, {a})
    check_grad(name .. " b only", function(y) return f(a:detach(), y) end, {b})
    -- in place, into a non-leaf (and a transposed view of one)
    local ip = name:match("^(%w+)")
    if ip ~= "maximum" and ip ~= "minimum" then
      a, b = binary_inputs(spec, {3, 4}, {4})
      check_grad(name .. " in place", function(x, y)
        local t = x * 1
        if name == "div floor" then
          t:div_(y, {rounding_mode = "floor"})
        elseif name == "div trunc" then
          t:div_(y, {rounding_mode = "trunc"})
        elseif name == "add alpha" then
          t:add_(y, {alpha = 2.5})
        elseif name == "sub alpha" then
          t:sub_(y, {alpha = -1.5})
        else
          t[ip .. "_"](t, y)
        end
        return t
      end, {a, b})
      if not name:find(" ") then
        a, b = binary_inputs(spec, {4, 3}, {4, 3})
        check_grad(name .. " in place on a view", function(x, y)
          local v = (x * 1):t()
          v[ip .. "_"](v, y:t())
          return v
        end, {a, b})
      end
    end
  end
end)

T.case("scalar operands", function()
  local x = U({3, 4}, 0.5, 2)
  check_grad("x ^ 2", function(a) return a ^ 2 end, {U({3, 4}, -2, 2)})
  check_grad("x ^ 3 (integer)", function(a) return a:pow(3) end, {U({5}, -2, 2)})
  check_grad("x ^ 0.5", function(a) return a ^ 0.5 end, {x})
  check_grad("x ^ -1.5", function(a) return a ^ -1.5 end, {x})
  check_grad("2 ^ x", function(a) return 2 ^ a end, {U({3, 4}, -2, 2)})
  check_grad("0.5 ^ x", function(a) return dl.pow(0.5, a) end, {U({3}, -2, 2)})
  check_grad("x ^ 0", function(a) return a ^ 0 end, {x})
  check_grad("3 - x", function(a) return 3 - a end, {x})
  check_grad("3 / x", function(a) return 3 / a end, {x})
  check_grad("x / 3", function(a) return a / 3 end, {x})
  check_grad("x * true", function(a) return a * true end, {x})
  check_grad("x % 0.7", function(a) return a % 0.7 end, {x})
  check_grad("pow_ scalar", function(a)
    local t = a * 1
    t:pow_(2.5)
    return t
  end, {x})
  check_grad("integer tensor operand", function(a) return a * dl.arange(4) + dl.arange(4) end, {x})
  check_grad("integer base", function(a) return dl.tensor({1, 2, 3, 4}) ^ a end, {x})
  check_grad("integer exponent", function(a) return a ^ dl.tensor({1, 2, 3, 0}) end, {x})
end)

T.case("clamp, where, masked_fill: finite differences", function()
  local x = U({3, 4}, -3, 3)
  check_grad("clamp scalars", function(a) return a:clamp(-1, 1) end, {x})
  check_grad("clamp min", function(a) return a:clamp({min = 0.3}) end, {x})
  check_grad("clamp max", function(a) return dl.clamp(a, nil, 0.3) end, {x})
  check_grad("clamp transposed", function(a) return a:t():clamp(-1, 1) end, {x})
  local lo, hi = U({4}, -2, -0.2), U({3, 1}, 0.2, 2)
  check_grad("clamp tensors", function(a, l, h) return dl.clamp(a, l, h) end, {x, lo, hi})
  check_grad("clamp lo tensor", function(a, l) return a:clamp_min(l) end, {x, lo})
  check_grad("clamp hi tensor", function(a, h) return a:clamp_max(h) end, {x, hi})
  local small = U({1, 4}, -1, 1)
  check_grad("clamp broadcasting x", function(a, l, h) return dl.clamp(a, l, h) end,
    {small, lo, hi})
  -- crossed bounds: hi wins where lo > hi
  check_grad("clamp crossed", function(a, l, h) return dl.clamp(a, h, l) end, {x, lo, hi})
  check_grad("clamp_", function(a, l, h)
    local t = a * 1
    t:clamp_(l, h)
    return t
  end, {x, lo, hi})
  check_grad("clip_ scalars", function(a)
    local t = a:t() * 1
    t:clip_(-0.5, 0.5)
    return t
  end, {x})

  local c = dl.rand(3, 1):gt(0.5)
  local a, b = U({3, 4}, -2, 2), U({4}, -2, 2)
  check_grad("where", function(p, q) return dl.where(c, p, q) end, {a, b})
  check_grad("where number", function(p) return dl.where(c, p, 1.5) end, {a})
  check_grad("where method", function(p, q) return p:t():where(c:t(), q:view(4, 1)) end, {a, b})
  local m = dl.rand(4):gt(0.5)
  local v = dl.tensor(0.7, F64):requires_grad_()
  check_grad("masked_fill", function(p, val) return p:masked_fill(m, val) end, {a, v})
  check_grad("masked_fill broadcasting", function(p, val) return b:masked_fill(c, val) * p end,
    {a, v})
  check_grad("masked_fill_", function(p, val)
    local t = p * 1
    t:masked_fill_(m, val)
    return t
  end, {a, v})
  check_grad("masked_fill_ number", function(p)
    local t = p:t() * 1
    t:masked_fill_(c:t(), -1)
    return t
  end, {a})
end)

-- --- in place ---------------------------------------------------------------------------

T.case("in place: leaves that require grad are refused", function()
  local x = dl.ones(3, {requires_grad = true})
  T.raises(function() x:add_(1) end, "add_: a leaf tensor that requires grad")
  T.raises(function() x:mul_(x) end, "leaf")
  T.raises(function() x:exp_() end, "exp_: a leaf")
  T.raises(function() x:clamp_(0, 1) end, "clamp_: a leaf")
  T.raises(function() x:masked_fill_(dl.tensor({true, false, true}), 0) end, "masked_fill_")
  T.raises(function() x:pow_(2) end, "pow_")
  dl.no_grad(function() x:add_(1) end)
  T.tensor_eq(x, {2, 2, 2})
  T.eq(x.grad_fn, nil)
end)

T.case("in place: self takes the new history", function()
  local w = dl.tensor({1.0, 2.0, 3.0}, F64):requires_grad_()
  local buf = dl.zeros(3, F64)
  buf:add_(w, {alpha = 2})
  T.eq(buf.requires_grad, true)
  T.eq(buf.grad_fn, "AddBackward")
  buf:mul_(w)
  T.eq(buf.grad_fn, "MulBackward")
  buf:backward(dl.ones(3, F64))
  -- buf = 2w * w
  T.tensor_eq(w.grad, {4, 8, 12})
  -- self used as other: x:add_(x) doubles the gradient
  local a = dl.tensor({1.0, 2.0}, F64):requires_grad_()
  local t = a * 1
  t:add_(t)
  t:backward(dl.ones(2, F64))
  T.tensor_eq(a.grad, {2, 2})
  -- a chain of in-place ops that need their old values
  a.grad = nil
  local u = a * 1
  u:sin_()
  u:mul_(3)
  u:sqrt_()
  u:backward(dl.ones(2, F64))
  local want = {}
  for i, v in ipairs({1, 2}) do want[i] = 3 * math.cos(v) / (2 * math.sqrt(3 * math.sin(v))) end
  T.tensor_eq(a.grad, want, 1e-12)
  -- comparisons in place carry no gradient
  a.grad = nil
  local c = a * 1
  c:gt_(1.5)
  T.eq(c.grad_fn, "GtBackward")
  c:backward(dl.ones(2, F64))
  T.tensor_eq(a.grad, {0, 0})
  -- an integer self is never recorded, even against a tensor that requires grad
  local iv = dl.tensor({1, 2})
  iv:eq_(a)
  T.eq(iv.requires_grad, false)
  T.tensor_eq(iv, {1, 1})
end)

T.case("saved tensors modified in place make backward fail", function()
  local x = dl.tensor({1.0, 2.0}, F64):requires_grad_()
  local y = x:exp()
  y:add_(1) -- exp saved its result
  T.raises(function() y:backward(dl.ones(2, F64)) end, "modified by an in-place operation")

  local b = dl.tensor({3.0, 4.0}, F64)
  local z = x * b
  b:mul_(2) -- mul saved b for x's gradient
  T.raises(function() z:backward(dl.ones(2, F64)) end, "MulBackward")
  local z2 = x * dl.tensor({3.0, 4.0}, F64)
  z2:backward(dl.ones(2, F64))

  local t = x * 1
  local s = t:sin()
  t:add_(1) -- sin saved its input
  T.raises(function() s:backward(dl.ones(2, F64)) end, "SinBackward: a tensor of shape [2]")

  local u = x * 1
  u:exp_()
  u:mul_(2) -- exp_ saved its result, which mul_ overwrote
  T.raises(function() u:backward(dl.ones(2, F64)) end, "modified by an in-place operation")

  local v = x * 1
  v:mul_(v) -- other is self: its saved value is overwritten by the write
  T.raises(function() v:backward(dl.ones(2, F64)) end, "modified by an in-place operation")

  -- sin_ keeps a copy of the old value, so later writes are fine
  x.grad = nil
  local w = x * 1
  w:sin_()
  w:add_(1)
  w:backward(dl.ones(2, F64))
  T.tensor_eq(x.grad, {math.cos(1), math.cos(2)}, 1e-12)

  -- clamp with a tensor bound modified afterwards
  local lo = dl.tensor({0.5, 0.5}, F64)
  local c = x:clamp(lo, nil)
  lo:fill_(3)
  T.raises(function() c:backward(dl.ones(2, F64)) end, "ClampBackward")
  -- where's condition is saved too
  local cond = dl.tensor({true, false})
  local wh = dl.where(cond, x, 0.0)
  cond:logical_not_()
  T.raises(function() wh:backward(dl.ones(2, F64)) end, "WhereBackward")
end)

-- --- names, grad mode, dtypes -----------------------------------------------------------

T.case("grad_fn names follow PyTorch", function()
  local x = dl.tensor({0.5, 0.25}):requires_grad_()
  local y = dl.tensor({1.5, 2.0}):requires_grad_()
  local names = {
    {x + y, "AddBackward"}, {x - 1, "SubBackward"}, {2 - x, "SubBackward"}, {x * y, "MulBackward"},
    {x / y, "DivBackward"}, {x // y, "DivBackward"}, {x ^ y, "PowBackward"}, {x ^ 2, "PowBackward"},
    {2 ^ x, "PowBackward"}, {x:square(), "PowBackward"}, {dl.maximum(x, y), "MaximumBackward"},
    {dl.minimum(x, y), "MinimumBackward"}, {x % y, "RemainderBackward"},
    {x:fmod(y), "FmodBackward"}, {dl.atan2(x, y), "Atan2Backward"}, {-x, "NegBackward"},
    {x:abs(), "AbsBackward"}, {x:sign(), "SignBackward"}, {x:relu(), "ReluBackward"},
    {x:floor(), "FloorBackward"}, {x:ceil(), "CeilBackward"}, {x:round(), "RoundBackward"},
    {x:trunc(), "TruncBackward"}, {x:exp(), "ExpBackward"}, {x:exp2(), "Exp2Backward"},
    {x:expm1(), "Expm1Backward"}, {x:log(), "LogBackward"}, {x:log2(), "Log2Backward"},
    {x:log10(), "Log10Backward"}, {x:log1p(), "Log1PBackward"}, {x:sqrt(), "SqrtBackward"},
    {x:rsqrt(), "RsqrtBackward"}, {x:reciprocal(), "ReciprocalBackward"},
    {x:sin(), "SinBackward"}, {x:cos(), "CosBackward"}, {x:tan(), "TanBackward"},
    {x:asin(), "AsinBackward"}, {x:acos(), "AcosBackward"}, {x:atan(), "AtanBackward"},
    {x:sinh(), "SinhBackward"}, {x:cosh(), "CoshBackward"}, {x:tanh(), "TanhBackward"},
    {x:sigmoid(), "SigmoidBackward"}, {x:erf(), "ErfBackward"}, {x:frac(), "FracBackward"},
    {x:clamp(0, 1), "ClampBackward"}, {x:clamp_min(y), "ClampBackward"},
    {dl.where(x:gt(0.3), x, y), "WhereBackward"},
    {x:masked_fill(x:gt(0.3), 0), "MaskedFillBackward"},
  }
  for i, p in ipairs(names) do T.eq(p[1].grad_fn, p[2], "case " .. i) end
end)

T.case("nothing is recorded without grad, and forwards agree", function()
  local x = dl.tensor({0.5, -0.25, 2.0})
  local xr = x:clone():requires_grad_()
  T.eq(x:exp().requires_grad, false)
  T.eq((x + 1).requires_grad, false)
  T.eq(dl.clamp(x, 0, 1).requires_grad, false)
  T.eq(dl.no_grad(function() return xr * 2 end).requires_grad, false)
  T.eq(dl.no_grad(function() return xr:sin() end).grad_fn, nil)
  -- comparisons and predicates return bool, never recorded
  T.eq(xr:gt(0).requires_grad, false)
  T.eq(xr:isnan().requires_grad, false)
  T.eq(dl.eq(xr, x).requires_grad, false)
  T.eq(xr:logical_not().requires_grad, false)
  -- same values with and without recording
  for _, op in ipairs({"exp", "tanh", "sigmoid", "abs", "relu", "square"}) do
    T.tensor_eq(xr[op](xr):detach(), x[op](x), 0, op)
  end
  T.tensor_eq((xr * x + xr / 3):detach(), x * x + x / 3, 0)
end)

T.case("gradients flow back in each input's dtype", function()
  local a = dl.tensor({1.0, 2.0}):requires_grad_()                       -- float32
  local b = dl.tensor({3.0, 4.0}, F64):requires_grad_()                   -- float64
  local y = a * b
  T.eq(y.dtype, dl.float64)
  y:backward(dl.ones(2, F64))
  T.eq(a.grad.dtype, dl.float32)
  T.eq(b.grad.dtype, dl.float64)
  T.tensor_eq(a.grad, {3, 4})
  T.tensor_eq(b.grad, {1, 2})
  -- float16 and bfloat16 compute in float32 and round back
  for _, dt in ipairs({dl.float16, dl.bfloat16}) do
    local h = dl.tensor({0.5, 1.0, 2.0}, {dtype = dt}):requires_grad_()
    local z = h:exp() * h
    z:backward(dl.ones(3, {dtype = dt}))
    T.eq(h.grad.dtype, dt)
    local want = {}
    for i, v in ipairs({0.5, 1, 2}) do want[i] = math.exp(v) * (1 + v) end
    T.tensor_eq(h.grad, want, 2e-2)
  end
  -- an integer operand gets no gradient, the float one does
  local f = dl.tensor({1.5, 2.5}):requires_grad_()
  local i = dl.tensor({2, 3})
  local s = dl.tensor(0.5):requires_grad_()
  ;(f * i + s):backward(dl.ones(2))
  T.tensor_eq(f.grad, {2, 3})
  T.tensor_eq(s.grad, 2)
  T.eq(i.requires_grad, false)
end)

T.case("bad input under autograd still reports the op's error", function()
  local x = dl.ones(2, 3, {requires_grad = true})
  T.raises(function() return x + dl.ones(4) end, "add")
  T.raises(function() return dl.clamp(x) end, "at least one")
  T.raises(function() return x:masked_fill(dl.ones(3), 1) end, "bool")
  T.raises(function() return dl.where(dl.ones(3), x, x) end, "bool")
  local t = x * 1
  T.raises(function() t:add_(dl.ones(2, 3, 4)) end, "add_")
  T.raises(function() t:clamp_(dl.ones(4, 1, 1), nil) end, "clamp_")
  -- a failed in-place op leaves the history alone
  T.eq(t.grad_fn, "MulBackward")
  t:backward(dl.ones(2, 3))
  T.tensor_eq(x.grad, {{1, 1, 1}, {1, 1, 1}})
  T.raises(function() dl.ones(2):requires_grad_():add_(1) end, "leaf")
end)

T.done()
