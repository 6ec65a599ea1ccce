-- test_reduce_cuda.lua - the reduction family on CUDA against the CPU: every
-- reduction with dim, keepdim, several dims and all dims; contiguous,
-- transposed and expanded inputs; float32/float64/int64/bool; sizes 0, 1, 7,
-- 1000, 1e6 and a 4096x4096 matrix along each dim; NaN rules of max/argmax;
-- scans, median; gradients through each op compared on both devices.
local T = require "testlib"
T.require_cuda()

-- the inputs of one case, built on the CPU, then moved
local function inputs(dev, seed)
  local x = T.randn(5, 6, 7, {seed = seed})
  local e = T.randn(5, 1, 7, {seed = seed + 1})
  return { -- in a fixed order
    {"contiguous", x:to(dev)},
    {"transposed", x:transpose(1, 3):to(dev):transpose(1, 3)}, -- a non-contiguous view on dev
    {"expanded", e:to(dev):expand(5, 6, 7)},
  }
end

local dims = {{1}, {2}, {3}, {-1}, {1, 3}, {2, 3}, {1, 2}, {1, 2, 3}}

-- op(x, dims, keepdim) over every input kind, dims list and keepdim
local function sweep(name, op, rtol, atol)
  T.cuda_case(name, function(dev)
    local out = {}
    for _, kx in ipairs(inputs(dev, 7)) do
      local kind, x = kx[1], kx[2]
      out[kind .. ".all"] = op(x, nil, false)
      for i, d in ipairs(dims) do
        out[kind .. "." .. i] = op(x, d, false)
        out[kind .. "." .. i .. "k"] = op(x, d, true)
      end
    end
    return out
  end, rtol, atol)
end

local function with_dims(method)
  return function(x, d, keep)
    if d == nil then return x[method](x) end
    return x[method](x, d, keep)
  end
end

sweep("sum", with_dims("sum"))
sweep("mean", with_dims("mean"))
sweep("prod", function(x, d, keep)
  x = x * 0.5 + 1 -- keep products in range
  if d == nil then return x:prod() end
  local r = x
  for i = #d, 1, -1 do r = r:prod(d[i], keep) end
  return r
end, 1e-5, 1e-6)
sweep("var", function(x, d, keep)
  if d == nil then return {x:var(), x:var(nil, {unbiased = false})} end
  return {x:var(d, true, keep), x:var(d, false, keep), x:var(d, {correction = 2, keepdim = keep})}
end)
sweep("std", function(x, d, keep)
  if d == nil then return {x:std(), x:std(nil, {unbiased = false})} end
  return {x:std(d, true, keep), x:std(d, false, keep)}
end)
sweep("norm", function(x, d, keep)
  local r = {}
  for _, p in ipairs({1, 2, math.huge, -math.huge, 3, 0, 0.5}) do
    r[#r + 1] = d == nil and x:norm(p) or x:norm(p, d, keep)
  end
  return r
end)
sweep("logsumexp", function(x, d, keep)
  if d == nil then return x:logsumexp({1, 2, 3}) end
  return x:logsumexp(d, keep)
end)
sweep("amax amin", function(x, d, keep)
  if d == nil then return {x:amax(), x:amin()} end
  return {x:amax(d, keep), x:amin(d, keep)}
end, 0, 0)

T.cuda_case("max min argmax argmin with a dim", function(dev)
  local out = {}
  for _, kx in ipairs(inputs(dev, 11)) do
    local kind, x = kx[1], kx[2]
    for d = -3, 3 do
      if d ~= 0 then
        for _, keep in ipairs({false, true}) do
          local v, i = x:max(d, keep)
          local w, j = x:min(d, keep)
          out[#out + 1] = {kind, v, i, w, j, x:argmax(d, keep), x:argmin(d, keep)}
        end
      end
    end
    out[#out + 1] = {x:max(), x:min(), x:argmax(), x:argmin()}
  end
  return out
end, 0, 0)

T.cuda_case("max/argmax: NaN wins, ties take the first index", function(dev)
  local nan = 0 / 0
  local x = dl.tensor({{1, nan, 3, nan}, {2, 2, 1, 2}, {-1, -1, -1, -1}, {0, 5, 5, 1}}):to(dev)
  local inf = dl.tensor({-math.huge, -math.huge, -math.huge}):to(dev)
  local v, i = x:max(2)
  local w, j = x:min(1)
  return {v, i, w, j, x:argmax(), x:argmin(), x:argmax(2), x:argmin(2), x:max(), inf:argmax(),
          inf:max(), x:amax(2), x:amin(1)}
end, 0, 0)

T.cuda_case("int64 and bool reductions", function(dev)
  dl.manual_seed(5)
  local i = dl.randint(-50, 50, {6, 9}):to(dev)
  local b = i:gt(0)
  local big = dl.tensor({math.maxinteger, 1, 3}):to(dev)
  return {i:sum(), i:sum(1), i:sum(2, true), i:prod(1), i:max(), i:min(), i:argmax(), i:argmin(2),
          {i:max(1)}, {i:min(2)}, i:amax(1), i:amin(2), b:sum(), b:sum(2), b:all(), b:any(),
          b:all(1), b:any(2), b:all(2, true), big:sum(), i:t():sum(1), i:median(), {i:median(2)},
          i:cumsum(2), i:cumprod(1), b:cumsum(1)}
end, 0, 0)

T.cuda_case("float64", function(dev)
  local x = T.randn(30, 40, {seed = 13}):double():to(dev)
  return {x:sum(), x:sum(1), x:mean(2), x:var(1), x:std(2, false), x:norm(3, 1), x:logsumexp(2),
          {x:max(1)}, x:argmin(2), x:cumsum(1), x:cumprod(2), {x:median(1)}, x:prod(2)}
end, 1e-12, 1e-12)

T.cuda_case("sizes 0, 1, 7, 1000", function(dev)
  local out = {}
  for _, n in ipairs({1, 7, 1000}) do
    local x = T.randn(n, {seed = n}):to(dev)
    out[#out + 1] = {x:sum(), x:mean(), x:var(), x:norm(), x:logsumexp(1), x:amax(), x:argmax(),
                     x:cumsum(1), x:median(), x:all(), x:any()}
  end
  local z = dl.zeros(0, 3):to(dev)
  out[#out + 1] = {z:sum(), z:sum(1), z:sum(2), z:prod(1), z:mean(1), z:norm(), z:norm(2, 1),
                   z:all(), z:any(), z:all(1), z:cumsum(1), z:logsumexp(1), z:amax(2)}
  local s = dl.tensor(2.5):to(dev)
  out[#out + 1] = {s:sum(), s:max(), s:argmax(), s:median(), s:norm()}
  return out
end)

T.cuda_case("1e6 elements", function(dev)
  local x = T.randn(3, 1000000, {seed = 41}):to(dev)
  local f = dl.full({1000000}, 0.1):to(dev)
  return {x:sum(), x:mean(), x:var(), x:std(), x:norm(), x:norm(1), x:logsumexp(1), x:amax(),
          x:argmax(), x:argmin(), x:max(), f:sum(), x:sum(2), x:sum(1), x:cumsum(2), x:median(),
          {x:median(2)}, dl.arange(1000000):to(dev):sum()}
end, 1e-6, 1e-6)

T.cuda_case("4096x4096 along each dim", function(dev)
  local x = T.randn(4096, 4096, {seed = 17}):to(dev)
  return {x:sum(1), x:sum(2), x:sum(), x:t():sum(1), x:amax(1), x:argmax(2)}
end, 1e-6, 1e-4)

T.cuda_case("cumsum cumprod along each dim", function(dev)
  local out = {}
  for _, kx in ipairs(inputs(dev, 19)) do
    local kind, x = kx[1], kx[2]
    local y = x * 0.3 + 1
    for d = 1, 3 do out[#out + 1] = {kind, x:cumsum(d), y:cumprod(d), x:cumsum(-d)} end
  end
  out[#out + 1] = T.randn(100, 1, {seed = 3}):to(dev):cumsum(2)
  return out
end)

T.cuda_case("median", function(dev)
  local out = {}
  dl.manual_seed(167) -- the same draws for both devices
  local r = dl.randint(0, 5, {9, 8, 7}):float():to(dev) -- many ties
  for _, kx in ipairs(inputs(dev, 23)) do
    local kind, x = kx[1], kx[2]
    out[#out + 1] = x:median()
    for d = 1, 3 do out[#out + 1] = {kind, x:median(d)} end
  end
  for d = 1, 3 do out[#out + 1] = {r:median(d, true)} end
  local nan = 0 / 0
  local q = dl.tensor({{3, nan, 1, nan}, {0, -0.0, 0, 1}, {2, 2, 2, 2}}):to(dev)
  out[#out + 1] = {q:median(2)}
  out[#out + 1] = q:median()
  out[#out + 1] = dl.tensor({-0.0, 0.0, 0.0}):to(dev):median()
  return out
end, 0, 0)

-- gradients: fn(x) on each device, x's grad compared
local function grad_case(name, fn, rtol, atol)
  T.cuda_case(name .. " backward", function(dev)
    local x = T.randn(4, 5, 6, {seed = 31}):to(dev):requires_grad_()
    local y = fn(x)
    y:sum():backward()
    return x.grad
  end, rtol, atol)
end

grad_case("sum", function(x) return x:sum({1, 3}) * 2 end)
grad_case("mean", function(x) return x:mean(2) end)
grad_case("prod", function(x) return (x * 0.5 + 1):prod(2) end)
grad_case("var", function(x) return x:var(3) end)
grad_case("std", function(x) return x:std({1, 2}) end)
grad_case("norm", function(x) return x:norm(2, 3):sum() + x:norm(3, 1):sum() + x:norm(1) end)
grad_case("logsumexp", function(x) return x:logsumexp(2) end)
grad_case("amax", function(x) return x:amax(3) end)
grad_case("max dim", function(x) local v = x:max(2) return v end)
grad_case("max all", function(x) return x:max() end)
grad_case("median dim", function(x) local v = x:median(3) return v end)
grad_case("cumsum", function(x) return x:cumsum(2) end)
grad_case("cumprod", function(x) return (x * 0.5 + 1):cumprod(3) end)

T.done()
