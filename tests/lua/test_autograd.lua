-- test_autograd.lua - the engine: graphs of views, accumulation, retain_graph,
-- grad mode, autograd.grad, custom Functions, in-place detection, long chains.
local T = require "testlib"

local function leaf(t) return t:double():requires_grad_() end

T.case("views route gradients", function()
  local x = leaf(dl.arange(12):view(3, 4))
  local y = x:t():reshape(2, 6):select(1, 2):narrow(1, 2, 3)
  y:backward(dl.tensor({1.0, 2.0, 3.0}, {dtype = dl.float64}))
  T.tensor_eq(x.grad, {{0, 0, 0, 3}, {0, 0, 1, 0}, {0, 0, 2, 0}})
  T.eq(x.is_leaf, true)
  T.eq(y.is_leaf, false)
  T.eq(y.grad_fn, "NarrowBackward")
end)

T.case("expand sums, permute and unsqueeze invert", function()
  local x = leaf(dl.tensor({{1, 2, 3}}))
  local y = x:expand(4, 3):permute(2, 1):unsqueeze(1):squeeze(1):contiguous():clone()
  y:backward(dl.ones(3, 4, {dtype = dl.float64}))
  T.tensor_eq(x.grad, {{4, 4, 4}})
end)

T.case("gradients accumulate across backward calls", function()
  local x = leaf(dl.ones(2))
  x:view(2, 1):backward(dl.ones(2, 1, {dtype = dl.float64}))
  x:view(1, 2):backward(dl.full({1, 2}, 2, {dtype = dl.float64}))
  T.tensor_eq(x.grad, {3, 3})
  x.grad = nil
  T.eq(x.grad, nil)
end)

T.case("implicit gradient only for one element", function()
  local x = leaf(dl.ones(3))
  T.raises(function() x:view(3, 1):backward() end, "one-element")
  x:select(1, 2):backward()
  T.tensor_eq(x.grad, {0, 1, 0})
end)

T.case("retain_graph and the second backward", function()
  local x = leaf(dl.ones(2, 2))
  local y = x:t():select(1, 1)
  y:backward(dl.ones(2, {dtype = dl.float64}), {retain_graph = true})
  y:backward(dl.ones(2, {dtype = dl.float64}))
  T.tensor_eq(x.grad, {{2, 0}, {2, 0}})
end)

T.case("grad mode", function()
  local x = leaf(dl.ones(2))
  T.eq(dl.is_grad_enabled(), true)
  local y = dl.no_grad(function() return x:view(2, 1) end)
  T.eq(y.requires_grad, false)
  T.eq(dl.is_grad_enabled(), true)
  local prev = dl.set_grad_enabled(false)
  T.eq(prev, true)
  T.eq(x:view(1, 2).requires_grad, false)
  dl.set_grad_enabled(true)
  T.eq(x:view(1, 2).requires_grad, true)
  T.raises(function() dl.no_grad(function() error("boom") end) end, "boom")
  T.eq(dl.is_grad_enabled(), true, "mode restored after an error")
  local a, b = dl.no_grad(function(p, q) return p, q end, 1, 2)
  T.eq(a + b, 3)
end)

T.case("autograd.grad leaves .grad alone", function()
  local x = leaf(dl.ones(3))
  local y = x:view(3, 1):select(2, 1)
  local g = dl.autograd.grad(y:select(1, 3), x)
  T.tensor_eq(g, {0, 0, 1})
  T.eq(x.grad, nil)
  local z = leaf(dl.ones(1))
  local gs = dl.autograd.grad(y:select(1, 1), {x, z}, {allow_unused = true})
  T.tensor_eq(gs[1], {1, 0, 0})
  T.eq(gs[2], nil)
  T.raises(function() dl.autograd.grad(x:select(1, 1), {z}) end, "not used")
end)

T.case("detach and requires_grad", function()
  local x = leaf(dl.ones(2))
  local d = x:detach()
  T.eq(d.requires_grad, false)
  T.raises(function() dl.ones(2, {dtype = dl.int64}):requires_grad_() end, "floating")
  local y = x:view(2, 1)
  T.raises(function() y:requires_grad_(false) end, "non-leaf")
  local w = dl.ones(2)
  w.requires_grad = true
  T.eq(w.requires_grad, true)
  T.raises(function() w.grad = dl.ones(3) end, "shape")
  T.raises(function() w.shape = 3 end, "cannot set")
end)

T.case("in-place on a leaf that requires grad", function()
  local x = leaf(dl.ones(2))
  T.raises(function() x:fill_(3) end, "leaf")
  T.raises(function() x:zero_() end, "leaf")
  dl.no_grad(function() x:fill_(3) end)
  T.tensor_eq(x, {3, 3})
end)

T.case("custom Function", function()
  local Cube = dl.autograd.Function{
    forward = function(ctx, x)
      ctx:save_for_backward(x)
      local c = x:clone()
      local flat = c:view(-1)
      for i = 1, flat:numel() do flat[i] = flat[i]:item() ^ 3 end
      return c
    end,
    backward = function(ctx, g)
      local x = ctx.saved_tensors[1]
      local r = x:clone()
      local flat, gf = r:view(-1), g:contiguous():view(-1)
      for i = 1, flat:numel() do flat[i] = 3 * flat[i]:item() ^ 2 * gf[i]:item() end
      return r
    end,
  }
  local x = leaf(dl.tensor({1, 2, 3}))
  local y = Cube(x)
  T.tensor_eq(y, {1, 8, 27})
  T.eq(y.requires_grad, true)
  y:backward(dl.ones(3, {dtype = dl.float64}))
  T.tensor_eq(x.grad, {3, 12, 27})
  -- without inputs requiring grad nothing is recorded
  T.eq(Cube(dl.tensor({2.0})).requires_grad, false)
  local Bad = dl.autograd.Function{forward = function(_, x) return x:clone() end,
                                   backward = function() error("nope") end}
  T.raises(function() Bad(leaf(dl.ones(1))):backward() end, "nope")
end)

T.case("gradcheck on views", function()
  local x = leaf(dl.randn(3, 4))
  T.gradcheck(function(a) return a:t():narrow(1, 2, 2):reshape(-1) end, {x})
end)

T.case("a long chain frees without overflowing the stack", function()
  local x = leaf(dl.ones(1))
  local y = x
  for _ = 1, 100000 do y = y:view(1) end
  y:backward()
  T.tensor_eq(x.grad, {1})
  y = nil
  collectgarbage()
end)

T.case("gradcheck takes dense non-contiguous inputs, refuses gapped ones", function()
  local A = dl.autograd
  local x = dl.randn(2, 3, 4, 5, {dtype = dl.float64}):contiguous({memory_format = "channels_last"})
  x:requires_grad_(true)
  T.eq(x:is_contiguous(), false)
  T.truthy(A.gradcheck(function(t) return (t * t):sum(2) end, {x}))
  local y = dl.randn(4, 3, {dtype = dl.float64}):t():requires_grad_(true)
  T.truthy(A.gradcheck(function(t) return t:exp() * dl.arange(1, 5):double() end, {y}))
  -- a wrong backward is still caught through the permuted order
  local wrong = A.Function{forward = function(_, t) return t * 2 end,
    backward = function(_, g) return g * 3 end}
  local ok, msg = A.gradcheck(function(t) return wrong(t) end, {y}, {raise = false})
  T.eq(ok, false)
  T.truthy(msg:match("analytic"), msg)
  local z = dl.randn(4, 6, {dtype = dl.float64}):narrow(2, 1, 3):requires_grad_(true)
  T.raises(function() A.gradcheck(function(t) return t * 2 end, {z}) end, "not dense")
end)

T.case("t[i] = v on a tensor with history: gradients as PyTorch's", function()
  -- b = [1, 2, 3, 4]; y = b * 2; y[2] = 0; sum(y): torch gives b.grad = [2, 0, 2, 2]
  local b = dl.tensor({1.0, 2.0, 3.0, 4.0}):requires_grad_(true)
  local y = b * 2
  y[2] = 0
  y:sum():backward()
  T.tensor_eq(b.grad, {2, 0, 2, 2})
  -- the assigned value gets the slice's gradient, summed over its broadcast
  local a = dl.tensor({{1.0, 2.0}, {3.0, 4.0}, {5.0, 6.0}}):requires_grad_(true)
  local s = dl.tensor(3.0):requires_grad_(true)
  local z = a * 1
  z[3] = s
  local w = dl.tensor({{1.0, 10.0}, {100.0, 1000.0}, {2.0, 5.0}})
  local loss = (z * w):sum()
  loss:backward()
  T.tensor_eq(a.grad, {{1, 10}, {100, 1000}, {0, 0}})
  T.near(s.grad:item(), 7, 0)
  -- float64 finite differences through an assignment of a tensor row
  T.gradcheck(function(x, r)
    local t = x * x
    t[2] = r * 3
    return t:exp()
  end, {dl.randn(3, 4, {dtype = dl.float64}):requires_grad_(true),
        dl.randn(4, {dtype = dl.float64}):requires_grad_(true)})
  -- a leaf that requires grad still refuses
  T.raises(function() b[1] = 5 end, "leaf tensor that requires grad")
end)

T.case("in place on a view: the view's gradient is right, the stale base is refused", function()
  local a = dl.tensor({1.0, 2.0, 3.0, 4.0}):requires_grad_(true)
  -- the view's own history includes the write
  local x = a * 1
  local v = x:narrow(1, 2, 2)
  v:mul_(3)
  v:sum():backward()
  T.tensor_eq(a.grad, {0, 3, 3, 0})
  -- the base's history does not: using it is an error, not a wrong gradient
  a.grad = nil
  x = a * 1
  v = x:narrow(1, 2, 2)
  v:mul_(3)
  T.raises(function() return x:sum() end, "written in place through another view")
  T.raises(function() return x * 2 end, "written in place through another view")
  -- a view taken before an in-place write on its base is stale too
  x = a * 1
  local early = x:narrow(1, 1, 2)
  x:add_(1)
  T.raises(function() return early:sum() end, "written in place through another view")
  T.raises(function() early:backward(dl.ones(2)) end, "written in place through another view")
  -- views taken after the write, and the written tensor itself, are fine
  local late = x:narrow(1, 1, 2)
  late:sum():backward()
  T.tensor_eq(a.grad, {1, 1, 0, 0})
  -- writes under no_grad are not recorded, and change nothing here
  x = a * 1
  local u = x:narrow(1, 1, 1)
  dl.no_grad(function() u:mul_(2) end)
  T.truthy(x:sum())
end)

T.case("autograd options are checked like every option table", function()
  local x = dl.randn(3, {dtype = dl.float64, requires_grad = true})
  T.raises(function() dl.autograd.backward(x:sum(), {retain = true}) end,
    "autograd.backward: unknown option 'retain' (expected: retain_graph)")
  T.raises(function() dl.autograd.grad(x:sum(), {x}, {allow_unsued = true}) end,
    "autograd.grad: unknown option 'allow_unsued'")
  T.raises(function() dl.autograd.grad(x:sum(), {x}, 5) end,
    "autograd.grad: options table expected, got number")
  T.raises(function() dl.autograd.gradcheck(function(t) return t * 2 end, {x}, {tol = 1}) end,
    "gradcheck: unknown option 'tol'")
  -- the known ones still work
  local g = dl.autograd.grad((x * x):sum(), {x}, {retain_graph = false})
  T.close(g[1], x:detach() * 2, 1e-12)
  T.truthy(dl.autograd.gradcheck(function(t) return t * 2 end, {x}, {eps = 1e-6}))
end)

T.done()
