-- test_softmax_cuda.lua - softmax and log_softmax on CUDA against the CPU:
-- along each dim of a 3-D tensor (row and column kernels), transposed input,
-- wide rows, float64, -inf masks, and the gradients of both.  Skipped
-- (exit 77) without a GPU.
local T = require "testlib"
T.require_cuda()
local F = dl._F

T.cuda_case("softmax log_softmax along each dim", function(dev)
  local out = {}
  for _, shape in ipairs({{4, 6, 100}, {3, 70, 5}, {200, 3, 2}}) do
    local x = T.randn(shape, {seed = 3}):to(dev)
    for d = 1, 3 do
      out[#out + 1] = {F.softmax(x, d), F.log_softmax(x, d), F.softmax(x:double(), d)}
    end
    out[#out + 1] = F.softmax(x:transpose(1, 2), 3)
  end
  local big = T.randn(3, 5000, {seed = 4}):to(dev) * 20
  out[#out + 1] = {F.softmax(big, 2), F.log_softmax(big, 2), F.log_softmax(big, 1)}
  local inf = dl.tensor({{1, -math.huge, 2}, {-math.huge, -math.huge, 0}}):to(dev)
  out[#out + 1] = {F.softmax(inf, 2), F.log_softmax(inf, 2)}
  return out
end, 1e-5, 1e-6)

T.cuda_case("softmax log_softmax backward", function(dev)
  local out = {}
  for _, shape in ipairs({{4, 6, 100}, {3, 70, 5}}) do
    for d = 1, 3 do
      for _, f in ipairs({F.softmax, F.log_softmax}) do
        local x = T.randn(shape, {seed = 5}):to(dev):requires_grad_()
        local w = T.randn(shape, {seed = 6}):to(dev)
        local y = f(x, d)
        ;(y * w):sum():backward()
        out[#out + 1] = x.grad
      end
    end
  end
  return out
end, 1e-5, 1e-6)

T.done()
