-- test_linalg_grad.lua - backward of matmul (1-D, 2-D, batched, broadcast
-- batches), mm, bmm, addmm, dot, mv, outer: known values, float64 finite
-- differences over shapes and layouts, grad_fn names, what never records,
-- and saved operands modified in place.
local T = require "testlib"

local f64 = {dtype = dl.float64}

-- A float64 leaf of the given shape (random), laid out as asked: "c"
-- contiguous, "t" a transposed view of the last two dims (a leaf itself).
local function leaf(shape, layout)
  if layout == "t" then
    local s = {table.unpack(shape)}
    s[#s - 1], s[#s] = s[#s], s[#s - 1]
    return dl.randn(s, f64):transpose(-2, -1):requires_grad_()
  end
  return dl.randn(shape, f64):requires_grad_()
end

-- Float64 finite differences (T.gradcheck) at this family's tolerances:
-- each element within 1e-6 + 1e-4 * |numeric|.
local function gradcheck(fn, inputs, what) return T.gradcheck(fn, inputs, {atol = 1e-6, rtol = 1e-4}, what) end

T.case("mm known values", function()
  local a = dl.tensor({{1, 2}, {3, 4}}, f64):requires_grad_()
  local b = dl.tensor({{5, 6, 7}, {8, 9, 10}}, f64):requires_grad_()
  local y = dl.mm(a, b)
  T.eq(y.grad_fn, "MmBackward")
  y:backward(dl.tensor({{1, 0, 0}, {0, 1, 2}}, f64))
  -- grad a = G @ b^T, grad b = a^T @ G
  T.tensor_eq(a.grad, {{5, 8}, {6 + 14, 9 + 20}})
  T.tensor_eq(b.grad, {{1, 3, 6}, {2, 4, 8}})
end)

T.case("dot, mv, outer known values", function()
  local a = dl.tensor({1, 2, 3}, f64):requires_grad_()
  local b = dl.tensor({4, 5, 6}, f64):requires_grad_()
  local y = dl.dot(a, b)
  T.eq(y.grad_fn, "DotBackward")
  y:backward(dl.tensor(2.0, f64))
  T.tensor_eq(a.grad, {8, 10, 12})
  T.tensor_eq(b.grad, {2, 4, 6})

  local m = dl.tensor({{1, 2, 3}, {4, 5, 6}}, f64):requires_grad_()
  local v = dl.tensor({1, 0, -1}, f64):requires_grad_()
  local z = dl.mv(m, v)
  T.eq(z.grad_fn, "MvBackward")
  z:backward(dl.tensor({1, 2}, f64))
  T.tensor_eq(m.grad, {{1, 0, -1}, {2, 0, -2}})
  T.tensor_eq(v.grad, {9, 12, 15})

  local p = dl.tensor({1, 2}, f64):requires_grad_()
  local q = dl.tensor({3, 4, 5}, f64):requires_grad_()
  local o = dl.outer(p, q)
  T.eq(o.grad_fn, "OuterBackward")
  o:backward(dl.ones(2, 3, f64))
  T.tensor_eq(p.grad, {12, 12})
  T.tensor_eq(q.grad, {3, 3, 3})
end)

T.case("addmm known values: beta, alpha, broadcast input", function()
  local inp = dl.tensor({1, 2}, f64):requires_grad_()
  local m1 = dl.tensor({{1, 2}, {3, 4}, {5, 6}}, f64):requires_grad_()
  local m2 = dl.eye(2, f64):requires_grad_()
  local y = dl.addmm(inp, m1, m2, {beta = 3, alpha = 2})
  T.eq(y.grad_fn, "AddmmBackward")
  T.tensor_eq(y, {{5, 10}, {9, 14}, {13, 18}})
  y:backward(dl.ones(3, 2, f64))
  T.tensor_eq(inp.grad, {9, 9})          -- beta * column sums
  T.tensor_eq(m1.grad, {{2, 2}, {2, 2}, {2, 2}})
  T.tensor_eq(m2.grad, {{18, 18}, {24, 24}})
end)

T.case("matmul cases keep PyTorch's names", function()
  local function name(sa, sb)
    return dl.matmul(dl.randn(sa):requires_grad_(), dl.randn(sb)).grad_fn
  end
  T.eq(name({3}, {3}), "DotBackward")
  T.eq(name({2, 3}, {3}), "MvBackward")
  T.eq(name({2, 3}, {3, 4}), "MmBackward")
  T.eq(name({2, 2, 3}, {3, 4}), "MatmulBackward")
  T.eq(dl.bmm(dl.randn(2, 2, 3):requires_grad_(), dl.randn(2, 3, 1)).grad_fn, "BmmBackward")
end)

T.case("gradcheck matmul over 1-D, 2-D, batched and broadcast shapes", function()
  local shapes = {
    {{4}, {4}}, {{3, 4}, {4}}, {{4}, {4, 5}}, {{3, 4}, {4, 5}},
    {{2, 3, 4}, {4, 5}},          -- b's gradient folds the batch
    {{2, 3, 4}, {4}}, {{4}, {2, 4, 3}},
    {{3, 4}, {2, 4, 5}},          -- a's gradient sums over b's batch
    {{2, 1, 3, 4}, {5, 4, 2}},    -- both broadcast
    {{2, 3, 4}, {2, 4, 5}}, {{1, 3, 4}, {2, 4, 2}},
    {{2, 3, 1}, {1, 2}},          -- K = 1
  }
  for _, s in ipairs(shapes) do
    local what = "matmul " .. T.fmt(s[1]) .. " x " .. T.fmt(s[2])
    gradcheck(dl.matmul, {leaf(s[1]), leaf(s[2])}, what)
    if #s[1] >= 2 and #s[2] >= 2 then
      gradcheck(dl.matmul, {leaf(s[1], "t"), leaf(s[2], "t")}, what .. " transposed")
    end
  end
  -- one operand not requiring grad, the other through a view
  local a, b = leaf({3, 4}), dl.randn(5, 4, f64)
  gradcheck(function(x) return dl.matmul(x, b:t()) end, {a}, "matmul with a constant")
  gradcheck(function(x) return dl.matmul(b, x:t()) end, {a}, "matmul with a constant (2)")
end)

T.case("gradcheck mm, bmm, mv, dot, outer, addmm", function()
  gradcheck(dl.mm, {leaf({3, 4}), leaf({4, 2})}, "mm")
  gradcheck(dl.mm, {leaf({3, 4}, "t"), leaf({4, 2}, "t")}, "mm transposed")
  gradcheck(dl.bmm, {leaf({2, 3, 4}), leaf({2, 4, 2})}, "bmm")
  gradcheck(dl.bmm, {leaf({2, 3, 4}, "t"), leaf({2, 4, 2}, "t")}, "bmm transposed")
  gradcheck(dl.mv, {leaf({3, 4}), leaf({4})}, "mv")
  gradcheck(dl.mv, {leaf({3, 4}, "t"), leaf({4})}, "mv transposed")
  gradcheck(dl.dot, {leaf({5}), leaf({5})}, "dot")
  gradcheck(dl.outer, {leaf({3}), leaf({4})}, "outer")
  for _, c in ipairs({{{3, 2}, 1, 1}, {{2}, 2, -0.5}, {{3, 1}, 0.5, 3}, {{}, 1, 2}, {{1, 2}, 0, 1},
                      {{3, 2}, 1.5, 0}}) do
    local ishape, beta, alpha = c[1], c[2], c[3]
    gradcheck(function(i, p, q) return dl.addmm(i, p, q, {beta = beta, alpha = alpha}) end,
      {leaf(ishape), leaf({3, 4}), leaf({4, 2})},
      string.format("addmm input %s beta %g alpha %g", T.fmt(ishape), beta, alpha))
  end
  gradcheck(function(i, p, q) return dl.addmm(i, p, q) end,
    {leaf({3, 2}), leaf({3, 4}, "t"), leaf({4, 2}, "t")}, "addmm transposed")
end)

T.case("outer promotes: gradients in each input's dtype", function()
  local a = dl.tensor({1, 2}, {dtype = dl.float32}):requires_grad_()
  local b = dl.tensor({3, 4, 5}, f64):requires_grad_()
  local y = dl.outer(a, b)
  T.eq(y.dtype, dl.float64)
  y:backward(dl.ones(2, 3, f64))
  T.eq(a.grad.dtype, dl.float32)
  T.tensor_eq(a.grad, {12, 12})
  T.eq(b.grad.dtype, dl.float64)
  T.tensor_eq(b.grad, {3, 3, 3})
  -- an integer operand gets nothing, the other still does
  local i = dl.tensor({1, 2})
  local c = dl.tensor({1.5, 2.5}):requires_grad_()
  local z = dl.outer(i, c)
  z:backward(dl.ones(2, 2))
  T.tensor_eq(c.grad, {3, 3})
end)

T.case("float16 and bfloat16 gradients", function()
  for _, dt in ipairs({dl.float16, dl.bfloat16}) do
    local a = dl.tensor({{1, 2}, {3, 4}}, {dtype = dt}):requires_grad_()
    local b = dl.tensor({{1, 0}, {0.5, 1}}, {dtype = dt}):requires_grad_()
    dl.matmul(a, b):backward(dl.ones(2, 2, {dtype = dt}))
    T.eq(a.grad.dtype, dt)
    T.tensor_eq(a.grad, {{1, 1.5}, {1, 1.5}})
    T.tensor_eq(b.grad, {{4, 4}, {6, 6}})
  end
end)

T.case("empty operands", function()
  local a = dl.zeros(0, 3):requires_grad_()
  local b = dl.randn(3, 2):requires_grad_()
  local y = dl.matmul(a, b)
  y:backward(dl.zeros(0, 2))
  T.shape_eq(a.grad, {0, 3})
  T.tensor_eq(b.grad, dl.zeros(3, 2))
  local p = dl.zeros(2, 0):requires_grad_()
  local q = dl.zeros(0, 3):requires_grad_()
  dl.mm(p, q):backward(dl.ones(2, 3))
  T.shape_eq(p.grad, {2, 0})
  T.shape_eq(q.grad, {0, 3})
  local u = dl.zeros(2, 0, 3):requires_grad_()
  dl.matmul(u, dl.randn(3, 4)):backward(dl.ones(2, 0, 4))
  T.shape_eq(u.grad, {2, 0, 3})
end)

T.case("nothing records without grad, in no_grad, or for integers", function()
  local a, b = dl.randn(2, 3), dl.randn(3, 2)
  local y = dl.matmul(a, b)
  T.eq(y.requires_grad, false)
  T.eq(y.grad_fn, nil)
  local r = dl.randn(2, 3):requires_grad_()
  T.eq(dl.no_grad(function() return dl.mm(r, b) end).requires_grad, false)
  local i = dl.mm(dl.ones(2, 2, {dtype = dl.int64}), dl.ones(2, 2, {dtype = dl.int64}))
  T.eq(i.requires_grad, false)
  -- only the operand that requires grad gets a gradient
  local x = dl.randn(2, 3):requires_grad_()
  dl.mm(x, b):backward(dl.ones(2, 2))
  T.truthy(x.grad)
  T.eq(b.grad, nil)
end)

T.case("a saved operand modified in place fails the backward", function()
  local a = dl.randn(2, 3):requires_grad_()
  local b = dl.randn(3, 2)
  local y = dl.mm(a, b)
  b:add_(1)
  T.raises(function() y:backward(dl.ones(2, 2)) end, "modified by an in-place operation")
  -- only what a gradient needs is saved: with d alone requiring grad, c is
  -- saved and d is not, so writing into d leaves the backward valid
  local c = dl.randn(2, 3)
  local dleaf = dl.randn(3, 2):requires_grad_()
  local d = dleaf:clone()
  local z = dl.mm(c, d)
  dl.no_grad(function() d:add_(1) end)
  z:backward(dl.ones(2, 2))
  T.tensor_eq(dleaf.grad, dl.mm(c:t(), dl.ones(2, 2)), 1e-5)
  local z2 = dl.mm(c, dleaf:clone())
  c:mul_(2)
  T.raises(function() z2:backward(dl.ones(2, 2)) end, "MmBackward")
end)

T.case("bad input while recording", function()
  local a = leaf({2, 3})
  T.raises(function() dl.matmul(a, leaf({2, 3})) end, "matmul: shapes [2, 3] and [2, 3] cannot be multiplied")
  T.raises(function() dl.mm(a, dl.randn(3, 2)) end, "mm: expected m1 and m2 to have the same dtype")
  T.raises(function() dl.addmm(leaf({3}), a, leaf({3, 2})) end, "addmm: input of shape [3] cannot be broadcast")
  T.raises(function() dl.bmm(leaf({2, 2, 3}), leaf({3, 3, 1})) end, "bmm: batch sizes differ")
  T.raises(function() dl.dot(leaf({2}), leaf({3})) end, "dot: expected 1-D tensors of the same size")
  local y = dl.mm(a, leaf({3, 2}))
  y:backward(dl.ones(2, 2, f64))
  T.truthy(a.grad)
end)

T.case("second backward needs retain_graph", function()
  local a = dl.randn(2, 3):requires_grad_()
  local y = dl.mm(a, dl.randn(3, 2))
  y:backward(dl.ones(2, 2))
  T.raises(function() y:backward(dl.ones(2, 2)) end, "second time")
  local z = dl.mm(a, dl.randn(3, 2))
  z:backward(dl.ones(2, 2), {retain_graph = true})
  z:backward(dl.ones(2, 2))
end)

T.case("chains: a two-layer product", function()
  local x = leaf({4, 3})
  local w1, w2 = leaf({3, 5}), leaf({5, 2})
  gradcheck(function(a, p, q) return dl.matmul(dl.matmul(a, p), q) end, {x, w1, w2}, "chain")
end)

T.done()
