-- test_reduce.lua - the reduction family against known values: every op and
-- option, 1-based indices, keepdim shapes, dtypes, non-contiguous, 0-dim and
-- empty inputs, and bad input.
local T = require "testlib"

local nan, inf = 0 / 0, math.huge

local function m23() return dl.tensor({{1, 2, 3}, {4, 5, 6}}, {dtype = dl.float32}) end

T.case("sum", function()
  local x = m23()
  T.tensor_eq(x:sum(), 21)
  T.shape_eq(x:sum(), {})
  T.tensor_eq(x:sum(1), {5, 7, 9})
  T.tensor_eq(x:sum(2), {6, 15})
  T.tensor_eq(x:sum(-1), {6, 15})
  T.tensor_eq(x:sum(-2), {5, 7, 9})
  T.tensor_eq(x:sum({1, 2}), 21)
  T.tensor_eq(x:sum({2, 1}), 21)
  T.tensor_eq(dl.sum(x, 2), {6, 15})
  T.eq(x:sum().dtype, dl.float32)
  -- keepdim: option table, positional shorthand, option dim
  T.shape_eq(x:sum(2, {keepdim = true}), {2, 1})
  T.tensor_eq(x:sum(2, true), {{6}, {15}})
  T.shape_eq(x:sum(1, true), {1, 3})
  T.shape_eq(x:sum({1, 2}, true), {1, 1})
  T.shape_eq(x:sum(nil, {keepdim = true}), {1, 1})
  T.tensor_eq(x:sum({dim = 2}), {6, 15})
  T.tensor_eq(x:sum({dim = {1, 2}, keepdim = true}), {{21}})
  T.shape_eq(x:sum({}), {})
end)

T.case("sum dtypes", function()
  local i = dl.tensor({{1, 2, 3}, {4, 5, 6}})
  T.eq(i:sum().dtype, dl.int64)
  T.eq(i:sum():item(), 21)
  T.eq(dl.tensor({1, 2}, {dtype = dl.int32}):sum().dtype, dl.int64)
  T.eq(dl.tensor({200, 100}, {dtype = dl.uint8}):sum():item(), 300)
  local b = dl.tensor({true, false, true})
  T.eq(b:sum().dtype, dl.int64)
  T.eq(b:sum():item(), 2)
  T.eq(m23():sum({dtype = dl.float64}).dtype, dl.float64)
  T.eq(i:sum(1, {dtype = dl.float32}).dtype, dl.float32)
  T.tensor_eq(i:sum(1, {dtype = "float64"}), {5, 7, 9})
  -- the input is converted first, as PyTorch
  T.eq(dl.tensor({1.7, 2.6}):sum({dtype = dl.int32}):item(), 3)
  T.eq(dl.tensor({1.7, 2.6}):sum({dtype = dl.int32}).dtype, dl.int32)
  local h = dl.tensor({1, 2, 3.5}):half()
  T.eq(h:sum().dtype, dl.float16)
  T.eq(h:sum():item(), 6.5)
  T.eq(dl.tensor({1, 2, 3.5}):bfloat16():sum(1).dtype, dl.bfloat16)
  T.eq(dl.tensor({1, 2}, {dtype = dl.float64}):sum():item(), 3)
  -- int64 arithmetic wraps around like PyTorch
  local big = dl.tensor({math.maxinteger, 1})
  T.eq(big:sum():item(), math.mininteger)
end)

T.case("sum accuracy and size", function()
  local n = 1000000
  T.eq(dl.ones(n):sum():item(), n)
  -- 0.1 is not exact in float32; the float32 nearest to n * float32(0.1)
  local s = dl.full({n}, 0.1):sum():item()
  local f01 = dl.tensor({0.1}):item()
  T.near(s, n * f01, 1e-7)
  -- columns and rows of a big matrix
  local m = dl.ones(1000, 300)
  T.tensor_eq(m:sum(1):narrow(1, 1, 3), {1000, 1000, 1000})
  T.tensor_eq(m:sum(2):narrow(1, 1, 3), {300, 300, 300})
  T.eq(m:sum():item(), 300000)
  T.eq(dl.ones(3, 400000):sum(1):sum():item(), 1200000)
  T.eq(dl.ones(400000, 3):sum(1):sum():item(), 1200000)
  T.eq(dl.ones(n, {dtype = dl.int64}):sum():item(), n)
  local a = dl.arange(n):float()
  -- exact in double, then rounded once to float32
  T.eq(a:sum():item(), dl.tensor({n * (n - 1) / 2}):item())
  T.eq(a:max():item(), n - 1)
  T.eq(a:argmax():item(), n)
  T.eq(a:argmin():item(), 1)
end)

T.case("non-contiguous inputs", function()
  local x = m23()
  local t = x:t() -- (3, 2) view
  T.tensor_eq(t:sum(1), {6, 15})
  T.tensor_eq(t:sum(2), {5, 7, 9})
  T.tensor_eq(t:sum(), 21)
  T.tensor_eq(x:narrow(2, 2, 2):sum(2), {5, 11})
  T.tensor_eq(x:narrow(2, 2, 2):sum(1), {7, 9})
  local e = dl.tensor({1, 2, 3}, {dtype = dl.float32}):expand(4, 3)
  T.tensor_eq(e:sum(1), {4, 8, 12})
  T.tensor_eq(e:sum(2), {6, 6, 6, 6})
  T.tensor_eq(e:sum(), 24)
  local c = dl.arange(24):view(2, 3, 4):float()
  local p = c:permute(3, 1, 2) -- (4, 2, 3)
  T.tensor_eq(p:sum({1, 3}), {66, 210})
  T.tensor_eq(p:sum(2), {{12, 20, 28}, {14, 22, 30}, {16, 24, 32}, {18, 26, 34}})
  T.tensor_eq(c:sum({1, 3}), {60, 92, 124})
  T.tensor_eq(c:sum(2), {{12, 15, 18, 21}, {48, 51, 54, 57}})
  -- argmax over everything counts in logical (row-major) order
  local y = dl.tensor({{1, 9}, {5, 2}}, {dtype = dl.float32}):t() -- {{1,5},{9,2}}
  T.eq(y:argmax():item(), 3)
  T.eq(y:argmin():item(), 1)
  local v, i = y:max(1)
  T.tensor_eq(v, {9, 5})
  T.tensor_eq(i, {2, 1})
  T.tensor_eq(t:cumsum(1), {{1, 4}, {3, 9}, {6, 15}})
  T.tensor_eq(e:cumsum(1), {{1, 2, 3}, {2, 4, 6}, {3, 6, 9}, {4, 8, 12}})
end)

T.case("0-dim and empty", function()
  local s = dl.tensor(5.5)
  T.tensor_eq(s:sum(), 5.5)
  T.tensor_eq(s:sum(1), 5.5)
  T.tensor_eq(s:sum(-1, true), 5.5)
  T.shape_eq(s:sum(1, true), {})
  T.tensor_eq(s:mean(), 5.5)
  local v, i = s:max(1)
  T.tensor_eq(v, 5.5)
  T.eq(i:item(), 1)
  T.eq(s:argmax():item(), 1)
  T.tensor_eq(s:cumsum(1), 5.5)
  T.truthy(s:var():item() ~= s:var():item(), "var of one element is nan")
  local z = dl.zeros(0, 3)
  T.tensor_eq(z:sum(), 0)
  T.tensor_eq(z:sum(1), {0, 0, 0})
  T.shape_eq(z:sum(2), {0})
  T.tensor_eq(z:prod(1), {1, 1, 1})
  T.tensor_eq(z:prod(), 1)
  T.truthy(z:mean():item() ~= z:mean():item(), "mean of empty is nan")
  T.tensor_eq(z:amax(2), {})
  T.shape_eq(z:amax(2), {0})
  T.tensor_eq(z:all(), true)
  T.tensor_eq(z:any(), false)
  T.tensor_eq(z:logsumexp(1), {-inf, -inf, -inf})
  T.tensor_eq(z:norm(), 0)
  T.tensor_eq(z:norm(math.huge, 1), {0, 0, 0})
  T.shape_eq(z:cumsum(1), {0, 3})
  local mv, mi = z:max(2)
  T.shape_eq(mv, {0})
  T.shape_eq(mi, {0})
  T.truthy(z:median():item() ~= z:median():item(), "median of empty is nan")
  T.raises(function() z:max() end, "max: cannot reduce an empty tensor")
  T.raises(function() z:max(1) end, "max: cannot reduce over dimension 1 of size 0")
  T.raises(function() z:argmax() end, "argmax: cannot reduce an empty tensor")
  T.raises(function() z:amin(1) end, "amin: cannot reduce over dimension 1 of size 0")
  T.raises(function() z:median(1) end, "median: cannot reduce over dimension 1")
end)

T.case("mean", function()
  local x = m23()
  T.tensor_eq(x:mean(), 3.5)
  T.tensor_eq(x:mean(1), {2.5, 3.5, 4.5})
  T.tensor_eq(x:mean(2, true), {{2}, {5}})
  T.tensor_eq(x:mean({1, 2}), 3.5)
  T.eq(x:double():mean().dtype, dl.float64)
  T.eq(x:half():mean(2).dtype, dl.float16)
  T.tensor_eq(x:half():mean(2), {2, 5})
  local i = dl.tensor({1, 2, 4})
  T.tensor_eq(i:mean({dtype = dl.float64}), 7 / 3, 1e-15)
  T.eq(i:mean({dtype = dl.float64}).dtype, dl.float64)
  T.raises(function() i:mean() end, "mean: could not infer the output dtype")
  T.raises(function() i:mean() end, "int64")
  T.raises(function() x:mean({dtype = dl.int64}) end, "must be a floating point type, got int64")
end)

T.case("prod", function()
  local x = m23()
  T.tensor_eq(x:prod(), 720)
  T.tensor_eq(x:prod(1), {4, 10, 18})
  T.tensor_eq(x:prod(2, true), {{6}, {120}})
  T.eq(dl.tensor({2, 3}):prod().dtype, dl.int64)
  T.eq(dl.tensor({2, 3}):prod():item(), 6)
  T.eq(dl.tensor({true, true}):prod():item(), 1)
  T.eq(dl.tensor({2, 3}):prod({dtype = dl.float64}).dtype, dl.float64)
  T.tensor_eq(dl.tensor({1e30, 1e30, 1e-30}, {dtype = dl.float32}):prod(), 1e30, 1e-6)
end)

T.case("max min", function()
  local x = dl.tensor({{3, 7, 7}, {9, 1, 9}}, {dtype = dl.float32})
  T.tensor_eq(x:max(), 9)
  T.tensor_eq(x:min(), 1)
  local v, i = x:max(2)
  T.tensor_eq(v, {7, 9})
  T.tensor_eq(i, {2, 1}) -- ties: the first occurrence, 1-based
  T.eq(i.dtype, dl.int64)
  v, i = x:min(1)
  T.tensor_eq(v, {3, 1, 7})
  T.tensor_eq(i, {1, 2, 1})
  v, i = x:max(-1, true)
  T.shape_eq(v, {2, 1})
  T.tensor_eq(i, {{2}, {1}})
  v, i = x:max(1, {keepdim = true})
  T.shape_eq(i, {1, 3})
  v, i = dl.max(x, 2)
  T.tensor_eq(i, {2, 1})
  -- NaN propagates and is reported at its first index
  local n = dl.tensor({1, nan, 3, nan}, {dtype = dl.float32})
  T.truthy(n:max():item() ~= n:max():item())
  T.truthy(n:min():item() ~= n:min():item())
  v, i = n:max(1)
  T.eq(i:item(), 2)
  v, i = n:min(1)
  T.eq(i:item(), 2)
  T.eq(n:argmax():item(), 2)
  T.eq(n:argmin():item(), 2)
  -- -inf everywhere still gives the first index
  v, i = dl.full({4}, -inf):max(1)
  T.eq(v:item(), -inf)
  T.eq(i:item(), 1)
  -- dtypes keep their type
  local xi = dl.tensor({{3, -7}, {2, 8}})
  T.eq(xi:max().dtype, dl.int64)
  T.eq(xi:max():item(), 8)
  v, i = xi:min(2)
  T.tensor_eq(v, {-7, 2})
  T.tensor_eq(i, {2, 1})
  T.eq(dl.tensor({1, 5}, {dtype = dl.uint8}):max().dtype, dl.uint8)
  T.eq(dl.tensor({1, 5}, {dtype = dl.int32}):min():item(), 1)
  T.eq(dl.tensor({true, false}):max():item(), true)
  T.eq(dl.tensor({true, false}):min():item(), false)
  T.eq(dl.tensor({1.5, 2.5}):half():max().dtype, dl.float16)
  T.eq(dl.tensor({1.5, 2.5}):bfloat16():max():item(), 2.5)
  T.eq(dl.tensor({math.maxinteger, math.maxinteger - 1}):max():item(), math.maxinteger)
  T.eq(dl.tensor({math.mininteger, math.mininteger + 1}):min():item(), math.mininteger)
  v, i = dl.tensor({math.mininteger, math.mininteger}):max(1)
  T.eq(i:item(), 1)
end)

T.case("max over long rows and columns", function()
  local n = 100003
  local a = dl.zeros(n)
  a[77777] = 5
  a[99999] = 5
  a[12] = -3
  T.eq(a:argmax():item(), 77777)
  T.eq(a:argmin():item(), 12)
  local v, i = a:max(1)
  T.eq(i:item(), 77777)
  local m = dl.zeros(n, 3)
  m[50001][2] = 4
  m[60001][2] = 4
  m[7][3] = 1
  v, i = m:max(1)
  T.tensor_eq(v, {0, 4, 1})
  T.tensor_eq(i, {1, 50001, 7})
  local mt = m:t() -- rows of a transposed view
  v, i = mt:max(2)
  T.tensor_eq(i, {1, 50001, 7})
  local im = dl.zeros(n, {dtype = dl.int64})
  im[n] = 1
  T.eq(im:argmax():item(), n)
end)

T.case("max min with indices along rows: chunked scans against a plain loop", function()
  -- rows longer than the kernels' scan chunk (1024), with ties across chunks,
  -- NaNs in later chunks, +-0 and rows of -inf / +inf only
  local function ref(row, mx)
    local bv, bi = row[1], 1
    for k = 2, #row do
      local v = row[k]
      if bv ~= bv then break end
      if v ~= v or (mx and v > bv) or (not mx and v < bv) then bv, bi = v, k end
    end
    return bv, bi
  end
  local L = 3000
  local rows = {}
  for r = 1, 8 do
    local row = {}
    for k = 1, L do row[k] = ((k * 7919 + r * 104729) % 2003) / 100 - 10 end
    rows[r] = row
  end
  rows[1][1500], rows[1][2900] = 50, 50 -- tie in two chunks: the first wins
  rows[2][2500], rows[2][2700] = nan, nan -- the first NaN wins
  rows[2][100] = 99
  rows[3][5] = -50
  rows[3][2050] = -50
  for k = 1, L do rows[4][k] = -inf end
  for k = 1, L do rows[5][k] = inf end
  for k = 1, L do rows[6][k] = (k % 2 == 0) and 0.0 or -0.0 end
  rows[7][L] = 1000 -- in the row's tail
  rows[8][1] = nan
  for _, dt in ipairs{dl.float32, dl.float64} do
    local x = dl.tensor(rows, {dtype = dt})
    for _, mx in ipairs{true, false} do
      local v, i
      if mx then v, i = x:max(2) else v, i = x:min(2) end
      local am = mx and x:argmax(2) or x:argmin(2)
      for r = 1, #rows do
        local bv, bi = ref(rows[r], mx)
        T.eq(i[r]:item(), bi, "index of row " .. r)
        T.eq(am[r]:item(), bi, "arg index of row " .. r)
        if bv ~= bv then
          T.truthy(v[r]:item() ~= v[r]:item(), "NaN wins in row " .. r)
        else
          T.eq(v[r]:item(), dl.tensor({bv}, {dtype = dt})[1]:item(), "value of row " .. r)
        end
      end
    end
  end
end)

T.case("many short rows", function()
  -- argmax over 10 classes of many rows, as after a classifier
  local n = 50000
  local x = dl.zeros(n, 10)
  x[1][3] = 1
  x[2][10] = 2
  x[n][7] = 5
  x[n][8] = 5
  x[n - 1][1] = nan
  x[n - 1][2] = 9
  local am = x:argmax(2)
  T.eq(am.dtype, dl.int64)
  T.tensor_eq(am:narrow(1, 1, 3), {3, 10, 1})
  T.tensor_eq(am:narrow(1, n - 1, 2), {1, 7})
  local v, i = x:max(2)
  T.eq(v[n]:item(), 5)
  T.eq(i[n]:item(), 7)
  T.truthy(v[n - 1]:item() ~= v[n - 1]:item())
  local s = x:sum(2)
  T.tensor_eq(s:narrow(1, 1, 3), {1, 2, 0})
  T.eq(s[n]:item(), 10)
  T.tensor_eq(dl.ones(n, 3):mean(2):narrow(1, 1, 2), {1, 1})
  T.eq(dl.ones(n, 3, {dtype = dl.int64}):sum(2):sum():item(), 3 * n)
  T.eq(dl.ones(n, 3, {dtype = dl.bool}):all(2):all():item(), true)
  T.tensor_eq(dl.arange(12):view(4, 3):float():logsumexp(2):narrow(1, 1, 1), {2.4076059644443806})
  -- reduced dims on both sides of a kept one, read in place
  local c = dl.arange(60):view(3, 4, 5):float()
  T.tensor_eq(c:sum({1, 3}), {330, 405, 480, 555})
  T.tensor_eq(c:amax({1, 3}), {44, 49, 54, 59})
  T.tensor_eq(c:long():amin({1, 3}), {0, 5, 10, 15})
  T.tensor_eq(c:var({-1, 1}), c:permute(2, 1, 3):reshape(4, 15):var(2), 1e-6)
end)

T.case("argmax argmin", function()
  local x = dl.tensor({{3, 7, 7}, {9, 1, 9}}, {dtype = dl.float32})
  T.eq(x:argmax():item(), 4)
  T.eq(x:argmin():item(), 5)
  T.eq(x:argmax().dtype, dl.int64)
  T.tensor_eq(x:argmax(2), {2, 1})
  T.tensor_eq(x:argmin(1), {1, 2, 1})
  T.tensor_eq(x:argmax(1, true), {{2, 1, 2}})
  T.shape_eq(x:argmax(nil, true), {1, 1})
  T.tensor_eq(dl.argmax(x, -1), {2, 1})
  T.tensor_eq(x:argmax({dim = 2, keepdim = true}), {{2}, {1}})
end)

T.case("amax amin", function()
  local x = dl.arange(24):view(2, 3, 4)
  T.tensor_eq(x:amax(), 23)
  T.tensor_eq(x:amax({1, 3}), {15, 19, 23})
  T.tensor_eq(x:amin({2, 3}, true), {{{0}}, {{12}}})
  T.eq(x:amax(1).dtype, dl.int64)
  T.tensor_eq(x:float():amin(-1), {{0, 4, 8}, {12, 16, 20}})
  local n = dl.tensor({{1, nan}, {2, 3}}, {dtype = dl.float32})
  local r = n:amax(2)
  T.truthy(r[1]:item() ~= r[1]:item())
  T.eq(r[2]:item(), 3)
end)

T.case("var std", function()
  local x = dl.tensor({{1, 2, 3, 4}, {2, 4, 6, 8}}, {dtype = dl.float32})
  T.tensor_eq(x:var(2), {5 / 3, 20 / 3})
  T.tensor_eq(x:var(2, {unbiased = false}), {1.25, 5})
  T.tensor_eq(x:var(2, false), {1.25, 5})
  T.tensor_eq(x:var(2, {correction = 0}), {1.25, 5})
  T.tensor_eq(x:var(2, {correction = 2}), {2.5, 10})
  T.tensor_eq(x:var(2, true, true), {{5 / 3}, {20 / 3}})
  T.shape_eq(x:var(2, {keepdim = true}), {2, 1})
  T.tensor_eq(x:std(2), {math.sqrt(5 / 3), math.sqrt(20 / 3)})
  T.tensor_eq(x:std(2, {unbiased = false}), {math.sqrt(1.25), math.sqrt(5)})
  T.tensor_eq(x:var(1), {0.5, 2, 4.5, 8})
  T.tensor_eq(x:var(), 5.357142857142857)
  T.tensor_eq(x:var(false), 4.6875)
  T.tensor_eq(x:var({1, 2}), 5.357142857142857)
  T.tensor_eq(x:std(), math.sqrt(5.357142857142857))
  T.tensor_eq(dl.var(x, 2), {5 / 3, 20 / 3})
  T.eq(x:double():var().dtype, dl.float64)
  T.eq(x:half():std().dtype, dl.float16)
  -- a large offset does not cost precision (two-pass in double)
  local y = dl.tensor({1e8 + 1, 1e8 + 2, 1e8 + 3}, {dtype = dl.float64})
  T.tensor_eq(y:var(), 1, 1e-12)
  -- too few elements: nan, as PyTorch
  local one = dl.tensor({3}, {dtype = dl.float32})
  T.truthy(one:var():item() ~= one:var():item())
  T.eq(one:var({unbiased = false}):item(), 0)
  T.raises(function() dl.tensor({1, 2}):var() end, "var: expected a floating point input, got int64")
  T.raises(function() x:std(1, {unbiased = true, correction = 1}) end, "either unbiased or correction")
end)

T.case("norm", function()
  local x = dl.tensor({{3, -4}, {0, 12}}, {dtype = dl.float32})
  T.tensor_eq(x:norm(), 13)
  T.tensor_eq(x:norm(2), 13)
  T.tensor_eq(x:norm("fro"), 13)
  T.tensor_eq(x:norm(1), 19)
  T.tensor_eq(x:norm(math.huge), 12)
  T.tensor_eq(x:norm(-math.huge), 0)
  T.tensor_eq(x:norm(0), 3)
  T.tensor_eq(x:norm(3), (27 + 64 + 1728) ^ (1 / 3), 1e-6)
  T.tensor_eq(x:norm(0.5), (math.sqrt(3) + 2 + math.sqrt(12)) ^ 2, 1e-6)
  T.tensor_eq(x:norm(2, 2), {5, 12})
  T.tensor_eq(x:norm(1, 1), {3, 16})
  T.tensor_eq(x:norm(2, 2, true), {{5}, {12}})
  T.tensor_eq(x:norm(2, {1, 2}), 13)
  T.tensor_eq(x:norm({p = 1, dim = 2}), {7, 12})
  T.tensor_eq(x:norm(nil, 2), {5, 12})
  T.tensor_eq(dl.norm(x, "fro", {1, 2}, {keepdim = true}), {{13}})
  T.tensor_eq(dl.tensor({-1, 2, -3}, {dtype = dl.float32}):norm(-1), 1 / (1 + 1 / 2 + 1 / 3), 1e-6)
  T.eq(x:double():norm().dtype, dl.float64)
  T.tensor_eq(dl.tensor({1e30, 1e30}, {dtype = dl.float32}):norm(), math.sqrt(2) * 1e30, 1e-6)
  T.raises(function() dl.tensor({1, 2}):norm() end, "norm: expected a floating point input, got int64")
  T.raises(function() x:norm("nuc") end, "nuclear norm")
  T.raises(function() x:norm("abc") end, "p must be a number or 'fro'")
end)

T.case("all any", function()
  local b = dl.tensor({{true, false}, {true, true}})
  T.tensor_eq(b:all(), false)
  T.tensor_eq(b:any(), true)
  T.tensor_eq(b:all(1), {true, false})
  T.tensor_eq(b:all(2), {false, true})
  T.tensor_eq(b:any(2, true), {{true}, {true}})
  T.tensor_eq(b:all({1, 2}), false)
  T.eq(b:all().dtype, dl.bool)
  local f = dl.tensor({0, 1.5, nan}, {dtype = dl.float32})
  T.tensor_eq(f:all(), false)
  T.tensor_eq(f:any(), true)
  T.tensor_eq(f:narrow(1, 2, 2):all(), true) -- nan counts as true
  T.tensor_eq(dl.tensor({0, 0}):any(), false)
  T.eq(dl.tensor({3, 1}, {dtype = dl.uint8}):all().dtype, dl.bool)
  local big = dl.ones(100000, {dtype = dl.bool})
  T.tensor_eq(big:all(), true)
  big[99999] = false
  T.tensor_eq(big:all(), false)
  T.tensor_eq(big:any(), true)
end)

T.case("cumsum cumprod", function()
  local x = m23()
  T.tensor_eq(x:cumsum(2), {{1, 3, 6}, {4, 9, 15}})
  T.tensor_eq(x:cumsum(1), {{1, 2, 3}, {5, 7, 9}})
  T.tensor_eq(x:cumsum(-1), {{1, 3, 6}, {4, 9, 15}})
  T.tensor_eq(x:cumprod(2), {{1, 2, 6}, {4, 20, 120}})
  T.tensor_eq(x:cumprod(1), {{1, 2, 3}, {4, 10, 18}})
  T.eq(x:cumsum(1).dtype, dl.float32)
  local i = dl.tensor({1, 2, 3}, {dtype = dl.int32})
  T.eq(i:cumsum(1).dtype, dl.int64)
  T.tensor_eq(i:cumsum(1), {1, 3, 6})
  T.eq(dl.tensor({true, true}):cumsum(1).dtype, dl.int64)
  T.tensor_eq(dl.tensor({true, true}):cumsum(1), {1, 2})
  T.eq(i:cumsum(1, {dtype = dl.float64}).dtype, dl.float64)
  T.eq(i:cumsum(1, dl.float32).dtype, dl.float32)
  T.eq(i:cumprod(1, "float64").dtype, dl.float64)
  T.tensor_eq(dl.cumsum(x, 2), {{1, 3, 6}, {4, 9, 15}})
  T.tensor_eq(x:cumsum({dim = 2}), {{1, 3, 6}, {4, 9, 15}})
  T.eq(x:half():cumsum(1).dtype, dl.float16)
  T.tensor_eq(x:half():cumsum(2), {{1, 3, 6}, {4, 9, 15}})
  local n = 200000
  local c = dl.ones(n):cumsum(1)
  T.eq(c[n]:item(), n)
  T.eq(c[12345]:item(), 12345)
  local a = dl.arange(n, {dtype = dl.int64})
  T.eq(a:cumsum(1)[n]:item(), n * (n - 1) // 2)
end)

T.case("logsumexp", function()
  local x = dl.tensor({{1, 2, 3}, {1000, 1000, 1000}}, {dtype = dl.float32})
  T.tensor_eq(x:logsumexp(2), {math.log(math.exp(1) + math.exp(2) + math.exp(3)), 1000 + math.log(3)})
  T.tensor_eq(x:logsumexp(2, true), {{3.4076059644443806}, {1001.0986122886681}})
  T.tensor_eq(x:logsumexp(1), {1000, 1000, 1000} )
  local m = dl.full({3}, -inf)
  T.eq(m:logsumexp(1):item(), -inf)
  T.eq(dl.tensor({1, inf}, {dtype = dl.float32}):logsumexp(1):item(), inf)
  local i = dl.tensor({1, 2})
  T.eq(i:logsumexp(1).dtype, dl.float32)
  T.tensor_eq(i:logsumexp(1), 2.3132616875182226)
  T.tensor_eq(x:narrow(1, 1, 1):logsumexp(), 3.4076059644443806)
end)

T.case("logsumexp along long rows: chunks, rescaling, NaN and inf", function()
  local function ref(row)
    local m = -inf
    for _, v in ipairs(row) do if v > m then m = v end end
    local s = 0
    for _, v in ipairs(row) do s = s + math.exp(v - m) end
    return m + math.log(s)
  end
  local L = 5000
  local rows = {}
  for r = 1, 4 do
    local row = {}
    -- rising values: the running max grows chunk after chunk
    for k = 1, L do row[k] = k / 50 + ((k * 7919 + r) % 101) / 10 end
    rows[r] = row
  end
  for k = 1, L do rows[3][k] = -k / 10 end -- falling: the first chunk holds the max
  for _, dt in ipairs{dl.float32, dl.float64} do
    local x = dl.tensor(rows, {dtype = dt})
    local got = x:logsumexp(2)
    for r = 1, #rows do
      local want = ref(rows[r])
      T.near(got[r]:item(), want, dt == dl.float32 and 2e-6 or 1e-12, "row " .. r)
    end
    -- a NaN or +inf in a later chunk, a row of -inf
    local y = x:clone()
    y[1][4000] = nan
    y[2][3000] = inf
    y[3] = -inf
    local g = y:logsumexp(2)
    T.truthy(g[1]:item() ~= g[1]:item(), "NaN row")
    T.eq(g[2]:item(), inf)
    T.eq(g[3]:item(), -inf)
    T.near(g[4]:item(), ref(rows[4]), dt == dl.float32 and 2e-6 or 1e-12)
  end
  -- one long row cut into chunks across threads: the same on 1 and 2 threads
  local v = dl.randn(300000):mul(5)
  local prev = dl.get_num_threads()
  dl.set_num_threads(1)
  local a = v:logsumexp(1):item()
  dl.set_num_threads(2)
  local b = v:logsumexp(1):item()
  dl.set_num_threads(prev)
  T.eq(a, b)
  T.near(a, v:double():logsumexp(1):item(), 2e-6)
end)

T.case("float16/bfloat16 sums and means: the float32 copy's result, bit for bit", function()
  dl.manual_seed(5)
  for _, dt in ipairs({dl.float16, dl.bfloat16}) do
    local function same(a, b, msg) T.same_bits(a, b:to(dt), msg) end
    local v = dl.randn(123457):mul(3):to(dt) -- one long row: chunks and a tail
    same(v:sum(), v:float():sum(), "sum()")
    same(v:mean(), v:float():mean(), "mean()")
    local m = dl.randn(300, 517):to(dt)
    for _, d in ipairs({1, 2}) do
      same(m:sum(d), m:float():sum(d), "sum(" .. d .. ")")
      same(m:mean(d, true), m:float():mean(d, true), "mean(" .. d .. ", true)")
    end
    local s = dl.randn(4000, 5):to(dt) -- short rows side by side
    same(s:sum(2), s:float():sum(2), "short rows")
    local t = dl.randn(6, 50, 7):to(dt) -- reduced dims on both sides of a kept one
    same(t:sum({1, 3}), t:float():sum({1, 3}), "sum({1, 3})")
    same(m:t():sum(2), m:float():t():sum(2), "transposed")
    local e = dl.tensor({1, 0 / 0, 3}, {dtype = dt})
    T.truthy(e:sum():item() ~= e:sum():item(), "NaN")
    T.eq(tostring(m:sum({dtype = dl.float32}).dtype), tostring(dl.float32))
    T.eq(m:sum({dtype = dl.float32}):item(), m:float():sum():item())
  end
end)

T.case("median", function()
  local x = dl.tensor({{5, 1, 4, 2}, {7, 3, 9, 8}}, {dtype = dl.float32})
  T.eq(x:median():item(), 4)
  local v, i = x:median(2)
  T.tensor_eq(v, {2, 7})
  T.tensor_eq(i, {4, 1})
  v, i = x:median(1, true)
  T.tensor_eq(v, {{5, 1, 4, 2}})
  T.tensor_eq(i, {{1, 1, 1, 1}})
  v, i = dl.tensor({3, nan, 1}, {dtype = dl.float32}):median(1)
  T.truthy(v:item() ~= v:item())
  T.eq(i:item(), 2)
  T.eq(dl.tensor({4, 1, 3}):median():item(), 3)
  T.eq(dl.tensor({4, 1, 3}):median().dtype, dl.int64)
end)

T.case("max and min of two tensors", function()
  if type(dl.maximum) ~= "function" then
    T.raises(function() dl.ones(2):max(dl.ones(2)) end, "needs dl.maximum")
    return
  end
  T.tensor_eq(dl.tensor({1, 5}):max(dl.tensor({3, 2})), {3, 5})
  T.tensor_eq(dl.min(dl.tensor({1, 5}), dl.tensor({3, 2})), {1, 2})
end)

T.case("bad input", function()
  local x = m23()
  T.raises(function() x:sum(3) end, "sum: dimension 3 out of range")
  T.raises(function() x:sum(-3) end, "out of range")
  T.raises(function() x:sum(0) end, "dimension 0 is invalid")
  T.raises(function() x:sum({1, 1}) end, "sum: dimension 1 appears more than once")
  T.raises(function() x:sum({1, -2}) end, "appears more than once")
  T.raises(function() x:sum(1.5) end, "non-integer")
  T.raises(function() x:sum("a") end, "sum: dim must be an integer or a table of integers, got string")
  T.raises(function() x:sum({"a"}) end, "dims must be integers, got string")
  T.raises(function() x:sum({1, keepdim = true}) end, "holds integers only")
  T.raises(function() x:sum(1, {keepdims = true}) end, "sum: unknown option 'keepdims'")
  T.raises(function() x:sum(1, {keepdim = 1}) end, "keepdim")
  T.raises(function() x:sum(1, {dtype = "float128"}) end, "unknown dtype")
  T.raises(function() x:sum(1, true, 5) end, "unexpected argument")
  T.raises(function() x:sum(1, {dim = 2}) end, "dim given both")
  T.raises(function() dl.sum(5) end, "tensor expected")
  T.raises(function() dl.sum() end, "tensor expected")
  T.raises(function() dl.tensor({1, 2}):mean() end, "mean: could not infer the output dtype")
  T.raises(function() x:cumsum() end, "cumsum: dim is required")
  T.raises(function() x:cumprod({dtype = dl.float64}) end, "cumprod: dim is required")
  T.raises(function() x:cumsum({1, 2}) end, "cumsum: expects a single dimension")
  T.raises(function() x:cumsum(3) end, "cumsum: dimension 3 out of range")
  T.raises(function() x:max({1, 2}) end, "max: expects a single dimension")
  T.raises(function() x:max(5) end, "max: dimension 5 out of range")
  T.raises(function() x:max(nil, true) end, "keepdim needs a dim")
  T.raises(function() x:argmax(1, {keep = true}) end, "argmax: unknown option 'keep'")
  T.raises(function() x:var(1, {correction = -1}) end, "correction must be >= 0")
  T.raises(function() x:norm(1, 2, {p = 2}) end, "p given both")
  T.raises(function() x:norm(true) end, "p must be a number")
  T.raises(function() x:median(dl.ones(2)) end, "median: dim must be an integer")
  T.raises(function() dl.tensor({1, 2}):std(1) end, "std: expected a floating point input")
  T.raises(function() dl.tensor(1):sum(2) end, "out of range")
  -- the state is healthy afterwards
  T.tensor_eq(x:sum(), 21)
end)

T.case("float32 folds: every kind along rows and wide columns, tails and NaN, against float64", function()
  dl.manual_seed(3)
  -- rows of 1000 + 37 (whole blocks, a part block, a tail), columns 2048 + 52
  -- wide (two column blocks), a reduction over dims on both sides of a kept one
  local cases = {{{3, 1037}, 2}, {{1037, 2100}, 1}, {{4, 5, 600}, {1, 3}}, {{70, 3}, 1}}
  for _, c in ipairs(cases) do
    local x = dl.randn(table.unpack(c[1]))
    local d = c[2]
    local xd = x:double()
    local what = string.format("shape %s dim %s", table.concat(c[1], "x"), type(d) == "table" and table.concat(d, ",") or d)
    -- sums within float32 blocks' rounding of the float64 sum, relative to the sum of |x|
    local function near_sum(got, ref, bound, name)
      local err = (got:double() - ref):abs() - bound * 1e-6
      T.truthy(err:max():item() <= 0, name .. " " .. what .. ": off by more than 1e-6 * sum |x|")
    end
    near_sum(x:sum(d), xd:sum(d), xd:abs():sum(d), "sum")
    near_sum(x:mean(d), xd:mean(d), xd:abs():mean(d), "mean")
    near_sum(x:norm(1, d), xd:norm(1, d), xd:abs():sum(d), "norm 1")
    near_sum(x:norm(2, d):pow(2), xd:norm(2, d):pow(2), xd:pow(2):sum(d), "norm 2")
    local p = x * 0.01 + 1 -- products near 1, far from overflow
    near_sum(p:prod(d):log(), p:double():prod(d):log(), xd:abs():sum(d) * 0.03, "prod")
    -- the extremes are exact
    T.tensor_eq(x:amax(d), xd:amax(d):float(), 0, "amax " .. what)
    T.tensor_eq(x:amin(d), xd:amin(d):float(), 0, "amin " .. what)
    T.tensor_eq(x:norm(inf, d), xd:norm(inf, d):float(), 0, "norm inf " .. what)
    T.tensor_eq(x:norm(-inf, d), xd:norm(-inf, d):float(), 0, "norm -inf " .. what)
  end
  -- a NaN anywhere (a whole block, the tail, a far column) wins for every kind
  local x = dl.randn(4, 1037)
  x[1][5], x[2][1030], x[3][700] = nan, nan, nan
  for _, r in ipairs{x:amax(2), x:amin(2), x:norm(inf, 2), x:norm(-inf, 2), x:sum(2), x:prod(2)} do
    local v = r:tolist()
    T.truthy(v[1] ~= v[1] and v[2] ~= v[2] and v[3] ~= v[3], "NaN rows give NaN")
    T.truthy(v[4] == v[4], "the row without NaN is a number")
  end
  local y = dl.randn(300, 2100)
  y[17][3], y[299][2099] = nan, nan
  for _, r in ipairs{y:amax(1), y:amin(1), y:norm(inf, 1), y:sum(1)} do
    local v = r:tolist()
    T.truthy(v[3] ~= v[3] and v[2099] ~= v[2099], "NaN columns give NaN")
    T.truthy(v[1] == v[1] and v[2100] == v[2100], "other columns are numbers")
  end
  -- +-inf and ties of the extremes; a whole tensor, split in chunks over threads
  local z = dl.randn(100000)
  z[77777] = inf
  z[5] = -inf
  T.eq(z:amax():item(), inf)
  T.eq(z:amin():item(), -inf)
  T.eq(z:abs():amin():item(), z:abs():double():amin():item())
  T.same_across_threads(function() return {z:sum(), y:sum(1), x:sum(2), y:amax(1)} end,
    {1, 2, 3}, "float32 folds")
end)

T.done()
