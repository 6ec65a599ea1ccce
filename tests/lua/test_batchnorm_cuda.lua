-- test_batchnorm_cuda.lua - batch norm on CUDA against the CPU: every case
-- builds its inputs on the CPU (seeded T.randn), runs on "cpu" and "cuda" and
-- compares the results (T.cuda_case).  Covers training (outputs, batch
-- statistics, running statistics after several calls; batch sizes 1..64,
-- spatial 1x1..56x56, 3..2048 channels) and evaluation, both backwards, no
-- affine, a channels-last input (kept channels-last on CUDA), bfloat16/float16
-- data with float32 parameters, float64, the BatchNorm2d module, and
-- mixed-device errors.  Skipped (exit 77) without a GPU.
local T = require "testlib"
T.require_cuda()
local dl = require "dl"
local nn = dl._nn

local F32, F64, BF16, F16 = dl.float32, dl.float64, dl.bfloat16, dl.float16

-- positive values in [0.5, 1.5): variances
local function rand_pos(seed, n, dev, dt)
  dl.manual_seed(seed)
  return (dl.rand(n) + 0.5):to(dt or F32):to(dev)
end

-- --- batch norm ------------------------------------------------------------------------

local bn_shapes = {
  {1, 3, 56, 56}, {64, 64, 56, 56}, {64, 2048, 1, 1}, {2, 2048, 1, 1}, {64, 3, 1, 1},
  {1, 512, 7, 7}, {64, 1000}, {8, 16, 100}, {3, 5, 7, 9},
}

for i, shape in ipairs(bn_shapes) do
  local big = shape[1] * (shape[3] or 1) * (shape[4] or 1) > 100000
  T.cuda_case("batch_norm training " .. table.concat(shape, "x"), function(dev)
    local C = shape[2]
    local x = T.randn(shape, {seed = 10 + i, device = dev})
    local w, b = T.randn({C}, {seed = 20 + i, device = dev}), T.randn({C}, {seed = 30 + i, device = dev})
    local rm, rv = T.randn({C}, {seed = 40 + i, device = dev}), rand_pos(50 + i, C, dev)
    local y, mean, invstd
    for _ = 1, 3 do
      y, mean, invstd = nn.batch_norm_forward(x, w, b, rm, rv, {training = true, momentum = 0.2})
    end
    return {y = y, mean = mean, invstd = invstd, rm = rm, rv = rv}
  end, big and 1e-4 or 1e-5, big and 1e-4 or 1e-5)
end

T.cuda_case("batch_norm training float64, cumulative average", function(dev)
  local x = T.randn({4, 6, 5, 3}, {seed = 1, device = dev, dtype = F64})
  local rm, rv = dl.zeros(6, {dtype = F64}):to(dev), dl.ones(6, {dtype = F64}):to(dev)
  local y, mean, invstd = nn.batch_norm_forward(x, nil, nil, rm, rv,
    {training = true, cumulative = true, num_batches_tracked = 3})
  return {y, mean, invstd, rm, rv}
end, 1e-12, 1e-12)

for i, shape in ipairs({{4, 8, 5, 5}, {64, 2048, 1, 1}, {2, 64, 56, 56}, {16, 10}}) do
  T.cuda_case("batch_norm evaluation " .. table.concat(shape, "x"), function(dev)
    local C = shape[2]
    local x = T.randn(shape, {seed = 60 + i, device = dev})
    local w, b = T.randn({C}, {seed = 70 + i, device = dev}), T.randn({C}, {seed = 80 + i, device = dev})
    local rm, rv = T.randn({C}, {seed = 90 + i, device = dev}), rand_pos(100 + i, C, dev)
    return nn.batch_norm_forward(x, w, b, rm, rv, {eps = 1e-3})
  end)
end

-- forward then backward (training or evaluation), with or without affine
local function bn_fwd_bwd(dev, shape, training, affine, seed, dt, pdt)
  local C = shape[2]
  local x = T.randn(shape, {seed = seed, device = dev, dtype = dt})
  local gy = T.randn(shape, {seed = seed + 1, device = dev, dtype = dt})
  local w = affine and T.randn({C}, {seed = seed + 2, device = dev, dtype = pdt}) or nil
  local b = affine and T.randn({C}, {seed = seed + 3, device = dev, dtype = pdt}) or nil
  local rm, rv = T.randn({C}, {seed = seed + 4, device = dev, dtype = pdt}), rand_pos(seed + 5, C, dev, pdt)
  if training then
    local y, mean, invstd = nn.batch_norm_forward(x, w, b, rm, rv, {training = true})
    local gx, gw, gb = nn.batch_norm_backward(gy, x, w, nil, nil, mean, invstd,
      {training = true, need = {true, affine, affine}})
    return {y = y, gx = gx, gw = gw, gb = gb, rm = rm, rv = rv}
  end
  local y = nn.batch_norm_forward(x, w, b, rm, rv)
  local gx, gw, gb = nn.batch_norm_backward(gy, x, w, rm, rv, nil, nil,
    {need = {true, affine, affine}})
  return {y = y, gx = gx, gw = gw, gb = gb}
end

for _, training in ipairs({true, false}) do
  local mode = training and "training" or "evaluation"
  for i, shape in ipairs({{4, 8, 6, 6}, {32, 256, 14, 14}, {64, 2048, 1, 1}, {1, 3, 56, 56}}) do
    T.cuda_case("batch_norm backward " .. mode .. " " .. table.concat(shape, "x"), function(dev)
      return bn_fwd_bwd(dev, shape, training, true, 200 + 10 * i, F32)
    end, 1e-4, 1e-5)
  end
  T.cuda_case("batch_norm backward " .. mode .. ", no affine", function(dev)
    return bn_fwd_bwd(dev, {5, 7, 9, 4}, training, false, 300, F32)
  end, 1e-4, 1e-5)
  T.cuda_case("batch_norm backward " .. mode .. " float64", function(dev)
    return bn_fwd_bwd(dev, {3, 4, 5, 6}, training, true, 310, F64, F64)
  end, 1e-10, 1e-12)
end

-- half data, float32 parameters and statistics (autocast's batch norm)
for _, dt in ipairs({BF16, F16}) do
  for _, training in ipairs({true, false}) do
    T.cuda_case(string.format("batch_norm %s data, float32 parameters, %s", dt.name,
      training and "training" or "evaluation"), function(dev)
      local r = bn_fwd_bwd(dev, {8, 32, 7, 7}, training, true, 400, dt, F32)
      T.eq(r.y.dtype, dt)
      T.eq(r.gw.dtype, F32)
      return r
    end, 2e-2, 2e-2)
  end
end

T.cuda_case("batch_norm channels-last input: training, backward, layout kept", function(dev)
  local x = T.channels_last(T.randn({4, 24, 9, 7}, {seed = 500, device = dev}))
  T.truthy(not x:is_contiguous())
  local gy = T.randn({4, 24, 9, 7}, {seed = 501, device = dev}) -- plain layout: converted to x's
  local w, b = T.randn({24}, {seed = 502, device = dev}), T.randn({24}, {seed = 503, device = dev})
  local rm, rv = dl.zeros(24):to(dev), dl.ones(24):to(dev)
  local y, mean, invstd = nn.batch_norm_forward(x, w, b, rm, rv, {training = true})
  if dev == "cuda" then
    T.truthy(not y:is_contiguous(), "y stays channels-last on CUDA")
    T.truthy(y:permute(1, 3, 4, 2):is_contiguous(), "y is (N,H,W,C) in memory")
  end
  local gx, gw, gb = nn.batch_norm_backward(gy, x, w, nil, nil, mean, invstd, {training = true})
  if dev == "cuda" then T.truthy(gx:permute(1, 3, 4, 2):is_contiguous(), "gx channels-last") end
  local ye = nn.batch_norm_forward(x, w, b, rm, rv)
  local gxe = nn.batch_norm_backward(gy, x, w, rm, rv, nil, nil)
  return {y = y, mean = mean, invstd = invstd, rm = rm, rv = rv, gx = gx, gw = gw, gb = gb,
    ye = ye, gxe = gxe}
end, 1e-4, 1e-5)

T.cuda_case("batch_norm channels-last bfloat16, ResNet-sized", function(dev)
  local x = T.channels_last(T.randn({8, 64, 56, 56}, {seed = 510, device = dev, dtype = BF16}))
  local w, b = T.randn({64}, {seed = 511, device = dev}), T.randn({64}, {seed = 512, device = dev})
  local rm, rv = dl.zeros(64):to(dev), dl.ones(64):to(dev)
  local y, mean, invstd = nn.batch_norm_forward(x, w, b, rm, rv, {training = true})
  return {y = y, mean = mean, invstd = invstd, rm = rm, rv = rv}
end, 2e-2, 2e-2)

T.case("batch_norm: mixed devices are refused with both devices named", function()
  local x = dl.randn(2, 3, 4, 4):to("cuda")
  local w = dl.ones(3)
  T.raises(function() nn.batch_norm_forward(x, w, nil, nil, nil, {training = true}) end,
    "batch_norm: expected all tensors on one device")
  local rm, rv = dl.zeros(3):to("cuda"), dl.ones(3)
  T.raises(function() nn.batch_norm_forward(x, nil, nil, rm, rv) end, "cpu")
end)

-- --- modules --------------------------------------------------------------------------------

T.cuda_case("BatchNorm2d module: training steps then evaluation, outputs and grads", function(dev)
  dl.manual_seed(900)
  local m = dl.nn.BatchNorm2d(16)
  m:to(dev)
  local out = {}
  for step = 1, 2 do
    local x = T.randn({4, 16, 10, 10}, {seed = 910 + step, device = dev}):requires_grad_(true)
    local y = m(x)
    y:backward(T.randn({4, 16, 10, 10}, {seed = 920 + step, device = dev}))
    out[step] = {y = y:detach(), gx = x.grad, gw = m.weight.grad:clone(), gb = m.bias.grad:clone()}
    m.weight.grad, m.bias.grad = nil, nil
  end
  m:eval()
  local xe = T.randn({4, 16, 10, 10}, {seed = 930, device = dev}):requires_grad_(true)
  local ye = m(xe)
  ye:backward(T.randn({4, 16, 10, 10}, {seed = 931, device = dev}))
  out.eval = {y = ye:detach(), gx = xe.grad, rm = m.running_mean, rv = m.running_var}
  return out
end, 1e-4, 1e-5)

T.done()
