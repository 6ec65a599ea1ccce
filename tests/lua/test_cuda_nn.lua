-- test_cuda_nn.lua - batch norm and pooling on CUDA against the CPU: every
-- case builds its inputs on the CPU (seeded randn), runs on "cpu" and "cuda"
-- and compares the results (T.cuda_case).  Covers batch norm in training
-- (outputs, batch statistics, running statistics after several calls; batch
-- sizes 1..64, spatial 1x1..56x56, 3..2048 channels) and evaluation, both
-- backwards, no affine, a channels-last input (kept channels-last on CUDA),
-- bfloat16/float16 data with float32 parameters, float64; max pooling
-- (ResNet's 3x3/2 pad 1, ceil mode, dilation, NaN), average pooling options,
-- adaptive average/max pooling, all gradients; the nn modules on CUDA; and
-- mixed-device errors.  Skipped (exit 77) without a GPU.
local T = require "testlib"
T.require_cuda()
local dl = require "dl"
local nn = dl._nn

local F32, F64, BF16, F16 = dl.float32, dl.float64, dl.bfloat16, dl.float16

-- seeded standard-normal tensor of shape on dev (built on the CPU)
local function randn(seed, shape, dev, dt)
  dl.manual_seed(seed)
  return dl.randn(table.unpack(shape)):to(dt or F32):to(dev)
end

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
    local x = randn(10 + i, shape, dev)
    local w, b = randn(20 + i, {C}, dev), randn(30 + i, {C}, dev)
    local rm, rv = randn(40 + i, {C}, dev), rand_pos(50 + i, C, dev)
    local y, mean, invstd
    for _ = 1, 3 do
      y, mean, invstd = nn.batch_norm_forward(x, w, b, rm, rv, {training = true, momentum = 0.2})
    end
    return {y = y, mean = mean, invstd = invstd, rm = rm, rv = rv}
  end, big and 1e-4 or 1e-5, big and 1e-4 or 1e-5)
end

T.cuda_case("batch_norm training float64, cumulative average", function(dev)
  local x = randn(1, {4, 6, 5, 3}, dev, F64)
  local rm, rv = dl.zeros(6, {dtype = F64}):to(dev), dl.ones(6, {dtype = F64}):to(dev)
  local y, mean, invstd = nn.batch_norm_forward(x, nil, nil, rm, rv,
    {training = true, cumulative = true, num_batches_tracked = 3})
  return {y, mean, invstd, rm, rv}
end, 1e-12, 1e-12)

for i, shape in ipairs({{4, 8, 5, 5}, {64, 2048, 1, 1}, {2, 64, 56, 56}, {16, 10}}) do
  T.cuda_case("batch_norm evaluation " .. table.concat(shape, "x"), function(dev)
    local C = shape[2]
    local x = randn(60 + i, shape, dev)
    local w, b = randn(70 + i, {C}, dev), randn(80 + i, {C}, dev)
    local rm, rv = randn(90 + i, {C}, dev), rand_pos(100 + i, C, dev)
    return nn.batch_norm_forward(x, w, b, rm, rv, {eps = 1e-3})
  end)
end

-- forward then backward (training or evaluation), with or without affine
local function bn_fwd_bwd(dev, shape, training, affine, seed, dt, pdt)
  local C = shape[2]
  local x, gy = randn(seed, shape, dev, dt), randn(seed + 1, shape, dev, dt)
  local w = affine and randn(seed + 2, {C}, dev, pdt) or nil
  local b = affine and randn(seed + 3, {C}, dev, pdt) or nil
  local rm, rv = randn(seed + 4, {C}, dev, pdt), rand_pos(seed + 5, C, dev, pdt)
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

-- channels-last: an (N,H,W,C) tensor permuted to (N,C,H,W)
local function channels_last(seed, n, c, h, w, dev, dt)
  return randn(seed, {n, h, w, c}, dev, dt):permute(1, 4, 2, 3)
end

T.cuda_case("batch_norm channels-last input: training, backward, layout kept", function(dev)
  local x = channels_last(500, 4, 24, 9, 7, dev)
  T.truthy(not x:is_contiguous())
  local gy = randn(501, {4, 24, 9, 7}, dev) -- plain layout: converted to x's
  local w, b = randn(502, {24}, dev), randn(503, {24}, dev)
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
  local x = channels_last(510, 8, 64, 56, 56, dev, BF16)
  local w, b = randn(511, {64}, dev), randn(512, {64}, dev)
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

-- --- pooling -----------------------------------------------------------------------------

-- forward (values and indices) and the scatter backward of max pooling
local function max_pool(dev, x, k, opts, seed)
  local y, ind = nn.max_pool2d_forward(x, k, opts)
  local gy = randn(seed, y.shape, dev, x.dtype)
  return {y = y, ind = ind, gx = nn.max_pool2d_backward(gy, x, ind, k, opts)}
end

local max_cases = {
  {"3x3/2 padding 1 (ResNet)", {4, 16, 56, 56}, 3, {stride = 2, padding = 1}},
  {"ceil_mode", {2, 3, 10, 9}, 3, {stride = 2, ceil_mode = true}},
  {"dilation", {2, 3, 13, 12}, 3, {stride = {1, 2}, padding = 1, dilation = {2, 3}}},
  {"2x2 default stride", {3, 5, 8, 8}, 2, nil},
  {"unbatched, rectangular kernel", {4, 11, 9}, {3, 2}, {stride = {2, 1}, padding = {1, 0}}},
}
for i, c in ipairs(max_cases) do
  T.cuda_case("max_pool2d " .. c[1], function(dev)
    return max_pool(dev, randn(600 + i, c[2], dev), c[3], c[4], 620 + i)
  end, 1e-6, 1e-6)
end

T.cuda_case("max_pool2d with NaN: NaN wins, indices as the CPU's", function(dev)
  dl.manual_seed(640)
  local x = dl.randn(2, 3, 9, 9)
  x = x:masked_fill(x:gt(1.5), 0 / 0):to(dev)
  return max_pool(dev, x, 3, {stride = 2, padding = 1}, 641)
end, 1e-6, 1e-6)

T.cuda_case("max_pool2d float64 and bfloat16", function(dev)
  return {max_pool(dev, randn(650, {2, 4, 11, 11}, dev, F64), 3, {stride = 2, padding = 1}, 651),
    max_pool(dev, randn(652, {2, 4, 11, 11}, dev, BF16), 3, {stride = 2}, 653)}
end, 1e-6, 1e-6)

T.cuda_case("max_pool2d of a channels-last input", function(dev)
  return max_pool(dev, channels_last(660, 2, 8, 15, 15, dev), 3, {stride = 2, padding = 1}, 661)
end, 1e-6, 1e-6)

local avg_cases = {
  {"3x3/2 padding 1", {2, 4, 15, 15}, 3, {stride = 2, padding = 1}},
  {"count_include_pad=false", {2, 4, 15, 14}, 3, {stride = 2, padding = 1, count_include_pad = false}},
  {"ceil_mode", {2, 3, 10, 9}, 3, {stride = 2, ceil_mode = true}},
  {"ceil_mode, padding, count_include_pad", {2, 3, 10, 9}, 3, {stride = 2, padding = 1, ceil_mode = true}},
  {"divisor_override", {2, 3, 9, 9}, {3, 2}, {stride = {2, 1}, padding = {1, 1}, divisor_override = 5}},
  {"2x2 default stride", {2, 64, 28, 28}, 2, nil},
  {"unbatched", {5, 7, 8}, 2, {stride = 1}},
}
for i, c in ipairs(avg_cases) do
  T.cuda_case("avg_pool2d " .. c[1], function(dev)
    local x = randn(700 + i, c[2], dev)
    local y = nn.avg_pool2d_forward(x, c[3], c[4])
    local gy = randn(720 + i, y.shape, dev)
    return {y = y, gx = nn.avg_pool2d_backward(gy, x, c[3], c[4])}
  end, 1e-5, 1e-6)
end

T.cuda_case("avg_pool2d float64 and float16", function(dev)
  local r = {}
  for j, dt in ipairs({F64, F16}) do
    local x = randn(740 + j, {2, 3, 9, 10}, dev, dt)
    local o = {stride = 2, padding = 1, ceil_mode = true}
    local y = nn.avg_pool2d_forward(x, 3, o)
    r[j] = {y = y, gx = nn.avg_pool2d_backward(randn(750 + j, y.shape, dev, dt), x, 3, o)}
  end
  return r
end, 1e-3, 1e-3)

local adaptive_cases = {
  {"to 1x1", {4, 64, 7, 7}, {1, 1}},
  {"to 7x7 from 15x13", {2, 8, 15, 13}, {7, 7}},
  {"to 7x7 from 9x11", {2, 8, 9, 11}, {7, 7}},
  {"to 3x5 from 7x7", {2, 4, 7, 7}, {3, 5}},
  {"upsampling 5x4 to 7x9", {2, 3, 5, 4}, {7, 9}},
  {"unbatched to 2x2", {3, 9, 7}, {2, 2}},
}
for i, c in ipairs(adaptive_cases) do
  T.cuda_case("adaptive_avg_pool2d " .. c[1], function(dev)
    local x = randn(800 + i, c[2], dev)
    local y = nn.adaptive_avg_pool2d_forward(x, c[3])
    local gy = randn(820 + i, y.shape, dev)
    return {y = y, gx = nn.adaptive_avg_pool2d_backward(gy, x)}
  end, 1e-5, 1e-6)
  T.cuda_case("adaptive_max_pool2d " .. c[1], function(dev)
    local x = randn(840 + i, c[2], dev)
    local y, ind = nn.adaptive_max_pool2d_forward(x, c[3])
    local gy = randn(860 + i, y.shape, dev)
    return {y = y, ind = ind, gx = nn.adaptive_max_pool2d_backward(gy, x, ind)}
  end, 1e-6, 1e-6)
end

T.case("pooling: mixed devices and bad indices are refused", function()
  local x = dl.randn(1, 2, 6, 6):to("cuda")
  local y, ind = nn.max_pool2d_forward(x, 2)
  T.raises(function() nn.max_pool2d_backward(dl.ones(1, 2, 3, 3), x, ind, 2) end,
    "expected all tensors on one device")
  local bad = (ind:cpu() + 100):to("cuda")
  T.raises(function() nn.max_pool2d_backward(dl.ones(1, 2, 3, 3):to("cuda"), x, bad, 2) end,
    "outside the input plane")
  -- the device is still healthy after the refused call
  local y2 = nn.max_pool2d_forward(x, 2)
  T.tensor_eq(y2:cpu(), y:cpu(), 0)
end)

-- --- modules --------------------------------------------------------------------------------

T.cuda_case("BatchNorm2d module: training steps then evaluation, outputs and grads", function(dev)
  dl.manual_seed(900)
  local m = dl.nn.BatchNorm2d(16)
  m:to(dev)
  local out = {}
  for step = 1, 2 do
    local x = randn(910 + step, {4, 16, 10, 10}, dev):requires_grad_(true)
    local y = m(x)
    y:backward(randn(920 + step, {4, 16, 10, 10}, dev))
    out[step] = {y = y:detach(), gx = x.grad, gw = m.weight.grad:clone(), gb = m.bias.grad:clone()}
    m.weight.grad, m.bias.grad = nil, nil
  end
  m:eval()
  local xe = randn(930, {4, 16, 10, 10}, dev):requires_grad_(true)
  local ye = m(xe)
  ye:backward(randn(931, {4, 16, 10, 10}, dev))
  out.eval = {y = ye:detach(), gx = xe.grad, rm = m.running_mean, rv = m.running_var}
  return out
end, 1e-4, 1e-5)

T.cuda_case("MaxPool2d and AdaptiveAvgPool2d modules: outputs and input grads", function(dev)
  local pool = dl.nn.MaxPool2d(3, {stride = 2, padding = 1})
  local gap = dl.nn.AdaptiveAvgPool2d(1)
  local x = randn(950, {2, 8, 17, 17}, dev):requires_grad_(true)
  local p = pool(x)
  local y = gap(p)
  y:backward(randn(951, {2, 8, 1, 1}, dev))
  return {p = p:detach(), y = y:detach(), gx = x.grad}
end, 1e-5, 1e-6)

T.done()
