-- test_functional_grad.lua - dl._F (what dl.nn.functional exposes) records
-- autograd: float64 finite-difference checks of every op and PyTorch's
-- gradients for the losses in float32.
local T = require "testlib"
local F = dl._F

local function leaf(t) return t:double():requires_grad_() end

T.case("softmax and log_softmax", function()
  local x = leaf(dl.randn(3, 5))
  T.truthy(dl.autograd.gradcheck(function(a) return F.softmax(a, 2) end, {x}))
  T.truthy(dl.autograd.gradcheck(function(a) return F.log_softmax(a, 1) end, {x}))
  T.eq(F.softmax(x, -1).grad_fn, "SoftmaxBackward")
end)

T.case("cross_entropy and nll_loss", function()
  local x = leaf(dl.randn(4, 6))
  local y = dl.tensor({1, 6, 3, 3})
  local w = dl.rand(6, {dtype = dl.float64}) + 0.5
  for _, red in ipairs({"mean", "sum", "none"}) do
    T.truthy(dl.autograd.gradcheck(function(a)
      return F.cross_entropy(a, y, {weight = w, reduction = red, label_smoothing = 0.1, ignore_index = 6})
    end, {x}), red)
    T.truthy(dl.autograd.gradcheck(function(a)
      return F.nll_loss(F.log_softmax(a, 2), y, {weight = w, reduction = red})
    end, {x}), red)
  end
  local probs = leaf(dl.rand(4, 6))
  T.truthy(dl.autograd.gradcheck(function(a, p) return F.cross_entropy(a, p) end, {x, probs}))
  local x4 = leaf(dl.randn(2, 3, 2, 2))
  T.truthy(dl.autograd.gradcheck(function(a) return F.cross_entropy(a, dl.tensor({{{1, 2}, {3, 1}}, {{2, 2}, {1, 3}}})) end, {x4}))
end)

T.case("pointwise losses", function()
  local x, y = leaf(dl.randn(3, 4)), leaf(dl.randn(3, 4))
  T.truthy(dl.autograd.gradcheck(function(a, b) return F.mse_loss(a, b) end, {x, y}))
  T.truthy(dl.autograd.gradcheck(function(a, b) return F.l1_loss(a, b, {reduction = "sum"}) end, {x, y}))
  local t = leaf(dl.rand(3, 4))
  T.truthy(dl.autograd.gradcheck(function(a, b)
    return F.binary_cross_entropy_with_logits(a, b, {pos_weight = dl.full({4}, 2.0, {dtype = dl.float64})})
  end, {x, t}))
end)

T.case("dropout and pad", function()
  local x = leaf(dl.randn(4, 5))
  dl.manual_seed(3)
  local y = F.dropout(x, 0.5, true)
  y:backward(dl.ones(4, 5, {dtype = dl.float64}))
  -- gradient is the mask scaled by 2, and matches where y kept x
  local g, yy, xx = T.flatten(x.grad), T.flatten(y), T.flatten(x)
  for i = 1, #g do
    if g[i] ~= 0 then T.near(yy[i], 2 * xx[i]) else T.eq(yy[i], 0.0) end
  end
  T.eq(F.dropout(x, 0.5, false).requires_grad, true)
  for _, mode in ipairs({"constant", "reflect", "replicate", "circular"}) do
    local z = leaf(dl.randn(1, 2, 4, 4))
    T.truthy(dl.autograd.gradcheck(function(a) return F.pad(a, {1, 2, 2, 1}, {mode = mode}) end, {z}), mode)
  end
end)

T.case("relu inplace on a non-leaf", function()
  local x = leaf(dl.tensor({-1, 2, -3, 4}))
  local y = x * 1
  F.relu(y, {inplace = true})
  y:sum():backward()
  T.tensor_eq(x.grad, {0, 1, 0, 1})
  T.raises(function() F.relu(x, {inplace = true}) end, "leaf")
end)

T.case("against PyTorch: cross_entropy gradient", function()
  local r = T.torch([[
x = torch.randn(8, 10, requires_grad=True)
y = torch.randint(0, 10, (8,))
w = torch.rand(10) + 0.5
loss = torch.nn.functional.cross_entropy(x, y, weight=w, label_smoothing=0.2)
g, = torch.autograd.grad(loss, x)
emit({"x": x.detach(), "y": y + 1, "w": w, "loss": loss.detach(), "g": g})
]])
  local x = T.from_torch(r.x):requires_grad_()
  local loss = F.cross_entropy(x, T.from_torch(r.y), {weight = T.from_torch(r.w), label_smoothing = 0.2})
  T.match_torch(loss, r.loss, 1e-5, 1e-6, "loss")
  loss:backward()
  T.match_torch(x.grad, r.g, 1e-4, 1e-6, "grad")
end)

T.done()
