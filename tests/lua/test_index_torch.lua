-- test_index_torch.lua - the joining and indexing ops against PyTorch over a
-- spread of shapes, dims (positive and negative), dtypes, broadcasts and
-- non-contiguous (permuted) inputs.  Torch's 0-based indices are shifted by
-- one on the way in and out.  One Python run produces every case.
local T = require "testlib"

local R = T.torch([==[
import itertools
g = torch.Generator().manual_seed(1234)
DT = [torch.float32, torch.float64, torch.float16, torch.bfloat16,
      torch.int64, torch.int32, torch.uint8, torch.bool]

def rand(shape, dt):
    if dt == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dt.is_floating_point:
        return (torch.randn(shape, generator=g) * 4).to(dt)
    if dt == torch.uint8:
        return torch.randint(0, 255, shape, generator=g, dtype=dt)
    return torch.randint(-50, 50, shape, generator=g, dtype=dt)

def inv(perm):
    # the base shape whose .permute(perm) has the wanted layout
    return [perm.index(i) for i in range(len(perm))]

def base_for(shape, perm):
    # a contiguous tensor b of shape permuted so that b.permute(perm) has `shape`
    bshape = [0] * len(shape)
    for i, p in enumerate(perm):
        bshape[p] = shape[i]
    return bshape

def perm_lua(perm):
    return [p + 1 for p in perm] if perm else None

def noncontig(shape, dt, perm):
    if perm is None:
        b = rand(shape, dt)
        return b, b
    b = rand(base_for(shape, perm), dt)
    return b, b.permute(perm)

cases = []

# cat / stack
for dts, shapes, dim, perm in [
    ((torch.float32, torch.float32), [(2, 3), (4, 3)], 0, None),
    ((torch.float32, torch.float64), [(2, 3), (2, 5)], 1, None),
    ((torch.int32, torch.int64, torch.uint8), [(2, 1, 4), (2, 3, 4), (2, 2, 4)], 1, None),
    ((torch.int64, torch.float16), [(3, 2, 2), (3, 2, 1)], -1, (2, 0, 1)),
    ((torch.bfloat16, torch.float16), [(1, 4), (2, 4)], -2, (1, 0)),
    ((torch.uint8, torch.bool), [(2, 2), (2, 2)], 0, None),
    ((torch.bool, torch.bool), [(0, 3), (2, 3)], 0, None),
    ((torch.float64,) * 4, [(2, 3, 4, 1)] * 4, 3, (3, 1, 0, 2)),
]:
    xs = [noncontig(s, dt, perm if i % 2 == 0 else None) for i, (s, dt) in enumerate(zip(shapes, dts))]
    cases.append(dict(op="cat", xs=[b for b, _ in xs], perms=[perm_lua(perm) if i % 2 == 0 else None for i in range(len(xs))],
                      dim=dim + 1 if dim >= 0 else dim, r=torch.cat([v for _, v in xs], dim)))
for dt, shape, n, dim in [(torch.float32, (3,), 2, 0), (torch.int64, (2, 3), 3, 2), (torch.float16, (2, 3), 2, -1),
                          (torch.bool, (4, 1, 2), 2, 1), (torch.float64, (), 3, 0)]:
    xs = [rand(shape, dt) for _ in range(n)]
    cases.append(dict(op="stack", xs=xs, dim=dim + 1 if dim >= 0 else dim, r=torch.stack(xs, dim)))

# index_select
for dt, shape, dim, perm, nidx in [
    (torch.float32, (7,), 0, None, 10), (torch.float64, (4, 6), 1, None, 3), (torch.float16, (4, 6), 0, (1, 0), 5),
    (torch.bfloat16, (3, 4, 5), -1, None, 7), (torch.int64, (3, 4, 5), 1, (2, 0, 1), 4), (torch.int32, (5, 2), -2, None, 0),
    (torch.uint8, (2, 3, 4), 2, (1, 2, 0), 6), (torch.bool, (6, 3), 0, None, 6), (torch.float32, (50, 300), 0, None, 200),
    (torch.float32, (300, 50), 1, (1, 0), 120)]:
    b, x = noncontig(shape, dt, perm)
    idx = torch.randint(0, shape[dim], (nidx,), generator=g)
    cases.append(dict(op="index_select", x=b, perm=perm_lua(perm), dim=dim + 1 if dim >= 0 else dim,
                      idx=idx + 1, r=x.index_select(dim, idx)))

# gather
for dt, shape, dim, ishape, perm in [
    (torch.float32, (5,), 0, (8,), None), (torch.float64, (3, 4), 1, (3, 6), None), (torch.float16, (3, 4), 0, (5, 2), (1, 0)),
    (torch.int64, (3, 4, 5), 2, (2, 3, 2), None), (torch.bfloat16, (3, 4, 5), 1, (3, 7, 5), (2, 1, 0)),
    (torch.uint8, (2, 3, 4), -3, (4, 3, 4), None), (torch.bool, (4, 4), -1, (4, 1), None), (torch.float32, (64, 512), 1, (64, 600), None)]:
    b, x = noncontig(shape, dt, perm)
    idx = torch.randint(0, shape[dim], ishape, generator=g)
    cases.append(dict(op="gather", x=b, perm=perm_lua(perm), dim=dim + 1 if dim >= 0 else dim,
                      idx=idx + 1, r=x.gather(dim, idx)))

# scatter (unique targets: each index row along dim is a prefix of a permutation) and scatter_add
def unique_index(sshape, ishape, dim):
    n = sshape[dim]
    idx = torch.empty(ishape, dtype=torch.int64)
    moved = idx.movedim(dim, -1)
    flat = moved.reshape(-1, ishape[dim])
    for r in range(flat.shape[0]):
        flat[r] = torch.randperm(n, generator=g)[:ishape[dim]]
    return flat.reshape(moved.shape).movedim(-1, dim).contiguous()

for dt, sshape, dim, ishape, srcshape, perm in [
    (torch.float32, (6,), 0, (4,), (5,), None), (torch.float64, (3, 5), 1, (2, 3), (3, 4), None),
    (torch.int64, (4, 3), 0, (3, 3), (3, 3), (1, 0)), (torch.float16, (2, 3, 4), 2, (2, 2, 4), (2, 3, 4), None),
    (torch.bfloat16, (3, 4, 2), -2, (3, 2, 2), (3, 2, 2), (2, 0, 1)), (torch.uint8, (5, 5), -1, (5, 5), (5, 5), None),
    (torch.bool, (3, 3), 0, (2, 3), (2, 3), None), (torch.float32, (80, 700), 1, (80, 500), (80, 500), None)]:
    b, x = noncontig(sshape, dt, perm)
    idx = unique_index(sshape, ishape, dim)
    src = rand(srcshape, dt)
    d1 = dim + 1 if dim >= 0 else dim
    cases.append(dict(op="scatter", x=b, perm=perm_lua(perm), dim=d1, idx=idx + 1, src=src,
                      r=x.scatter(dim, idx, src)))
    val = 3 if not dt.is_floating_point else 2.5
    if dt == torch.bool:
        val = True
    cases.append(dict(op="scatter_value", x=b, perm=perm_lua(perm), dim=d1, idx=idx + 1, value=val,
                      r=x.scatter(dim, idx, val)))
for dt, sshape, dim, ishape, perm in [
    (torch.float64, (5,), 0, (30,), None), (torch.int64, (3, 4), 1, (3, 9), None), (torch.float32, (4, 3), 0, (8, 3), (1, 0)),
    (torch.int32, (2, 3, 4), -1, (2, 3, 10), None), (torch.float16, (3, 4), 0, (6, 4), None),
    (torch.bfloat16, (4, 4), 1, (4, 6), (1, 0)), (torch.uint8, (3, 3), 0, (5, 3), None), (torch.float32, (30, 80), 1, (30, 2000), None)]:
    b, x = noncontig(sshape, dt, perm)
    idx = torch.randint(0, sshape[dim], ishape, generator=g)
    src = rand(ishape, dt)
    if dt == torch.uint8:
        src = src % 8
    if dt in (torch.float16, torch.bfloat16):
        src = torch.randint(-4, 5, ishape, generator=g).to(dt) * 0.5
    cases.append(dict(op="scatter_add", x=b, perm=perm_lua(perm), dim=dim + 1 if dim >= 0 else dim,
                      idx=idx + 1, src=src, r=x.scatter_add(dim, idx, src)))

# sort / argsort (stable, so indices are exact even with ties and NaN)
for dt, shape, dim, desc, perm in [
    (torch.float32, (9,), 0, False, None), (torch.float32, (9,), 0, True, None), (torch.float64, (4, 7), 1, False, (1, 0)),
    (torch.float16, (5, 3), 0, True, None), (torch.bfloat16, (3, 4, 5), -1, False, (2, 0, 1)),
    (torch.int64, (6, 5), -2, True, None), (torch.int32, (3, 40), 1, False, None), (torch.uint8, (2, 3, 50), 2, True, None),
    (torch.bool, (4, 9), 1, False, None), (torch.float32, (8, 1000), 1, True, None), (torch.float32, (2000, 20), 0, False, (1, 0))]:
    b, x = noncontig(shape, dt, perm)
    if dt.is_floating_point:
        # ties and NaNs on purpose
        x = x.contiguous().clone()
        x.view(-1)[::7] = float("nan")
        x.view(-1)[1::5] = 1.0
        x.view(-1)[2::11] = float("inf")
        b = x.permute(inv(perm)).contiguous() if perm else x
        b, x = b, (b.permute(perm) if perm else b)
    else:
        x = x.clone()
        if dt != torch.bool:
            x = x % 5
        b = x.permute(inv(perm)).contiguous() if perm else x
        x = b.permute(perm) if perm else b
    v, i = torch.sort(x, dim=dim, descending=desc, stable=True)
    cases.append(dict(op="sort", x=b, perm=perm_lua(perm), dim=dim + 1 if dim >= 0 else dim, desc=desc, v=v, i=i + 1))

# topk on distinct values (indices exact)
for dt, shape, dim, k, largest, perm in [
    (torch.float32, (10,), 0, 3, True, None), (torch.float64, (4, 9), 1, 9, False, None), (torch.float32, (6, 5), 0, 2, True, (1, 0)),
    (torch.int64, (3, 4, 8), -1, 1, True, (0, 2, 1)), (torch.int32, (7, 3), -2, 4, False, None),
    (torch.float16, (2, 30), 1, 5, True, None), (torch.float32, (16, 2000), 1, 10, True, None),
    (torch.float64, (5, 3), 1, 0, True, None)]:
    n = 1
    for s in shape:
        n *= s
    vals = torch.randperm(n, generator=g).to(dt).reshape(base_for(shape, perm) if perm else shape)
    x = vals.permute(perm) if perm else vals
    # torch 1.13 has no CPU topk for float16: take it in float32 (exact here)
    v, i = torch.topk(x.float() if dt == torch.float16 else x, k, dim=dim, largest=largest)
    v = v.to(dt)
    cases.append(dict(op="topk", x=vals, perm=perm_lua(perm), dim=dim + 1 if dim >= 0 else dim, k=k, largest=largest,
                      v=v, i=i + 1))

# one_hot
for shape, c in [((6,), 4), ((3, 5), 7), ((2, 2, 3), -1), ((), 3), ((0,), 2)]:
    lab = torch.randint(0, 3, shape, generator=g)
    cases.append(dict(op="one_hot", labels=lab + 1, c=c, r=torch.nn.functional.one_hot(lab, c)))

# masked_select with broadcasting, and nonzero
for dt, xshape, mshape, perm in [
    (torch.float32, (3, 4), (3, 4), None), (torch.int64, (3, 4), (4,), (1, 0)), (torch.float16, (2, 1, 3), (4, 1), None),
    (torch.bool, (5,), (2, 5), None), (torch.bfloat16, (), (3,), None), (torch.uint8, (4, 3, 2), (3, 1), (2, 0, 1))]:
    b, x = noncontig(xshape, dt, perm)
    mask = torch.rand(mshape, generator=g) > 0.4
    cases.append(dict(op="masked_select", x=b, perm=perm_lua(perm), mask=mask, r=x.masked_select(mask)))
for dt, shape, perm in [(torch.float32, (4, 5), None), (torch.int32, (3, 4, 2), (2, 0, 1)), (torch.bool, (7,), None),
                        (torch.float64, (2, 3, 2, 2), (3, 2, 1, 0)), (torch.bfloat16, (3, 3), (1, 0))]:
    b, x = noncontig(shape, dt, perm)
    x = x.clone()
    if dt != torch.bool:
        x = x * (torch.rand(x.shape, generator=g) > 0.5).to(dt)
    b = x.permute(inv(perm)).contiguous() if perm else x
    cases.append(dict(op="nonzero", x=b, perm=perm_lua(perm), r=(b.permute(perm) if perm else b).nonzero() + 1))

# flip, roll, tril, triu
for dt, shape, dims, perm in [(torch.float32, (5,), [0], None), (torch.int64, (3, 4), [1], (1, 0)),
                              (torch.float16, (2, 3, 4), [0, 2], None), (torch.bool, (2, 3, 4), [-1, -3, 1], (2, 0, 1))]:
    b, x = noncontig(shape, dt, perm)
    cases.append(dict(op="flip", x=b, perm=perm_lua(perm), dims=[d + 1 if d >= 0 else d for d in dims], r=x.flip(dims)))
for dt, shape, shifts, dims, perm in [(torch.float32, (7,), [3], [0], None), (torch.int64, (3, 4), [-5], None, (1, 0)),
                                      (torch.float64, (2, 3, 4), [1, -2], [2, 0], None), (torch.uint8, (4, 5), [12, 3], [0, 1], (1, 0))]:
    b, x = noncontig(shape, dt, perm)
    r = torch.roll(x, shifts, dims) if dims is not None else torch.roll(x, shifts)
    cases.append(dict(op="roll", x=b, perm=perm_lua(perm), shifts=shifts,
                      dims=[d + 1 if d >= 0 else d for d in dims] if dims is not None else None, r=r))
for dt, shape, diag, perm in [(torch.float32, (4, 4), 0, None), (torch.int64, (3, 5), 2, (1, 0)), (torch.float16, (2, 4, 3), -1, None),
                              (torch.bool, (2, 3, 3), 1, (0, 2, 1)), (torch.float64, (6, 2), -3, None)]:
    b, x = noncontig(shape, dt, perm)
    cases.append(dict(op="tri", x=b, perm=perm_lua(perm), diag=diag, lo=x.tril(diag), up=x.triu(diag)))

emit(cases)
]==])

local function input(c, rec)
  local t = T.from_torch(rec or c.x)
  if c.perm then t = t:permute(c.perm) end
  return t
end

local function idx(rec) return T.from_torch(rec) end

local ran = {}
for n, c in ipairs(R) do
  T.case(string.format("%s #%d", c.op, n), function()
    local msg = c.op .. " #" .. n
    ran[c.op] = (ran[c.op] or 0) + 1
    if c.op == "cat" then
      local xs = {}
      for i, rec in ipairs(c.xs) do
        xs[i] = T.from_torch(rec)
        if c.perms[i] then xs[i] = xs[i]:permute(c.perms[i]) end
      end
      T.match_torch(dl.cat(xs, c.dim), c.r, 0, 0, msg)
    elseif c.op == "stack" then
      local xs = {}
      for i, rec in ipairs(c.xs) do xs[i] = T.from_torch(rec) end
      T.match_torch(dl.stack(xs, c.dim), c.r, 0, 0, msg)
    elseif c.op == "index_select" then
      T.match_torch(input(c):index_select(c.dim, idx(c.idx)), c.r, 0, 0, msg)
    elseif c.op == "gather" then
      T.match_torch(input(c):gather(c.dim, idx(c.idx)), c.r, 0, 0, msg)
    elseif c.op == "scatter" then
      local x = input(c)
      T.match_torch(x:scatter(c.dim, idx(c.idx), T.from_torch(c.src)), c.r, 0, 0, msg)
      x:scatter_(c.dim, idx(c.idx), T.from_torch(c.src)) -- in place through the permuted view
      T.match_torch(x, c.r, 0, 0, msg .. " in place")
    elseif c.op == "scatter_value" then
      T.match_torch(input(c):scatter(c.dim, idx(c.idx), c.value), c.r, 0, 0, msg)
    elseif c.op == "scatter_add" then
      local tol = c.x.dtype == "float32" and 1e-5 or 0
      T.match_torch(input(c):scatter_add(c.dim, idx(c.idx), T.from_torch(c.src)), c.r, tol, tol, msg)
      local x = input(c)
      x:scatter_add_(c.dim, idx(c.idx), T.from_torch(c.src))
      T.match_torch(x, c.r, tol, tol, msg .. " in place")
    elseif c.op == "sort" then
      local v, i = input(c):sort({dim = c.dim, descending = c.desc, stable = true})
      T.match_torch(v, c.v, 0, 0, msg .. " values")
      T.match_torch(i, c.i, 0, 0, msg .. " indices")
      T.match_torch(input(c):argsort({dim = c.dim, descending = c.desc, stable = true}), c.i, 0, 0, msg .. " argsort")
    elseif c.op == "topk" then
      local v, i = input(c):topk(c.k, {dim = c.dim, largest = c.largest})
      T.match_torch(v, c.v, 0, 0, msg .. " values")
      T.match_torch(i, c.i, 0, 0, msg .. " indices")
    elseif c.op == "one_hot" then
      local r = c.c > 0 and dl.one_hot(T.from_torch(c.labels), c.c) or dl.one_hot(T.from_torch(c.labels))
      T.match_torch(r, c.r, 0, 0, msg)
    elseif c.op == "masked_select" then
      T.match_torch(input(c):masked_select(T.from_torch(c.mask)), c.r, 0, 0, msg)
    elseif c.op == "nonzero" then
      T.match_torch(input(c):nonzero(), c.r, 0, 0, msg)
    elseif c.op == "flip" then
      T.match_torch(input(c):flip(c.dims), c.r, 0, 0, msg)
    elseif c.op == "roll" then
      local shifts = #c.shifts == 1 and c.shifts[1] or c.shifts
      T.match_torch(input(c):roll(shifts, c.dims), c.r, 0, 0, msg)
    elseif c.op == "tri" then
      T.match_torch(input(c):tril(c.diag), c.lo, 0, 0, msg .. " tril")
      T.match_torch(input(c):triu(c.diag), c.up, 0, 0, msg .. " triu")
      local x = input(c)
      x:tril_(c.diag)
      T.match_torch(x, c.lo, 0, 0, msg .. " tril_")
    else
      error("unknown case " .. c.op)
    end
  end)
end

T.case("every op family was compared", function()
  for _, op in ipairs({"cat", "stack", "index_select", "gather", "scatter", "scatter_value", "scatter_add",
                       "sort", "topk", "one_hot", "masked_select", "nonzero", "flip", "roll", "tri"}) do
    T.truthy((ran[op] or 0) > 0, "no torch case for " .. op)
  end
end)

T.done()
