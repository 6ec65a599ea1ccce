-- test_index_cuda.lua - the joining and indexing family on CUDA against the
-- CPU: index_select, index_add (through index_select's gradient), gather,
-- scatter/scatter_add, index_fill/index_copy, sort/argsort/topk (repeated
-- values, NaN, every dim, both directions, 1e6 elements), one_hot, nonzero
-- (and the count it implies), masked_select, masked_scatter (through
-- masked_select's gradient), masked_fill, tril/triu, cat/stack, split/chunk,
-- flip, roll, t[i] and t[i] = v, narrow, expand, padding in every mode; on
-- contiguous and non-contiguous inputs, float32/int64/bool, empty and large
-- sizes; gradients compared across devices; bad indices refused with the
-- CPU's message on both devices.  Skipped (exit 77) without a GPU.
-- Inputs and masks are built on the CPU, so only this family's CUDA kernels
-- (and the core's copies) run, except in the masked_fill case (elementwise).
local T = require "testlib"
T.require_cuda()

local nan = 0 / 0
local F = dl._F
local I = function(t) return dl.tensor(t, {dtype = dl.int64}) end
local empty_index = function() return dl.zeros(0, {dtype = dl.int64}) end

-- Values with many repeats and some NaN: small integers as float32.
local function repeats(seed, shape, with_nan)
  dl.manual_seed(seed)
  local t = dl.randint(0, 4, shape):float()
  if with_nan then t = t:masked_fill(dl.rand(shape):lt(0.15), nan) end
  return t
end

-- The gradient of out = fn(x) for x (CPU, moved to dev) with grad_outputs w
-- (a fixed random tensor of out's shape, built on the CPU).
local function grad_on(dev, x, fn, seed)
  local xd = x:to(dev):requires_grad_()
  local out = fn(xd)
  dl.manual_seed(seed or 7)
  local w = dl.randn(out.shape):to(out.dtype):to(dev)
  return dl.autograd.grad(out, {xd}, {grad_outputs = w})[1]
end

-- --- index_select / index_add -------------------------------------------------------

T.cuda_case("index_select: dims, repeats, non-contiguous, dtypes, empty", function(dev)
  local x = T.randn(5, 7, {seed = 1}):to(dev)
  local idx = I({3, 1, 5, 5, 2}):to(dev)
  local xi = dl.arange(35):view(5, 7):to(dev)
  return {
    x:index_select(1, idx), x:index_select(2, idx), x:index_select(-1, idx),
    x:t():index_select(1, idx), x:t():index_select(2, idx),
    xi:index_select(2, idx), dl.arange(35):view(5, 7):gt(17):to(dev):index_select(1, idx),
    x:index_select(1, empty_index():to(dev)),
    dl.zeros(0, 7):to(dev):index_select(2, idx),
    x:index_select(2, I(3)), -- a 0-dim CPU index is moved to the data's device
  }
end)

T.cuda_case("index_select: large", function(dev)
  local x = T.randn(1000, 1000, {seed = 2}):to(dev)
  dl.manual_seed(3)
  local idx = dl.randint(1, 1001, {700}):to(dev)
  return {x:index_select(1, idx), x:index_select(2, idx)}
end)

T.cuda_case("index_select gradient (index_add, repeated indices)", function(dev)
  local idx = I({3, 1, 5, 5, 3, 3}):to(dev)
  return {
    grad_on(dev, T.randn(5, 7, {seed = 2}), function(x) return x:index_select(1, idx) end),
    grad_on(dev, T.randn(5, 7, {seed = 2}), function(x) return x:t():index_select(2, idx) end),
    grad_on(dev, T.randn(5, 7, {seed = 2}):double(), function(x) return x:index_select(1, idx) end),
  }
end, 1e-5, 1e-5)

-- --- gather / scatter -------------------------------------------------------------------

T.cuda_case("gather: every dim, non-contiguous, int64 and bool", function(dev)
  local x = T.randn(4, 3, 5, {seed = 3}):to(dev)
  dl.manual_seed(5)
  local i1 = dl.randint(1, 4, {4, 3, 5}):to(dev)
  local i2 = dl.randint(1, 4, {2, 3, 4}):to(dev)
  local i3 = dl.randint(1, 6, {4, 2, 6}):to(dev)
  local xi = dl.arange(60):view(4, 3, 5):to(dev)
  return {
    x:gather(1, i1), x:gather(2, i2), x:gather(3, i3), x:gather(-1, i3),
    x:transpose(1, 3):gather(1, dl.randint(1, 6, {5, 3, 4}):to(dev)),
    xi:gather(3, i3), dl.arange(60):view(4, 3, 5):gt(30):to(dev):gather(3, i3),
    x:gather(1, dl.zeros(0, 3, 5, {dtype = dl.int64}):to(dev)),
  }
end)

T.cuda_case("scatter and scatter_add: values, src, in place, expanded src", function(dev)
  -- scatter positions are a permutation per row, so no two writes collide
  local self = dl.zeros(3, 6):to(dev)
  dl.manual_seed(11)
  local perm = dl.stack({dl.randperm(6), dl.randperm(6), dl.randperm(6)}):narrow(2, 1, 4):to(dev)
  local src = T.randn(3, 4, {seed = 12}):to(dev)
  local dup = I({{1, 1, 2, 1}, {6, 6, 6, 6}, {3, 2, 3, 2}}):to(dev)
  local a = self:clone()
  a:scatter_(2, perm, src)
  local b = dl.zeros(6, 3):to(dev):t()
  b:scatter_add_(2, dup, src)
  local xi = dl.zeros(3, 6, {dtype = dl.int64}):to(dev)
  return {
    self:scatter(2, perm, src), self:scatter(2, perm, 2.5), a, b,
    self:scatter_add(2, dup, src), self:scatter_add(1, I({{3, 1, 3, 2}}):to(dev), src),
    self:scatter_add(2, dup, dl.ones(1, 1):to(dev):expand(3, 4)),
    xi:scatter_add(2, dup, dl.arange(12):view(3, 4):to(dev)),
    xi:scatter(2, perm, 7),
    dl.zeros(3, 6, {dtype = dl.bool}):to(dev):scatter(2, perm, true),
    self:scatter_add(2, dl.zeros(3, 0, {dtype = dl.int64}):to(dev), src),
  }
end)

T.cuda_case("scatter_add: large with many collisions", function(dev)
  dl.manual_seed(13)
  local idx = dl.randint(1, 101, {1000, 1000}):to(dev)
  local src = dl.ones(1000, 1000):to(dev)
  local xi = dl.zeros(1000, 100, {dtype = dl.int64}):to(dev)
  return {dl.zeros(1000, 100):to(dev):scatter_add(2, idx, src),
          xi:scatter_add(2, idx, dl.ones(1000, 1000, {dtype = dl.int64}):to(dev))}
end)

T.cuda_case("gather and scatter gradients", function(dev)
  dl.manual_seed(17)
  local gi = dl.randint(1, 6, {4, 8}):to(dev)
  local perm = dl.stack({dl.randperm(6), dl.randperm(6), dl.randperm(6)}):narrow(2, 1, 4):to(dev)
  local self = T.randn(3, 6, {seed = 19})
  return {
    grad_on(dev, T.randn(4, 5, {seed = 1}), function(x) return x:gather(2, gi) end),
    grad_on(dev, T.randn(3, 4, {seed = 2}), function(s) return self:to(dev):scatter(2, perm, s) end),
    grad_on(dev, self, function(x) return x:scatter(2, perm, T.randn(3, 4, {seed = 3}):to(dev)) end),
    grad_on(dev, T.randn(3, 4, {seed = 2}), function(s) return self:to(dev):scatter_add(2, perm, s) end),
  }
end)

T.cuda_case("index_fill and index_copy", function(dev)
  local x = T.randn(5, 4, {seed = 21}):to(dev)
  local idx = I({2, 4, -1}):to(dev)
  local y = x:clone()
  y:index_fill_(1, idx, -3)
  return {
    x:index_fill(1, idx, 9), x:t():index_fill(1, I({1, 3}):to(dev), 0), y,
    x:index_copy(1, I({5, 1}):to(dev), T.randn(2, 4, {seed = 22}):to(dev)),
  }
end)

-- --- sort / argsort / topk -----------------------------------------------------------

-- Appends both results of t:sort(...) (or t:topk(...)) to the list out.
local function push2(out, v, i)
  out[#out + 1] = v
  out[#out + 1] = i
end

T.cuda_case("sort: every dim, both directions, repeats and NaN, non-contiguous", function(dev)
  local x = repeats(23, {4, 5, 6}, true):to(dev)
  local out = {}
  for d = 1, 3 do
    for _, desc in ipairs({false, true}) do
      push2(out, x:sort(d, desc))
      push2(out, x:transpose(1, 3):sort(d, desc))
    end
  end
  return out
end)

T.cuda_case("sort: signed zeros, infinities, int64, bool, 0-dim, empty", function(dev)
  local f = dl.tensor({0.0, -0.0, 1 / 0, -1 / 0, nan, 3, -0.0, nan, 0.0}):to(dev)
  local xi = I({{5, -3, 5, 0, -3, 9223372036854775807, -9223372036854775807}}):to(dev)
  local b = dl.tensor({true, false, true, false}):to(dev)
  local out = {}
  for _, desc in ipairs({false, true}) do
    for _, t in ipairs({f, xi, b, dl.tensor(2.5):to(dev), dl.zeros(3, 0):to(dev)}) do
      push2(out, t:sort(-1, desc))
    end
  end
  return out
end)

T.cuda_case("sort: 1e6 float32, one slice and many", function(dev)
  local x = T.randn(1000000, {seed = 29}):to(dev)
  local v, i = x:sort()
  local v2, i2 = x:view(1000, 1000):sort(1, true)
  local r = repeats(31, {1000000}, true):to(dev)
  local v3, i3 = r:sort(1, true)
  return {v, i, v2, i2, v3, i3}
end)

T.cuda_case("argsort and topk: largest/smallest, k = 1 and k = n", function(dev)
  local x = repeats(37, {6, 9}, true):to(dev)
  local out = {x:argsort(), x:argsort(1, true), x:t():argsort(2)}
  for _, k in ipairs({1, 4, 9}) do
    for _, largest in ipairs({true, false}) do push2(out, x:topk(k, 2, largest)) end
  end
  push2(out, x:topk(3, 1))
  push2(out, T.randn(100000, {seed = 41}):to(dev):topk(10))
  return out
end)

T.cuda_case("sort and topk gradients", function(dev)
  local x = T.randn(5, 8, {seed = 43})
  return {
    grad_on(dev, x, function(t) return (t:sort(2, true)) end),
    grad_on(dev, x, function(t) return (t:topk(3, 1)) end),
  }
end)

-- --- one_hot, nonzero, masks -----------------------------------------------------------

T.cuda_case("one_hot", function(dev)
  return {dl.one_hot(I({1, 3, 2, 3}):to(dev)), dl.one_hot(I({{1, 2}, {4, 1}}):to(dev), 6),
          dl.one_hot(empty_index():to(dev), 3)}
end)

T.cuda_case("nonzero and its count: floats with NaN, bool, int64, non-contiguous, empty, large", function(dev)
  local xc = repeats(47, {5, 6}, true) -- zeros, NaN and non-zeros
  local x = xc:to(dev)
  local big = repeats(53, {1000, 1000}, false):to(dev)
  local out = {
    x:nonzero(), x:t():nonzero(), xc:gt(1):to(dev):nonzero(), x:long():nonzero(),
    dl.zeros(4, 0):to(dev):nonzero(), dl.zeros(7):to(dev):nonzero(), big:nonzero(),
    dl.tensor(3):to(dev):nonzero(), x:nonzero({as_tuple = true}),
  }
  out[#out + 1] = big:nonzero():size(1)
  return out
end)

T.cuda_case("masked_select: broadcast mask, non-contiguous, dtypes, large", function(dev)
  local xc = T.randn(4, 5, {seed = 59})
  local x, m = xc:to(dev), xc:gt(0):to(dev)
  local row = dl.tensor({true, false, true, true, false}):to(dev)
  local bigc = T.randn(1000, 1000, {seed = 61})
  local big = bigc:to(dev)
  return {
    x:masked_select(m), x:masked_select(row), x:t():masked_select(m:t()),
    dl.arange(20):view(4, 5):to(dev):masked_select(row), m:masked_select(row),
    x:masked_select(dl.zeros(4, 5, {dtype = dl.bool}):to(dev)),
    big:masked_select(bigc:lt(0.3):to(dev)),
  }
end)

T.cuda_case("masked_select gradient (masked_scatter) and masked_fill", function(dev)
  local row = dl.tensor({true, false, true, true, false}):to(dev)
  local x = T.randn(4, 5, {seed = 67})
  local m = x:gt(0):to(dev)
  local y = x:clone():to(dev) -- a copy on the CPU too: x stays as it is
  y:masked_fill_(m, 0)
  return {
    grad_on(dev, x, function(t) return t:masked_select(row) end),
    grad_on(dev, x, function(t) return t:t():masked_select(m:t()) end),
    x:to(dev):masked_fill(m, -1), y, x:to(dev):t():masked_fill(row:view(5, 1), 2),
    grad_on(dev, x, function(t) return t:masked_fill(m, 3) end),
  }
end)

-- --- triangles ---------------------------------------------------------------------------

T.cuda_case("tril and triu: diagonals, batches, non-contiguous, in place, dtypes", function(dev)
  local xc = T.randn(3, 4, 6, {seed = 71})
  local x = xc:to(dev)
  local out = {}
  for _, k in ipairs({-2, -1, 0, 1, 3, 100, -100}) do
    out[#out + 1] = x:tril(k)
    out[#out + 1] = x:triu(k)
    out[#out + 1] = x:transpose(2, 3):tril(k)
  end
  local y = x:clone()
  y:triu_(1)
  out[#out + 1] = y
  out[#out + 1] = dl.arange(24):view(4, 6):to(dev):tril()
  out[#out + 1] = xc:gt(0):to(dev):triu(-1)
  out[#out + 1] = dl.zeros(0, 3):to(dev):tril()
  return out
end)

-- --- joining, splitting, rearranging -------------------------------------------------------

T.cuda_case("cat and stack: mixed sizes, dim -1, promotion, non-contiguous", function(dev)
  local ac, bc = T.randn(2, 3, {seed = 73}), T.randn(2, 5, {seed = 79})
  local a, b = ac:to(dev), bc:to(dev)
  local c = dl.arange(6):view(3, 2):to(dev)
  return {
    dl.cat({a, b}, 2), dl.cat({a, b, a}, -1), dl.cat({a, a:t():t()}), dl.cat({a:t(), c}),
    dl.cat({dl.zeros(0):to(dev), a}), dl.cat({a, dl.zeros(2, 0):to(dev)}, 2),
    dl.stack({a, a:flip(1)}), dl.stack({a, a}, -1), dl.stack({c, c:flip(1)}, 2),
    dl.cat({ac:gt(0):to(dev), bc:gt(0):to(dev)}, 2),
  }
end)

-- (each leaf used once, so no gradient accumulation is involved)
T.cuda_case("cat and stack gradients", function(dev)
  local other = T.randn(2, 5, {seed = 83}):to(dev)
  return {
    grad_on(dev, T.randn(2, 3, {seed = 89}), function(t) return dl.cat({other, t, other}, 2) end),
    grad_on(dev, T.randn(3, 2, {seed = 91}), function(t) return dl.cat({t:t(), other}, -1) end),
    grad_on(dev, T.randn(2, 5, {seed = 97}), function(t) return dl.stack({other, t:t():t()}, 3) end),
  }
end)

T.cuda_case("split, chunk, unbind, narrow, expand, t[i]", function(dev)
  local x = T.randn(7, 4, {seed = 101}):to(dev)
  local out = {x:split(3), x:split({2, 5}), x:chunk(3, 2), x:t():chunk(2), x:unbind(2)}
  out[#out + 1] = x:narrow(1, 2, 3)
  out[#out + 1] = x:t():narrow(2, 5, 3):contiguous()
  out[#out + 1] = x[3]
  out[#out + 1] = x[-1]
  out[#out + 1] = x[2][4]
  out[#out + 1] = T.randn(1, 4, {seed = 103}):to(dev):expand(3, 4):contiguous()
  return out
end)

T.cuda_case("index assignment t[i] = v", function(dev)
  local x = T.randn(5, 3, {seed = 107}):to(dev)
  x[2] = 7
  x[-1] = T.randn(3, {seed = 109}):to(dev)
  local y = dl.zeros(4, {dtype = dl.int64}):to(dev)
  y[3] = 5
  return {x, y}
end)

T.cuda_case("flip and roll", function(dev)
  local x = T.randn(3, 4, 5, {seed = 113}):to(dev)
  local xi = dl.arange(12):view(3, 4):to(dev)
  return {
    x:flip(1), x:flip({2, 3}), x:transpose(1, 3):flip(-1), xi:flip(1, 2),
    x:roll(2, 1), x:roll({1, -2}, {2, 3}), x:roll(7), xi:t():roll(1, 2),
    dl.arange(12):view(3, 4):gt(5):to(dev):roll(-1, 1),
  }
end)

T.cuda_case("flip and roll gradients", function(dev)
  return {
    grad_on(dev, T.randn(3, 4, {seed = 127}), function(t) return t:flip(1, 2) end),
    grad_on(dev, T.randn(3, 4, {seed = 131}), function(t) return t:roll({1, 3}, {1, 2}) end),
  }
end)

-- --- padding ---------------------------------------------------------------------------------

T.cuda_case("pad: every mode, 1 to 3 dims, crops, non-contiguous, int64", function(dev)
  local x1, x2 = T.randn(2, 3, 6, {seed = 137}):to(dev), T.randn(2, 3, 5, 6, {seed = 139}):to(dev)
  local x3 = T.randn(1, 2, 4, 5, 3, {seed = 149}):to(dev)
  local out = {}
  for _, mode in ipairs({"constant", "reflect", "replicate", "circular"}) do
    out[#out + 1] = F.pad(x1, {2, 3}, {mode = mode})
    out[#out + 1] = F.pad(x2, {1, 2, 3, 1}, {mode = mode})
    out[#out + 1] = F.pad(x2:transpose(3, 4), {2, 0, 1, 1}, {mode = mode})
    out[#out + 1] = F.pad(x3, {1, 1, 2, 0, 1, 2}, {mode = mode})
    out[#out + 1] = F.pad(dl.arange(12):view(1, 2, 6):to(dev), {2, 1}, {mode = mode})
  end
  out[#out + 1] = F.pad(x2, {-1, 2, 1, -2}, {value = 4.5})
  out[#out + 1] = F.pad(x1, {-1, -2}, {mode = "reflect"})
  return out
end)

T.cuda_case("pad gradients, every mode", function(dev)
  local out = {}
  for _, mode in ipairs({"constant", "reflect", "replicate", "circular"}) do
    out[#out + 1] = grad_on(dev, T.randn(2, 3, 5, 6, {seed = 151}), function(t)
      return F.pad(t, {2, 3, 3, 1}, {mode = mode})
    end)
    out[#out + 1] = grad_on(dev, T.randn(2, 3, 6, {seed = 157}):double(), function(t)
      return F.pad(t, {3, 4}, {mode = mode})
    end)
  end
  return out
end)

-- --- bad input on both devices ----------------------------------------------------------------

T.case("out-of-range indices give the CPU's message on both devices", function()
  for _, dev in ipairs(T.devices()) do
    local x = T.randn(5, 7, {seed = 163}):to(dev)
    T.raises(function() x:index_select(1, I({2, 6}):to(dev)) end,
             "index_select: index 6 is out of range for dimension 1 of size 5")
    T.raises(function() x:index_select(2, I({-1}):to(dev)) end, "out of range for dimension 2")
    T.raises(function() x:gather(2, I({{1, 8}}):to(dev)) end,
             "gather: index 8 is out of range for dimension 2 of size 7")
    T.raises(function() x:clone():scatter_(1, I({{6}}):to(dev), 1.0) end,
             "scatter: index 6 is out of range for dimension 1 of size 5")
    T.raises(function() x:clone():scatter_add_(2, I({{1, 9}}):to(dev), x) end,
             "scatter_add: index 9 is out of range for dimension 2 of size 7")
    T.raises(function() dl.one_hot(I({1, 5}):to(dev), 3) end,
             "one_hot: class 5 is out of range (classes are 1 to 3)")
    T.raises(function() x:index_fill(1, I({7}):to(dev), 0) end, "out of range")
    T.raises(function() x:topk(8, 1) end, "topk: k (8) is out of range")
    -- nothing was written, and the device still works after the errors
    local got, want = x:index_select(1, I({5}):to(dev)):cpu():view(7), x[5]:cpu()
    T.eq((got - want):abs():max():item(), 0)
  end
end)

if T.cuda then
  T.case("a CPU index with CUDA data is refused, naming both devices", function()
    local x = T.randn(5, 7, {seed = 167}):to("cuda")
    T.raises(function() x:index_select(1, I({1, 2})) end, "cpu")
    T.raises(function() x:gather(1, I({{1}})) end, "cuda")
    T.raises(function() x:masked_select(dl.tensor({true, false, true, true, false, true, true})) end,
             "expected all tensors on one device")
  end)
end

T.done()
