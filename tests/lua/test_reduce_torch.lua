-- test_reduce_torch.lua - the reduction family against PyTorch: every op over
-- a spread of shapes (a 1-D vector of 100k elements, 3-D tensors over each dim
-- and lists of dims, 0-dim), keepdim, non-contiguous views (transposed,
-- narrowed, permuted, expanded) and dtypes.  Python draws the inputs and
-- computes torch's results; Lua rebuilds the inputs and compares.
local T = require "testlib"

local data = T.torch([==[
import torch

inputs, cases = [], []

def mk(shape, dt):
    if dt == torch.bool:
        return torch.rand(shape) > 0.5
    if dt == torch.uint8:
        return torch.randint(0, 6, shape, dtype=dt)
    if dt in (torch.int64, torch.int32):
        return torch.randint(-5, 6, shape, dtype=dt)
    return torch.randn(shape, dtype=torch.float64).to(dt)

def all_dims(x):
    return tuple(range(x.dim()))

def reduce_seq(x, op, dim, keepdim):
    # all/any over a list of dims (torch 1.13 takes one dim at a time)
    if dim is None:
        r = getattr(x, op)()
        return r.reshape([1] * x.dim()) if keepdim else r
    if isinstance(dim, int):
        return getattr(x, op)(dim, keepdim)
    for d in sorted([d % x.dim() for d in dim], reverse=True):
        x = getattr(x, op)(d, keepdim)
    return x

def torch_result(x, op, dim, keepdim, kw):
    res = idx = None
    if op == "median":
        x = x.contiguous()  # torch 1.13's median(dim) misreads expanded (stride 0) inputs
    if op in ("max", "min", "median"):
        if dim is None:
            res = getattr(torch, op)(x)
        else:
            r = getattr(torch, op)(x, dim, keepdim=keepdim)
            res, idx = r.values, r.indices
    elif op in ("argmax", "argmin"):
        idx = getattr(torch, op)(x, dim=dim, keepdim=keepdim)
    elif op in ("cumsum", "cumprod"):
        res = getattr(torch, op)(x, dim, **kw)
    elif op == "norm":
        res = torch.linalg.vector_norm(x, ord=kw["p"], dim=dim, keepdim=keepdim)
    elif op in ("all", "any"):
        res = reduce_seq(x, op, dim, keepdim).bool()  # dlua: bool for every input
    else:
        d = dim if dim is not None else (all_dims(x) if keepdim or op == "logsumexp" else None)
        if d is None:
            res = getattr(torch, op)(x, **kw)
        else:
            res = getattr(torch, op)(x, dim=d, keepdim=keepdim, **kw)
    return res, idx

def add(xid, x, op, dim=None, keepdim=False, **kw):
    try:
        res, idx = torch_result(x, op, dim, keepdim, kw)
    except (RuntimeError, TypeError, IndexError):
        return  # a combination torch does not do
    c = {"x": xid, "op": op, "dim": lua_dim(dim), "keepdim": keepdim, "res": res, "idx": idx}
    for k, v in kw.items():
        c[k] = str(v).replace("torch.", "") if isinstance(v, torch.dtype) else v
    cases.append(c)

def new_input(shape, dt, v=None):
    b = mk(shape, dt)
    inputs.append({"t": b, "view": v})
    return len(inputs), view(b, v)

FLOAT_OPS = ["sum", "mean", "prod", "amax", "amin", "logsumexp", "all", "any"]
DIMS3 = [None, 0, 1, 2, -1, [0, 2], [0, 1], [1, 2], [0, 1, 2], [-1, 0]]

def sweep3(xid, x, ops, dims=DIMS3, minmax=True):
    n = 0
    for op in ops:
        for d in dims:
            n += 1
            add(xid, x, op, d, n % 2 == 0)
    for d in dims:
        n += 1
        k = n % 2 == 0
        add(xid, x, "var", d, k)
        add(xid, x, "std", d, k, unbiased=False)
        add(xid, x, "var", d, k, correction=0)
        for p in (2, 1, float("inf"), 3):
            add(xid, x, "norm", d, k, p=p)
    if minmax:
        for d in (None, 0, 1, 2, -1):
            for op in ("max", "min", "argmax", "argmin", "median"):
                n += 1
                add(xid, x, op, d, d is not None and n % 2 == 0)
    for d in (0, 1, 2, -1):
        add(xid, x, "cumsum", d)
        add(xid, x, "cumprod", d)

# 3-D float tensors over each dim and lists of dims, contiguous and views
for dt, views in ((torch.float32, [None, "T", "narrow", "perm", "expand"]),
                  (torch.float64, [None, "T"])):
    for v in views:
        shape = (1, 5, 6) if v == "expand" else (4, 5, 6)
        xid, x = new_input(shape, dt, v)
        sweep3(xid, x, FLOAT_OPS)

# half types: fewer ops (torch's CPU lacks some of them)
for dt in (torch.float16, torch.bfloat16):
    xid, x = new_input((4, 5, 6), dt, "T")
    sweep3(xid, x, ["sum", "mean", "amax", "amin", "all"], DIMS3[:6], True)

# integer and bool inputs: sum/prod give int64, max keeps the type
for dt in (torch.int64, torch.int32, torch.uint8, torch.bool):
    xid, x = new_input((3, 4, 5), dt, "perm" if dt == torch.int32 else None)
    for d in DIMS3:
        add(xid, x, "sum", d, d == 1)
        add(xid, x, "amax", d)
        add(xid, x, "amin", d, True)
        add(xid, x, "any", d)
        add(xid, x, "all", d)
        add(xid, x, "logsumexp", d)
    for d in (None, 0, 1, 2, -1):
        add(xid, x, "prod", d)
        for op in ("max", "min", "argmax", "argmin"):
            add(xid, x, op, d)
    for d in (0, 1, 2):
        add(xid, x, "cumsum", d)
        add(xid, x, "cumprod", d)
    add(xid, x, "sum", 1, dtype=torch.float64)
    add(xid, x, "mean", [0, 2], dtype=torch.float32)
    add(xid, x, "cumsum", 2, dtype=torch.float32)

# a 1-D vector of 100k elements in float32 (and a float64 one)
for dt in (torch.float32, torch.float64):
    xid, x = new_input((100000,), dt)
    for op in ("sum", "mean", "amax", "amin", "logsumexp", "all", "any", "max", "min",
               "argmax", "argmin", "median", "var", "std"):
        add(xid, x, op, None)
        add(xid, x, op, 0, op not in ("argmax", "argmin", "max", "min", "median"))
    for p in (2, 1, float("inf"), 0.5):
        add(xid, x, "norm", None, p=p)
    add(xid, x, "cumsum", 0)
    add(xid, x, "sum", 0, dtype=torch.float64)
xid, x = new_input((100000,), torch.float16)
add(xid, x, "sum")
add(xid, x, "amax")
xid, x = new_input((100000,), torch.int64)
add(xid, x, "sum")
add(xid, x, "cumsum", 0)
add(xid, x, "argmax")

# wide rows and tall columns
xid, x = new_input((7, 3001), torch.float32, "T")
for d in (None, 0, 1):
    for op in ("sum", "amax", "argmax", "var", "logsumexp"):
        add(xid, x, op, d)
xid, x = new_input((3001, 7), torch.float32)
for d in (0, 1):
    for op in ("sum", "max", "argmin", "std", "cumsum"):
        add(xid, x, op, d)

# 0-dim
xid, x = new_input((), torch.float32)
for op in ("sum", "mean", "amax", "logsumexp", "all"):
    add(xid, x, op, None)
    add(xid, x, op, 0, True)
for op in ("max", "argmax", "cumsum", "cumprod"):
    add(xid, x, op, 0)

emit({"inputs": [i["t"] for i in inputs], "views": [i["view"] or "" for i in inputs],
      "cases": cases})
]==])

-- Rebuild the inputs with the same views.
local X = {}
for i, rec in ipairs(data.inputs) do X[i] = T.from_torch_view(rec, data.views[i]) end

local function run(c, x)
  local op = c.op
  if op == "max" or op == "min" or op == "median" then
    if c.dim then return x[op](x, c.dim, c.keepdim) end
    return x[op](x)
  elseif op == "argmax" or op == "argmin" then
    return nil, x[op](x, c.dim, c.keepdim)
  elseif op == "cumsum" or op == "cumprod" then
    return x[op](x, c.dim, {dtype = c.dtype})
  elseif op == "norm" then
    return x:norm(c.p, c.dim, c.keepdim)
  elseif op == "var" or op == "std" then
    return x[op](x, c.dim, {keepdim = c.keepdim, unbiased = c.unbiased, correction = c.correction})
  end
  return x[op](x, c.dim, {keepdim = c.keepdim, dtype = c.dtype})
end

local TOL = {
  float32 = {1e-5, 1e-5}, float64 = {1e-10, 1e-12},
  float16 = {2e-3, 2e-3}, bfloat16 = {1e-2, 1e-2},
}

local function one_based(rec)
  local d = {}
  for i, v in ipairs(rec.data) do d[i] = v + 1 end
  return {shape = rec.shape, dtype = rec.dtype, data = d}
end

local function describe(c)
  local dim = type(c.dim) == "table" and ("{" .. table.concat(c.dim, ",") .. "}") or tostring(c.dim)
  local x = X[c.x]
  return string.format("%s(dim=%s, keepdim=%s%s%s%s) of %s %s%s", c.op, dim, tostring(c.keepdim),
    c.p and (", p=" .. c.p) or "", c.dtype and (", dtype=" .. c.dtype) or "",
    c.correction and ", correction=0" or (c.unbiased == false and ", unbiased=false" or ""),
    x.dtype.name, T.fmt(x.shape), data.views[c.x] ~= "" and (" " .. data.views[c.x]) or "")
end

local counts, total = {}, 0
for _, c in ipairs(data.cases) do
  T.case(describe(c), function()
    local res, idx = run(c, X[c.x])
    if c.res then
      local tol = TOL[c.res.dtype] or {0, 0}
      -- large float32 sums: allow for torch's own float32 accumulation
      if c.res.dtype == "float32" and X[c.x]:numel() >= 3000 then tol = {2e-5, 1e-4} end
      T.match_torch(res, c.res, tol[1], tol[2], "values")
    end
    if c.idx then T.match_torch(idx, one_based(c.idx), 0, 0, "indices (1-based)") end
  end)
  counts[c.op] = (counts[c.op] or 0) + 1
  total = total + 1
end

T.case("oracle coverage", function()
  T.truthy(total > 1500, "expected over 1500 oracle cases, got " .. total)
  for _, op in ipairs({"sum", "mean", "prod", "max", "min", "argmax", "argmin", "amax", "amin",
                       "var", "std", "norm", "all", "any", "cumsum", "cumprod", "logsumexp",
                       "median"}) do
    T.truthy((counts[op] or 0) >= 10, op .. ": only " .. tostring(counts[op]) .. " oracle cases")
  end
end)

T.done()
