-- test_clipgrad_cuda.lua - gradient clipping on CUDA against the CPU: the
-- total norm of many gradients of several sizes and dtypes (more than one
-- multi-tensor batch, several chunks each) for every norm type, the
-- clipped gradients, clip_grad_value_; the total stays on the device.
-- Skipped (exit 77) without a GPU.
local T = require "testlib"
T.require_cuda()
local U = dl.nn.utils

local function grads(dev, half)
  local out = {}
  for i = 1, 120 do
    local n = i % 10 == 0 and 70000 + i or i * 3
    local dt = i % 3 == 0 and dl.float64 or (half and i % 7 == 0 and half or dl.float32)
    local p = dl.zeros(n, {dtype = dt}):to(dev):requires_grad_()
    p.grad = (T.randn(n, {seed = i}) * 0.1):to(dt):to(dev)
    out[i] = p
  end
  return out
end

for _, p in ipairs({2, 1, 3, "inf", 0}) do
  T.cuda_case("clip_grad_norm_ norm_type " .. tostring(p), function(dev)
    local ps = grads(dev)
    local total = U.clip_grad_norm_(ps, 0.5, {norm_type = p})
    if dev == "cuda" then T.truthy(total:is_cuda(), "the total stays on the device") end
    local out = {total:double()}
    for i, q in ipairs(ps) do out[i + 1] = q.grad end
    return out
  end, 1e-5, 1e-7)
end

-- half gradients: one rounding of theirs may differ where the two devices'
-- totals differ in the last bit
T.cuda_case("clip_grad_norm_ with bfloat16 and float16 gradients", function(dev)
  local out = {}
  for _, half in ipairs({dl.bfloat16, dl.float16}) do
    local ps = grads(dev, half)
    out[#out + 1] = U.clip_grad_norm_(ps, 0.5):double()
    for _, q in ipairs(ps) do out[#out + 1] = q.grad end
  end
  return out
end, 1e-2, 1e-4)

T.cuda_case("clip_grad_value_", function(dev)
  local ps = grads(dev, dl.bfloat16)
  U.clip_grad_value_(ps, 0.05)
  local out = {}
  for i, q in ipairs(ps) do out[i] = q.grad end
  return out
end, 0, 0)

T.done()
