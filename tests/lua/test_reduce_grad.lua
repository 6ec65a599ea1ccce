-- test_reduce_grad.lua - backward formulas of the reduction family: known
-- values, float64 finite-difference checks over dims/keepdim/views, ties and
-- zeros, grad_fn names, dtypes, empty and 0-dim inputs, what never records,
-- and saved tensors modified in place.
local T = require "testlib"

local f64 = {dtype = dl.float64}
local function leaf(t)
  if dl.is_tensor(t) then return t:double():requires_grad_() end
  return dl.tensor(t, f64):requires_grad_()
end
local function rand(...) return dl.randn(...):double():requires_grad_() end

-- Float64 finite differences (T.gradcheck) of fn at the leaf x, each element
-- within 1e-5 + 1e-4 * |numeric|.
local function fdcheck(fn, x, what) return T.gradcheck(fn, {x}, {atol = 1e-5, rtol = 1e-4}, what) end

T.case("sum and mean: known values", function()
  local x = leaf({{1, 2, 3}, {4, 5, 6}})
  T.tensor_eq(T.grad_of(x, x:sum(2), dl.tensor({1, 2}, f64)), {{1, 1, 1}, {2, 2, 2}})
  T.tensor_eq(T.grad_of(x, x:sum()), {{1, 1, 1}, {1, 1, 1}})
  T.tensor_eq(T.grad_of(x, x:sum(1, true), dl.tensor({{1, 2, 3}}, f64)), {{1, 2, 3}, {1, 2, 3}})
  T.tensor_eq(T.grad_of(x, x:mean()), {{1 / 6, 1 / 6, 1 / 6}, {1 / 6, 1 / 6, 1 / 6}})
  T.tensor_eq(T.grad_of(x, x:mean(1), dl.tensor({2, 4, 6}, f64)), {{1, 2, 3}, {1, 2, 3}})
  T.tensor_eq(T.grad_of(x, x:mean({1, 2}, true), dl.tensor({{12}}, f64)), {{2, 2, 2}, {2, 2, 2}})
end)

T.case("sum, mean: finite differences over dims, keepdim and views", function()
  local x = rand(2, 3, 4)
  for _, dims in ipairs({{}, {1}, {2}, {3}, {-1}, {1, 3}, {2, 3}, {1, 2, 3}}) do
    for _, kd in ipairs({false, true}) do
      local d = #dims > 0 and dims or nil
      fdcheck(function(a) return a:sum(d, kd) end, x, "sum")
      fdcheck(function(a) return a:mean(d, kd) end, x, "mean")
    end
  end
  fdcheck(function(a) return a:transpose(1, 3):sum(2) end, x, "sum of a transposed view")
  fdcheck(function(a) return a:narrow(3, 2, 2):mean({1, 3}) end, x, "mean of a narrowed view")
  local v = rand(1, 4)
  fdcheck(function(a) return a:expand(3, 4):sum(1) end, v, "sum of an expanded view")
end)

T.case("prod: known values, zeros", function()
  local x = leaf({2, 3, 4})
  T.tensor_eq(T.grad_of(x, x:prod()), {12, 8, 6})
  local z1 = leaf({2, 0, 4})
  T.tensor_eq(T.grad_of(z1, z1:prod()), {0, 8, 0})
  local z2 = leaf({0, 3, 0})
  T.tensor_eq(T.grad_of(z2, z2:prod()), {0, 0, 0})
  local m = leaf({{2, 0, 4}, {1, 2, 3}, {0, 5, 0}})
  T.tensor_eq(T.grad_of(m, m:prod(2), dl.tensor({1, 2, 1}, f64)), {{0, 8, 0}, {12, 6, 4}, {0, 0, 0}})
  T.tensor_eq(T.grad_of(m, m:prod(1), dl.ones(3, f64)), {{0, 10, 0}, {0, 0, 0}, {2, 0, 12}})
  local one = leaf({{0}, {3}})
  T.tensor_eq(T.grad_of(one, one:prod(2), dl.tensor({5, 7}, f64)), {{5}, {7}})
end)

T.case("prod: finite differences with and without zeros", function()
  local x = rand(3, 4)
  fdcheck(function(a) return a:prod() end, x, "prod")
  fdcheck(function(a) return a:prod(1) end, x, "prod dim 1")
  fdcheck(function(a) return a:prod(2, true) end, x, "prod dim 2 keepdim")
  fdcheck(function(a) return a:t():prod(1) end, x, "prod of a transposed view")
  fdcheck(function(a) return a:prod({1, 2}, true) end, x, "prod over a list of dims")
  local z = leaf({{1.5, 0, -2, 0.5}, {0.3, 1.2, 0, -0.7}, {0.9, -1.1, 1.3, 0.8}})
  fdcheck(function(a) return a:prod(2) end, z, "prod dim 2 with zeros")
  fdcheck(function(a) return a:prod(1) end, z, "prod dim 1 with zeros")
  local z1 = leaf({1.5, 0, -2, 0.5})
  fdcheck(function(a) return a:prod() end, z1, "prod with one zero")
end)

T.case("amax, amin, max, min: ties split evenly or go to the index", function()
  local x = leaf({{1, 3, 3}, {5, 2, 5}})
  T.tensor_eq(T.grad_of(x, x:amax()), {{0, 0, 0}, {0.5, 0, 0.5}})
  T.tensor_eq(T.grad_of(x, x:amax(2), dl.tensor({1, 4}, f64)), {{0, 0.5, 0.5}, {2, 0, 2}})
  T.tensor_eq(T.grad_of(x, x:amin(1, true), dl.tensor({{1, 2, 3}}, f64)), {{1, 0, 3}, {0, 2, 0}})
  T.tensor_eq(T.grad_of(x, x:max()), {{0, 0, 0}, {0.5, 0, 0.5}})
  T.tensor_eq(T.grad_of(x, x:min()), {{1, 0, 0}, {0, 0, 0}})
  local v, i = x:max(2)
  T.eq(i.requires_grad, false)
  T.tensor_eq(i, {2, 1})
  T.tensor_eq(T.grad_of(x, v, dl.tensor({1, 4}, f64)), {{0, 1, 0}, {4, 0, 0}})
  local mv = x:min(1, true)
  T.tensor_eq(T.grad_of(x, mv, dl.tensor({{1, 2, 3}}, f64)), {{1, 0, 3}, {0, 2, 0}})
  local y = leaf({2, 2, 2, 2})
  T.tensor_eq(T.grad_of(y, y:max()), {0.25, 0.25, 0.25, 0.25})
  T.tensor_eq(T.grad_of(y, y:amin()), {0.25, 0.25, 0.25, 0.25})
  -- a NaN maximum: the gradient goes to the NaNs (PyTorch's evenly_distribute_backward)
  local n = leaf({1, 0 / 0, 3, 0 / 0})
  T.tensor_eq(T.grad_of(n, n:max()), {0, 0.5, 0, 0.5})
end)

T.case("amax, amin, max, min: finite differences (no ties)", function()
  local x = leaf(dl.arange(24):double():mul(0.37):sin():view(2, 3, 4))
  for _, d in ipairs({1, 2, 3, -1}) do
    for _, kd in ipairs({false, true}) do
      fdcheck(function(a) return a:amax(d, kd) end, x, "amax")
      fdcheck(function(a) return a:amin(d, kd) end, x, "amin")
      fdcheck(function(a) return (a:max(d, kd)) end, x, "max dim")
      fdcheck(function(a) return (a:min(d, kd)) end, x, "min dim")
    end
  end
  fdcheck(function(a) return a:amax({1, 3}) end, x, "amax over a list of dims")
  fdcheck(function(a) return a:max() end, x, "max")
  fdcheck(function(a) return a:min() end, x, "min")
  fdcheck(function(a) return (a:permute(3, 1, 2):max(1)) end, x, "max of a permuted view")
end)

T.case("var and std: known values and finite differences", function()
  local x = leaf({1, 2, 3, 4})
  T.tensor_eq(T.grad_of(x, x:var()), {-1, -1 / 3, 1 / 3, 1}, 1e-12)
  T.tensor_eq(T.grad_of(x, x:var(false)), {-0.75, -0.25, 0.25, 0.75}, 1e-12)
  local s = math.sqrt(5 / 3)
  T.tensor_eq(T.grad_of(x, x:std()), {-1.5 / 3 / s, -0.5 / 3 / s, 0.5 / 3 / s, 1.5 / 3 / s}, 1e-12)
  local c = leaf({{2, 2}, {1, 3}})
  T.tensor_eq(T.grad_of(c, c:std(2), dl.ones(2, f64)), {{0, 0}, {-1 / math.sqrt(2), 1 / math.sqrt(2)}}, 1e-12)
  local r = rand(3, 4)
  for _, d in ipairs({1, 2}) do
    for _, kd in ipairs({false, true}) do
      fdcheck(function(a) return a:var(d, true, kd) end, r, "var")
      fdcheck(function(a) return a:std(d, false, kd) end, r, "std")
    end
  end
  fdcheck(function(a) return a:var() end, r, "var over everything")
  fdcheck(function(a) return a:std({correction = 0}) end, r, "std correction 0")
  fdcheck(function(a) return a:var({1, 2}, {correction = 2}) end, r, "var correction 2")
  fdcheck(function(a) return a:t():std(1) end, r, "std of a transposed view")
end)

T.case("norm: every p, zero input", function()
  local x = leaf({3, -4})
  T.tensor_eq(T.grad_of(x, x:norm()), {0.6, -0.8}, 1e-12)
  T.tensor_eq(T.grad_of(x, x:norm(1)), {1, -1})
  T.tensor_eq(T.grad_of(x, x:norm(math.huge)), {0, -1})
  T.tensor_eq(T.grad_of(x, x:norm(-math.huge)), {1, 0})
  T.tensor_eq(T.grad_of(x, x:norm(0)), {0, 0})
  local z = leaf(dl.zeros(3))
  T.tensor_eq(T.grad_of(z, z:norm()), {0, 0, 0})
  T.tensor_eq(T.grad_of(z, z:norm(3)), {0, 0, 0})
  local t = leaf({2, -2, 1})
  T.tensor_eq(T.grad_of(t, t:norm(math.huge)), {0.5, -0.5, 0})
  local r = leaf(dl.arange(12):double():mul(0.61):sin():add(0.05):view(3, 4))
  for _, p in ipairs({2, 1, 3, 1.5, 0.5, -1, math.huge, -math.huge, "fro"}) do
    fdcheck(function(a) return a:norm(p) end, r, "norm p=" .. tostring(p))
    fdcheck(function(a) return a:norm(p, 2) end, r, "norm dim p=" .. tostring(p))
    fdcheck(function(a) return a:norm(p, 1, true) end, r, "norm keepdim p=" .. tostring(p))
  end
  fdcheck(function(a) return a:t():norm(2, 2) end, r, "norm of a transposed view")
end)

T.case("logsumexp", function()
  local x = leaf({0, math.log(3)})
  T.tensor_eq(T.grad_of(x, x:logsumexp(1)), {0.25, 0.75}, 1e-12)
  local r = rand(3, 4)
  fdcheck(function(a) return a:logsumexp(2) end, r, "logsumexp")
  fdcheck(function(a) return a:logsumexp({1, 2}, true) end, r, "logsumexp keepdim")
  fdcheck(function(a) return a:t():logsumexp(1) end, r, "logsumexp of a view")
  -- trailing contiguous dims (the fused CPU backward) and other layouts (op by op)
  local x3 = rand(3, 4, 5)
  for _, dims in ipairs({{}, {3}, {-1}, {2, 3}, {1}, {1, 3}, {2}}) do
    for _, kd in ipairs({false, true}) do
      local d = #dims > 0 and dims or nil
      fdcheck(function(a) return a:logsumexp(d, kd) end, x3, "logsumexp dims " .. T.fmt(dims))
    end
  end
  fdcheck(function(a) return a:logsumexp(2) * a:sum(2) end, r, "logsumexp in a product")
end)

T.case("logsumexp backward: the fused rows equal the op-by-op formula to the bit", function()
  for _, dt in ipairs({dl.float32, dl.float64}) do
    local x = dl.randn({37, 1500}, {dtype = dt}) * 5
    local flat = x:view(-1)
    for k = 1, 1500 do flat[k] = -math.huge end -- row 1 all -inf, then a +inf, a NaN, a -inf
    flat[1502], flat[3003], flat[4504] = math.huge, 0 / 0, -math.huge
    local g = dl.randn({37}, {dtype = dt})
    local function grad(a) -- a leaf with x's values
      return dl.autograd.grad(a:logsumexp(a:dim()), {a}, {grad_outputs = g})[1]
    end
    local fused = grad(x:clone():requires_grad_())
    local formula = g:view(37, 1) * (x - x:logsumexp(2, true)):exp()
    T.same_bits(fused, formula, "fused vs op by op " .. tostring(dt))
    -- the same values as a non-contiguous leaf take the op-by-op backward
    local xt = x:t():contiguous():t():requires_grad_()
    T.truthy(not xt:is_contiguous(), "a strided leaf")
    T.close(grad(xt):narrow(1, 4, 34), fused:narrow(1, 4, 34), 1e-6, 0, "strided leaf " .. tostring(dt))
    local v = fused:tolist()
    T.truthy(v[1][1] ~= v[1][1], "an all -inf row gives NaN (as torch 1.13)")
    T.truthy(v[2][2] ~= v[2][2], "a +inf element's grad is NaN")
    T.eq(v[2][1], 0.0, "the others of a +inf row get 0")
    -- a full reduction (one long row) and thread counts
    local xf = x:narrow(1, 5, 30):clone():requires_grad_()
    T.same_across_threads(function()
      return {dl.autograd.grad(xf:logsumexp(), {xf})[1], grad(x:clone():requires_grad_())}
    end, {1, 2}, "logsumexp backward")
  end
end)

T.case("cumsum and cumprod", function()
  local x = leaf({1, 2, 3})
  T.tensor_eq(T.grad_of(x, x:cumsum(1), dl.tensor({1, 1, 1}, f64)), {3, 2, 1})
  local p = leaf({2, 3, 4})
  T.tensor_eq(T.grad_of(p, p:cumprod(1), dl.ones(3, f64)), {16, 10, 6})
  local z = leaf({2, 0, 4})
  T.tensor_eq(T.grad_of(z, z:cumprod(1), dl.ones(3, f64)), {1, 10, 0})
  local zz = leaf({0, 3, 0})
  T.tensor_eq(T.grad_of(zz, zz:cumprod(1), dl.ones(3, f64)), {4, 0, 0})
  local r = rand(3, 4)
  for _, d in ipairs({1, 2, -1}) do
    fdcheck(function(a) return a:cumsum(d) end, r, "cumsum")
    fdcheck(function(a) return a:cumprod(d) end, r, "cumprod")
  end
  fdcheck(function(a) return a:t():cumprod(2) end, r, "cumprod of a view")
  local zr = leaf({{1.5, 0, -2, 0.5}, {0, 1.2, 0, -0.7}, {0.9, -1.1, 1.3, 0.8}})
  fdcheck(function(a) return a:cumprod(2) end, zr, "cumprod with zeros")
  fdcheck(function(a) return a:cumprod(1) end, zr, "cumprod with zeros, dim 1")
  local g = dl.autograd.grad(zr:cumprod(2), zr, {grad_outputs = dl.ones(3, 4, f64)})
  T.eq(g:isnan():any():item(), false, "no NaN with zeros")
  -- a dtype option: the gradient comes back in the input's dtype
  local h = dl.tensor({1, 2, 3}, {dtype = dl.float32}):requires_grad_()
  h:cumsum(1, dl.float64):backward(dl.ones(3, f64))
  T.eq(h.grad.dtype, dl.float32)
  T.tensor_eq(h.grad, {3, 2, 1})
end)

T.case("median", function()
  local x = leaf({{3, 1, 2}, {6, 5, 4}})
  local v = x:median(2)
  T.tensor_eq(T.grad_of(x, v, dl.tensor({1, 2}, f64)), {{0, 0, 1}, {0, 2, 0}})
  T.tensor_eq(T.grad_of(x, x:median()), {{1, 0, 0}, {0, 0, 0}})
  local t = leaf({1, 2, 2, 3})
  T.tensor_eq(T.grad_of(t, t:median()), {0, 0.5, 0.5, 0})
  local r = leaf(dl.arange(12):double():mul(0.71):sin():view(3, 4))
  fdcheck(function(a) return (a:median(1)) end, r, "median dim 1")
  fdcheck(function(a) return (a:median(2, true)) end, r, "median dim 2 keepdim")
  fdcheck(function(a) return a:median() end, r, "median")
end)

T.case("grad_fn names", function()
  local x = rand(2, 3)
  local names = {
    {x:sum(), "SumBackward"}, {x:mean(1), "MeanBackward"}, {x:prod(), "ProdBackward"},
    {x:amax(), "AmaxBackward"}, {x:amin(1), "AminBackward"}, {x:max(), "MaxBackward"},
    {(x:max(1)), "MaxBackward"}, {x:min(), "MinBackward"}, {(x:min(2)), "MinBackward"},
    {x:var(), "VarBackward"}, {x:std(1), "StdBackward"}, {x:norm(), "NormBackward"},
    {x:logsumexp(1), "LogsumexpBackward"}, {x:cumsum(1), "CumsumBackward"},
    {x:cumprod(2), "CumprodBackward"}, {x:median(), "MedianBackward"},
    {(x:median(1)), "MedianBackward"},
  }
  for _, p in ipairs(names) do
    T.eq(p[1].grad_fn, p[2])
    T.eq(p[1].requires_grad, true, p[2])
  end
end)

T.case("integer results, indices and no-grad never record", function()
  local x = rand(2, 3)
  T.eq(x:argmax().requires_grad, false)
  T.eq(x:argmin(1).requires_grad, false)
  T.eq(x:all().requires_grad, false)
  T.eq(x:any(1).requires_grad, false)
  local _, i = x:max(1)
  T.eq(i.requires_grad, false)
  T.eq(x:sum({dtype = dl.int64}).requires_grad, false)
  T.eq(x:cumsum(1, dl.int32).requires_grad, false)
  local y = dl.no_grad(function() return x:sum() end)
  T.eq(y.requires_grad, false)
  T.eq(y.grad_fn, nil)
  T.eq(dl.tensor({1, 2}):sum().requires_grad, false)
  T.eq(dl.randn(3):sum().grad_fn, nil)
end)

T.case("dtypes: gradients come back in the input's dtype", function()
  local x = dl.tensor({1, 2, 3}, {dtype = dl.float32}):requires_grad_()
  x:sum({dtype = dl.float64}):backward()
  T.eq(x.grad.dtype, dl.float32)
  T.tensor_eq(x.grad, {1, 1, 1})
  x.grad = nil
  x:mean({dtype = dl.float64}):backward()
  T.eq(x.grad.dtype, dl.float32)
  T.tensor_eq(x.grad, {1 / 3, 1 / 3, 1 / 3})
  x.grad = nil
  x:prod({dtype = dl.float64}):backward()
  T.tensor_eq(x.grad, {6, 3, 2})
  for _, dt in ipairs({dl.float16, dl.bfloat16}) do
    local h = dl.tensor({1, 2, 4}, {dtype = dt}):requires_grad_()
    h:norm():backward()
    T.eq(h.grad.dtype, dt)
    T.tensor_eq(h.grad, {1 / math.sqrt(21), 2 / math.sqrt(21), 4 / math.sqrt(21)}, 1e-2)
    h.grad = nil
    h:amax():backward()
    T.tensor_eq(h.grad, {0, 0, 1})
    h.grad = nil
    h:cumsum(1):backward(dl.ones(3, {dtype = dt}))
    T.tensor_eq(h.grad, {3, 2, 1})
  end
end)

T.case("empty and 0-dim inputs", function()
  local e = leaf(dl.zeros(0, 3))
  T.tensor_eq(T.grad_of(e, e:sum(1), dl.ones(3, f64)), dl.zeros(0, 3, f64))
  T.tensor_eq(T.grad_of(e, e:sum()), dl.zeros(0, 3, f64))
  T.tensor_eq(T.grad_of(e, e:prod(1), dl.ones(3, f64)), dl.zeros(0, 3, f64))
  T.tensor_eq(T.grad_of(e, (e:max(2)), dl.ones(0, f64)), dl.zeros(0, 3, f64))
  T.tensor_eq(T.grad_of(e, e:norm(2, 1), dl.ones(3, f64)), dl.zeros(0, 3, f64))
  T.tensor_eq(T.grad_of(e, e:cumprod(1), dl.ones(0, 3, f64)), dl.zeros(0, 3, f64))
  T.tensor_eq(T.grad_of(e, e:logsumexp(2), dl.ones(0, f64)), dl.zeros(0, 3, f64))
  local s = leaf(2.5)
  for _, f in ipairs({
    function(a) return a:sum() end, function(a) return a:mean(1) end,
    function(a) return a:prod() end, function(a) return a:amax() end,
    function(a) return (a:max(1)) end, function(a) return a:cumsum(1) end,
    function(a) return a:cumprod(1) end, function(a) return a:logsumexp(1) end,
    function(a) return a:norm() end, function(a) return (a:median(1)) end,
  }) do
    local g = T.grad_of(s, f(s))
    T.shape_eq(g, {})
    T.near(g:item(), 1)
  end
  T.near(T.grad_of(s, s:norm(1)):item(), 1)
  -- var of one element: N - correction = 0, PyTorch's nan
  T.truthy(T.grad_of(s, s:var()):isnan():item())
end)

T.case("saved tensors modified in place", function()
  local x = rand(2, 3)
  local b = x:clone()
  local y = b:prod(2)
  b:fill_(1)
  T.raises(function() y:backward(dl.ones(2, f64)) end, "modified by an in-place operation")
  local c = x:clone()
  local m = c:amax(1)
  dl.no_grad(function() m:fill_(0) end)
  T.raises(function() m:sum():backward() end, "AmaxBackward")
  local s = x:clone()
  local sd = s:std()
  s:fill_(2)
  T.raises(function() sd:backward() end, "modified by an in-place operation")
  -- sum saves nothing: writing into its input is fine
  local u = x:clone()
  local us = u:sum()
  u:fill_(3)
  us:backward()
  T.tensor_eq(x.grad, {{1, 1, 1}, {1, 1, 1}})
end)

T.case("bad input around backward", function()
  local x = rand(2, 3)
  T.raises(function() x:sum(1):backward(dl.ones(2, f64)) end, "gradient of shape")
  local _, i = x:max(2)
  T.raises(function() i:sum():backward() end, "does not require grad")
  T.raises(function() x:amax(1):backward() end, "one-element")
  local p = x:prod(1)
  dl.no_grad(function() x:fill_(2) end)
  T.raises(function() p:backward(dl.ones(3, f64)) end, "ProdBackward")
  local n = x:norm()
  dl.no_grad(function() x:fill_(1) end)
  T.raises(function() n:backward() end, "modified by an in-place operation")
  T.raises(function() dl.autograd.grad(x:sum(), dl.ones(2, {requires_grad = true})) end, "not used")
end)

T.case("second backward needs retain_graph", function()
  local x = rand(3)
  local y = x:prod()
  y:backward({retain_graph = true})
  y:backward()
  local g = x.grad:clone()
  local z = x:logsumexp(1)
  z:backward()
  T.raises(function() z:backward() end, "second time")
  T.eq(g.shape[1], 3)
end)

T.case("chains of reductions", function()
  local x = rand(3, 4)
  fdcheck(function(a) return a:cumsum(2):amax(1):logsumexp(1) end, x, "cumsum amax logsumexp")
  fdcheck(function(a) return a:var(1, true, true):expand(3, 4):sum(2) end, x, "var expand sum")
  fdcheck(function(a) return (a:cumprod(1):max(2)) end, x, "cumprod max")
end)

T.done()
