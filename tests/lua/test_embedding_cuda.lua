-- test_embedding_cuda.lua - the embedding family on CUDA against the CPU:
-- lookups of every weight dtype, weight gradients (the sort-based kernel:
-- repeated ids, padding_idx, scale_grad_by_freq; run twice, bit-equal),
-- bags in every mode with offsets, empty bags, padding and
-- per_sample_weights (their gradient too), half weights in bags, max_norm,
-- and out-of-range ids (a clear error, the device healthy after it).
-- Skipped (exit 77) without a GPU.
local T = require "testlib"
T.require_cuda()
local F = dl.nn.functional

local V, D = 300, 40

local function ids_of(n, seed)
  dl.manual_seed(seed)
  return dl.randint(1, V + 1, {n})
end

T.cuda_case("embedding: lookups of every dtype", function(dev)
  local out = {}
  local ids = ids_of(500, 1):reshape(20, 25):to(dev)
  for _, dt in ipairs({dl.float32, dl.float64, dl.float16, dl.bfloat16, dl.int64}) do
    local w = (T.randn(V, D, {seed = 2}) * 10):to(dt):to(dev)
    out[#out + 1] = F.embedding(ids, w)
  end
  return out
end, 0, 0)

T.cuda_case("embedding: weight gradients", function(dev)
  local out = {}
  local ids = ids_of(3000, 3):to(dev) -- every id many times
  local gy = T.randn(3000, D, {seed = 4}):to(dev)
  for _, opts in ipairs({{}, {padding_idx = 7}, {scale_grad_by_freq = true}}) do
    for _, dt in ipairs({dl.float32, dl.float64}) do
      local w = T.randn(V, D, {seed = 5}):to(dt):to(dev):requires_grad_()
      F.embedding(ids, w, opts):backward(gy:to(dt))
      out[#out + 1] = w.grad
    end
  end
  return out
end, 1e-5, 1e-6)

T.case("embedding: the CUDA weight gradient repeats bit for bit", function()
  local ids = ids_of(5000, 6):cuda()
  local gy = T.randn(5000, D, {seed = 7}):cuda()
  local g1 = dl._nn.embedding_backward(gy, ids, V)
  local g2 = dl._nn.embedding_backward(gy, ids, V)
  T.same_bits(g2:cpu(), g1:cpu(), "two runs")
end)

T.cuda_case("embedding_bag: every mode, padding, weights, half weights", function(dev)
  local out = {}
  local ids = ids_of(400, 8)
  local off = dl.tensor({1, 4, 4, 50, 51, 200, 399})
  for _, mode in ipairs({"sum", "mean", "max"}) do
    for _, dt in ipairs({dl.float32, dl.float64, dl.bfloat16}) do
      local w = T.randn(V, D, {seed = 9}):to(dt):to(dev):requires_grad_()
      local y = F.embedding_bag(ids:to(dev), w, off:to(dev), {mode = mode, padding_idx = 3})
      local gy = T.randn(y.shape, {seed = 10}):to(dt):to(dev)
      out[#out + 1] = {y, dl.autograd.grad(y, {w}, {grad_outputs = gy})[1]}
    end
  end
  local w = T.randn(V, D, {seed = 11}):to(dev):requires_grad_()
  local psw = T.randn(400, {seed = 12}):to(dev):requires_grad_()
  local y = F.embedding_bag(ids:to(dev), w, off:to(dev), {mode = "sum", per_sample_weights = psw})
  out[#out + 1] = {y, dl.autograd.grad(y, {w, psw}, {grad_outputs = T.randn(y.shape, {seed = 13}):to(dev)})}
  out[#out + 1] = F.embedding_bag(ids:reshape(40, 10):to(dev), w:detach(), nil, {mode = "mean"})
  return out
end, 2e-2, 2e-2)

T.cuda_case("embedding: max_norm renormalises in place", function(dev)
  local w = (T.randn(V, D, {seed = 14}) * 3):to(dev)
  local y = F.embedding(ids_of(200, 15):to(dev), w, {max_norm = 2.5, norm_type = 1.5})
  return {y, w}
end, 1e-5, 1e-6)

T.case("embedding on CUDA: out-of-range ids are clear errors", function()
  local w = dl.randn(10, 4):cuda()
  T.raises(function() F.embedding(dl.tensor({1, 11}):cuda(), w) end,
    "embedding: input has id 11 (element 2), out of range for 10 embeddings")
  T.raises(function() F.embedding_bag(dl.tensor({1, 2}):cuda(), w, dl.tensor({1, 4}):cuda()) end,
    "embedding_bag: offsets[2] is 4, past the end of input (2 ids)")
  T.tensor_eq(F.embedding(dl.tensor({2}):cuda(), w):cpu(), w[2]:reshape(1, 4):cpu())
end)

T.done()
