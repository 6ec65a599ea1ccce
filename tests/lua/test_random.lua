-- test_random.lua - rand/randn/randint/randperm/bernoulli and the in-place
-- fills: known Philox values, reproducibility from the seed and across
-- thread counts, statistics on 10^6 samples, bounds, dtypes and bad input.
-- Statistics use tolist() and Lua loops, not tensor reductions.
local T = require "testlib"

local function stats(t)
  local xs = T.flatten(t)
  local n, s, s2, lo, hi = #xs, 0, 0, math.huge, -math.huge
  for i = 1, n do
    local x = xs[i]
    s = s + x
    s2 = s2 + x * x
    if x < lo then lo = x end
    if x > hi then hi = x end
  end
  local mean = s / n
  return mean, math.sqrt(s2 / n - mean * mean), lo, hi, xs
end

local function same(a, b)
  local x, y = T.flatten(a), T.flatten(b)
  if #x ~= #y then return false end
  for i = 1, #x do if x[i] ~= y[i] then return false end end
  return true
end

T.case("known Philox4x32-10 values", function()
  -- Random123's known answer: key 0, counter 0 -> 6627e8d5 e169c58d bc57ac4c 9b00dbd8
  local words = {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}
  dl.manual_seed(0)
  local r = dl.rand(4):tolist() -- float32: lane i%4, top 24 bits
  for i = 1, 4 do T.eq(r[i], (words[i] >> 8) / 2 ^ 24, "rand element " .. i) end
  dl.manual_seed(0)
  T.tensor_eq(dl.randint(0, 1 << 32, {2}), {words[1], words[3]}, 0) -- 64-bit draws: lanes (0,1), (2,3)
  dl.manual_seed(0)
  local d = dl.rand(1, {dtype = dl.float64}):tolist()[1]
  T.eq(d, ((words[1] << 32 | words[2]) >> 11) / 2 ^ 53, "rand float64")
  T.eq(dl.initial_seed(), 0)
end)

T.case("reproducible from the seed", function()
  dl.manual_seed(42)
  local a, b, c = dl.rand(1000), dl.randn(3, 7), dl.randint(0, 100, {50})
  dl.manual_seed(42)
  T.truthy(same(a, dl.rand(1000)), "rand repeats")
  T.truthy(same(b, dl.randn(3, 7)), "randn repeats")
  T.truthy(same(c, dl.randint(0, 100, {50})), "randint repeats")
  T.truthy(not same(a, dl.rand(1000)), "the stream moves on")
  dl.manual_seed(43)
  T.truthy(not same(a, dl.rand(1000)), "another seed differs")
  dl.manual_seed(7)
  local p = dl.randperm(100)
  dl.manual_seed(7)
  T.truthy(same(p, dl.randperm(100)), "randperm repeats")
end)

T.case("independent of the thread count", function()
  local function draw()
    dl.manual_seed(1234)
    local n = 100003 -- above the parallel grain, not a multiple of 4
    return {dl.rand(n), dl.randn(n), dl.randn(n, {dtype = dl.float64}), dl.rand(n, {dtype = dl.float16}),
            dl.randint(-7, 1000, {n}), dl.empty(n):bernoulli_(0.25), dl.empty(n, {dtype = dl.bfloat16}):normal_(1, 3)}
  end
  T.same_across_threads(draw, {1, 2, 3}, "draws")
end)

T.case("rand and randn statistics (10^6 samples)", function()
  dl.manual_seed(5)
  local mean, std, lo, hi = stats(dl.rand(1000000))
  T.near(mean, 0.5, 0.003, "rand mean")
  T.near(std, math.sqrt(1 / 12), 0.003, "rand std")
  T.truthy(lo >= 0 and hi < 1 and lo < 1e-4 and hi > 1 - 1e-4, "rand range " .. lo .. " " .. hi)
  mean, std, lo, hi = stats(dl.randn(1000, 1000))
  T.truthy(math.abs(mean) < 0.005, "randn mean " .. mean)
  T.near(std, 1, 0.005, "randn std")
  T.truthy(lo < -4 and hi > 4 and lo > -7 and hi < 7, "randn tails " .. lo .. " " .. hi)
  -- a quarter of the mass lies beyond +-1.1503
  local xs, beyond = T.flatten(dl.randn(200000)), 0
  for i = 1, #xs do if math.abs(xs[i]) > 1.150349 then beyond = beyond + 1 end end
  T.near(beyond / #xs, 0.25, 0.02, "randn quartiles")
  mean, std = stats(dl.randn(200000, {dtype = dl.float64}))
  T.truthy(math.abs(mean) < 0.01, "randn float64 mean " .. mean)
  T.near(std, 1, 0.01, "randn float64 std")
  mean, std, lo, hi = stats(dl.rand(200000, {dtype = dl.float64}))
  T.near(mean, 0.5, 0.005, "rand float64 mean")
  T.truthy(lo >= 0 and hi < 1, "rand float64 range")
end)

T.case("half-precision fills stay below the upper bound", function()
  dl.manual_seed(11)
  local _, _, lo, hi = stats(dl.rand(1000000, {dtype = dl.float16}))
  T.truthy(lo >= 0 and hi < 1, "float16 rand range " .. lo .. " " .. hi)
  local mean
  mean, _, lo, hi = stats(dl.empty(200000, {dtype = dl.bfloat16}):uniform_(1, 2))
  T.truthy(lo >= 1 and hi < 2, "bfloat16 uniform_ range " .. lo .. " " .. hi)
  T.near(mean, 1.5, 0.01, "bfloat16 uniform_ mean")
  mean = stats(dl.randn(200000, {dtype = dl.bfloat16}))
  T.truthy(math.abs(mean) < 0.02, "bfloat16 randn mean " .. mean)
end)

T.case("uniform_ and normal_", function()
  dl.manual_seed(3)
  local mean, std, lo, hi = stats(dl.empty(200000):uniform_(-3, -1))
  T.truthy(lo >= -3 and hi < -1 and lo < -2.99 and hi > -1.01, "uniform_ bounds " .. lo .. " " .. hi)
  T.near(mean, -2, 0.01, "uniform_ mean")
  T.near(std, 2 / math.sqrt(12), 0.01, "uniform_ std")
  T.tensor_eq(dl.empty(5):uniform_(2.5, 2.5), {2.5, 2.5, 2.5, 2.5, 2.5})
  mean, std = stats(dl.empty(500, 400, {dtype = dl.float64}):normal_(3, 2))
  T.near(mean, 3, 0.01, "normal_ mean")
  T.near(std, 2, 0.01, "normal_ std")
  T.tensor_eq(dl.empty(3):normal_(4, 0), {4, 4, 4})
  -- a strided view: only its elements change, and it returns itself
  local z = dl.zeros(4, 6)
  local v = z:narrow(2, 2, 3)
  T.eq(v:uniform_(5, 6), v)
  for i, row in ipairs(z:tolist()) do
    for j, x in ipairs(row) do
      if j >= 2 and j <= 4 then T.truthy(x >= 5 and x < 6, "view element")
      else T.eq(x, 0, "outside the view " .. i .. "," .. j) end
    end
  end
  local tz = dl.zeros(3, 5):t():normal_()
  T.truthy(not same(tz, dl.zeros(5, 3)), "transposed normal_ wrote")
  -- defaults: uniform_() is [0, 1)
  _, _, lo, hi = stats(dl.empty(1000):uniform_())
  T.truthy(lo >= 0 and hi < 1)
end)

T.case("randint", function()
  dl.manual_seed(9)
  local t = dl.randint(0, 10, {1000000})
  T.eq(t.dtype, dl.int64)
  local counts, xs = {}, T.flatten(t)
  for i = 1, #xs do counts[xs[i]] = (counts[xs[i]] or 0) + 1 end
  for v = 0, 9 do T.near(counts[v] / 1e5, 1, 0.02, "frequency of " .. v) end
  T.eq(counts[-1], nil)
  T.eq(counts[10], nil)
  local _, _, lo, hi = stats(dl.randint(-5, 5, {2, 50000}))
  T.eq(lo, -5); T.eq(hi, 4)
  _, _, lo, hi = stats(dl.randint(3, {100}))
  T.eq(lo, 0); T.eq(hi, 2)
  T.shape_eq(dl.randint(0, 5, {2, 3, 4}), {2, 3, 4})
  T.eq(dl.randint(0, 256, {4}, {dtype = dl.uint8}).dtype, dl.uint8)
  T.eq(dl.randint(0, 5, {4}, {dtype = dl.float32}).dtype, dl.float32)
  local i32 = dl.randint(-2147483648, 2147483647, {1000}, {dtype = "int32"})
  _, _, lo, hi = stats(i32)
  T.truthy(lo < -1e9 and hi > 1e9, "int32 full range")
  local huge = T.flatten(dl.randint(math.mininteger, math.maxinteger, {100}))
  local neg = 0
  for i = 1, #huge do if huge[i] < 0 then neg = neg + 1 end end
  T.truthy(neg > 20 and neg < 80, "int64 full range")
  T.tensor_eq(dl.randint(7, 8, {3}), {7, 7, 7})
  local b = T.flatten(dl.randint(0, 2, {1000}, {dtype = dl.bool}))
  local trues = 0
  for i = 1, #b do if b[i] then trues = trues + 1 end end
  T.truthy(trues > 400 and trues < 600, "bool randint")
  t = dl.zeros(2, 3, {dtype = dl.int32})
  T.eq(t:random_(10, 20), t)
  _, _, lo, hi = stats(t)
  T.truthy(lo >= 10 and hi < 20)
end)

T.case("randperm is a permutation of 1..n", function()
  dl.manual_seed(2)
  for _, n in ipairs({0, 1, 2, 5, 1000, 100001}) do
    local p = dl.randperm(n)
    T.eq(p.dtype, dl.int64)
    T.shape_eq(p, {n})
    local xs = p:tolist()
    table.sort(xs)
    for i = 1, n do if xs[i] ~= i then T.fail("randperm(" .. n .. ") misses " .. i) end end
  end
  -- every position is equally likely to hold 1
  local first = {0, 0, 0}
  for _ = 1, 3000 do
    local p = dl.randperm(3):tolist()
    for i = 1, 3 do if p[i] == 1 then first[i] = first[i] + 1 end end
  end
  for i = 1, 3 do T.near(first[i] / 1000, 1, 0.12, "position " .. i) end
  local f = dl.randperm(10, {dtype = dl.float32})
  T.eq(f.dtype, dl.float32)
  local xs = f:tolist()
  table.sort(xs)
  T.tensor_eq(dl.tensor(xs), {1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
  T.eq(dl.randperm(255, {dtype = dl.uint8}).shape[1], 255)
end)

T.case("like, bernoulli and options", function()
  local x = dl.zeros(2, 3, {dtype = dl.float64})
  local r = dl.rand_like(x)
  T.eq(r.dtype, dl.float64); T.shape_eq(r, {2, 3})
  T.eq(dl.randn_like(x, {dtype = dl.float32}).dtype, dl.float32)
  local ri = dl.randint_like(x, 5, 8)
  T.eq(ri.dtype, dl.float64)
  local _, _, lo, hi = stats(ri)
  T.truthy(lo >= 5 and hi < 8)
  _, _, lo, hi = stats(dl.randint_like(dl.zeros(100, {dtype = dl.int64}), 4))
  T.truthy(lo >= 0 and hi < 4)
  T.eq(dl.rand(2, {requires_grad = true}).requires_grad, true)
  T.eq(dl.rand(2).requires_grad, false)
  T.shape_eq(dl.rand(), {})
  T.shape_eq(dl.randn({2, 0}), {2, 0})
  T.shape_eq(dl.rand(2, 3, 4), {2, 3, 4})
  T.eq(dl.rand({3}, {dtype = "bfloat16"}).dtype, dl.bfloat16)

  dl.manual_seed(4)
  local mean = stats(dl.empty(200000):bernoulli_(0.3))
  T.near(mean, 0.3, 0.01, "bernoulli_ mean")
  T.tensor_eq(dl.bernoulli(dl.tensor({0, 1, 0, 1, 1}, {dtype = dl.float32})), {0, 1, 0, 1, 1})
  local p = dl.tensor({{0.0}, {1.0}})
  local b = dl.empty(2, 4, {dtype = dl.int32}):bernoulli_(p)
  T.tensor_eq(b, {{0, 0, 0, 0}, {1, 1, 1, 1}})
  local bb = dl.empty(1000, {dtype = dl.bool}):bernoulli_()
  T.eq(bb.dtype, dl.bool)
  mean = stats(dl.full({100000}, 0.8):bernoulli())
  T.near(mean, 0.8, 0.01, "bernoulli() mean")
end)

T.case("bad input", function()
  T.raises(function() dl.rand(-1) end, "rand: negative size -1 in dimension 1")
  T.raises(function() dl.randn(2, -3) end, "randn: negative size -3 in dimension 2")
  T.raises(function() dl.randint(0, 5, {-2}) end, "randint: negative size")
  T.raises(function() dl.randint(5, 5, {2}) end, "randint: expects low < high")
  T.raises(function() dl.randint(6, 5, {2}) end, "low=6 >= high=5")
  T.raises(function() dl.randint(0, {2}) end, "randint: expects low < high")
  T.raises(function() dl.randint(0, 10) end, "randint: size table")
  T.raises(function() dl.randint(0, 10, 3) end, "randint: size table")
  T.raises(function() dl.randint("a", {2}) end, "randint: high (integer) expected")
  T.raises(function() dl.randint(0, 2.5, {2}) end, "integer representation")
  T.raises(function() dl.randint(0, 300, {2}, {dtype = dl.uint8}) end, "does not fit dtype uint8")
  T.raises(function() dl.randint(-1, 1, {2}, {dtype = dl.bool}) end, "does not fit dtype bool")
  T.raises(function() dl.randint(0, 1 << 40, {2}, {dtype = dl.float32}) end, "does not fit dtype float32")
  T.raises(function() dl.rand(2, {dtype = dl.int64}) end, "rand: expected a floating-point dtype, got int64")
  T.raises(function() dl.randn(2, {dtype = "bool"}) end, "randn: expected a floating-point dtype")
  T.raises(function() dl.rand_like(dl.zeros(2, {dtype = dl.int32})) end, "rand_like: expected a floating-point dtype")
  T.raises(function() dl.rand(2, {dtyp = dl.float32}) end, "rand: unknown option 'dtyp'")
  T.raises(function() dl.randint(0, 3, {2}, {size = 2}) end, "randint: unknown option 'size'")
  T.raises(function() dl.randperm(3, {foo = 1}) end, "randperm: unknown option 'foo'")
  T.raises(function() dl.rand(2, "x") end, "rand: unexpected argument")
  T.raises(function() dl.rand(2, {}, 5) end, "rand: unexpected argument")
  T.raises(function() dl.rand(2.5) end, "integer")
  T.raises(function() dl.rand(2, {dtype = "float99"}) end, "float99")
  T.raises(function() dl.randint(0, 3, {2}, {requires_grad = true}) end, "only floating-point tensors")
  T.raises(function() dl.randperm(-1) end, "randperm: n must be non-negative")
  T.raises(function() dl.randperm(300, {dtype = dl.uint8}) end, "do not fit dtype uint8")
  T.raises(function() dl.randperm(3, {dtype = dl.bool}) end, "randperm: dtype bool")
  T.raises(function() dl.randperm("x") end, "number expected")
  T.raises(function() dl.zeros(3, {dtype = dl.int64}):uniform_() end, "uniform_: expected a floating-point dtype, got int64")
  T.raises(function() dl.zeros(3):uniform_(2, 1) end, "uniform_: expects low <= high")
  T.raises(function() dl.zeros(3):uniform_(0, 1 / 0) end, "uniform_: bounds must be finite")
  T.raises(function() dl.zeros(3, {dtype = dl.float16}):uniform_(-60000, 60000) end, "overflows float16")
  T.raises(function() dl.zeros(3):normal_(0, -1) end, "normal_: expects std >= 0")
  T.raises(function() dl.zeros(3, {dtype = dl.int32}):normal_() end, "normal_: expected a floating-point dtype")
  T.raises(function() dl.zeros(3):random_(3, 3) end, "random_: expects low < high")
  T.raises(function() dl.zeros(3):random_() end, "random_: high (integer) expected")
  T.raises(function() dl.zeros(3):bernoulli_(1.5) end, "bernoulli_: probability must be in [0, 1]")
  T.raises(function() dl.zeros(3):bernoulli_(0 / 0) end, "bernoulli_: probability must be in [0, 1]")
  T.raises(function() dl.zeros(3):bernoulli_("x") end, "bernoulli_: probability (number or tensor)")
  T.raises(function() dl.zeros(3):bernoulli_(dl.tensor({0.5, 2.0, 0.1})) end, "probabilities must be in [0, 1]")
  T.raises(function() dl.zeros(3):bernoulli_(dl.tensor({0.5, 0.5})) end, "cannot be broadcast")
  T.raises(function() dl.bernoulli(dl.tensor({1, 0})) end, "bernoulli: expected a floating-point dtype")
  T.raises(function() dl.rand_like(5) end, "tensor expected")
  -- the generator still works after all that
  T.shape_eq(dl.rand(2), {2})
end)

T.done()
