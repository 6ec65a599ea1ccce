-- test_reduce_grad_torch.lua - gradients of the reduction family against
-- PyTorch's torch.autograd.grad: every op over a spread of shapes (0-dim,
-- empty, 1-D to 3-D, a larger 2-D one), dims, lists of dims and keepdim,
-- views (transposed, narrowed, permuted, expanded: the gradient of an
-- expanded input sums back), ties (amax/max), zeros (prod/cumprod), norms of
-- every p, var/std corrections, and float32/float64/float16/bfloat16.
-- Python draws the inputs and a random grad_output and computes torch's
-- gradient; Lua rebuilds the inputs, runs the same graph and compares.
local T = require "testlib"

local data = T.torch([==[
import torch

cases = []

def run(x, op, dim, keepdim, kw):
    if op in ("sum", "mean"):
        return getattr(x, op)() if dim is None else getattr(x, op)(dim, keepdim)
    if op == "prod":
        return x.prod() if dim is None else x.prod(dim, keepdim)
    if op in ("amax", "amin"):
        return getattr(torch, op)(x, () if dim is None else dim, keepdim)
    if op in ("max", "min", "median"):
        if op == "median":
            x = x.contiguous()  # torch 1.13's median(dim) misreads expanded inputs
        return getattr(torch, op)(x) if dim is None else getattr(torch, op)(x, dim, keepdim).values
    if op in ("var", "std"):
        d = dim if dim is not None else tuple(range(x.dim()))
        return getattr(torch, op)(x, d, correction=kw["correction"], keepdim=keepdim)
    if op == "norm":
        p = 2 if kw["p"] == "fro" else kw["p"]
        return torch.linalg.vector_norm(x, ord=p, dim=dim, keepdim=keepdim)
    if op == "logsumexp":
        return torch.logsumexp(x, tuple(range(x.dim())) if dim is None else dim, keepdim)
    if op in ("cumsum", "cumprod"):
        return getattr(torch, op)(x, dim)
    raise ValueError(op)

def add(shape, op, dim=None, keepdim=False, v=None, dt=torch.float32, fill=None, **kw):
    base = torch.randn(shape, dtype=torch.float64)
    if fill == "ties":
        base = torch.randint(-2, 3, shape).double()
    elif fill == "zeros":
        base = base.masked_fill(torch.rand(shape) < 0.3, 0)
    elif fill == "one_zero":
        base.view(-1)[base.numel() // 2] = 0
    elif fill == "nonfinite":  # rows: all -inf, a +inf, a NaN, two +inf, a -inf
        inf, nan = float("inf"), float("nan")
        base[:5] = torch.tensor([[-inf, -inf, -inf], [1, inf, 2], [1, nan, 2], [inf, inf, 0],
                                 [-inf, 0, 1]], dtype=torch.float64)
    base = base.to(dt)
    b = base.clone().requires_grad_()
    try:
        y = run(view(b, v), op, dim, keepdim, kw)
        go = torch.randn(y.shape, dtype=torch.float64).to(dt)
        g, = torch.autograd.grad(y, b, go)
    except RuntimeError:
        return  # a combination torch does not do
    c = {"base": base, "op": op, "dim": lua_dim(dim), "keepdim": keepdim, "view": v,
         "go": go, "grad": g, "name": type(y.grad_fn).__name__}
    c.update(kw)
    cases.append(c)

shapes = [(5,), (3, 4), (2, 3, 4)]
for s in shapes:
    nd = len(s)
    dims = [None] + list(range(nd)) + [-1] + ([[0, nd - 1]] if nd > 1 else [])
    for d in dims:
        for kd in ([False, True] if d is not None else [False]):
            for op in ("sum", "mean", "amax", "amin", "logsumexp"):
                add(s, op, d, kd)
            add(s, "var", d, kd, correction=1)
            add(s, "std", d, kd, correction=0)
            add(s, "norm", d, kd, p=2)
            if not isinstance(d, list):
                add(s, "prod", d, kd)
                add(s, "prod", d, kd, fill="zeros")
                add(s, "max", d, kd)
                add(s, "min", d, kd)
                add(s, "median", d, kd)
                add(s, "amax", d, kd, fill="ties")
                add(s, "max", d, kd, fill="ties")
                add(s, "min", d, kd, fill="ties")
                if d is not None:
                    add(s, "cumsum", d)
                    add(s, "cumprod", d)
                    add(s, "cumprod", d, fill="zeros")
for p in (2, 1, 3, 1.5, 0.5, -1, float("inf"), float("-inf"), 0, "fro"):
    add((3, 4), "norm", None, p=p)
    add((3, 4), "norm", 1, True, p=p)
    add((2, 3, 4), "norm", [0, 2], p=p)
    add((2, 3, 4), "norm", 1, v="T", p=p)
add((3, 4), "norm", 1, p=2, fill="zeros")
for c in (0, 1, 2):
    add((4, 5), "var", 1, correction=c)
    add((4, 5), "std", None, correction=c)
add((5,), "prod", None, fill="one_zero")
add((3, 4), "prod", 1, fill="one_zero")
add((5,), "cumprod", 0, fill="one_zero")
add((4, 6), "cumprod", 1, fill="zeros")
# views
for v in ("T", "narrow", "perm"):
    for op, d in (("sum", 1), ("mean", [0, 2]), ("prod", 2), ("amax", 0), ("max", 1), ("var", 2),
                  ("std", None), ("norm", 0), ("logsumexp", -1), ("cumsum", 1), ("cumprod", 2),
                  ("median", 1), ("min", None)):
        kw = {"correction": 1} if op in ("var", "std") else {"p": 2} if op == "norm" else {}
        add((4, 3, 5), op, d, v=v, **kw)
for op, d in (("sum", 0), ("mean", 1), ("prod", 0), ("amax", 0), ("max", 0), ("var", 0),
              ("logsumexp", 0), ("cumsum", 0), ("norm", None), ("median", 1)):
    kw = {"correction": 1} if op in ("var", "std") else {"p": 2} if op == "norm" else {}
    add((1, 4), op, d, v="expand", **kw)
# 0-dim, empty, larger
for op in ("sum", "mean", "prod", "amax", "max", "logsumexp", "cumsum", "cumprod", "median", "norm"):
    kw = {"p": 2} if op == "norm" else {}
    add((), op, 0 if op in ("cumsum", "cumprod") else None, **kw)
for op, d in (("sum", 0), ("mean", 1), ("prod", 0), ("amax", 1), ("logsumexp", 1), ("cumsum", 0),
              ("norm", 0)):
    kw = {"p": 2} if op == "norm" else {}
    add((0, 3), op, d, **kw)
add((64, 100), "sum", 1)
add((64, 100), "norm", 0, p=2)
add((64, 100), "logsumexp", 1)
# logsumexp over trailing contiguous dims takes the fused CPU backward: long rows, several
# trailing dims, non-finite rows, float64; leading dims and views keep the op-by-op formula
add((64, 1000), "logsumexp", -1)
add((3, 5, 700), "logsumexp", [1, 2], True)
add((16, 300), "logsumexp", 1, dt=torch.float64)
for dt in (torch.float32, torch.float64):
    add((6, 3), "logsumexp", 1, fill="nonfinite", dt=dt)
    add((6, 3), "logsumexp", 0, fill="nonfinite", dt=dt)
    add((6, 3), "logsumexp", 0, v="T", fill="nonfinite", dt=dt)
add((64, 100), "amax", 0)
# dtypes
for dt in (torch.float64, torch.float16, torch.bfloat16):
    for op, d in (("sum", 1), ("mean", None), ("amax", 1), ("max", 0), ("var", 1), ("std", 1),
                  ("norm", 1), ("prod", 1), ("logsumexp", 1), ("cumsum", 1), ("cumprod", 0)):
        kw = {"correction": 1} if op in ("var", "std") else {"p": 2} if op == "norm" else {}
        add((3, 4), op, d, dt=dt, **kw)
emit(cases)
]==])

local function run(x, c)
  local op = c.op
  if op == "sum" or op == "mean" or op == "prod" or op == "amax" or op == "amin" or op == "logsumexp" then
    return x[op](x, c.dim, c.keepdim)
  elseif op == "max" or op == "min" or op == "median" then
    if c.dim == nil then return x[op](x) end
    return (x[op](x, c.dim, c.keepdim))
  elseif op == "var" or op == "std" then
    return x[op](x, c.dim, {correction = c.correction, keepdim = c.keepdim})
  elseif op == "norm" then
    return x:norm(c.p, c.dim, c.keepdim)
  elseif op == "cumsum" or op == "cumprod" then
    return x[op](x, c.dim)
  end
  error("unknown op " .. op)
end

local function tols(dtype)
  if dtype == "float16" then return 1e-2, 1e-2 end
  if dtype == "bfloat16" then return 2e-2, 2e-2 end
  if dtype == "float64" then return 1e-10, 1e-12 end
  return 1e-4, 1e-5
end

T.case("gradients match torch", function()
  T.truthy(#data > 300, "oracle cases: " .. #data)
  for i, c in ipairs(data) do
    local what = string.format("case %d: %s dim=%s keepdim=%s view=%s p=%s correction=%s dtype=%s shape=%s",
      i, c.op, T.fmt(c.dim), tostring(c.keepdim), tostring(c.view), tostring(c.p),
      tostring(c.correction), c.base.dtype, T.fmt(c.base.shape))
    local b = T.from_torch(c.base):requires_grad_()
    local ok, err = pcall(function()
      local y = run(T.torch_view(b, c.view), c)
      local g = dl.autograd.grad(y, b, {grad_outputs = T.from_torch(c.go)})
      local rtol, atol = tols(c.base.dtype)
      T.match_torch(g, c.grad, rtol, atol, what)
      -- grad_fn names: PyTorch's without the trailing number
      local want = c.name:gsub("%d+$", ""):gsub("^LinalgVectorNorm", "Norm")
      if y.grad_fn ~= "ExpandBackward" then T.eq(y.grad_fn, want, what) end
    end)
    if not ok then error(tostring(err):find(what, 1, true) and err or (what .. ": " .. tostring(err)), 0) end
  end
end)

T.done()
