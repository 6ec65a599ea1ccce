-- test_index_grad.lua - backward of the joining and indexing family: cat,
-- stack, split/chunk/unbind, index_select, gather, scatter(_add), index_fill,
-- index_copy, masked_select, sort/topk values, flip, roll, tril/triu and the
-- in-place forms.  Known values, float64 finite differences, grad_fn names,
-- what never records, the leaf check of in-place ops, and saved tensors
-- modified in place.
local T = require "testlib"

local f64 = {dtype = dl.float64}
local I = function(t) return dl.tensor(t, {dtype = dl.int64}) end

local function leaf(shape) return dl.randn(shape, f64):requires_grad_() end
local function T64(t) return dl.tensor(t, f64) end

-- Float64 finite differences (T.gradcheck) at this family's tolerances:
-- each element within 1e-6 + 1e-4 * |numeric|.
local function gradcheck(fn, inputs, what) return T.gradcheck(fn, inputs, {atol = 1e-6, rtol = 1e-4}, what) end

-- x's gradient from out:backward(g), x.grad reset first.
T.case("cat and stack: slices of the gradient", function()
  local a, b = T64({{1, 2}, {3, 4}}):requires_grad_(), T64({{5, 6}}):requires_grad_()
  local c = dl.cat({a, b})
  T.eq(c.grad_fn, "CatBackward")
  c:backward(T64({{1, 2}, {3, 4}, {5, 6}}))
  T.tensor_eq(a.grad, {{1, 2}, {3, 4}})
  T.tensor_eq(b.grad, {{5, 6}})
  local s = dl.stack({a, a:t()}, 2)
  T.eq(s.grad_fn, "StackBackward")
  -- s[i][1][j] = a[i][j] and s[i][2][j] = a[j][i]
  T.tensor_eq(T.grad_of(a, s, T64({{{1, 10}, {2, 20}}, {{3, 30}, {4, 40}}})), {{1 + 2, 10 + 4}, {3 + 20, 30 + 40}})
  -- mixed dtypes: each input's gradient in its own dtype
  local p = dl.tensor({1, 2}, {dtype = dl.float32}):requires_grad_()
  local q = T64({3}):requires_grad_()
  local pq = dl.cat({p, q})
  T.eq(pq.dtype, dl.float64)
  pq:backward(T64({1, 2, 3}))
  T.eq(p.grad.dtype, dl.float32)
  T.tensor_eq(p.grad, {1, 2})
  T.tensor_eq(q.grad, {3})
  -- skipped 1-D empty inputs get empty gradients; integer inputs none
  local e = dl.zeros(0, f64):requires_grad_()
  local k = dl.tensor({{7, 8}})
  local ce = dl.cat({e, a, k})
  T.eq(ce.dtype, dl.float64)
  a.grad = nil
  ce:backward(dl.ones(3, 2, f64))
  T.shape_eq(e.grad, {0})
  T.tensor_eq(a.grad, {{1, 1}, {1, 1}})
end)

T.case("gradcheck cat and stack", function()
  gradcheck(function(a, b) return dl.cat({a, b}) end, {leaf({2, 3}), leaf({1, 3})}, "cat dim 1")
  gradcheck(function(a, b) return dl.cat({a, b, a}, 2) end, {leaf({2, 1}), leaf({2, 3})}, "cat dim 2")
  gradcheck(function(a, b) return dl.cat({a:t(), b}, -1) end, {leaf({3, 2}), leaf({2, 2})}, "cat transposed")
  gradcheck(function(a) return dl.cat({a:expand(3, 2), dl.zeros(0, f64)}) end, {leaf({1, 2})}, "cat expanded")
  gradcheck(function(a, b) return dl.cat({a, b}) end, {leaf({0, 3}), leaf({2, 3})}, "cat with an empty")
  for _, d in ipairs({1, 2, 3, -1}) do
    gradcheck(function(a, b) return dl.stack({a, b:t()}, d) end, {leaf({2, 3}), leaf({3, 2})}, "stack dim " .. d)
  end
  gradcheck(function(a, b) return dl.stack({a, b}) end, {leaf({}), leaf({})}, "stack of 0-dim")
end)

T.case("split, chunk, unbind: gradients of several pieces meet", function()
  local x = T64({{1, 2, 3}, {4, 5, 6}}):requires_grad_()
  local p = x:split(2, 2)
  T.eq(p[1].grad_fn, "SplitBackward")
  T.eq(p[2].grad_fn, "SplitBackward")
  T.eq(x:split({1, 2}, 2)[1].grad_fn, "SplitWithSizesBackward")
  T.eq(x:chunk(2, 2)[1].grad_fn, "SplitBackward")
  T.eq(x:unbind()[2].grad_fn, "UnbindBackward")
  -- the gradient of one piece only: zeros elsewhere
  T.tensor_eq(T.grad_of(x, p[2], T64({{7}, {8}})), {{0, 0, 7}, {0, 0, 8}})
  -- two pieces in one graph
  local u = x:unbind(1)
  T.tensor_eq(T.grad_of(x, dl.cat({u[2], u[1], u[2]}), T64({1, 2, 3, 4, 5, 6, 7, 8, 9})),
    {{4, 5, 6}, {1 + 7, 2 + 8, 3 + 9}})
  gradcheck(function(a) local q = a:split(2, 2); return dl.cat({q[3], q[1]}, 2) end, {leaf({3, 5})}, "split")
  gradcheck(function(a) local q = a:split({1, 0, 2}); return dl.cat({q[3], q[2], q[1], q[3]}) end,
    {leaf({3, 2})}, "split_with_sizes")
  gradcheck(function(a) local q = a:t():chunk(3, 1); return dl.cat({q[2], q[2]}) end, {leaf({2, 5})}, "chunk")
  gradcheck(function(a) local q = a:unbind(2); return dl.stack({q[3], q[1]}) end, {leaf({2, 3})}, "unbind")
  -- an empty dimension: no pieces to record
  T.eq(#leaf({0, 2}):unbind(1), 0)
end)

T.case("index_select and gather accumulate repeated indices", function()
  local x = T64({{1, 2, 3}, {4, 5, 6}}):requires_grad_()
  local s = x:index_select(2, I({3, 1, 3}))
  T.eq(s.grad_fn, "IndexSelectBackward")
  T.tensor_eq(T.grad_of(x, s, T64({{1, 2, 3}, {4, 5, 6}})), {{2, 0, 1 + 3}, {5, 0, 4 + 6}})
  local g = x:gather(1, I({{2, 2, 1}, {2, 1, 1}}))
  T.eq(g.grad_fn, "GatherBackward")
  T.tensor_eq(T.grad_of(x, g, T64({{1, 2, 3}, {4, 5, 6}})), {{0, 5, 3 + 6}, {1 + 4, 2, 0}})
  gradcheck(function(a) return a:index_select(1, I({2, 2, 1, 3})) end, {leaf({3, 4})}, "index_select dim 1")
  gradcheck(function(a) return a:t():index_select(2, I({3, 1, 3})) end, {leaf({3, 4})}, "index_select transposed")
  gradcheck(function(a) return a:index_select(-1, dl.tensor({2, 1}, {dtype = dl.int32})) end,
    {leaf({2, 3, 2})}, "index_select int32")
  gradcheck(function(a) return a:index_select(1, I({1})) end, {leaf({})}, "index_select 0-dim")
  gradcheck(function(a) return a:index_select(2, I({})) end, {leaf({2, 3})}, "index_select empty index")
  gradcheck(function(a) return a:gather(2, I({{1, 1, 3}, {2, 2, 2}})) end, {leaf({2, 3})}, "gather")
  gradcheck(function(a) return a:t():gather(1, I({{1, 2}, {2, 2}})) end, {leaf({3, 2})}, "gather transposed")
  gradcheck(function(a) return a:gather(3, I({{{2}, {1}}})) end, {leaf({2, 3, 2})}, "gather smaller index")
  gradcheck(function(a) return a:gather(1, I(1):view()) end, {leaf({})}, "gather 0-dim")
end)

T.case("scatter, scatter_add: self and src", function()
  local x = T64({{1, 2, 3}, {4, 5, 6}}):requires_grad_()
  local src = T64({{10, 20, 30}, {40, 50, 60}}):requires_grad_()
  local idx = I({{3, 1}, {2, 2}})
  local y = x:scatter(2, idx, src)
  T.eq(y.grad_fn, "ScatterBackward")
  T.tensor_eq(y, {{20, 2, 10}, {4, 50, 6}})
  y:backward(T64({{1, 2, 3}, {4, 5, 6}}))
  T.tensor_eq(x.grad, {{0, 2, 0}, {4, 0, 6}})
  T.tensor_eq(src.grad, {{3, 1, 0}, {5, 5, 0}}) -- gathered, padded to src's shape
  x.grad, src.grad = nil, nil
  local z = x:scatter_add(2, idx, src)
  T.eq(z.grad_fn, "ScatterAddBackward")
  z:backward(T64({{1, 2, 3}, {4, 5, 6}}))
  T.tensor_eq(x.grad, {{1, 2, 3}, {4, 5, 6}})
  T.tensor_eq(src.grad, {{3, 1, 0}, {5, 5, 0}})
  -- a value: only self gets a gradient
  x.grad = nil
  local v = x:scatter(1, I({{2, 1, 2}}), 0.5)
  T.eq(v.grad_fn, "ScatterBackward")
  T.tensor_eq(T.grad_of(x, v, dl.ones(2, 3, f64)), {{1, 0, 1}, {0, 1, 0}})
  gradcheck(function(a, b) return a:scatter(1, I({{2, 1, 3}, {3, 2, 1}}), b) end,
    {leaf({3, 3}), leaf({2, 3})}, "scatter")
  gradcheck(function(a, b) return a:t():scatter(2, I({{2}, {1}}), b:t()) end,
    {leaf({2, 2}), leaf({3, 2})}, "scatter transposed, src larger")
  gradcheck(function(a) return a:scatter(2, I({{1, 2}}), 3.0) end, {leaf({2, 3})}, "scatter value")
  gradcheck(function(a, b) return a:scatter_add(1, I({{1, 1, 2}, {1, 1, 1}}), b) end,
    {leaf({2, 3}), leaf({2, 3})}, "scatter_add repeated")
  gradcheck(function(a, b) return a:scatter_add(2, I({{}, {}}), b) end,
    {leaf({2, 3}), leaf({2, 2})}, "scatter_add empty index")
end)

T.case("index_fill and index_copy", function()
  local x = T64({{1, 2, 3}, {4, 5, 6}}):requires_grad_()
  local f = x:index_fill(2, I({1, -1}), 9)
  T.eq(f.grad_fn, "IndexFillBackward")
  T.tensor_eq(f, {{9, 2, 9}, {9, 5, 9}})
  T.tensor_eq(T.grad_of(x, f, dl.ones(2, 3, f64)), {{0, 1, 0}, {0, 1, 0}})
  -- a tensor value that requires grad: the sum over the filled slices (repeats once)
  local val = T64(2):requires_grad_()
  local fv = x:index_fill(1, I({2, 2}), val)
  fv:backward(T64({{1, 2, 3}, {4, 5, 6}}))
  T.tensor_eq(val.grad, 15)
  local src = T64({{7, 8}, {9, 10}}):requires_grad_()
  local c = x:index_copy(2, I({3, 1}), src)
  T.eq(c.grad_fn, "IndexCopyBackward")
  T.tensor_eq(c, {{8, 2, 7}, {10, 5, 9}})
  x.grad = nil
  c:backward(T64({{1, 2, 3}, {4, 5, 6}}))
  T.tensor_eq(x.grad, {{0, 2, 0}, {0, 5, 0}})
  T.tensor_eq(src.grad, {{3, 1}, {6, 4}})
  gradcheck(function(a) return a:index_fill(1, I({1, 3}), -1) end, {leaf({3, 2})}, "index_fill")
  gradcheck(function(a, v) return a:t():index_fill(2, I({2}), v) end, {leaf({3, 2}), leaf({})},
    "index_fill tensor value")
  gradcheck(function(a, b) return a:index_copy(1, I({3, 1}), b) end, {leaf({3, 2}), leaf({2, 2})}, "index_copy")
  gradcheck(function(a, b) return a:index_copy(1, I({1}), b) end, {leaf({}), leaf({})}, "index_copy 0-dim")
end)

T.case("masked_select: back to the masked positions, summed over broadcasting", function()
  local x = T64({{1, 2, 3}, {4, 5, 6}}):requires_grad_()
  local m = dl.tensor({{true, false, true}, {false, true, false}})
  local s = x:masked_select(m)
  T.eq(s.grad_fn, "MaskedSelectBackward")
  T.tensor_eq(T.grad_of(x, s, T64({1, 2, 3})), {{1, 0, 2}, {0, 3, 0}})
  -- x broadcast against a bigger mask: the repeated positions add up
  local r = T64({{1}, {2}}):requires_grad_()
  local sr = r:masked_select(m)
  T.tensor_eq(sr, {1, 1, 2})
  T.tensor_eq(T.grad_of(r, sr, T64({1, 2, 3})), {{3}, {3}})
  gradcheck(function(a) return a:masked_select(dl.tensor({true, false, true})) end, {leaf({2, 3})}, "masked_select")
  gradcheck(function(a) return a:t():masked_select(dl.tensor({{{true}}, {{false}}})) end, {leaf({3, 2})},
    "masked_select broadcast")
  gradcheck(function(a) return a:masked_select(dl.zeros(2, 3, {dtype = dl.bool})) end, {leaf({3})},
    "masked_select nothing")
end)

T.case("sort and topk: values route back to their positions", function()
  local x = T64({{3, 1, 2}, {5, 6, 4}}):requires_grad_()
  local v, i = x:sort(2)
  T.eq(v.grad_fn, "SortBackward")
  T.eq(i.requires_grad, false)
  T.tensor_eq(i, {{2, 3, 1}, {3, 1, 2}})
  T.tensor_eq(T.grad_of(x, v, T64({{1, 2, 3}, {4, 5, 6}})), {{3, 1, 2}, {5, 6, 4}})
  local tv, ti = x:topk(2, 1, false)
  T.eq(tv.grad_fn, "TopkBackward")
  T.eq(ti.requires_grad, false)
  T.tensor_eq(T.grad_of(x, tv, T64({{1, 2, 3}, {4, 5, 6}})), {{1, 2, 3}, {4, 5, 6}})
  gradcheck(function(a) return (a:sort(1)) end, {leaf({4, 3})}, "sort dim 1")
  gradcheck(function(a) return (a:t():sort{descending = true}) end, {leaf({4, 3})}, "sort descending transposed")
  gradcheck(function(a) return (a:topk(2)) end, {leaf({3, 5})}, "topk")
  gradcheck(function(a) return (a:topk(3, 1, false)) end, {leaf({4, 2})}, "topk smallest")
  gradcheck(function(a) return (a:topk(0)) end, {leaf({3})}, "topk 0")
  gradcheck(function(a) return (a:sort()) end, {leaf({})}, "sort 0-dim")
end)

T.case("flip, roll, tril, triu", function()
  local x = T64({{1, 2, 3}, {4, 5, 6}}):requires_grad_()
  local g = T64({{1, 2, 3}, {4, 5, 6}})
  local f = x:flip(1, 2)
  T.eq(f.grad_fn, "FlipBackward")
  T.tensor_eq(T.grad_of(x, f, g), {{6, 5, 4}, {3, 2, 1}})
  local r = x:roll(1, 2)
  T.eq(r.grad_fn, "RollBackward")
  T.tensor_eq(T.grad_of(x, r, g), {{2, 3, 1}, {5, 6, 4}})
  T.tensor_eq(T.grad_of(x, x:roll(-2), g), {{5, 6, 1}, {2, 3, 4}})
  local tl = x:tril()
  T.eq(tl.grad_fn, "TrilBackward")
  T.tensor_eq(T.grad_of(x, tl, g), {{1, 0, 0}, {4, 5, 0}})
  T.eq(x:triu(1).grad_fn, "TriuBackward")
  T.tensor_eq(T.grad_of(x, x:triu(1), g), {{0, 2, 3}, {0, 0, 6}})
  gradcheck(function(a) return a:flip(1, 3) end, {leaf({2, 3, 2})}, "flip")
  gradcheck(function(a) return a:t():flip({-1}) end, {leaf({2, 3})}, "flip transposed")
  gradcheck(function(a) return a:flip(1) end, {leaf({})}, "flip 0-dim")
  gradcheck(function(a) return a:roll({1, -4}, {1, 2}) end, {leaf({3, 3})}, "roll dims")
  gradcheck(function(a) return a:t():roll(7) end, {leaf({2, 3})}, "roll flattened")
  gradcheck(function(a) return a:roll(math.mininteger, 1) end, {leaf({3})}, "roll by mininteger")
  for _, d in ipairs({0, 1, -1, 5, -5}) do
    gradcheck(function(a) return a:tril(d) end, {leaf({2, 3, 4})}, "tril " .. d)
    gradcheck(function(a) return a:t():triu(d) end, {leaf({4, 3})}, "triu " .. d)
  end
end)

T.case("in-place forms on non-leaves record", function()
  local idx = I({{2, 1}, {3, 3}})
  local src = leaf({2, 3})
  gradcheck(function(a, b) local y = a:clone(); y:scatter_(1, idx, b); return y end,
    {leaf({3, 2}), leaf({2, 2})}, "scatter_")
  gradcheck(function(a, b) local y = a:clone(); y:scatter_add_(2, I({{1, 1}}), b); return y end,
    {leaf({2, 3}), src}, "scatter_add_")
  gradcheck(function(a) local y = a:clone(); y:scatter_(2, I({{1}}), 2.5); return y end,
    {leaf({2, 3})}, "scatter_ value")
  gradcheck(function(a, v) local y = a:clone(); y:index_fill_(2, I({2}), v); return y end,
    {leaf({2, 3}), leaf({})}, "index_fill_")
  gradcheck(function(a, b) local y = a:clone(); y:index_copy_(1, I({2}), b); return y end,
    {leaf({2, 3}), leaf({1, 3})}, "index_copy_")
  gradcheck(function(a) local y = a:clone(); y:tril_(-1); return y end, {leaf({3, 3})}, "tril_")
  gradcheck(function(a) local y = a:clone(); y:triu_(); y:tril_(1); return y end, {leaf({3, 4})}, "triu_ tril_")
  local y = leaf({2, 3}):clone()
  y:scatter_(2, I({{1}}), src)
  T.eq(y.grad_fn, "ScatterBackward")
  y:tril_()
  T.eq(y.grad_fn, "TrilBackward")
  -- self not requiring grad, src requiring it: self joins the graph
  local z = dl.zeros(2, 3, f64)
  z:index_copy_(1, I({2}), src:narrow(1, 1, 1))
  T.eq(z.requires_grad, true)
  T.eq(z.grad_fn, "IndexCopyBackward")
  src.grad = nil
  z:backward(dl.ones(2, 3, f64))
  T.tensor_eq(src.grad, {{1, 1, 1}, {0, 0, 0}})
  -- in no_grad nothing records
  local w = dl.zeros(2, 3, f64)
  dl.no_grad(function() w:scatter_(1, I({{1, 2, 1}}), src) end)
  T.eq(w.requires_grad, false)
end)

T.case("in-place forms refuse a leaf that requires grad", function()
  local x = leaf({2, 3})
  T.raises(function() x:scatter_(1, I({{1}}), leaf({1, 1})) end, "scatter_: a leaf tensor that requires grad")
  T.raises(function() x:scatter_(1, I({{1}}), 1) end, "leaf")
  T.raises(function() x:scatter_add_(1, I({{1}}), leaf({1, 1})) end, "scatter_add_: a leaf")
  T.raises(function() x:index_fill_(1, I({1}), 0) end, "index_fill_: a leaf")
  T.raises(function() x:index_copy_(1, I({1}), leaf({1, 3})) end, "index_copy_: a leaf")
  T.raises(function() x:tril_() end, "tril_: a leaf")
  T.raises(function() x:triu_() end, "triu_: a leaf")
  -- x is untouched, and no_grad allows it
  local before = x:detach():clone()
  T.tensor_eq(x, before)
  dl.no_grad(function() x:tril_() end)
  T.tensor_eq(x, before:tril())
end)

T.case("saved tensors modified in place fail the backward", function()
  -- masked_select keeps the caller's mask
  local x = leaf({2, 3})
  local m = dl.tensor({true, false, true})
  local s = x:masked_select(m)
  m:fill_(false)
  T.raises(function() s:backward(dl.ones(4, f64)) end, "MaskedSelectBackward: a tensor of shape [3] needed")
  -- the in-place ops of this family bump the version of what they write
  for _, write in ipairs({
    function(t) t:scatter_(1, I({{1}}), 0) end,
    function(t) t:scatter_add_(1, I({{1}}), dl.ones(1, 1, f64)) end,
    function(t) t:index_fill_(1, I({1}), 0) end,
    function(t) t:index_copy_(1, I({1}), dl.ones(1, 3, f64)) end,
    function(t) t:tril_() end,
  }) do
    local a = leaf({2, 3})
    local c = a:clone()
    local p = dl.mm(c, leaf({3, 2})) -- saves c for the other operand's gradient
    write(c)
    T.raises(function() p:backward(dl.ones(2, 2, f64)) end, "modified by an in-place operation")
  end
  -- the indices sort returns can be rewritten freely: the node has its own copy
  local y = leaf({4})
  local v, i = y:sort()
  i:fill_(1)
  v:backward(dl.ones(4, f64))
  T.tensor_eq(y.grad, {1, 1, 1, 1})
end)

T.case("bad input while recording: errors, nothing recorded, state intact", function()
  local x = leaf({2, 3})
  local y = x:clone()
  local src = dl.randn(2, 3):requires_grad_() -- float32 against float64 self
  T.raises(function() y:scatter_(1, I({{1}}), src) end, "src dtype float32 does not match self dtype float64")
  T.eq(y.grad_fn, "CloneBackward", "history unchanged by a failed in-place op")
  T.raises(function() y:index_copy_(1, I({3}), leaf({1, 3})) end, "index_copy_: index 3 is out of range")
  T.eq(y.grad_fn, "CloneBackward")
  T.raises(function() y:index_fill_(5, I({1}), 0) end, "dimension")
  T.raises(function() x:gather(1, I({{3}})) end, "gather: index 3 is out of range")
  T.raises(function() x:index_select(1, I({{1}})) end, "index_select: index must be a 1-D tensor")
  T.raises(function() x:masked_select(dl.ones(2, 3)) end, "masked_select: mask must be a bool tensor")
  T.raises(function() dl.cat({x, leaf({2, 2})}) end, "cat: sizes of tensors must match")
  T.raises(function() dl.stack({x, leaf({3, 2})}) end, "stack: tensors must all have the same shape")
  T.raises(function() x:split({1, 1}, 2) end, "split: split sizes add up to 2 but dimension 2 has size 3")
  T.raises(function() x:topk(4, 2) end, "topk: k (4) is out of range")
  T.raises(function() x:roll({1, 2}, 1) end, "roll: 2 shifts given for 1 dimensions")
  T.raises(function() leaf({3}):tril() end, "tril: input must have at least 2 dimensions")
  -- the graph still works afterwards
  y:backward(dl.ones(2, 3, f64))
  T.tensor_eq(x.grad, dl.ones(2, 3))
end)

T.case("what never records", function()
  local x = leaf({2, 3})
  T.eq(x:argsort().requires_grad, false)
  T.eq(x:nonzero().requires_grad, false)
  local _, i = x:topk(1)
  T.eq(i.requires_grad, false)
  T.eq(dl.one_hot(I({1, 2})).requires_grad, false)
  -- integer data through joining ops
  T.eq(dl.cat({I({1}), I({2})}).requires_grad, false)
  -- nothing requires grad: no node
  local y = dl.randn(2, 3)
  for _, t in ipairs({dl.cat({y, y}), y:index_select(1, I({1})), y:flip(1), y:roll(1), y:tril(),
                      y:masked_select(dl.tensor({true, false, true})), y:split(1)[1], (y:sort())}) do
    T.eq(t.requires_grad, false)
    T.eq(t.grad_fn, nil)
  end
  -- no_grad
  T.eq(dl.no_grad(function() return dl.stack({x, x}) end).requires_grad, false)
  T.eq(dl.no_grad(function() return x:split(1)[1] end).requires_grad, false)
end)

T.case("float32 and half dtypes keep their gradient dtype", function()
  for _, dt in ipairs({dl.float32, dl.float16, dl.bfloat16}) do
    local x = dl.tensor({{1, 2}, {3, 4}}, {dtype = dt}):requires_grad_()
    local y = dl.cat({x:index_select(1, I({2, 2})), x:flip(2), (x:sort(2, true))})
    y:backward(dl.ones(6, 2, {dtype = dt}))
    T.eq(x.grad.dtype, dt)
    T.tensor_eq(x.grad:float(), {{2, 2}, {4, 4}})
  end
end)

T.done()
