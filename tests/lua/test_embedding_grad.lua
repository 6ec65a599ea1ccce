-- test_embedding_grad.lua - the gradients of embedding and embedding_bag
-- against central finite differences in float64 (T.gradcheck): the weight's
-- gradient with repeated ids and 3-D ids (padding_idx and
-- scale_grad_by_freq, which alter it on purpose, as edits of it); every bag
-- mode with offsets (an empty bag included) and 2-D input with padding; and
-- per_sample_weights' gradient together with the weight's.
local T = require "testlib"
local F = dl.nn.functional

local function weight(seed)
  return T.randn(7, 4, {seed = seed, dtype = dl.float64}):requires_grad_()
end

local ids = dl.tensor({{3, 1, 3}, {7, 2, 3}})

T.case("embedding gradcheck", function()
  T.gradcheck(function(w) return F.embedding(ids, w) end, {weight(1)}, "plain")
  T.gradcheck(function(w) return F.embedding(ids:reshape(2, 3, 1), w) end, {weight(4)}, "3-D ids")
end)

-- padding_idx and scale_grad_by_freq change the gradient on purpose (the
-- padding row gets none; a row is divided by its id's count): they are the
-- checked plain gradient, so edited
T.case("embedding: padding_idx and scale_grad_by_freq edit the checked gradient", function()
  local gy = T.randn(2, 3, 4, {seed = 10, dtype = dl.float64})
  local function grad(opts)
    local w = weight(2)
    F.embedding(ids, w, opts):backward(gy)
    return w.grad
  end
  local plain = grad()
  local want = plain:clone()
  want[3]:zero_()
  T.close(grad({padding_idx = 3}), want, 1e-15, 0, "padding_idx")
  want = plain:clone()
  want[3]:div_(3) -- id 3 occurs three times
  T.close(grad({scale_grad_by_freq = true}), want, 1e-15, 0, "scale_grad_by_freq")
end)

local flat, off = dl.tensor({3, 1, 3, 7, 2, 3, 5}), dl.tensor({1, 4, 4, 6})

for _, mode in ipairs({"sum", "mean", "max"}) do
  T.case("embedding_bag gradcheck: " .. mode, function()
    T.gradcheck(function(w) return F.embedding_bag(flat, w, off, {mode = mode}) end, {weight(5)},
      mode .. " with offsets")
    T.gradcheck(function(w) return F.embedding_bag(ids, w, nil, {mode = mode, padding_idx = 1}) end,
      {weight(6)}, mode .. " 2-D with padding")
  end)
end

T.case("embedding_bag gradcheck: per_sample_weights", function()
  local psw = T.randn(7, {seed = 7, dtype = dl.float64}):requires_grad_()
  T.gradcheck(function(w, p)
    return F.embedding_bag(flat, w, off, {mode = "sum", per_sample_weights = p, padding_idx = 2})
  end, {weight(8), psw}, "sum with per_sample_weights")
end)

T.done()
