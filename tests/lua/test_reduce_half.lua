-- test_reduce_half.lua - float16/bfloat16 reductions on the CPU read the
-- half storage directly (blocks converted in registers): every op must give
-- its float32 copy's result cast to the half type, bit for bit, over rows,
-- columns, the whole tensor, short rows side by side, reduced dims on both
-- sides of a kept one, tails and NaN/inf; and PyTorch 1.13's float32 result
-- cast to the half type within a half rounding.
local T = require "testlib"

local nan, inf = 0 / 0, math.huge

-- fn(x) of the half tensor x against fn(x:float()) cast to its dtype
local function same_as_float(x, fn, msg)
  local a, ai = fn(x)
  local b, bi = fn(x:float())
  if a then T.same_bits(a, b:to(x.dtype), msg) end
  if ai then T.same_bits(ai, bi, msg .. " (indices)") end
end

local NORMS = {2, 1, 0, inf, -inf, 0.5, 3}

-- every reduction over dims d (nil: all of them) of x
local function all_ops(x, d, tag)
  local function m(s) return s .. "(" .. tostring(d) .. ") " .. tag end
  for _, op in ipairs({"amax", "amin", "prod", "sum", "mean", "logsumexp"}) do
    same_as_float(x, function(t) return t[op](t, d) end, m(op))
  end
  for _, p in ipairs(NORMS) do
    same_as_float(x, function(t) return t:norm(p, d) end, m("norm p=" .. p))
  end
  same_as_float(x, function(t) return t:var(d) end, m("var"))
  same_as_float(x, function(t) return t:std(d, {correction = 0}) end, m("std"))
  if type(d) ~= "table" then
    for _, op in ipairs({"max", "min"}) do
      same_as_float(x, function(t) if d then return t[op](t, d) end return t[op](t) end, m(op))
    end
    for _, op in ipairs({"argmax", "argmin"}) do
      same_as_float(x, function(t) return nil, t[op](t, d) end, m(op))
    end
  end
end

for _, dt in ipairs({dl.float16, dl.bfloat16}) do
  local name = dt.name
  T.case(name .. ": a long row (chunks, tail), the whole tensor", function()
    dl.manual_seed(11)
    local v = dl.randn(123457):mul(0.02):add(1):to(dt)
    all_ops(v, nil, "long row")
    all_ops(v, 1, "long row")
  end)

  T.case(name .. ": rows and columns (slices, tails, wide columns)", function()
    dl.manual_seed(12)
    local m = dl.randn(300, 517):to(dt)
    all_ops(m, 1, "columns")
    all_ops(m, 2, "rows")
    all_ops(m:t(), 2, "transposed")
    local w = dl.randn(20, 3000):mul(0.1):add(1):to(dt) -- more columns than a fold block
    all_ops(w, 1, "wide columns")
  end)

  T.case(name .. ": short rows side by side, split reduced dims", function()
    dl.manual_seed(13)
    all_ops(dl.randn(4000, 5):to(dt), 2, "short rows")
    local t = dl.randn(6, 50, 7):to(dt)
    all_ops(t, {1, 3}, "dims {1, 3}")
    all_ops(t, {1, 2}, "dims {1, 2}")
    all_ops(t, 2, "middle dim")
  end)

  T.case(name .. ": NaN, inf, -inf and signed zeros", function()
    local rows = {
      {1, nan, 3, -2, 0, 5},
      {-inf, -inf, -inf, -inf, -inf, -inf},
      {inf, 1, 2, 3, 4, -1},
      {-inf, 2, inf, 0, 1, 2},
      {0, -0.0, 0, -0.0, 0, -0.0},
      {-0.0, 0, -0.0, 0, -0.0, 0},
      {nan, inf, -inf, nan, 1, 2},
      {7, 7, 7, 7, 7, 7},
    }
    local e = dl.tensor(rows, {dtype = dt})
    for _, d in ipairs({2, 1}) do all_ops(e, d, "edges") end
    all_ops(e, nil, "edges")
    -- and long rows with a NaN or an inf past the first chunk
    local l = dl.randn(3, 5000):to(dt)
    l[1][4500] = nan
    l[2][3000] = inf
    l[3][2000] = -inf
    all_ops(l, 2, "long edges")
    T.truthy(l:amax(2)[1]:item() ~= l:amax(2)[1]:item(), "a NaN row's max is NaN")
    T.eq(l:amax(2)[2]:item(), inf)
    T.eq(l:logsumexp(2)[2]:item(), inf)
    local _, i = l:max(2)
    T.eq(i[1]:item(), 4500)
    T.eq(i[2]:item(), 3000)
  end)

  T.case(name .. ": thread count does not change the bits", function()
    dl.manual_seed(14)
    local x = dl.randn(64, 40000):to(dt)
    local prev = dl.get_num_threads()
    dl.set_num_threads(1)
    local a, b = x:norm(3, 2), x:var()
    dl.set_num_threads(2)
    T.same_bits(x:norm(3, 2), a, "norm")
    T.same_bits(x:var(), b, "var")
    dl.set_num_threads(prev)
  end)
end

-- PyTorch 1.13 (float32 computation, cast to the half type)
local data = T.torch([==[
import torch
torch.manual_seed(3)
inputs, cases = [], []
def f32(x, op, dim, **kw):
    y = x.float()
    if op == "norm":
        return torch.linalg.vector_norm(y, ord=kw["p"], dim=dim).to(x.dtype), None
    if op in ("max", "min"):
        r = getattr(torch, op)(y, dim)
        return r.values.to(x.dtype), r.indices
    if op in ("argmax", "argmin"):
        return None, getattr(torch, op)(y, dim)
    if op in ("var", "std"):
        return getattr(torch, op)(y, dim, unbiased=kw["unbiased"]).to(x.dtype), None
    if dim is None:
        dim = tuple(range(x.dim())) if op == "logsumexp" else None
    r = getattr(torch, op)(y) if dim is None else getattr(torch, op)(y, dim)
    return r.to(x.dtype), None
for dt in (torch.float16, torch.bfloat16):
    for shape in ((37, 1100), (5, 3, 40), (2000,)):
        x = (torch.randn(shape) * 0.5 + 0.2).to(dt)
        inputs.append(x)
        dims = [None] + list(range(x.dim()))
        for d in dims:
            for op in ("amax", "amin", "prod", "logsumexp"):
                r, _ = f32(x, op, d)
                cases.append({"x": len(inputs), "op": op, "dim": d, "res": r})
            for p in (2, 1, float("inf"), 0.5):
                r, _ = f32(x, "norm", d, p=p)
                cases.append({"x": len(inputs), "op": "norm", "p": p, "dim": d, "res": r})
            for op in ("var", "std"):
                r, _ = f32(x, op, d, unbiased=True)
                cases.append({"x": len(inputs), "op": op, "dim": d, "res": r})
            if d is not None:
                for op in ("max", "min", "argmax", "argmin"):
                    r, i = f32(x, op, d)
                    cases.append({"x": len(inputs), "op": op, "dim": d, "res": r, "idx": i})
emit({"inputs": inputs, "cases": cases})
]==])

local X = {}
for i, rec in ipairs(data.inputs) do X[i] = T.from_torch(rec) end
local TOL = {float16 = {2e-3, 1e-3}, bfloat16 = {1.6e-2, 8e-3}}

for i, c in ipairs(data.cases) do
  local x = X[c.x]
  T.case(string.format("torch #%d: %s(%s) of %s %s", i, c.op, tostring(c.dim), x.dtype.name,
                       T.fmt(x.shape)), function()
    local d = c.dim and c.dim + 1
    local res, idx
    if c.op == "norm" then
      res = x:norm(c.p, d)
    elseif c.op == "max" or c.op == "min" then
      res, idx = x[c.op](x, d)
    elseif c.op == "argmax" or c.op == "argmin" then
      idx = x[c.op](x, d)
    else
      res = x[c.op](x, d)
    end
    if c.res then
      local tol = TOL[x.dtype.name]
      T.match_torch(res, c.res, tol[1], tol[2], "values")
    end
    if c.idx then
      local one = {shape = c.idx.shape, dtype = c.idx.dtype, data = {}}
      for k, v in ipairs(c.idx.data) do one.data[k] = v + 1 end
      T.match_torch(idx, one, 0, 0, "indices (1-based)")
    end
  end)
end

T.case("the oracle ran", function() T.truthy(#data.cases > 150, "cases: " .. #data.cases) end)

T.done()
