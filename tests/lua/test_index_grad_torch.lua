-- test_index_grad_torch.lua - gradients of the joining and indexing family
-- against torch.autograd.grad for random output gradients: cat, stack,
-- split/chunk/unbind (several outputs), index_select, gather, scatter,
-- scatter_add, index_fill, index_copy, masked_select, sort/topk values, flip,
-- roll, tril/triu, and the in-place forms on non-leaves, over shapes,
-- dims, transposed and expanded inputs, float32 and float64.  Python makes
-- the inputs (indices 1-based for Lua), the gradients and torch's input
-- gradients; Lua rebuilds the inputs laid out the same way and compares.
local T = require "testlib"

local r = T.torch([==[
cases = []

def make(shape, layout, dt):
    # the input torch differentiates, and what Lua receives to rebuild it
    if layout == "t":
        base = torch.randn(tuple(shape[:-2]) + (shape[-1], shape[-2]), dtype=dt)
        return base.transpose(-2, -1), base
    if layout == "e":  # expanded along the first dim from size 1
        base = torch.randn((1,) + tuple(shape[1:]), dtype=dt)
        return base.expand(tuple(shape)), base
    x = torch.randn(tuple(shape), dtype=dt)
    return x, x

def ldim(d):
    return d + 1 if d >= 0 else d

def rand_index(size, shape):
    return torch.randint(0, size, shape)

def apply(op, xs, p):
    d = p.get("dim", 0)
    if op == "cat": return torch.cat(xs, d)
    if op == "stack": return torch.stack(xs, d)
    if op == "split": return list(xs[0].split(p["size"], d))
    if op == "chunk": return list(xs[0].chunk(p["chunks"], d))
    if op == "unbind": return list(xs[0].unbind(d))
    if op == "index_select": return xs[0].index_select(d, p["index"])
    if op == "gather": return xs[0].gather(d, p["index"])
    if op == "scatter": return xs[0].scatter(d, p["index"], xs[1])
    if op == "scatter_value": return xs[0].scatter(d, p["index"], p["value"])
    if op == "scatter_add": return xs[0].scatter_add(d, p["index"], xs[1])
    if op == "index_fill": return xs[0].index_fill(d, p["index"], xs[1] if len(xs) > 1 else p["value"])
    if op == "index_copy": return xs[0].index_copy(d, p["index"], xs[1])
    if op == "masked_select":
        # torch 1.13 scatters the gradient of a non-contiguous input in memory
        # order (pytorch/pytorch#99638, fixed after 1.13): differentiate
        # through a contiguous copy, which is the same function
        return xs[0].contiguous().masked_select(p["mask"])
    if op == "sort": return xs[0].sort(d, descending=p["descending"])[0]
    if op == "topk": return xs[0].topk(p["k"], d, largest=p["largest"])[0]
    if op == "flip": return xs[0].flip(p["dims"])
    if op == "roll": return xs[0].roll(p["shifts"], p["dims"]) if "dims" in p else xs[0].roll(p["shifts"])
    if op == "tril": return xs[0].tril(p["diagonal"])
    if op == "triu": return xs[0].triu(p["diagonal"])
    if op == "scatter_": return xs[0].clone().scatter_(d, p["index"], xs[1])
    if op == "scatter_add_": return xs[0].clone().scatter_add_(d, p["index"], xs[1])
    if op == "index_fill_": return xs[0].clone().index_fill_(d, p["index"], p["value"])
    if op == "index_copy_": return xs[0].clone().index_copy_(d, p["index"], xs[1])
    if op == "tril_": return xs[0].clone().tril_(p["diagonal"])
    raise ValueError(op)

def add(op, shapes, layouts=None, dt=torch.float32, **p):
    layouts = layouts or ["c"] * len(shapes)
    xs, sent = [], []
    for s, l in zip(shapes, layouts):
        x, base = make(s, l, dt)
        xs.append(x.detach().requires_grad_())
        sent.append(base)
    out = apply(op, xs, p)
    outs = out if isinstance(out, list) else [out]
    gs = [torch.randn(o.shape, dtype=dt) for o in outs]
    grads = torch.autograd.grad(outs, xs, gs, allow_unused=True)
    lp = dict(p)
    if "dim" in p: lp["dim"] = ldim(p["dim"])
    if "index" in p: lp["index"] = p["index"] + (p["index"] >= 0).long()
    if "dims" in p: lp["dims"] = [ldim(x) for x in p["dims"]]
    cases.append(dict(op=op, p=lp, layouts=layouts, shapes=[list(s) for s in shapes], inputs=sent,
                      gs=gs, grads=[g if g is not None else "none" for g in grads]))

for dt in (torch.float32, torch.float64):
    for l in "cte":
        add("cat", [(2, 3, 4), (2, 3, 4)], [l, "c"], dt, dim=1)
        add("cat", [(3, 2, 4), (1, 2, 4), (2, 2, 4)], ["c", l, "c"], dt, dim=0)
        add("stack", [(3, 4), (3, 4)], [l, l], dt, dim=1)
        add("split", [(5, 4, 3)], [l], dt, size=2, dim=0)
        add("split", [(3, 7)], [l], dt, size=[2, 0, 5], dim=-1)
        add("chunk", [(4, 6)], [l], dt, chunks=4, dim=1)
        add("unbind", [(3, 2)], [l], dt, dim=0)
        add("index_select", [(4, 5)], [l], dt, dim=0, index=torch.tensor([3, 0, 3, 1, 1]))
        add("index_select", [(4, 5)], [l], dt, dim=1, index=torch.tensor([4, 4, 2]))
        add("gather", [(4, 5)], [l], dt, dim=1, index=rand_index(5, (4, 7)))
        add("gather", [(4, 5)], [l], dt, dim=0, index=rand_index(4, (3, 2)))
        add("scatter_add", [(4, 5), (4, 5)], [l, "c"], dt, dim=0, index=rand_index(4, (4, 5)))
        add("scatter_add", [(3, 6), (3, 4)], [l, "c"], dt, dim=1, index=rand_index(6, (3, 4)))
        add("index_fill", [(4, 5)], [l], dt, dim=1, index=torch.tensor([0, -1, 0]), value=2.5)
        add("index_fill", [(4, 5), ()], [l, "c"], dt, dim=0, index=torch.tensor([2, 2, 1]))
        add("index_copy", [(4, 5), (2, 5)], [l, "c"], dt, dim=0, index=torch.tensor([3, 1]))
        add("masked_select", [(3, 4)], [l], dt, mask=torch.rand(3, 4) > 0.5)
        add("masked_select", [(3, 4)], [l], dt, mask=torch.rand(2, 1, 4) > 0.3)
        add("sort", [(4, 6)], [l], dt, dim=1, descending=False)
        nt = "c" if l == "e" else l  # expanded rows tie along dim 0
        add("sort", [(4, 6)], [nt], dt, dim=0, descending=True)
        add("topk", [(5, 6)], [l], dt, k=3, dim=1, largest=True)
        add("topk", [(5, 6)], [nt], dt, k=2, dim=0, largest=False)
        add("flip", [(3, 4, 2)], [l if l != "t" else "c"], dt, dims=[0, 2])
        add("flip", [(3, 4)], [l], dt, dims=[-1])
        add("roll", [(3, 5)], [l], dt, shifts=[2, -1], dims=[0, 1])
        add("roll", [(3, 5)], [l], dt, shifts=7)
        add("tril", [(2, 4, 5)], [l], dt, diagonal=-1)
        add("triu", [(4, 5)], [l], dt, diagonal=2)
    # scatter: unique positions per slice (duplicates write an unspecified winner)
    add("scatter", [(4, 5), (2, 5)], ["c", "c"], dt, dim=0,
        index=torch.stack([torch.randperm(4)[:2] for _ in range(5)], 1))
    add("scatter", [(3, 6), (3, 4)], ["t", "c"], dt, dim=1,
        index=torch.stack([torch.randperm(6)[:4] for _ in range(3)], 0))
    add("scatter_value", [(3, 6)], ["c"], dt, dim=1, index=torch.tensor([[1, 5], [0, 0]]), value=-1.0)
    add("scatter_", [(3, 6), (3, 2)], ["c", "c"], dt, dim=1, index=torch.tensor([[1, 5], [0, 2], [4, 3]]))
    add("scatter_add_", [(3, 6), (3, 2)], ["e", "c"], dt, dim=1, index=torch.tensor([[1, 1], [0, 2], [4, 4]]))
    add("index_fill_", [(3, 6)], ["t"], dt, dim=0, index=torch.tensor([1]), value=3.0)
    add("index_copy_", [(3, 6), (3, 2)], ["c", "c"], dt, dim=1, index=torch.tensor([5, 0]))
    add("tril_", [(5, 3)], ["t"], dt, diagonal=0)
emit(cases)
]==])

local function rebuild(rec, layout, shape)
  local t = T.from_torch(rec)
  if layout == "t" then t = t:transpose(-2, -1) end
  if layout == "e" then t = t:expand(shape) end
  return t:requires_grad_()
end

local function outs(op, xs, p)
  local x, d = xs[1], p.dim
  if op == "cat" then return dl.cat(xs, d) end
  if op == "stack" then return dl.stack(xs, d) end
  if op == "split" then return x:split(p.size, d) end
  if op == "chunk" then return x:chunk(p.chunks, d) end
  if op == "unbind" then return x:unbind(d) end
  local idx = p.index and T.from_torch(p.index)
  if op == "index_select" then return x:index_select(d, idx) end
  if op == "gather" then return x:gather(d, idx) end
  if op == "scatter" then return x:scatter(d, idx, xs[2]) end
  if op == "scatter_value" then return x:scatter(d, idx, p.value) end
  if op == "scatter_add" then return x:scatter_add(d, idx, xs[2]) end
  if op == "index_fill" then return x:index_fill(d, idx, xs[2] or p.value) end
  if op == "index_copy" then return x:index_copy(d, idx, xs[2]) end
  if op == "masked_select" then return x:masked_select(T.from_torch(p.mask)) end
  if op == "sort" then return (x:sort(d, p.descending)) end
  if op == "topk" then return (x:topk(p.k, d, p.largest)) end
  if op == "flip" then return x:flip(p.dims) end
  if op == "roll" then return x:roll(p.shifts, p.dims) end
  if op == "tril" then return x:tril(p.diagonal) end
  if op == "triu" then return x:triu(p.diagonal) end
  local y = x:clone()
  if op == "scatter_" then y:scatter_(d, idx, xs[2]) end
  if op == "scatter_add_" then y:scatter_add_(d, idx, xs[2]) end
  if op == "index_fill_" then y:index_fill_(d, idx, p.value) end
  if op == "index_copy_" then y:index_copy_(d, idx, xs[2]) end
  if op == "tril_" then y:tril_(p.diagonal) end
  return y
end

T.case("gradients vs torch", function()
  local n = 0
  for _, c in ipairs(r) do
    local xs = {}
    for i, rec in ipairs(c.inputs) do xs[i] = rebuild(rec, c.layouts[i], c.shapes[i]) end
    local o = outs(c.op, xs, c.p)
    if dl.is_tensor(o) then o = {o} end
    local gs = {}
    for i, g in ipairs(c.gs) do gs[i] = T.from_torch(g) end
    local what = c.op .. " " .. T.fmt(c.shapes) .. " " .. table.concat(c.layouts) .. " " .. gs[1].dtype.name
    T.eq(#o, #gs, what .. ": outputs")
    dl.autograd.backward(o, gs)
    local got = {}
    for i, x in ipairs(xs) do got[i] = x.grad end
    T.match_grads(got, c.grads, 1e-5, 1e-5, what)
    n = n + 1
  end
  T.truthy(n > 150, "ran " .. n .. " cases")
end)

T.done()
