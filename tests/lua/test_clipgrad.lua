-- test_clipgrad.lua - gradient clipping (dl.nn.utils.clip_grad_norm_,
-- clip_grad_value_, get_total_norm, clip_grads_with_norm_; the clipgrad
-- family) on known values: every norm type, parameters given as a tensor,
-- an array or a Module, parameters without gradient, a tied weight counted
-- once (its gradient the sum of both uses), non-contiguous and half
-- gradients, in-place versions, many small gradients in one pass, results
-- independent of the thread count, error_if_nonfinite, and bad input.
local T = require "testlib"
local U = dl.nn.utils

local function param(values, dtype)
  local g = dl.tensor(values, {dtype = dtype or dl.float32})
  local p = dl.zeros(g.shape, {dtype = g.dtype}):requires_grad_()
  p.grad = g
  return p
end

T.case("clip_grad_norm_: known values for every norm type", function()
  local a, b = param({3, 4}), param({{0, -12}})
  local total = U.clip_grad_norm_({a, b}, 6.5)
  T.eq(total:dim(), 0, "a 0-dim tensor")
  T.near(total:item(), 13, 1e-6)
  T.tensor_eq(a.grad, {1.5, 2}, 1e-6)
  T.tensor_eq(b.grad, {{0, -6}}, 1e-6)
  -- below max_norm: the gradients keep their values (coefficient clamped to 1)
  a, b = param({3, 4}), param({{0, -12}})
  U.clip_grad_norm_({a, b}, 100)
  T.tensor_eq(a.grad, {3, 4})
  local function norm(p)
    return U.get_total_norm({param({3, -4}).grad, param({0, 0, 12}).grad}, {norm_type = p}):item()
  end
  T.near(norm(2), 13, 1e-6)
  T.near(norm(1), 19, 1e-6)
  T.near(norm(3), (27 + 64 + 1728) ^ (1 / 3), 1e-6)
  T.near(norm(math.huge), 12, 0)
  T.near(norm("inf"), 12, 0)
  T.near(norm(-math.huge), 0, 0)
  T.near(norm(0), 2, 0, "0-norm of the tensors' 0-norms: tensors with a non-zero")
  -- float64 stays float64; mixed dtypes promote
  T.eq(U.get_total_norm({dl.ones(2, {dtype = dl.float64})}).dtype, dl.float64)
  T.eq(U.get_total_norm({dl.ones(2, {dtype = dl.float64}), dl.ones(2)}).dtype, dl.float64)
  T.eq(U.get_total_norm({dl.ones(2, {dtype = dl.bfloat16}), dl.ones(2)}).dtype, dl.float32)
end)

T.case("clip_grad_norm_: parameters as a tensor, an array or a Module; tied weights", function()
  local p = param({6, 8})
  T.near(U.clip_grad_norm_(p, 5):item(), 10, 1e-6)
  T.tensor_eq(p.grad, {3, 4}, 1e-5)
  T.near(U.clip_grad_norm_({}, 1):item(), 0, 0, "nothing to clip")
  T.near(U.clip_grad_norm_({dl.zeros(2):requires_grad_()}, 1):item(), 0, 0, "no gradient yet")
  -- an embedding tied to the output head: one parameter, one summed gradient
  local Tied = dl.nn.Module:extend("Tied")
  function Tied:__init()
    self.emb = dl.nn.Embedding(6, 3)
    self.head = dl.nn.Linear(3, 6, {bias = false})
    self.head.weight = self.emb.weight
  end
  function Tied:forward(ids) return self.head(self.emb(ids)) end
  local m = Tied()
  local ids = dl.tensor({1, 5, 5, 2})
  m(ids):sum():backward()
  local g = m.emb.weight.grad:clone()
  -- the sum of both uses: the head's gradient plus the lookups'
  local h = m.emb(ids):detach()
  local want = dl.ones(4, 6):t():matmul(h)
  want = want + dl._nn.embedding_backward(dl.ones(4, 6):matmul(m.emb.weight:detach()), ids, 6)
  T.close(g, want, 1e-6, 1e-6, "tied gradient")
  local total = U.clip_grad_norm_(m, 0.5)
  T.near(total:item(), g:norm():item(), 1e-6, "the tied weight counts once")
  T.close(m.emb.weight.grad, g * (0.5 / (total:item() + 1e-6)), 1e-6, 0)
end)

T.case("clip_grad_norm_, clip_grad_value_: layouts, dtypes, versions, many tensors", function()
  -- a transposed gradient is clipped in place through its view
  local p = dl.zeros(3, 2):requires_grad_()
  p.grad = dl.tensor({{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}}):t()
  local w = dl.ones(3, 2):requires_grad_()
  local y = (w * p.grad):sum() -- saves the gradient for its backward
  U.clip_grad_value_(p, 2.5)
  T.tensor_eq(p.grad, {{1, 2.5}, {2, 2.5}, {2.5, 2.5}})
  T.raises(function() y:backward() end, "modified by an in-place operation", "version bumped")
  -- half gradients compute in float32, keep their dtype
  local h = param({300, 400}, dl.bfloat16)
  local total = U.clip_grad_norm_({h}, 1)
  T.eq(total.dtype, dl.bfloat16)
  T.tensor_eq(h.grad:float(), {0.6, 0.8}, 1e-2)
  -- NaN survives clamping; -0 and 0 stay
  local n = param({0 / 0, -3, 0})
  U.clip_grad_value_({n}, 1)
  local l = n.grad:tolist()
  T.truthy(l[1] ~= l[1] and l[2] == -1 and l[3] == 0, "clamp keeps NaN")
  -- a thousand small gradients in one pass
  local ps = {}
  for i = 1, 1000 do ps[i] = param({i % 7 - 3}) end
  local sum = 0
  for i = 1, 1000 do sum = sum + (i % 7 - 3) ^ 2 end
  T.near(U.clip_grad_norm_(ps, 1):item(), math.sqrt(sum), 1e-6)
  T.near(ps[1].grad:item(), (1 % 7 - 3) / (math.sqrt(sum) + 1e-6), 1e-5)
end)

T.case("get_total_norm: results do not depend on the thread count", function()
  local ts = {T.randn(700, 300, {seed = 1}), T.randn(5, {seed = 2}), T.randn(100000, {seed = 3})}
  T.same_across_threads(function()
    return {U.get_total_norm(ts), U.get_total_norm(ts, {norm_type = 3}), U.get_total_norm(ts, {norm_type = "inf"})}
  end, {1, 3}, "get_total_norm")
end)

T.case("clip_grad_norm_: error_if_nonfinite and bad input", function()
  local p = param({1, 1 / 0})
  T.raises(function() U.clip_grad_norm_(p, 1, {error_if_nonfinite = true}) end,
    "clip_grad_norm_: the total norm of order 2.0 for gradients from `parameters` is non-finite")
  T.eq(p.grad[2]:item(), math.huge, "gradients untouched after the error")
  local total = U.clip_grad_norm_(p, 1) -- default: scaled by the non-finite norm, as PyTorch
  T.eq(total:item(), math.huge)
  T.raises(function() U.clip_grad_norm_(param({1}), "big") end, "clip_grad_norm_: max_norm must be a number")
  T.raises(function() U.clip_grad_norm_(param({1}), 1, {norm_type = -2}) end,
    "clip_grad_norm_: norm_type must be positive, 0 or +-inf, got -2")
  T.raises(function() U.clip_grad_norm_(param({1}), 1, {ord = 2}) end, "clip_grad_norm_: unknown option 'ord'")
  T.raises(function() U.clip_grad_norm_(42, 1) end,
    "clip_grad_norm_: parameters must be a tensor, an array of tensors or a Module")
  T.raises(function() U.clip_grad_norm_({param({1}), "w"}, 1) end, "clip_grad_norm_: parameters[2] is a string")
  T.raises(function() U.get_total_norm({dl.ones(2, {dtype = dl.int64})}) end,
    "clip_grad_norm_: every tensor must be a floating-point tensor, got int64")
  T.raises(function() U.clip_grad_value_(param({1}), -1) end, "clip_grad_value_: clip_value must be non-negative")
  T.raises(function() U.clip_grads_with_norm_(param({1}), 1, 2) end, "clip_grads_with_norm_: total_norm must be a tensor")
  T.raises(function() dl._nn.grads_total_norm(dl.ones(2), 2) end, "clip_grad_norm_: tensors must be an array of tensors")
  -- clip_grads_with_norm_ with a given norm
  local q = param({3, 4})
  U.clip_grads_with_norm_(q, 1, dl.tensor(10.0))
  T.tensor_eq(q.grad, {0.3, 0.4}, 1e-6)
end)

T.done()
