-- test_linalg_grad_torch.lua - gradients of matmul, mm, bmm, addmm, dot, mv
-- and outer against torch.autograd.grad for a random output gradient, over
-- 1-D/2-D/batched/broadcast shapes, transposed and expanded operands, and
-- float32/float64.  Python makes the inputs, the output gradient and torch's
-- gradients; Lua rebuilds the inputs laid out the same way (leaves that are
-- themselves transposed or expanded views), runs dl's backward, compares.
local T = require "testlib"

local r = T.torch([[
cases = []

def make(shape, layout, dt):
    # the input torch differentiates, and what Lua receives to rebuild it
    if layout == "t":
        base = torch.randn(shape[:-2] + (shape[-1], shape[-2]), dtype=dt)
        return base.transpose(-2, -1), base
    if layout == "e":  # expanded along the first dim from size 1
        base = torch.randn((1,) + tuple(shape[1:]), dtype=dt)
        return base.expand(shape), base
    x = torch.randn(shape, dtype=dt)
    return x, x

def run(op, xs, kw):
    if op == "addmm":
        return torch.addmm(xs[0], xs[1], xs[2], beta=kw["beta"], alpha=kw["alpha"])
    return getattr(torch, op)(*xs)

def add(op, shapes, layouts=None, dt=torch.float32, req=None, **kw):
    layouts = layouts or ["c"] * len(shapes)
    req = req or [True] * len(shapes)
    xs, sent = [], []
    for s, l, q in zip(shapes, layouts, req):
        x, base = make(tuple(s), l, dt)
        x = x.detach().requires_grad_(q)
        xs.append(x)
        sent.append(base)
    out = run(op, xs, kw)
    g = torch.randn(out.shape, dtype=dt)
    wanted = [x for x in xs if x.requires_grad]
    grads = iter(torch.autograd.grad(out, wanted, g))
    cases.append(dict(op=op, kw=kw, layouts=layouts, req=req, shapes=[list(s) for s in shapes],
                      inputs=sent, g=g, grads=[next(grads) if q else "none" for q in req]))

for dt in (torch.float32, torch.float64):
    for sa, sb in [((5,), (5,)), ((4, 5), (5,)), ((5,), (5, 6)), ((7, 8), (8, 9)),
                   ((2, 3, 4), (4, 5)), ((4,), (2, 4, 3)), ((2, 1, 3, 4), (5, 4, 2)),
                   ((3, 4, 5), (3, 5, 6)), ((4, 5), (3, 5, 2)), ((2, 3, 4), (4,)),
                   ((1, 6), (6, 1)), ((33, 65), (65, 17)), ((3, 2, 4, 5), (1, 5, 3))]:
        add("matmul", [sa, sb], dt=dt)
    add("mm", [(9, 1), (1, 7)], dt=dt)
    add("mm", [(20, 33), (33, 12)], ["t", "t"], dt=dt)
    add("bmm", [(4, 3, 5), (4, 5, 2)], dt=dt)
    add("bmm", [(4, 3, 5), (4, 5, 2)], ["t", "e"], dt=dt)
    add("dot", [(17,), (17,)], dt=dt)
    add("mv", [(6, 9), (9,)], dt=dt)
    add("mv", [(6, 9), (9,)], ["t", "c"], dt=dt)
    add("outer", [(4,), (3,)], dt=dt)
for la in "cte":
    for lb in "ct":
        add("matmul", [(3, 6, 7), (7, 5)], [la, lb])
        add("matmul", [(6, 7), (2, 7, 5)], ["c" if la == "e" else la, lb])
        add("matmul", [(2, 6, 7), (2, 7, 5)], [la, lb])
add("matmul", [(3, 6, 7), (7, 5)], req=[True, False])
add("matmul", [(3, 6, 7), (7, 5)], req=[False, True])
add("matmul", [(130, 300), (300, 53)], ["t", "t"])
for ishape, beta, alpha in [((5, 4), 1, 1), ((4,), 2, 3), ((5, 1), -1, 0.5), ((), 1, 0),
                            ((5, 4), 0, 2), ((1, 4), 0.5, -1)]:
    add("addmm", [ishape, (5, 6), (6, 4)], beta=beta, alpha=alpha)
add("addmm", [(5, 4), (5, 6), (6, 4)], ["e", "t", "t"], beta=2, alpha=1)
add("addmm", [(5, 4), (5, 6), (6, 4)], req=[False, True, False], beta=1, alpha=2)
emit(cases)
]])

local function rebuild(rec, layout, shape, req)
  local t = T.from_torch(rec)
  if layout == "t" then t = t:transpose(-2, -1) end
  if layout == "e" then t = t:expand(shape) end
  if req then t:requires_grad_() end
  return t
end

local function run(op, xs, kw)
  if op == "addmm" then return dl.addmm(xs[1], xs[2], xs[3], {beta = kw.beta, alpha = kw.alpha}) end
  return dl[op](table.unpack(xs))
end

T.case("gradients vs torch", function()
  local n = 0
  for _, c in ipairs(r) do
    local xs = {}
    for i, rec in ipairs(c.inputs) do xs[i] = rebuild(rec, c.layouts[i], c.shapes[i], c.req[i]) end
    local g = T.from_torch(c.g)
    local what = c.op .. " " .. T.fmt(c.shapes) .. " " .. table.concat(c.layouts) .. " " .. g.dtype.name
    if c.kw.beta then what = what .. " beta " .. c.kw.beta .. " alpha " .. c.kw.alpha end
    local out = run(c.op, xs, c.kw)
    out:backward(g)
    local rtol = g.dtype == dl.float64 and 1e-10 or 1e-4
    local got = {}
    for i, x in ipairs(xs) do got[i] = x.grad end
    T.match_grads(got, c.grads, rtol, rtol, what)
    n = n + 1
  end
  T.truthy(n > 60, "ran " .. n .. " cases")
end)

T.done()
