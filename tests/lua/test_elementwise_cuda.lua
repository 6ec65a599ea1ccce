-- test_elementwise_cuda.lua - the elementwise family on CUDA against the CPU:
-- every binary op (float32, float64, int64, bool), broadcasting, views,
-- Lua-number scalars, in-place forms, every unary op, clamp, where,
-- masked_fill, isclose/allclose/equal, float16/bfloat16, large, odd-sized and
-- misaligned tensors (the float4 path and its fallbacks), empty tensors,
-- integer division by zero, relu_backward/dropout_backward and gradients.
-- The vectorized maps (dl._nn.elementwise_vectorized: 16-byte packs of
-- 4 float32 or 8 float16/bfloat16 elements with a scalar tail, int indices
-- below 2^31) against the CPU with the setting on and off: every tail
-- length, misaligned and strided views, scalar operands, and channels-last
-- bfloat16 at ResNet-50's shapes.
-- Each case builds its inputs on the CPU (deterministically) and moves them
-- with :to(dev); T.cuda_case runs it on both devices and compares.
-- Tolerances: exact for integers, bools, comparisons and correctly rounded
-- float ops (+ - * / floor, fmod, ...); 1e-6 relative for float32 functions
-- (CUDA's and glibc's expf/logf/powf differ by an ulp or two).
local T = require "testlib"
T.require_cuda()

local nan, inf = 0 / 0, 1 / 0
local F32, F64, I64 = {dtype = dl.float32}, {dtype = dl.float64}, {dtype = dl.int64}
local FN32 = 1e-6   -- float32 transcendental functions, relative and absolute
local FN64 = 1e-12  -- float64 ones

-- An int64 tensor with values in [-k, k] (rounded normals * k / 2).
local function randi(seed, k, ...)
  return (T.randn({...}, {seed = seed}) * (k / 2)):round():clamp(-k, k):long()
end

-- The same tensor without zeros (divisors).
local function nonzero(t)
  return t:masked_fill(t:eq(0), 1)
end

local EXACT_BINARY = {"add", "sub", "mul", "div", "maximum", "minimum", "remainder", "fmod",
                      "eq", "ne", "lt", "le", "gt", "ge"}
local CMP = {"eq", "ne", "lt", "le", "gt", "ge"}

-- Every binary op of a and b (same device) that is exact on floats, plus the
-- rounding divisions and alpha forms (alpha: 2.5 for floats, 2 for integers).
local function exact_binary(a, b, alpha)
  alpha = alpha or 2.5
  local r = {}
  for _, op in ipairs(EXACT_BINARY) do r[op] = dl[op](a, b) end
  r.floor = a:div(b, {rounding_mode = "floor"})
  r.trunc = a:div(b, {rounding_mode = "trunc"})
  r.floor_divide = a:floor_divide(b)
  r.add_alpha = a:add(b, {alpha = alpha})
  r.sub_alpha = a:sub(b, {alpha = -alpha})
  r.logical_and = a:logical_and(b)
  r.logical_or = a:logical_or(b)
  r.logical_xor = a:logical_xor(b)
  return r
end

-- --- binary ops ----------------------------------------------------------------------

T.cuda_case("binary float32, exact ops", function(dev)
  local a = T.randn(3, 4, 5, {seed = 1})
  local b = T.randn(3, 4, 5, {seed = 2})
  b[1][1][1] = 0   -- division by zero gives inf/nan on both
  a[1][1][2] = nan
  b[1][1][3] = nan
  a[1][2][1] = inf
  return exact_binary(a:to(dev), b:to(dev))
end, 0, 0)

T.cuda_case("binary float32, pow and atan2", function(dev)
  local a, b = T.randn(6, 7, {seed = 3}):to(dev), T.randn(6, 7, {seed = 4}):to(dev)
  return {a:abs():add(0.5):pow(b), dl.atan2(a, b), a:pow(b)}
end, FN32, FN32)

T.cuda_case("binary float64", function(dev)
  local a, b = T.randn(4, 9, {seed = 5}):double(), T.randn(4, 9, {seed = 6}):double()
  b[2][3] = 0
  local r = exact_binary(a:to(dev), b:to(dev))
  return r
end, 0, 0)

T.cuda_case("binary float64, pow and atan2", function(dev)
  local a, b = T.randn(40, {seed = 7}):double():to(dev), T.randn(40, {seed = 8}):double():to(dev)
  return {a:abs():add(0.5):pow(b), dl.atan2(a, b)}
end, FN64, FN64)

T.cuda_case("binary int64", function(dev)
  local a = randi(9, 50, 5, 6):to(dev)
  local b = nonzero(randi(10, 7, 5, 6)):to(dev)
  local r = exact_binary(a, b, 2)
  r.pow = a:pow(randi(11, 4, 5, 6):abs():to(dev))
  r.pow_neg = dl.tensor({1, -1, 2, 0, -1, 3}, I64):to(dev):pow(dl.tensor({-1, -3, -1, -2, -2, 0}, I64):to(dev))
  return r
end, 0, 0)

T.cuda_case("int64 wraps and edge cases", function(dev)
  local big = dl.tensor({math.maxinteger, math.mininteger, 9007199254740993, -7, 7}, I64):to(dev)
  return {
    big + 1, big - 2, big * 3, -big, big:abs(), big:square(),
    big // -1, big % -1, big:fmod(-1), big // 2, big % 3, big:fmod(-3),
    big:pow(3), dl.tensor({3}, I64):to(dev):pow(dl.tensor({50}, I64):to(dev)),
    big:maximum(big // 2), big:lt(0),
  }
end, 0, 0)

T.cuda_case("binary bool", function(dev)
  local p = T.randn(17, {seed = 12}):gt(0):to(dev)
  local q = T.randn(17, {seed = 13}):gt(0.3):to(dev)
  return {p:logical_and(q), p:logical_or(q), p:logical_xor(q), p:eq(q), p:ne(q), p + q, p * q,
          dl.maximum(p, q), dl.minimum(p, q), p:lt(q), p:logical_and(true),
          T.randn(17, {seed = 14}):to(dev):logical_or(q), dl.tensor({0, nan, 1}):to(dev):logical_and(true)}
end, 0, 0)

-- --- broadcasting, views, scalars ---------------------------------------------------------

T.cuda_case("broadcasting against 1-D and 0-dim", function(dev)
  local a = T.randn(3, 4, 5, {seed = 15}):to(dev)
  local v = T.randn(5, {seed = 16}):to(dev)
  local col = T.randn(4, 1, {seed = 17}):to(dev)
  local s_dev = dl.tensor(1.25):to(dev)          -- 0-dim on the device
  local s_cpu = dl.tensor(-0.5)                  -- 0-dim on the CPU beside CUDA tensors
  local i = randi(18, 9, 3, 4, 5):to(dev)
  return {a + v, v - a, a * col, a / s_dev, a:maximum(s_cpu), s_cpu - a,
          a:lt(v), col:ge(v), i + v, i * s_dev, i // dl.tensor(3, I64):to(dev),
          dl.tensor(2.0):to(dev) + dl.tensor(3.0):to(dev), s_dev * s_cpu}
end, 0, 0)

-- powf differs from the CPU's by an ulp on some inputs
T.cuda_case("pow broadcasting a 0-dim exponent on the device", function(dev)
  local a = T.randn(3, 4, 5, {seed = 15}):to(dev):abs()
  return {a:pow(dl.tensor(1.25):to(dev)), a:pow(dl.tensor(-0.75))}
end, FN32, 0)

T.cuda_case("transposed, narrowed, expanded and strided views", function(dev)
  local m = T.randn(6, 8, {seed = 19}):to(dev)
  local n = T.randn(8, 6, {seed = 20}):to(dev)
  local e = T.randn(8, {seed = 21}):to(dev):expand(6, 8)
  local s = T.randn(6, 16, {seed = 22}):to(dev):narrow(2, 3, 8)    -- rows with a gap
  local st = T.randn(6, 24, {seed = 23}):to(dev):select(2, 5)       -- stride 24
  local p = T.randn(2, 3, 4, {seed = 24}):to(dev):permute(3, 1, 2)  -- (4, 2, 3)
  return {m + n:t(), m * e, s - m, n:t():maximum(s), st * m:select(2, 1), p + 1,
          p:transpose(1, 3):exp(), m:t():lt(n), n:t():clamp(-0.5, 0.5)}
end, FN32, FN32)

T.cuda_case("Lua numbers", function(dev)
  local a = T.randn(7, 9, {seed = 25}):to(dev)
  local i = randi(26, 30, 7, 9):to(dev)
  return {a + 2, 2 - a, a * 0.5, a / 3, 3 / a, a - 1e-3, a // 0.5, a % 0.75, 1 % a,
          a ^ 2, a ^ 3, a:abs() ^ 0.5, a:abs() ^ -0.5, a ^ -1, a ^ -2, i + 3, i * -2, i // 4,
          i % 5, i ^ 2, i:fmod(-3), a:lt(0.1), i:ge(0), i + 0.5, i / 2, a:maximum(0),
          a:minimum(nan), dl.pow(2, i:clamp(0, 20)), dl.pow(0.5, a)}
end, FN32, FN32)

T.cuda_case("in-place forms", function(dev)
  local a = T.randn(5, 6, {seed = 27}):to(dev)
  local b = T.randn(5, 6, {seed = 28}):to(dev)
  local r = {}
  local x = a:clone(); x:add_(b); r[#r + 1] = x
  x = a:clone(); x:add_(b, {alpha = 0.5}); r[#r + 1] = x
  x = a:clone(); x:sub_(2); r[#r + 1] = x
  x = a:clone(); x:mul_(b); r[#r + 1] = x
  x = a:clone(); x:mul_(dl.tensor(3):to(dev)); r[#r + 1] = x
  x = a:clone(); x:div_(b:abs():add(1)); r[#r + 1] = x
  x = a:clone(); x:pow_(2); r[#r + 1] = x
  x = a:clone(); x:t():add_(T.randn(5, {seed = 29}):to(dev)); r[#r + 1] = x  -- through a transposed view
  x = a:clone(); x:narrow(2, 2, 3):mul_(10); r[#r + 1] = x
  x = a:clone(); x:clamp_(-0.5, 0.5); r[#r + 1] = x
  x = a:clone(); x:neg_(); r[#r + 1] = x
  x = a:clone(); x:abs_(); r[#r + 1] = x
  x = a:clone(); x:floor_divide_(0.25); r[#r + 1] = x
  local i = randi(30, 40, 5, 6):to(dev)
  x = i:clone(); x:add_(7); r[#r + 1] = x
  x = i:clone(); x:mul_(i); r[#r + 1] = x
  x = i:clone(); x:floor_divide_(3); r[#r + 1] = x
  x = i:clone(); x:remainder_(-4); r[#r + 1] = x
  local m = a:gt(0)
  x = m:clone(); x:logical_not_(); r[#r + 1] = x
  x = m:clone(); x:logical_and_(b:gt(0)); r[#r + 1] = x
  return r
end, 0, 0)

-- --- unary ops ----------------------------------------------------------------------------

local UNARY_ANY = {"neg", "abs", "sign", "relu", "floor", "ceil", "round", "trunc", "square",
                   "exp", "exp2", "expm1", "sin", "cos", "tan", "atan", "sinh", "cosh", "tanh",
                   "sigmoid", "erf", "erfc", "frac", "reciprocal", "logical_not", "isnan", "isinf",
                   "isfinite"}
local UNARY_POS = {"log", "log2", "log10", "log1p", "sqrt", "rsqrt"}
local UNARY_UNIT = {"asin", "acos"}

-- Every unary op on x: the positive-domain ones on |x| + 0.01, asin/acos on tanh(x).
local function all_unary(x)
  local r = {}
  for _, op in ipairs(UNARY_ANY) do r[op] = x[op](x) end
  local pos, unit = x:abs() + 0.01, x:tanh()
  for _, op in ipairs(UNARY_POS) do r[op] = pos[op](pos) end
  for _, op in ipairs(UNARY_UNIT) do r[op] = unit[op](unit) end
  r.log_neg = x:log()  -- NaN where negative, -inf at 0
  r.gelu, r.silu = dl._F.gelu(x), dl._F.silu(x)
  r.gelu_tanh = dl._F.gelu(x, {approximate = "tanh"})
  return r
end

T.cuda_case("unary float32", function(dev)
  local x = T.randn(4, 50, {seed = 31}) * 3
  x[1][1], x[1][2], x[1][3], x[1][4] = nan, inf, -inf, 0
  x[2][1], x[2][2], x[2][3], x[2][4], x[2][5] = 0.5, 1.5, 2.5, -0.5, -2.5  -- half to even
  x[2][6], x[2][7] = -0.0, 1e-30
  return all_unary(x:to(dev))
end, FN32, FN32)

T.cuda_case("unary float64", function(dev)
  local x = T.randn(4, 50, {seed = 32}):double() * 3
  x[1][1], x[1][2], x[1][3] = nan, inf, -inf
  x[2][1], x[2][2], x[2][3] = 0.5, 2.5, -1.5
  return all_unary(x:to(dev))
end, FN64, FN64)

T.cuda_case("unary int64 and bool", function(dev)
  local i = randi(33, 1000, 60):to(dev)
  local b = T.randn(60, {seed = 34}):gt(0):to(dev)
  local r = {}
  for _, op in ipairs({"neg", "abs", "sign", "relu", "floor", "ceil", "round", "trunc", "square",
                       "logical_not", "isnan", "isinf", "isfinite"}) do
    r[op] = i[op](i)
  end
  r.b_not, r.b_sign, r.b_square, r.b_isnan = b:logical_not(), b:sign(), b:square(), b:isnan()
  r.i_exp, r.i_sqrt, r.b_exp = i:clamp(-20, 20):exp(), i:abs():sqrt(), b:exp()
  return r
end, FN32, 0)

T.cuda_case("unary in place and through views", function(dev)
  local x = T.randn(6, 7, {seed = 35}):to(dev)
  local r = {}
  for _, op in ipairs({"exp", "tanh", "sigmoid", "floor", "round", "sin", "relu"}) do
    local c = x:clone()
    c:t()[op .. "_"](c:t())
    r[op] = c
  end
  r.narrow = x:narrow(2, 2, 5):exp()
  r.expand = x:select(2, 1):view(6, 1):expand(6, 9):sigmoid()
  return r
end, FN32, FN32)

-- --- clamp, where, masked_fill ------------------------------------------------------------

T.cuda_case("clamp", function(dev)
  local x = T.randn(5, 8, {seed = 36})
  x[1][1] = nan
  x = x:to(dev)
  local lo, hi = T.randn(5, 8, {seed = 37}):to(dev) - 0.5, T.randn(8, {seed = 38}):to(dev) + 0.5
  local i = randi(39, 100, 5, 8):to(dev)
  local c = x:clone(); c:clamp_(-0.25, 0.25)
  return {x:clamp(-1, 1), x:clamp(0), x:clamp(nil, 0), x:clamp(lo, hi), x:clamp(lo),
          x:clamp(nil, hi), x:clamp(1, -1), x:clamp(nan, 1), x:clamp(0, nan), x:clamp_min(0.3),
          x:clamp_max(-0.3), i:clamp(-10, 10), i:clamp(0), i:clamp(-5.5, 5.5),
          i:clamp(dl.tensor(-3, I64):to(dev), dl.tensor(4, I64):to(dev)),
          x:double():clamp(-0.5, 0.5), x:clamp(dl.tensor(-0.5):to(dev), hi), c}
end, 0, 0)

T.cuda_case("where", function(dev)
  local c = T.randn(4, 6, {seed = 40}):gt(0):to(dev)
  local a, b = T.randn(4, 6, {seed = 41}):to(dev), T.randn(6, {seed = 42}):to(dev)
  local i = randi(43, 9, 4, 6):to(dev)
  local h = a:half()
  return {dl.where(c, a, b), dl.where(c, a, 0), dl.where(c, 1.5, b), dl.where(c, i, -1),
          dl.where(c, i, a), dl.where(c, a:double(), b), dl.where(c, h, h * 2), dl.where(c, h, 0.1),
          dl.where(c, c, c:logical_not()), dl.where(c:select(1, 1), a, b),
          dl.where(c:to(dl.uint8), a, b), dl.where(a:gt(b), a, b), dl.where(c:t():t(), a:t():t(), b)}
end, 0, 0)

T.cuda_case("masked_fill", function(dev)
  local x = T.randn(5, 7, {seed = 44}):to(dev)
  local m = T.randn(5, 7, {seed = 45}):gt(0.2):to(dev)
  local row = T.randn(7, {seed = 46}):gt(0):to(dev)
  local i = randi(47, 9, 5, 7):to(dev)
  local r = {x:masked_fill(m, -1), x:masked_fill(row, 2.5), x:masked_fill(m, nan),
             x:masked_fill(m, dl.tensor(7):to(dev)), x:masked_fill(m, dl.tensor(8)),
             i:masked_fill(m, 42), x:half():masked_fill(m, 0.1), x:bfloat16():masked_fill(row, 3),
             m:masked_fill(row, true), x:t():masked_fill(m:t(), 0), x:masked_fill(m:to(dl.uint8), 5)}
  local c = x:clone(); c:masked_fill_(row, 0); r[#r + 1] = c
  local d = i:clone(); d:narrow(2, 2, 4):masked_fill_(m:narrow(2, 1, 4), -9); r[#r + 1] = d
  return r
end, 0, 0)

-- --- isclose, allclose, equal ---------------------------------------------------------------

T.cuda_case("isclose, allclose, equal", function(dev)
  local a = T.randn(40, {seed = 48})
  local b = a + T.randn(40, {seed = 49}) * 1e-5
  a[1], b[1] = nan, nan
  a[2], b[2] = inf, inf
  a[3], b[3] = inf, -inf
  a[4], b[4] = 1, inf
  a, b = a:to(dev), b:to(dev)
  local same = a:clone()
  return {dl.isclose(a, b), dl.isclose(a, b, {equal_nan = true}),
          dl.isclose(a, b, {rtol = 0, atol = 1e-4}), dl.isclose(a:double(), b:double()),
          dl.isclose(a, 0.5), dl.isclose(a:half(), b:half()),
          dl.allclose(a, b), dl.allclose(a, b, {equal_nan = true, atol = 1e-3}),
          dl.allclose(a:narrow(1, 5, 30), b:narrow(1, 5, 30), {atol = 1e-3}),
          dl.equal(a, same), dl.equal(a:narrow(1, 2, 30), same:narrow(1, 2, 30)),
          dl.equal(a, b), dl.equal(a, a:view(4, 10)),
          dl.equal(randi(50, 5, 9):to(dev), randi(50, 5, 9):to(dev))}
end, 0, 0)

-- --- float16 and bfloat16 ----------------------------------------------------------------------

T.cuda_case("float16 and bfloat16, exact ops", function(dev)
  local r = {}
  for _, dt in ipairs({dl.float16, dl.bfloat16}) do
    local a = T.randn(6, 9, {seed = 51}):to(dt):to(dev)
    local b = T.randn(9, {seed = 52}):to(dt):to(dev)
    local k = #r
    r[k + 1], r[k + 2], r[k + 3], r[k + 4] = a + b, a * b, a - 0.1, a / b
    r[k + 5], r[k + 6], r[k + 7] = a:lt(b), a:maximum(b), a + b:float()
    r[k + 8], r[k + 9], r[k + 10] = a:neg(), a:abs(), a:floor()
    r[k + 11], r[k + 12] = a:clamp(-0.5, 0.3), a:clamp(b - 1, b)
    local c = a:clone(); c:add_(b); r[k + 13] = c
    c = a:clone(); c:mul_(0.3); r[k + 14] = c
    c = a:clone(); c:mul_(b:float()); r[k + 15] = c  -- float32 result into a half self
    c = a:clone(); c:clamp_(-0.1, 0.1); r[k + 16] = c
    r[k + 17] = a:isnan()
    r[k + 18] = a:double() * b   -- float64 result
  end
  return r
end, 0, 0)

T.cuda_case("float16 and bfloat16, functions", function(dev)
  local r = {}
  for _, dt in ipairs({dl.float16, dl.bfloat16}) do
    local a = T.randn(6, 9, {seed = 53}):to(dt):to(dev)
    r[#r + 1] = a:exp()
    r[#r + 1] = a:sigmoid()
    r[#r + 1] = a:tanh()
    r[#r + 1] = a:abs():sqrt()
    r[#r + 1] = a:pow(a:abs())
    local c = a:clone(); c:exp_(); r[#r + 1] = c
  end
  return r
end, 1e-2, 1e-3)

-- --- sizes and alignment ---------------------------------------------------------------------

T.cuda_case("1e6 elements (many blocks, the float4 path)", function(dev)
  local n = 1000000
  local a, b = T.randn(n, {seed = 54}):to(dev), T.randn(n, {seed = 55}):to(dev)
  return {exact = {a + b, a * b, a - 0.5, a:maximum(b), a / b, a:neg(), a:relu(), a:floor()},
          fn = {a:exp(), a:sigmoid(), a:tanh(), a:pow(2), a:abs():pow(0.5)}}
end, FN32, FN32)

T.cuda_case("1e6 + 3 elements (the tail of the float4 path)", function(dev)
  local n = 1000003
  local a, b = T.randn(n, {seed = 56}):to(dev), T.randn(n, {seed = 57}):to(dev)
  local c = a:clone(); c:mul_(b)
  return {a + b, a * 3, a:abs(), c, a:sigmoid(), a:gt(b)}
end, FN32, FN32)

T.cuda_case("misaligned views (x:narrow(1, 2, n))", function(dev)
  local n = 1000001
  local a = T.randn(n + 3, {seed = 58}):to(dev):narrow(1, 2, n)
  local b = T.randn(n + 3, {seed = 59}):to(dev):narrow(1, 3, n)
  local c = T.randn(n + 3, {seed = 60}):to(dev)
  local d = c:narrow(1, 2, n); d:add_(1)
  return {a + b, a * b, a:exp(), b:neg(), a:maximum(0), c}
end, FN32, FN32)

-- the vectorized setting on and off: packs of every dtype, each tail length
-- (n = 8k + r), misaligned (a pack fallback), strided (int-indexed) and
-- broadcast operands; exact ops exact, functions to FN32 (halves: 1e-2)
local function with_vec(on, fn) return T.with_setting(dl._nn.elementwise_vectorized, on, fn) end
for _, on in ipairs({true, false}) do
  for _, dt in ipairs({dl.float32, dl.float16, dl.bfloat16}) do
    T.cuda_case(string.format("vectorized maps %s, %s: tails, views, scalars", on and "on" or "off", dt.name),
      function(dev)
        return with_vec(on, function()
          local r = {}
          for tail = 0, 8 do
            local n = 64 + tail
            local a = T.randn(n, {seed = 70 + tail}):to(dt):to(dev)
            local b = T.randn(n, {seed = 80 + tail}):to(dt):to(dev)
            r[#r + 1] = {a + b, a * b, a - b * 2.5, a:maximum(b), a / b, a:neg(), a:relu(), a:abs(),
              a * 0.5, a + dl.tensor(1.25):to(dt), a:floor()}
          end
          local a = T.randn(1003, {seed = 90}):to(dt):to(dev)
          local b = T.randn(1003, {seed = 91}):to(dt):to(dev)
          local m = T.randn(40, 33, {seed = 92}):to(dt):to(dev)
          r[#r + 1] = {a:narrow(1, 2, 1000) + b:narrow(1, 3, 1000), a:narrow(1, 2, 1000):relu(),
            m:t() * 2, m:t() + m:t(), m:t():neg(), m + T.randn(33, {seed = 93}):to(dt):to(dev)}
          local c = a:clone(); c:add_(b); r[#r + 1] = c
          c = a:clone(); c:relu_(); r[#r + 1] = c
          return r
        end)
      end, 0, 0)
    T.cuda_case(string.format("vectorized maps %s, %s: functions", on and "on" or "off", dt.name), function(dev)
      return with_vec(on, function()
        local a = T.randn(1021, {seed = 94}):to(dt):to(dev)
        return {a:exp(), a:sigmoid(), a:tanh(), a:abs():sqrt(), a:pow(2)}
      end)
    end, dt == dl.float32 and FN32 or 1e-2, dt == dl.float32 and FN32 or 1e-3)
  end
  T.cuda_case(string.format("vectorized maps %s: channels-last bfloat16 at ResNet-50's shapes", on and "on" or "off"),
    function(dev)
      return with_vec(on, function()
        local r = {}
        for i, sh in ipairs({{4, 256, 56, 56}, {4, 512, 28, 28}, {4, 2048, 7, 7}, {4, 64, 112, 112}}) do
          local a = T.channels_last(T.randn(sh, {seed = 100 + i})):to(dl.bfloat16):to(dev)
          local b = T.channels_last(T.randn(sh, {seed = 110 + i})):to(dl.bfloat16):to(dev)
          local c = a:clone(); c:add_(b)
          r[#r + 1] = {(a + b):relu(), a * b, c, a:relu()}
        end
        return r
      end)
    end, 0, 0)
end

T.cuda_case("tiny and 0-dim tensors", function(dev)
  local s = dl.tensor(-2.5):to(dev)
  local t = dl.tensor({1, 2, 3}):to(dev)
  return {s + s, s:exp(), s:abs(), s:lt(0), s * t, t:narrow(1, 2, 2) * 2, t:exp(), t + t}
end, FN32, FN32)

T.cuda_case("empty tensors", function(dev)
  local e = dl.zeros(0, 3):to(dev)
  local m = dl.zeros(0, 3, {dtype = dl.bool}):to(dev)
  local i = dl.zeros(0, 3, I64):to(dev)
  local c = e:clone(); c:add_(1)
  return {e + 1, e * e, e:exp(), e:lt(0), e:clamp(0, 1), dl.where(m, e, e), e:masked_fill(m, 3),
          dl.isclose(e, e), dl.allclose(e, e), i // 2, i % 3, c, e + dl.zeros(3):to(dev)}
end, 0, 0)

-- --- errors ----------------------------------------------------------------------------------

T.case("integer division by zero is an error on both devices", function()
  for _, dev in ipairs(T.devices()) do
    local i = dl.tensor({7, -7, 3}, I64):to(dev)
    local z = dl.tensor({1, 0, 2}, I64):to(dev)
    T.raises(function() return i // 0 end, "integer division by zero")
    T.raises(function() return i % z end, "integer division by zero")
    T.raises(function() return i:fmod(z) end, "integer division by zero")
    T.raises(function() return i:div(z, {rounding_mode = "trunc"}) end, "integer division by zero")
    T.raises(function() local c = i:clone(); c:floor_divide_(z) end, "integer division by zero")
    T.raises(function() return dl.arange(100000):to(dev) % dl.zeros(100000, I64):to(dev) end,
             "division by zero")
    -- the device is still healthy
    T.tensor_eq((i // 2):cpu(), {3, -4, 1})
    T.tensor_eq((i % dl.tensor({2, 2, 2}, I64):to(dev)):cpu(), {1, 1, 1})
  end
end)

T.case("mixing devices is refused", function()
  if not T.cuda then return end
  local g, c = dl.ones(3):to("cuda"), dl.ones(3)
  T.raises(function() return g + c end, "expected all tensors on one device")
  T.raises(function() return dl.where(c:gt(0), g, g) end, "expected all tensors on one device")
  T.raises(function() return g:masked_fill(c:gt(0), 1) end, "expected all tensors on one device")
  T.raises(function() return dl.isclose(g, c) end, "expected all tensors on one device")
  T.raises(function() local x = c:clone(); x:add_(dl.tensor(1):to("cuda")) end, "cuda")
  T.tensor_eq((g + dl.tensor(2)):cpu(), {3, 3, 3})   -- a 0-dim CPU tensor is a scalar
end)

-- --- activation helpers --------------------------------------------------------------------------

T.cuda_case("relu_backward and dropout_backward", function(dev)
  local r = {}
  for _, dt in ipairs({dl.float32, dl.float64, dl.float16, dl.bfloat16}) do
    local y = T.randn(7, 8, {seed = 61}):relu():to(dt)
    y[1][1] = nan
    local gy = T.randn(7, 8, {seed = 62}):to(dt)
    local mask = T.randn(7, 8, {seed = 63}):gt(0)
    r[#r + 1] = dl._nn.relu_backward(gy:to(dev), y:to(dev))
    r[#r + 1] = dl._nn.relu_backward(gy:to(dev):t(), y:to(dev):t())
    r[#r + 1] = dl._nn.dropout_backward(gy:to(dev), mask:to(dev), 0.3)
  end
  return r
end, 0, 0)

-- --- gradients -------------------------------------------------------------------------------------

-- Leaves of one shape (no reduction in backward): the grads of a chain of
-- elementwise ops, with where, clamp and masked_fill in it.
T.cuda_case("gradients through elementwise ops", function(dev)
  local a = T.randn(6, 7, {seed = 64}):to(dev):requires_grad_()
  local b = T.randn(6, 7, {seed = 65}):to(dev):requires_grad_()
  local m = T.randn(6, 7, {seed = 66}):gt(0.5):to(dev)
  local y = (a * b + a:exp() - b:sigmoid()) / (b:abs() + 1)
  y = dl.where(a:gt(0), y, a:tanh() * b)
  y = y:clamp(-1.5, 1.5) + dl.maximum(a, b) * dl.minimum(a, b:sin())
  y = y:masked_fill(m, 0) + a:pow(2) + b:abs():add(0.1):pow(a) + dl.atan2(a, b)
  y = y + a:square() - b:abs():add(0.1):sqrt() + b:erf() * a:abs():log1p()
  y:backward(T.randn(6, 7, {seed = 67}):to(dev))
  return {a.grad, b.grad}
end, 1e-5, 1e-5)

-- With a broadcast operand (its gradient is summed by the reduce family's kernels).
T.cuda_case("gradients with broadcasting", function(dev)
  local a = T.randn(6, 7, {seed = 68}):to(dev):requires_grad_()
  local v = T.randn(7, {seed = 69}):to(dev):requires_grad_()
  local y = (a * v + v:exp()) / (a:abs() + 1)
  y:backward(T.randn(6, 7, {seed = 70}):to(dev))
  return {a.grad, v.grad}
end, 1e-5, 1e-5)

T.cuda_case("gradients of in-place ops", function(dev)
  local a = T.randn(5, 5, {seed = 71}):to(dev):requires_grad_()
  local y = a * 1
  y:mul_(a)
  y:add_(a, {alpha = 3})
  y:clamp_(-3, 3)
  y:exp_()
  y:backward(T.randn(5, 5, {seed = 72}):to(dev))
  return a.grad
end, 1e-5, 1e-5)

T.done()
